use toolwright::prelude::*;

/// The arguments of get_weather.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    /// The city, e.g. "Paris".
    city: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL, or OpenAI's gpt-4o-mini.
    let config = OpenAiConfig::from_env()?.unwrap_or_else(|| OpenAiConfig::new("gpt-4o-mini"));
    let weather = FnTool::typed("get_weather", "Current weather for a city", |args: City, _| async move {
        Ok(serde_json::json!({"city": args.city, "sky": "clear", "celsius": 21}))
    });
    let agent = Agent::builder(OpenAiModel::new(config)?).tool(weather).build()?;
    let out = agent.run("session-1", "What is the weather in Paris?").await?;
    println!("{}", out.answer);
    Ok(())
}
