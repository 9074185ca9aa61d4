//! The tasks: a prompt, a check of the final answer (against facts the fixture computes, not
//! against a tool), the native moves of a competent model (independent calls in one round,
//! each round reading the results of the one before), and the code-mode script.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolwright_core::ToolError;
use toolwright_tool_system::{FnTool, ToolRegistry};

use super::fixture::{self as fx, revenue};
use super::{Move, Turn, call, text};

/// The servers a task needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub fs: bool,
    pub memory: bool,
    pub everything: bool,
}

impl Needs {
    pub fn union(self, o: Needs) -> Needs {
        Needs {
            fs: self.fs || o.fs,
            memory: self.memory || o.memory,
            everything: self.everything || o.everything,
        }
    }
}

const OWN: Needs = Needs {
    fs: false,
    memory: false,
    everything: false,
};
const FS: Needs = Needs { fs: true, ..OWN };
const MEM: Needs = Needs {
    memory: true,
    ..OWN
};
const SUM: Needs = Needs {
    everything: true,
    ..OWN
};

type Check = Box<dyn Fn(&str, &Path) -> Result<(), String> + Send + Sync>;
type Policy = Box<dyn Fn(&[Turn]) -> Move + Send + Sync>;

pub struct Task {
    pub id: &'static str,
    /// Rounds of dependent tool calls a competent native model needs (its model calls minus
    /// the answer).
    pub steps: usize,
    pub needs: Needs,
    pub prompt: String,
    pub check: Check,
    pub native: Policy,
    pub script: String,
}

// ---- the project's own tools (in-process, like the examples' get_weather) ----

/// `(city, °C, conditions)`.
pub const WEATHER: [(&str, i64, &str); 10] = [
    ("Paris", 14, "cloudy"),
    ("Oslo", 3, "snow"),
    ("Rome", 19, "sunny"),
    ("Cairo", 29, "sunny"),
    ("Lima", 22, "cloudy"),
    ("Tokyo", 17, "rain"),
    ("Nairobi", 24, "sunny"),
    ("Brasilia", 27, "rain"),
    ("Ottawa", -2, "snow"),
    ("Canberra", 21, "sunny"),
];

/// `(country, capital, population in millions, currency)`.
pub const COUNTRY: [(&str, &str, f64, &str); 8] = [
    ("France", "Paris", 68.2, "EUR"),
    ("Japan", "Tokyo", 124.5, "JPY"),
    ("Kenya", "Nairobi", 55.1, "KES"),
    ("Brazil", "Brasilia", 216.4, "BRL"),
    ("Canada", "Ottawa", 40.1, "CAD"),
    ("Australia", "Canberra", 26.6, "AUD"),
    ("Norway", "Oslo", 5.5, "NOK"),
    ("Peru", "Lima", 34.4, "PEN"),
];

/// Units of each currency for one euro.
pub const PER_EUR: [(&str, f64); 8] = [
    ("EUR", 1.0),
    ("JPY", 162.5),
    ("KES", 140.2),
    ("BRL", 5.9),
    ("CAD", 1.48),
    ("AUD", 1.65),
    ("NOK", 11.6),
    ("PEN", 4.05),
];

fn weather_of(city: &str) -> Option<(i64, &'static str)> {
    WEATHER
        .iter()
        .find(|w| w.0.eq_ignore_ascii_case(city.trim()))
        .map(|w| (w.1, w.2))
}

fn country_of(name: &str) -> Option<(&'static str, f64, &'static str)> {
    COUNTRY
        .iter()
        .find(|c| c.0.eq_ignore_ascii_case(name.trim()))
        .map(|c| (c.1, c.2, c.3))
}

fn per_eur(code: &str) -> Option<f64> {
    PER_EUR
        .iter()
        .find(|c| c.0.eq_ignore_ascii_case(code.trim()))
        .map(|c| c.1)
}

/// The names of [`own_tools`].
pub const OWN_TOOLS: [&str; 3] = ["get_weather", "country_info", "exchange_rate"];

