//! Encodes `{"documents": [...], "queries": [...]}` (the file `replay` writes) with the embedded
//! multilingual-e5-small, as the bridge does (documents as passages, queries as queries), and
//! writes `{"id", "documents": [[f32]], "queries": [[f32]]}`.
//!
//! `encode IN OUT` — or `encode --time IN`: each query encoded alone, the p50 of one encoding.
use toolwright_core::{EmbedKind, Embedder};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let timing = args.get(1).is_some_and(|a| a == "--time");
    let input = if timing { &args[2] } else { &args[1] };
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(input).expect("IN")).expect("JSON");
    let e = toolwright_local_model::E5Embedder::fetch()
        .await
        .expect("the e5 encoder");
    let texts = |key: &str| -> Vec<String> {
        spec[key]
            .as_array()
            .map(|x| {
                x.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    if timing {
        let mut times = Vec::new();
        for q in texts("queries").iter().take(200) {
            let t = std::time::Instant::now();
            e.embed(std::slice::from_ref(q), EmbedKind::Query)
                .await
                .expect("encode");
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "one request's encoding over {} requests: p50 {:?}, p90 {:?}",
            times.len(),
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
        return;
    }
    let mut out = serde_json::Map::new();
    out.insert("id".into(), e.id().into());
    for (key, kind) in [
        ("documents", EmbedKind::Document),
        ("queries", EmbedKind::Query),
    ] {
        let mut vectors = Vec::new();
        for chunk in texts(key).chunks(16) {
            vectors.extend(e.embed(chunk, kind).await.expect("encode"));
        }
        out.insert(key.into(), serde_json::json!(vectors));
    }
    std::fs::write(&args[2], serde_json::Value::Object(out).to_string()).expect("OUT");
}
