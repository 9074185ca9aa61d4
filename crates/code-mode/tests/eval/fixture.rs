//! The directory the filesystem server serves, written fresh for each mode, and the facts the
//! checks compare answers with (computed here from the same data, never from a tool).

use std::path::Path;
use std::time::{Duration, SystemTime};

/// `(name, first line, filler lines, modified: seconds after a fixed epoch)`.
pub const REPORTS: [(&str, &str, usize, u64); 6] = [
    ("q1-summary.txt", "Q1 summary: revenue up 4%", 12, 100),
    (
        "q2-summary.txt",
        "Q2 summary: new warehouse opened",
        40,
        400,
    ),
    (
        "q3-summary.txt",
        "Q3 summary: two suppliers replaced",
        7,
        600,
    ),
    ("q4-summary.txt", "Q4 summary: record December", 55, 300),
    ("hiring.txt", "Hiring plan: six engineers", 23, 200),
    ("audit.txt", "Audit notes: no findings", 31, 500),
];

/// `(file, ERROR lines, other lines)`.
pub const LOGS: [(&str, usize, usize); 3] =
    [("api.log", 3, 20), ("worker.log", 5, 14), ("db.log", 0, 9)];

/// One sales row: item, quantity, unit price.
pub type Row = (&'static str, u32, f64);

/// `(file, rows)`.
pub const SALES: [(&str, &[Row]); 3] = [
    (
        "sales-jan.csv",
        &[("lamp", 12, 19.5), ("chair", 4, 85.0), ("desk", 2, 240.0)],
    ),
    (
        "sales-feb.csv",
        &[
            ("lamp", 20, 19.5),
            ("chair", 6, 85.0),
            ("desk", 1, 240.0),
            ("shelf", 3, 60.0),
        ],
    ),
    ("sales-mar.csv", &[("lamp", 8, 19.5), ("desk", 5, 240.0)]),
];

/// `(file, first line, body)`; the launch is mentioned in two.
pub const NOTES: [(&str, &str, &str); 5] = [
    (
        "standup.md",
        "# Standup 3 March",
        "Ana is blocked on the API keys. The launch date holds.",
    ),
    (
        "retro.md",
        "# Retro",
        "Deploys were slow; we will cache the build.",
    ),
    (
        "design.md",
        "# Design review",
        "Colours approved. Icons need another pass.",
    ),
    (
        "budget.md",
        "# Budget",
        "Travel cut by a third; the launch party stays.",
    ),
    ("ideas.md", "# Ideas", "A dark mode; an export to CSV."),
];

pub const CONFIG_CHAIN: [(&str, &str); 3] = [
    (
        "main.json",
        r#"{"name": "main", "debug": false, "include": "config/network.json"}"#,
    ),
    (
        "network.json",
        r#"{"port": 8080, "hosts": ["a.internal", "b.internal"], "include": "config/owner.json"}"#,
    ),
    (
        "owner.json",
        r#"{"owner": "Dana Whitfield", "team": "platform"}"#,
    ),
];

pub const CITIES: [&str; 4] = ["Rome", "Oslo", "Cairo", "Lima"];
pub const COUNTRIES: [&str; 3] = ["Japan", "Kenya", "Canada"];
pub const TEAM: [(&str, &str); 5] = [
    ("Mia", "Initech"),
    ("Noah", "Umbrella"),
    ("Olga", "Initech"),
    ("Pavel", "Initech"),
    ("Quinn", "Umbrella"),
];

fn filler(n: usize) -> String {
    (0..n)
        .map(|i| format!("line {i:03}: figures and remarks for the record\n"))
        .collect()
}

pub fn report_text(first: &str, lines: usize) -> String {
    format!("{first}\n{}", filler(lines))
}

pub fn log_text(errors: usize, others: usize) -> String {
    // The ERROR lines spread through the file (7 is prime to every total here).
    let total = errors + others;
    (0..total)
        .map(|i| {
            if (i * 7) % total < errors {
                format!("2026-11-25T10:{i:02}:00 ERROR request {i} failed\n")
            } else {
                format!("2026-11-25T10:{i:02}:00 INFO request {i} ok\n")
            }
        })
        .collect()
}

pub fn sales_text(rows: &[(&str, u32, f64)]) -> String {
    let mut s = String::from("item,qty,price\n");
    for (item, qty, price) in rows {
        s.push_str(&format!("{item},{qty},{price:.2}\n"));
    }
    s
}

pub fn revenue(rows: &[(&str, u32, f64)]) -> f64 {
    rows.iter().map(|(_, q, p)| f64::from(*q) * p).sum()
}

/// Writes the fixture into a new temporary directory.
pub fn create() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("code-mode-eval-")
        .tempdir()?;
    let root = dir.path();
    for sub in [
        "reports", "logs", "data", "notes", "config", "inputs", "out",
    ] {
        std::fs::create_dir(root.join(sub))?;
    }
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
    for (name, first, lines, modified) in REPORTS {
        let path = root.join("reports").join(name);
        std::fs::write(&path, report_text(first, lines))?;
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(epoch + Duration::from_secs(modified))?;
    }
    for (name, errors, others) in LOGS {
        std::fs::write(root.join("logs").join(name), log_text(errors, others))?;
    }
    for (name, rows) in SALES {
        std::fs::write(root.join("data").join(name), sales_text(rows))?;
    }
    for (name, first, body) in NOTES {
        std::fs::write(
            root.join("notes").join(name),
            format!("{first}\n\n{body}\n"),
        )?;
    }
    for (name, text) in CONFIG_CHAIN {
        std::fs::write(root.join("config").join(name), text)?;
    }
    std::fs::write(
        root.join("inputs/cities.txt"),
        CITIES.iter().map(|c| format!("{c}\n")).collect::<String>(),
    )?;
    std::fs::write(
        root.join("inputs/countries.txt"),
        COUNTRIES
            .iter()
            .map(|c| format!("{c}\n"))
            .collect::<String>(),
    )?;
    let mut team = String::from("name,company\n");
    for (n, c) in TEAM {
        team.push_str(&format!("{n},{c}\n"));
    }
    std::fs::write(root.join("inputs/team.csv"), team)?;
    Ok(dir)
}

/// Sizes in bytes of every file under `root/sub`, by name.
pub fn sizes(root: &Path, sub: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(root.join(sub))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.metadata().map(|m| m.len()).unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