/// get_weather, country_info, exchange_rate.
pub fn own_tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(FnTool::new(
        "get_weather",
        "Get the current weather for a city: the temperature in degrees Celsius and the conditions (sunny, cloudy, rain, snow). Data comes from the nearest station and is at most ten minutes old.",
        json!({"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}}, "required": ["city"]}),
        |args, _| async move {
            let city = args["city"].as_str().unwrap_or_default().to_owned();
            match weather_of(&city) {
                Some((t, c)) => Ok(json!({"city": city, "temperature_c": t, "conditions": c})),
                None => Err(ToolError::invalid_arguments(format!("No weather station for {city:?}; give a capital city."))),
            }
        },
    ))
    .unwrap();
    r.register(FnTool::new(
        "country_info",
        "Look up a country: its capital, population (millions) and currency (ISO 4217 code).",
        json!({"type": "object", "properties": {"country": {"type": "string", "description": "Country name in English"}}, "required": ["country"]}),
        |args, _| async move {
            let name = args["country"].as_str().unwrap_or_default().to_owned();
            match country_of(&name) {
                Some((capital, pop, cur)) => Ok(json!({"country": name, "capital": capital, "population_millions": pop, "currency": cur})),
                None => Err(ToolError::invalid_arguments(format!("Unknown country {name:?}."))),
            }
        },
    ))
    .unwrap();
    r.register(FnTool::new(
        "exchange_rate",
        "The exchange rate between two currencies: how many units of `to` one unit of `from` buys, at today's reference rate.",
        json!({"type": "object", "properties": {
            "from": {"type": "string", "description": "ISO 4217 code, e.g. EUR"},
            "to": {"type": "string", "description": "ISO 4217 code, e.g. JPY"}
        }, "required": ["from", "to"]}),
        |args, _| async move {
            let from = args["from"].as_str().unwrap_or_default().to_owned();
            let to = args["to"].as_str().unwrap_or_default().to_owned();
            match (per_eur(&from), per_eur(&to)) {
                (Some(f), Some(t)) => Ok(json!({"from": from, "to": to, "rate": t / f})),
                _ => Err(ToolError::invalid_arguments(format!("Unknown currency in {from}/{to}."))),
            }
        },
    ))
    .unwrap();
    r
}

// ---- helpers for the native policies and the checks ----

/// `[FILE]` names of a directory listing.
fn files_in(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|l| l.starts_with("[FILE]"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

/// The `size:` of a get_file_info answer.
fn size_of(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("size: "))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn modified_of(info: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix("modified: "))
        .unwrap_or_default()
        .to_owned()
}

/// The number at the end of get-sum's sentence ("The sum of 1 and 2 is 3.").
fn sum_of(v: &Value) -> f64 {
    let t = text(v);
    t.trim_end_matches('.')
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(f64::NAN)
}

fn results(turns: &[Turn], i: usize) -> &[Value] {
    &turns[i].results
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// An answer as the checks read it: lower case, without markdown emphasis or code marks, and
/// without thousands separators (`2,503` reads as `2503`), so a real model's formatting does not
/// decide the result. Applied to both sides of a comparison.
pub fn normalise(text: &str) -> String {
    let chars: Vec<char> = text
        .chars()
        .filter(|c| !matches!(c, '*' | '`' | '_'))
        .collect();
    let digit = |j: Option<usize>| {
        j.and_then(|j| chars.get(j))
            .is_some_and(char::is_ascii_digit)
    };
    let mut out = String::with_capacity(text.len());
    for (i, c) in chars.iter().enumerate() {
        if *c == ',' && digit(i.checked_sub(1)) && digit(Some(i + 1)) {
            continue;
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn has_all(answer: &str, wanted: &[String]) -> Result<(), String> {
    let answer = normalise(answer);
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|w| !answer.contains(&normalise(w)))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("the answer lacks {missing:?}"))
    }
}

fn has_none(answer: &str, unwanted: &[String]) -> Result<(), String> {
    let answer = normalise(answer);
    let found: Vec<&String> = unwanted
        .iter()
        .filter(|w| answer.contains(&normalise(w)))
        .collect();
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!("the answer wrongly names {found:?}"))
    }
}

fn strings<S: ToString>(v: impl IntoIterator<Item = S>) -> Vec<String> {
    v.into_iter().map(|s| s.to_string()).collect()
}

fn check(f: impl Fn(&str, &Path) -> Result<(), String> + Send + Sync + 'static) -> Check {
    Box::new(f)
}

fn policy(f: impl Fn(&[Turn]) -> Move + Send + Sync + 'static) -> Policy {
    Box::new(f)
}

fn answer(s: impl Into<String>) -> Move {
    Move::Answer(s.into())
}

/// The weather results of a round, as `(city, temp, conditions)`.
fn weathers(rs: &[Value]) -> Vec<(String, i64, String)> {
    rs.iter()
        .map(|r| {
            (
                r["city"].as_str().unwrap_or_default().to_owned(),
                r["temperature_c"].as_i64().unwrap_or(i64::MIN),
                r["conditions"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn graph_relations(v: &Value) -> Vec<(String, String, String)> {
    v["relations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["from"].as_str().unwrap_or_default().to_owned(),
                        r["relationType"].as_str().unwrap_or_default().to_owned(),
                        r["to"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entity_names(v: &Value) -> Vec<String> {
    v["entities"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn t(
    id: &'static str,
    steps: usize,
    needs: Needs,
    prompt: &str,
    check: Check,
    native: Policy,
    script: &str,
) -> Arc<Task> {
    Arc::new(Task {
        id,
        steps,
        needs,
        prompt: prompt.to_owned(),
        check,
        native,
        script: script.trim_start().to_owned(),
    })
}

/// Every task, in the order of the table.
pub fn all() -> Vec<Arc<Task>> {
    let mut v = Vec::new();
    v.extend(filesystem());
    v.extend(memory());
    v.extend(own());
    v.extend(mixed());
    v
}

/// Tasks that need only the in-process tools and server-everything (installed with the
/// workspace's test dependencies): what the test runs.
pub fn without_npm_extras() -> Vec<Arc<Task>> {
    all()
        .into_iter()
        .filter(|t| !t.needs.fs && !t.needs.memory)
        .collect()
}

// ---- filesystem server ----

fn filesystem() -> Vec<Arc<Task>> {
    let mut v = Vec::new();

    let mut largest: Vec<_> = fx::REPORTS
        .iter()
        .map(|r| (fx::report_text(r.1, r.2).len(), r.0, r.1))
        .collect();
    largest.sort_by(|a, b| b.cmp(a));
    let want: Vec<String> = largest[..3]
        .iter()
        .flat_map(|(_, n, f)| [n.to_string(), f.to_string()])
        .collect();
    let not: Vec<String> = largest[3..].iter().map(|(_, n, _)| n.to_string()).collect();
    v.push(t(
        "fs_three_largest_first_lines",
        2,
        FS,
        "Find the three largest files in reports/ and tell me the first line of each.",
        check(move |a, _| has_all(a, &want).and(has_none(a, &not))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call(
                "fs__list_directory_with_sizes",
                json!({"path": "reports", "sortBy": "size"}),
            )]),
            1 => Move::Calls(
                files_in(&text(&results(turns, 0)[0]))
                    .iter()
                    .take(3)
                    .map(|f| {
                        call(
                            "fs__read_text_file",
                            json!({"path": format!("reports/{f}"), "head": 1}),
                        )
                    })
                    .collect(),
            ),
            _ => answer(
                turns[1]
                    .calls
                    .iter()
                    .zip(results(turns, 1))
                    .map(|((_, a), r)| {
                        format!(
                            "{}: {}",
                            base(a["path"].as_str().unwrap_or_default()),
                            text(r).trim()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }),
        r#"
listing = fs__list_directory_with_sizes(path="reports", sortBy="size")["content"]
files = [l.split()[1] for l in listing.splitlines() if l.startswith("[FILE]")][:3]
for f in files:
    print(f + ":", fs__read_text_file(path="reports/" + f, head=1)["content"].strip())
"#,
    ));

    let total: usize = fx::LOGS.iter().map(|l| l.1).sum();
    let mut want = vec![format!("total {total}")];
    want.extend(fx::LOGS.iter().map(|l| format!("{}: {}", l.0, l.1)));
    v.push(t(
        "fs_error_lines_in_logs",
        2,
        FS,
        "How many lines containing ERROR are in the .log files under logs/? Answer with one line per file, '<file name>: <count>', then 'total <count>'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call(
                "fs__search_files",
                json!({"path": "logs", "pattern": "*.log"}),
            )]),
            1 => Move::Calls(
                text(&results(turns, 0)[0])
                    .lines()
                    .map(|p| call("fs__read_text_file", json!({"path": p.trim()})))
                    .collect(),
            ),
            _ => {
                let mut lines = Vec::new();
                let mut total = 0;
                for ((_, a), r) in turns[1].calls.iter().zip(results(turns, 1)) {
                    let n = text(r).lines().filter(|l| l.contains("ERROR")).count();
                    total += n;
                    lines.push(format!(
                        "{}: {n}",
                        base(a["path"].as_str().unwrap_or_default())
                    ));
                }
                answer(format!("{}\ntotal {total}", lines.join("\n")))
            }
        }),
        r#"
paths = fs__search_files(path="logs", pattern="*.log")["content"].splitlines()
total = 0
for p in paths:
    n = sum(1 for l in fs__read_text_file(path=p)["content"].splitlines() if "ERROR" in l)
    total += n
    print(p.rsplit("/", 1)[-1] + ":", n)
print("total", total)
"#,
    ));

    v.push(t(
        "fs_follow_config_includes",
        3,
        FS,
        "Start at config/main.json. Each config file may name another in its \"include\" field; follow the chain to its end and tell me the owner named there.",
        check(|a, _| has_all(a, &strings(["Dana Whitfield"]))),
        policy(|turns| {
            let next = match turns.last() {
                None => Some("config/main.json".to_owned()),
                Some(t) => {
                    let v: Value = serde_json::from_str(&text(&t.results[0])).unwrap_or_default();
                    match v["include"].as_str() {
                        Some(p) => Some(p.to_owned()),
                        None => return answer(format!("The owner is {}.", v["owner"].as_str().unwrap_or("not named"))),
                    }
                }
            };
            Move::Calls(vec![call("fs__read_text_file", json!({"path": next}))])
        }),
        r#"
import json
path = "config/main.json"
while True:
    conf = json.loads(fs__read_text_file(path=path)["content"])
    if "include" not in conf:
        break
    path = conf["include"]
print("The owner is", conf.get("owner", "not named"), "(from", path + ")")
"#,
    ));

    let best = fx::SALES
        .iter()
        .max_by(|a, b| revenue(a.1).total_cmp(&revenue(b.1)))
        .unwrap();
    let want = vec![best.0.to_owned(), format!("{:.2}", revenue(best.1))];
    let not: Vec<String> = fx::SALES
        .iter()
        .filter(|s| s.0 != best.0)
        .map(|s| format!("best: {}", s.0))
        .collect();
    v.push(t(
        "fs_best_sales_month",
        2,
        FS,
        "The CSV files in data/ (columns item,qty,price) each hold one month of sales. Which month had the highest revenue (sum of qty*price), and how much was it? Answer as 'best: <file name> with revenue <amount, two decimals>'.",
        check(move |a, _| has_all(a, &want).and(has_none(a, &not))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__list_directory", json!({"path": "data"}))]),
            1 => Move::Calls(
                files_in(&text(&results(turns, 0)[0]))
                    .iter()
                    .map(|f| call("fs__read_text_file", json!({"path": format!("data/{f}")})))
                    .collect(),
            ),
            _ => {
                let mut best = (String::new(), f64::MIN);
                for ((_, a), r) in turns[1].calls.iter().zip(results(turns, 1)) {
                    let rev: f64 = text(r)
                        .lines()
                        .skip(1)
                        .filter_map(|l| {
                            let f: Vec<&str> = l.split(',').collect();
                            Some(f.get(1)?.parse::<f64>().ok()? * f.get(2)?.parse::<f64>().ok()?)
                        })
                        .sum();
                    if rev > best.1 {
                        best = (base(a["path"].as_str().unwrap_or_default()).to_owned(), rev);
                    }
                }
                answer(format!("best: {} with revenue {:.2}", best.0, best.1))
            }
        }),
        r#"
listing = fs__list_directory(path="data")["content"]
best = None
for f in [l.split()[1] for l in listing.splitlines() if l.startswith("[FILE]")]:
    rows = fs__read_text_file(path="data/" + f)["content"].splitlines()[1:]
    rev = sum(int(r.split(",")[1]) * float(r.split(",")[2]) for r in rows if r)
    if best is None or rev > best[1]:
        best = (f, rev)
print(f"best: {best[0]} with revenue {best[1]:.2f}")
"#,
    ));

    let (yes, no): (Vec<&(&str, &str, &str)>, Vec<_>) =
        fx::NOTES.iter().partition(|n| n.2.contains("launch"));
    let want = strings(yes.iter().map(|n| n.0));
    let not = strings(no.iter().map(|n| n.0));
    v.push(t(
        "fs_notes_mentioning_launch",
        2,
        FS,
        "Which notes in notes/ mention the launch? Give their file names only.",
        check(move |a, _| has_all(a, &want).and(has_none(a, &not))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__list_directory", json!({"path": "notes"}))]),
            1 => Move::Calls(
                files_in(&text(&results(turns, 0)[0]))
                    .iter()
                    .map(|f| call("fs__read_text_file", json!({"path": format!("notes/{f}")})))
                    .collect(),
            ),
            _ => answer(
                turns[1]
                    .calls
                    .iter()
                    .zip(results(turns, 1))
                    .filter(|(_, r)| text(r).to_lowercase().contains("launch"))
                    .map(|((_, a), _)| base(a["path"].as_str().unwrap_or_default()).to_owned())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }),
        r#"
listing = fs__list_directory(path="notes")["content"]
names = [l.split()[1] for l in listing.splitlines() if l.startswith("[FILE]")]
print(", ".join(n for n in names if "launch" in fs__read_text_file(path="notes/" + n)["content"].lower()))
"#,
    ));

    v.push(t(
        "fs_total_bytes_two_dirs",
        2,
        FS,
        "What is the total size in bytes of the files in reports/ and logs/ together? Answer as '<n> bytes'.",
        check(|a, root| {
            let total: u64 = fx::sizes(root, "reports")
                .iter()
                .chain(&fx::sizes(root, "logs"))
                .map(|s| s.1)
                .sum();
            has_all(a, &[format!("{total} bytes")])
        }),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![
                call("fs__list_directory", json!({"path": "reports"})),
                call("fs__list_directory", json!({"path": "logs"})),
            ]),
            1 => Move::Calls(
                turns[0]
                    .calls
                    .iter()
                    .zip(results(turns, 0))
                    .flat_map(|((_, a), r)| {
                        let dir = a["path"].as_str().unwrap_or_default().to_owned();
                        files_in(&text(r)).into_iter().map(move |f| {
                            call("fs__get_file_info", json!({"path": format!("{dir}/{f}")}))
                        })
                    })
                    .collect(),
            ),
            _ => {
                let total: u64 = results(turns, 1).iter().map(|r| size_of(&text(r))).sum();
                answer(format!("Together they take {total} bytes."))
            }
        }),
        r#"
total = 0
for d in ["reports", "logs"]:
    for l in fs__list_directory(path=d)["content"].splitlines():
        if l.startswith("[FILE]"):
            info = fs__get_file_info(path=d + "/" + l.split()[1])["content"]
            total += int([x for x in info.splitlines() if x.startswith("size: ")][0][6:])
print(f"Together they take {total} bytes.")
"#,
    ));

    let newest = fx::REPORTS.iter().max_by_key(|r| r.3).unwrap().0;
    let not = strings(fx::REPORTS.iter().filter(|r| r.0 != newest).map(|r| r.0));
    v.push(t(
        "fs_newest_report",
        2,
        FS,
        "Which file in reports/ was modified most recently? Name only that file.",
        check(move |a, _| has_all(a, &strings([newest])).and(has_none(a, &not))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__list_directory", json!({"path": "reports"}))]),
            1 => Move::Calls(
                files_in(&text(&results(turns, 0)[0]))
                    .iter()
                    .map(|f| call("fs__get_file_info", json!({"path": format!("reports/{f}")})))
                    .collect(),
            ),
            _ => {
                // The dates are ISO-like strings of one format: compare them as times.
                let newest = turns[1]
                    .calls
                    .iter()
                    .zip(results(turns, 1))
                    .max_by_key(|(_, r)| parse_js_date(&modified_of(&text(r))))
                    .map(|((_, a), _)| base(a["path"].as_str().unwrap_or_default()).to_owned())
                    .unwrap_or_default();
                answer(format!("The most recently modified is {newest}."))
            }
        }),
        r#"
import datetime
def when(info):
    m = [x for x in info.splitlines() if x.startswith("modified: ")][0][10:]
    return datetime.datetime.strptime(" ".join(m.split()[1:5]), "%b %d %Y %H:%M:%S")
listing = fs__list_directory(path="reports")["content"]
files = [l.split()[1] for l in listing.splitlines() if l.startswith("[FILE]")]
newest = max(files, key=lambda f: when(fs__get_file_info(path="reports/" + f)["content"]))
print(f"The most recently modified is {newest}.")
"#,
    ));

    v.push(t(
        "fs_write_notes_index",
        4,
        FS,
        "Write out/index.md with one line per note in notes/, as '<file name>: <first line>'. Then read it back and tell me how many lines it has, as '<n> lines'.",
        check(|a, root| {
            let written = std::fs::read_to_string(root.join("out/index.md"))
                .map_err(|e| format!("out/index.md: {e}"))?;
            for (name, first, _) in fx::NOTES {
                let line = format!("{name}: {first}");
                if !written.lines().any(|l| l.trim() == line) {
                    return Err(format!("out/index.md lacks {line:?}: {written:?}"));
                }
            }
            has_all(a, &[format!("{} lines", fx::NOTES.len())])
        }),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__list_directory", json!({"path": "notes"}))]),
            1 => Move::Calls(
                files_in(&text(&results(turns, 0)[0]))
                    .iter()
                    .map(|f| call("fs__read_text_file", json!({"path": format!("notes/{f}"), "head": 1})))
                    .collect(),
            ),
            2 => {
                let content: String = turns[1]
                    .calls
                    .iter()
                    .zip(results(turns, 1))
                    .map(|((_, a), r)| format!("{}: {}\n", base(a["path"].as_str().unwrap_or_default()), text(r).trim()))
                    .collect();
                Move::Calls(vec![call("fs__write_file", json!({"path": "out/index.md", "content": content}))])
            }
            3 => Move::Calls(vec![call("fs__read_text_file", json!({"path": "out/index.md"}))]),
            _ => {
                let n = text(&results(turns, 3)[0]).lines().filter(|l| !l.trim().is_empty()).count();
                answer(format!("out/index.md is written; it has {n} lines."))
            }
        }),
        r#"
listing = fs__list_directory(path="notes")["content"]
names = [l.split()[1] for l in listing.splitlines() if l.startswith("[FILE]")]
content = "".join(f"{n}: {fs__read_text_file(path='notes/' + n, head=1)['content'].strip()}\n" for n in names)
fs__write_file(path="out/index.md", content=content)
back = fs__read_text_file(path="out/index.md")["content"]
print(f"out/index.md is written; it has {len([l for l in back.splitlines() if l.strip()])} lines.")
"#,
    ));

    v.push(t(
        "fs_largest_file_anywhere",
        2,
        FS,
        "Find the largest file anywhere under the root (every folder) and tell me its path and its size, as '<path> with <n> bytes'.",
        check(|a, root| {
            let mut best = (0, String::new());
            for d in ["reports", "logs", "data", "notes", "config", "inputs"] {
                for (n, s) in fx::sizes(root, d) {
                    if s > best.0 {
                        best = (s, format!("{d}/{n}"));
                    }
                }
            }
            has_all(a, &[best.1, format!("{} bytes", best.0)])
        }),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__directory_tree", json!({"path": "."}))]),
            1 => {
                let tree: Value = serde_json::from_str(&text(&results(turns, 0)[0])).unwrap_or_default();
                let mut files = Vec::new();
                tree_files(&tree, "", &mut files);
                Move::Calls(files.into_iter().map(|f| call("fs__get_file_info", json!({"path": f}))).collect())
            }
            _ => {
                let best = turns[1]
                    .calls
                    .iter()
                    .zip(results(turns, 1))
                    .max_by_key(|(_, r)| size_of(&text(r)))
                    .map(|((_, a), r)| (a["path"].as_str().unwrap_or_default().to_owned(), size_of(&text(r))))
                    .unwrap_or_default();
                answer(format!("The largest is {} with {} bytes.", best.0, best.1))
            }
        }),
        r#"
import json
# At most 20 calls per script (run_code's description): the largest file of each folder by
# the server's own size order, then the exact size of those few.
def folders(nodes, prefix):
    for n in nodes:
        if n["type"] == "directory":
            p = prefix + n["name"]
            yield p
            yield from folders(n.get("children", []), p + "/")
def size(p):
    info = fs__get_file_info(path=p)["content"]
    return int([x for x in info.splitlines() if x.startswith("size: ")][0][6:])
sizes = {}
for d in ["."] + list(folders(json.loads(fs__directory_tree(path=".")["content"]), "")):
    top = [l.split()[1] for l in fs__list_directory_with_sizes(path=d, sortBy="size")["content"].splitlines() if l.startswith("[FILE]")][:1]
    for f in top:
        p = f if d == "." else d + "/" + f
        sizes[p] = size(p)
best = max(sizes, key=sizes.get)
print(f"The largest is {best} with {sizes[best]} bytes.")
"#,
    ));
    v
}

fn tree_files(nodes: &Value, prefix: &str, out: &mut Vec<String>) {
    for n in nodes.as_array().into_iter().flatten() {
        let path = format!("{prefix}{}", n["name"].as_str().unwrap_or_default());
        if n["type"] == "directory" {
            tree_files(&n["children"], &format!("{path}/"), out);
        } else {
            out.push(path);
        }
    }
}

/// A JavaScript `Date` as Node prints it (`Tue Sep 21 2026 10:00:00 GMT+0000 (…)`), as a
/// sortable `(year, month, day, time)`.
fn parse_js_date(s: &str) -> (u32, u32, u32, String) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let f: Vec<&str> = s.split_whitespace().collect();
    let month = f
        .get(1)
        .and_then(|m| MONTHS.iter().position(|x| x == m))
        .unwrap_or(0) as u32;
    let day = f.get(2).and_then(|d| d.parse().ok()).unwrap_or(0);
    let year = f.get(3).and_then(|y| y.parse().ok()).unwrap_or(0);
    (year, month, day, f.get(4).unwrap_or(&"").to_string())
}

// ---- memory server ----

fn memory() -> Vec<Arc<Task>> {
    let mut v = Vec::new();
    v.push(t(
        "mem_who_works_at_acme",
        3,
        MEM,
        "Record in the knowledge graph: Alice and Bob work at Acme, Carol works at Globex (people are entities of type person, companies of type company, the relation is works_at). Then, from the graph, tell me who works at Acme.",
        check(|a, _| has_all(a, &strings(["Alice", "Bob"])).and(has_none(a, &strings(["Carol"])))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("memory__create_entities", json!({"entities": [
                {"name": "Alice", "entityType": "person", "observations": []},
                {"name": "Bob", "entityType": "person", "observations": []},
                {"name": "Carol", "entityType": "person", "observations": []},
                {"name": "Acme", "entityType": "company", "observations": []},
                {"name": "Globex", "entityType": "company", "observations": []}
            ]}))]),
            1 => Move::Calls(vec![call("memory__create_relations", json!({"relations": [
                {"from": "Alice", "to": "Acme", "relationType": "works_at"},
                {"from": "Bob", "to": "Acme", "relationType": "works_at"},
                {"from": "Carol", "to": "Globex", "relationType": "works_at"}
            ]}))]),
            2 => Move::Calls(vec![call("memory__open_nodes", json!({"names": ["Acme"]}))]),
            _ => {
                let g = &results(turns, 2)[0];
                let people: Vec<String> = graph_relations(g)
                    .into_iter()
                    .filter(|r| r.1 == "works_at" && r.2 == "Acme")
                    .map(|r| r.0)
                    .collect();
                answer(format!("Working at Acme: {}.", people.join(" and ")))
            }
        }),
        r#"
people = [("Alice", "Acme"), ("Bob", "Acme"), ("Carol", "Globex")]
memory__create_entities(entities=[{"name": p, "entityType": "person", "observations": []} for p, _ in people]
    + [{"name": c, "entityType": "company", "observations": []} for c in ("Acme", "Globex")])
memory__create_relations(relations=[{"from": p, "to": c, "relationType": "works_at"} for p, c in people])
g = memory__open_nodes(names=["Acme"])
print("Working at Acme:", " and ".join(r["from"] for r in g["relations"] if r["relationType"] == "works_at" and r["to"] == "Acme") + ".")
"#,
    ));

    v.push(t(
        "mem_search_vegetarians",
        2,
        MEM,
        "Add these people to the knowledge graph (type person) with what we know as observations: Dana is vegetarian and likes chess; Eli likes running; Finn is vegetarian. Then search the graph for 'vegetarian' and tell me who matches.",
        check(|a, _| has_all(a, &strings(["Dana", "Finn"])).and(has_none(a, &strings(["Eli"])))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("memory__create_entities", json!({"entities": [
                {"name": "Dana", "entityType": "person", "observations": ["is vegetarian", "likes chess"]},
                {"name": "Eli", "entityType": "person", "observations": ["likes running"]},
                {"name": "Finn", "entityType": "person", "observations": ["is vegetarian"]}
            ]}))]),
            1 => Move::Calls(vec![call("memory__search_nodes", json!({"query": "vegetarian"}))]),
            _ => answer(format!("Vegetarian: {}.", entity_names(&results(turns, 1)[0]).join(", "))),
        }),
        r#"
memory__create_entities(entities=[
    {"name": "Dana", "entityType": "person", "observations": ["is vegetarian", "likes chess"]},
    {"name": "Eli", "entityType": "person", "observations": ["likes running"]},
    {"name": "Finn", "entityType": "person", "observations": ["is vegetarian"]}])
found = memory__search_nodes(query="vegetarian")
print("Vegetarian:", ", ".join(e["name"] for e in found["entities"]) + ".")
"#,
    ));

    v.push(t(
        "mem_managers_manager",
        3,
        MEM,
        "Record in the knowledge graph that Grace manages Heidi and Heidi manages Ivan (all of type person, relation manages). Then use the graph to find who manages Ivan's manager.",
        check(|a, _| has_all(a, &strings(["Grace"]))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("memory__create_entities", json!({"entities": [
                {"name": "Grace", "entityType": "person", "observations": []},
                {"name": "Heidi", "entityType": "person", "observations": []},
                {"name": "Ivan", "entityType": "person", "observations": []}
            ]}))]),
            1 => Move::Calls(vec![call("memory__create_relations", json!({"relations": [
                {"from": "Grace", "to": "Heidi", "relationType": "manages"},
                {"from": "Heidi", "to": "Ivan", "relationType": "manages"}
            ]}))]),
            2 => Move::Calls(vec![call("memory__read_graph", json!({}))]),
            _ => {
                let rel = graph_relations(&results(turns, 2)[0]);
                let boss = |who: &str| rel.iter().find(|r| r.1 == "manages" && r.2 == who).map(|r| r.0.clone());
                let top = boss("Ivan").and_then(|m| boss(&m)).unwrap_or_else(|| "nobody in the graph".into());
                answer(format!("Ivan's manager's manager is {top}."))
            }
        }),
        r#"
memory__create_entities(entities=[{"name": n, "entityType": "person", "observations": []} for n in ("Grace", "Heidi", "Ivan")])
memory__create_relations(relations=[{"from": "Grace", "to": "Heidi", "relationType": "manages"},
                                    {"from": "Heidi", "to": "Ivan", "relationType": "manages"}])
rel = memory__read_graph()["relations"]
boss = lambda who: next((r["from"] for r in rel if r["relationType"] == "manages" and r["to"] == who), None)
print("Ivan's manager's manager is", (boss(boss("Ivan")) if boss("Ivan") else None) or "nobody in the graph")
"#,
    ));

    let obs = strings(["deadline in March", "budget 40k", "owner Dana"]);
    v.push(t(
        "mem_project_observations",
        3,
        MEM,
        "Create the entity 'Project Falcon' (type project) with the observation 'deadline in March'. Then add the observations 'budget 40k' and 'owner Dana' to it, and open the node to list all its observations.",
        check(move |a, _| has_all(a, &obs)),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("memory__create_entities", json!({"entities": [
                {"name": "Project Falcon", "entityType": "project", "observations": ["deadline in March"]}
            ]}))]),
            1 => Move::Calls(vec![call("memory__add_observations", json!({"observations": [
                {"entityName": "Project Falcon", "contents": ["budget 40k", "owner Dana"]}
            ]}))]),
            2 => Move::Calls(vec![call("memory__open_nodes", json!({"names": ["Project Falcon"]}))]),
            _ => {
                let g = &results(turns, 2)[0];
                let obs: Vec<String> = g["entities"][0]["observations"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|o| o.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                answer(format!("Project Falcon: {}.", obs.join("; ")))
            }
        }),
        r#"
memory__create_entities(entities=[{"name": "Project Falcon", "entityType": "project", "observations": ["deadline in March"]}])
memory__add_observations(observations=[{"entityName": "Project Falcon", "contents": ["budget 40k", "owner Dana"]}])
node = memory__open_nodes(names=["Project Falcon"])["entities"][0]
print("Project Falcon:", "; ".join(node["observations"]) + ".")
"#,
    ));
    v
}

// ---- the project's own tools, and server-everything's get-sum ----

fn own() -> Vec<Arc<Task>> {
    let mut v = Vec::new();
    v.push(t(
        "weather_warmest_and_coldest",
        1,
        OWN,
        "What's the weather in Paris, Oslo, Rome, Cairo and Lima? Which is the warmest and which the coldest? End with 'warmest: <city>, coldest: <city>'.",
        check(|a, _| has_all(a, &strings(["warmest: Cairo", "coldest: Oslo"]))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["Paris", "Oslo", "Rome", "Cairo", "Lima"]
                    .iter()
                    .map(|c| call("get_weather", json!({"city": c})))
                    .collect(),
            ),
            _ => {
                let w = weathers(results(turns, 0));
                let hot = w.iter().max_by_key(|x| x.1).unwrap();
                let cold = w.iter().min_by_key(|x| x.1).unwrap();
                let all: Vec<String> = w.iter().map(|x| format!("{} {} °C {}", x.0, x.1, x.2)).collect();
                answer(format!("{}. warmest: {}, coldest: {}", all.join("; "), hot.0, cold.0))
            }
        }),
        r#"
w = [get_weather(city=c) for c in ["Paris", "Oslo", "Rome", "Cairo", "Lima"]]
print("; ".join(f"{x['city']} {x['temperature_c']} °C {x['conditions']}" for x in w) + ".",
      "warmest:", max(w, key=lambda x: x["temperature_c"])["city"] + ",",
      "coldest:", min(w, key=lambda x: x["temperature_c"])["city"])
"#,
    ));

    v.push(t(
        "capitals_warmest",
        2,
        OWN,
        "For France, Japan and Kenya, find the capital, then the current weather there. Which capital is the warmest? Answer as 'warmest capital: <city>'.",
        check(|a, _| has_all(a, &strings(["warmest capital: Nairobi"]))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["France", "Japan", "Kenya"]
                    .iter()
                    .map(|c| call("country_info", json!({"country": c})))
                    .collect(),
            ),
            1 => Move::Calls(
                results(turns, 0)
                    .iter()
                    .map(|r| call("get_weather", json!({"city": r["capital"]})))
                    .collect(),
            ),
            _ => {
                let w = weathers(results(turns, 1));
                let hot = w.iter().max_by_key(|x| x.1).unwrap();
                answer(format!("warmest capital: {} ({} °C)", hot.0, hot.1))
            }
        }),
        r#"
w = [get_weather(city=country_info(country=c)["capital"]) for c in ["France", "Japan", "Kenya"]]
hot = max(w, key=lambda x: x["temperature_c"])
print(f"warmest capital: {hot['city']} ({hot['temperature_c']} °C)")
"#,
    ));

    let want: Vec<String> = ["Japan", "Brazil", "Canada"]
        .iter()
        .map(|c| {
            let cur = country_of(c).unwrap().2;
            format!("{:.2} {cur}", 120.0 * per_eur(cur).unwrap())
        })
        .collect();
    v.push(t(
        "ticket_price_in_local_currencies",
        2,
        OWN,
        "A ticket costs 120 EUR. What is that in the local currency of Japan, Brazil and Canada? One line per country, '<country>: <amount, two decimals> <currency code>'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["Japan", "Brazil", "Canada"]
                    .iter()
                    .map(|c| call("country_info", json!({"country": c})))
                    .collect(),
            ),
            1 => Move::Calls(
                results(turns, 0)
                    .iter()
                    .map(|r| call("exchange_rate", json!({"from": "EUR", "to": r["currency"]})))
                    .collect(),
            ),
            _ => answer(
                results(turns, 0)
                    .iter()
                    .zip(results(turns, 1))
                    .map(|(c, r)| {
                        format!(
                            "{}: {:.2} {}",
                            c["country"].as_str().unwrap_or_default(),
                            120.0 * r["rate"].as_f64().unwrap_or(f64::NAN),
                            r["to"].as_str().unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }),
        r#"
for c in ["Japan", "Brazil", "Canada"]:
    cur = country_info(country=c)["currency"]
    print(f"{c}: {120 * exchange_rate({'from': 'EUR', 'to': cur})['rate']:.2f} {cur}")
"#,
    ));

    let pop: f64 = ["Canada", "Australia", "Norway"]
        .iter()
        .map(|c| country_of(c).unwrap().1)
        .sum();
    let want = vec![format!("{pop:.1} million")];
    v.push(t(
        "population_sum_with_get_sum",
        3,
        SUM,
        "Using the get-sum tool for the arithmetic, what is the combined population (in millions) of Canada, Australia and Norway? Answer as '<n, one decimal> million'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| {
            let pops = |turns: &[Turn]| -> Vec<f64> {
                results(turns, 0).iter().map(|r| r["population_millions"].as_f64().unwrap_or(f64::NAN)).collect()
            };
            match turns.len() {
                0 => Move::Calls(
                    ["Canada", "Australia", "Norway"]
                        .iter()
                        .map(|c| call("country_info", json!({"country": c})))
                        .collect(),
                ),
                1 => {
                    let p = pops(turns);
                    Move::Calls(vec![call("everything__get-sum", json!({"a": p[0], "b": p[1]}))])
                }
                2 => Move::Calls(vec![call(
                    "everything__get-sum",
                    json!({"a": sum_of(&results(turns, 1)[0]), "b": pops(turns)[2]}),
                )]),
                _ => answer(format!("Together: {:.1} million people.", sum_of(&results(turns, 2)[0]))),
            }
        }),
        r#"
import re
def add(a, b):
    return float(re.findall(r"-?[0-9.]+", everything__get_sum(a=a, b=b).rstrip("."))[-1])
p = [country_info(country=c)["population_millions"] for c in ["Canada", "Australia", "Norway"]]
print(f"Together: {add(add(p[0], p[1]), p[2]):.1f} million people.")
"#,
    ));

    let temps: Vec<i64> = ["Tokyo", "Nairobi", "Ottawa", "Canberra"]
        .iter()
        .map(|c| weather_of(c).unwrap().0)
        .collect();
    let sum: i64 = temps.iter().sum();
    let want = vec![
        format!("sum {sum}"),
        format!("average {:.2}", sum as f64 / 4.0),
    ];
    v.push(t(
        "temperature_average_with_get_sum",
        3,
        SUM,
        "Get the temperatures in Tokyo, Nairobi, Ottawa and Canberra, add them up with the get-sum tool, and give the sum and the average, as 'sum <n>, average <n, two decimals>'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["Tokyo", "Nairobi", "Ottawa", "Canberra"]
                    .iter()
                    .map(|c| call("get_weather", json!({"city": c})))
                    .collect(),
            ),
            1 => {
                let w = weathers(results(turns, 0));
                Move::Calls(vec![
                    call("everything__get-sum", json!({"a": w[0].1, "b": w[1].1})),
                    call("everything__get-sum", json!({"a": w[2].1, "b": w[3].1})),
                ])
            }
            2 => Move::Calls(vec![call(
                "everything__get-sum",
                json!({"a": sum_of(&results(turns, 1)[0]), "b": sum_of(&results(turns, 1)[1])}),
            )]),
            _ => {
                let s = sum_of(&results(turns, 2)[0]);
                answer(format!("sum {s}, average {:.2}", s / 4.0))
            }
        }),
        r#"
import re
def add(a, b):
    return float(re.findall(r"-?[0-9.]+", everything__get_sum(a=a, b=b).rstrip("."))[-1])
t = [get_weather(city=c)["temperature_c"] for c in ["Tokyo", "Nairobi", "Ottawa", "Canberra"]]
s = add(add(t[0], t[1]), add(t[2], t[3]))
print(f"sum {s:g}, average {s / 4:.2f}")
"#,
    ));

    v.push(t(
        "closer_temperature_to_oslo",
        1,
        OWN,
        "I'm in Oslo. Which of Rome or Ottawa is closer in temperature to Oslo right now? Answer as 'closer: <city>'.",
        check(|a, _| has_all(a, &strings(["closer: Ottawa"]))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["Oslo", "Rome", "Ottawa"]
                    .iter()
                    .map(|c| call("get_weather", json!({"city": c})))
                    .collect(),
            ),
            _ => {
                let w = weathers(results(turns, 0));
                let best = w[1..].iter().min_by_key(|x| (x.1 - w[0].1).abs()).unwrap();
                answer(format!(
                    "closer: {} ({} °C vs Oslo {} °C)",
                    best.0, best.1, w[0].1
                ))
            }
        }),
        r#"
o = get_weather(city="Oslo")["temperature_c"]
w = [get_weather(city=c) for c in ["Rome", "Ottawa"]]
b = min(w, key=lambda x: abs(x["temperature_c"] - o))
print(f"closer: {b['city']} ({b['temperature_c']} °C vs Oslo {o} °C)")
"#,
    ));
    v
}

// ---- several servers in one task ----

fn mixed() -> Vec<Arc<Task>> {
    let mut v = Vec::new();
    let hot = fx::CITIES
        .iter()
        .max_by_key(|c| weather_of(c).unwrap().0)
        .unwrap();
    let want = vec![format!("warmest: {hot}")];
    v.push(t(
        "cities_file_warmest",
        2,
        FS,
        "inputs/cities.txt lists cities, one per line. Get the weather for each and tell me which is the warmest, as 'warmest: <city>'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__read_text_file", json!({"path": "inputs/cities.txt"}))]),
            1 => Move::Calls(
                text(&results(turns, 0)[0])
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|c| call("get_weather", json!({"city": c.trim()})))
                    .collect(),
            ),
            _ => {
                let w = weathers(results(turns, 1));
                let hot = w.iter().max_by_key(|x| x.1).unwrap();
                answer(format!("warmest: {} ({} °C)", hot.0, hot.1))
            }
        }),
        r#"
cities = [c.strip() for c in fs__read_text_file(path="inputs/cities.txt")["content"].splitlines() if c.strip()]
w = [get_weather(city=c) for c in cities]
hot = max(w, key=lambda x: x["temperature_c"])
print(f"warmest: {hot['city']} ({hot['temperature_c']} °C)")
"#,
    ));

    let lines: Vec<String> = fx::COUNTRIES
        .iter()
        .map(|c| {
            let (cap, _, _) = country_of(c).unwrap();
            let (t, cond) = weather_of(cap).unwrap();
            format!("{c}: {cap}, {t} °C, {cond}")
        })
        .collect();
    let hot = fx::COUNTRIES
        .iter()
        .map(|c| country_of(c).unwrap().0)
        .max_by_key(|cap| weather_of(cap).unwrap().0)
        .unwrap();
    let want = vec![format!("warmest capital: {hot}")];
    v.push(t(
        "countries_file_to_capitals_report",
        4,
        FS,
        "For each country in inputs/countries.txt, find its capital and the weather there, and write out/capitals.md with one line per country: '<country>: <capital>, <temperature> °C, <conditions>'. Then tell me the warmest capital, as 'warmest capital: <city>'.",
        check(move |a, root| {
            let written = std::fs::read_to_string(root.join("out/capitals.md"))
                .map_err(|e| format!("out/capitals.md: {e}"))?;
            for l in &lines {
                if !written.lines().any(|x| x.trim() == l) {
                    return Err(format!("out/capitals.md lacks {l:?}: {written:?}"));
                }
            }
            has_all(a, &want)
        }),
        policy(|turns| match turns.len() {
            0 => Move::Calls(vec![call("fs__read_text_file", json!({"path": "inputs/countries.txt"}))]),
            1 => Move::Calls(
                text(&results(turns, 0)[0])
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|c| call("country_info", json!({"country": c.trim()})))
                    .collect(),
            ),
            2 => Move::Calls(
                results(turns, 1)
                    .iter()
                    .map(|r| call("get_weather", json!({"city": r["capital"]})))
                    .collect(),
            ),
            3 => {
                let content: String = results(turns, 1)
                    .iter()
                    .zip(weathers(results(turns, 2)))
                    .map(|(c, w)| format!("{}: {}, {} °C, {}\n", c["country"].as_str().unwrap_or_default(), w.0, w.1, w.2))
                    .collect();
                Move::Calls(vec![call("fs__write_file", json!({"path": "out/capitals.md", "content": content}))])
            }
            _ => {
                let w = weathers(results(turns, 2));
                let hot = w.iter().max_by_key(|x| x.1).unwrap();
                answer(format!("Wrote out/capitals.md. warmest capital: {} ({} °C)", hot.0, hot.1))
            }
        }),
        r#"
countries = [c.strip() for c in fs__read_text_file(path="inputs/countries.txt")["content"].splitlines() if c.strip()]
rows = []
for c in countries:
    w = get_weather(city=country_info(country=c)["capital"])
    rows.append((c, w))
fs__write_file(path="out/capitals.md", content="".join(
    f"{c}: {w['city']}, {w['temperature_c']} °C, {w['conditions']}\n" for c, w in rows))
hot = max(rows, key=lambda r: r[1]["temperature_c"])[1]
print(f"Wrote out/capitals.md. warmest capital: {hot['city']} ({hot['temperature_c']} °C)")
"#,
    ));

    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, c) in fx::TEAM {
        *per.entry(c).or_default() += 1;
    }
    let want: Vec<String> = per.iter().map(|(c, n)| format!("{c}: {n}")).collect();
    v.push(t(
        "team_csv_into_graph",
        4,
        Needs {
            fs: true,
            memory: true,
            everything: false,
        },
        "inputs/team.csv has rows name,company. Put each person (type person) and each company (type company) into the knowledge graph with works_at relations, then read the graph back and tell me how many people work at each company of the file, one line per company: '<company>: <count>'.",
        check(move |a, _| has_all(a, &want)),
        policy(|turns| {
            let rows = |turns: &[Turn]| -> Vec<(String, String)> {
                text(&results(turns, 0)[0])
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(',').map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned())))
                    .collect()
            };
            match turns.len() {
                0 => Move::Calls(vec![call("fs__read_text_file", json!({"path": "inputs/team.csv"}))]),
                1 => {
                    let rows = rows(turns);
                    let mut companies: Vec<&String> = rows.iter().map(|r| &r.1).collect();
                    companies.sort();
                    companies.dedup();
                    let mut e: Vec<Value> = rows.iter().map(|r| json!({"name": r.0, "entityType": "person", "observations": []})).collect();
                    e.extend(companies.iter().map(|c| json!({"name": c, "entityType": "company", "observations": []})));
                    Move::Calls(vec![call("memory__create_entities", json!({"entities": e}))])
                }
                2 => Move::Calls(vec![call("memory__create_relations", json!({"relations":
                    rows(turns).iter().map(|r| json!({"from": r.0, "to": r.1, "relationType": "works_at"})).collect::<Vec<_>>()}))]),
                3 => Move::Calls(vec![call("memory__read_graph", json!({}))]),
                _ => {
                    let rows = rows(turns);
                    let mut per: BTreeMap<String, usize> = BTreeMap::new();
                    for r in graph_relations(&results(turns, 3)[0]) {
                        if r.1 == "works_at" && rows.iter().any(|x| x.1 == r.2) {
                            *per.entry(r.2).or_default() += 1;
                        }
                    }
                    answer(per.iter().map(|(c, n)| format!("{c}: {n}")).collect::<Vec<_>>().join("\n"))
                }
            }
        }),
        r#"
rows = [l.split(",") for l in fs__read_text_file(path="inputs/team.csv")["content"].splitlines()[1:] if l.strip()]
companies = sorted({c.strip() for _, c in rows})
memory__create_entities(entities=[{"name": n.strip(), "entityType": "person", "observations": []} for n, _ in rows]
    + [{"name": c, "entityType": "company", "observations": []} for c in companies])
memory__create_relations(relations=[{"from": n.strip(), "to": c.strip(), "relationType": "works_at"} for n, c in rows])
per = {}
for r in memory__read_graph()["relations"]:
    if r["relationType"] == "works_at" and r["to"] in companies:
        per[r["to"]] = per.get(r["to"], 0) + 1
print("\n".join(f"{c}: {n}" for c, n in sorted(per.items())))
"#,
    ));

    let sunny: Vec<&str> = ["Rome", "Oslo", "Lima", "Canberra"]
        .into_iter()
        .filter(|c| weather_of(c).unwrap().1 == "sunny")
        .collect();
    let not = strings(
        ["Rome", "Oslo", "Lima", "Canberra"]
            .into_iter()
            .filter(|c| !sunny.contains(c)),
    );
    let want = strings(sunny);
    v.push(t(
        "weather_into_graph_then_search",
        3,
        MEM,
        "Get the weather of Rome, Oslo, Lima and Canberra and record each city in the knowledge graph (type city, its conditions as an observation). Then search the graph for 'sunny' and tell me which of these cities match (names only).",
        check(move |a, _| has_all(a, &want).and(has_none(a, &not))),
        policy(|turns| match turns.len() {
            0 => Move::Calls(
                ["Rome", "Oslo", "Lima", "Canberra"]
                    .iter()
                    .map(|c| call("get_weather", json!({"city": c})))
                    .collect(),
            ),
            1 => Move::Calls(vec![call("memory__create_entities", json!({"entities":
                weathers(results(turns, 0)).iter().map(|w| json!({"name": w.0, "entityType": "city", "observations": [w.2]})).collect::<Vec<_>>()}))]),
            2 => Move::Calls(vec![call("memory__search_nodes", json!({"query": "sunny"}))]),
            _ => {
                let mine = ["Rome", "Oslo", "Lima", "Canberra"];
                let found: Vec<String> = entity_names(&results(turns, 2)[0]).into_iter().filter(|n| mine.contains(&n.as_str())).collect();
                answer(format!("Sunny: {}.", found.join(", ")))
            }
        }),
        r#"
cities = ["Rome", "Oslo", "Lima", "Canberra"]
memory__create_entities(entities=[{"name": c, "entityType": "city", "observations": [get_weather(city=c)["conditions"]]} for c in cities])
found = [e["name"] for e in memory__search_nodes(query="sunny")["entities"] if e["name"] in cities]
print("Sunny:", ", ".join(found) + ".")
"#,
    ));
    v
}
