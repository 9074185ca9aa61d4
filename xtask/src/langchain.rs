//! `cargo xtask bench langchain [--pairs N]`: our loop against LangChain core's, side by side
//! ("keep tracing off at ≥ 100× LangChain's round").
//!
//! This VM's clock drifts by up to 2× between hours, so an absolute µs target cannot be shown;
//! a ratio measured on the same machine at the same time can. Each pair runs our
//! `tool_loop/native_run_2_rounds` (criterion, `benches/loop_overhead.rs`) and LangChain core's
//! same round (`crates/tool-system/benches/langchain/round.py`) one right after the other, the
//! order flipped every pair (ours first, then LangChain first, …) so that a machine getting
//! slower or faster during the run does not favour one side. LangChain runs from a virtualenv
//! under `~/.cache/llm-toolkit` (outside the clone, kept between runs), installed from the
//! pinned `requirements.txt` beside the script.
//!
//! Three ratios per pair: of the central figures (criterion's estimate, the median of
//! LangChain's repeats), of the medians (criterion's median of its samples against the same
//! LangChain median: each side's middle sample, which a few slow samples do not move, where
//! criterion's estimate, a fit over all samples, does), and of the best ones (the fastest of
//! criterion's longer samples, the fastest of LangChain's repeats, both ~30–60 ms of work). On
//! a loaded machine other work only ever adds time, so the best figures are the nearer to each
//! side's own cost.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::python::{cache_venv, pip_install, system_python};
use super::{cargo, root, run};

/// The criterion bench, as `cargo bench` is asked for it.
const BENCH: &str = "native_run_2_rounds";
/// Its group: criterion keeps its estimates under `<criterion home>/tool_loop/<bench>/new`.
const GROUP: &str = "tool_loop";
/// Pairs when `--pairs` is not given.
const PAIRS: usize = 3;
/// One side of one pair may take this long (they take ~10 s); past it the run fails.
const LIMIT: Duration = Duration::from_secs(180);
/// LangChain's own tracing switches: off, as ours is (no subscriber).
const LANGCHAIN_TRACING: &[&str] = &[
    "LANGSMITH_TRACING",
    "LANGSMITH_TRACING_V2",
    "LANGCHAIN_TRACING",
    "LANGCHAIN_TRACING_V2",
];

/// The folder of `round.py` and `requirements.txt`.
fn bench_dir() -> PathBuf {
    root().join("crates/tool-system/benches/langchain")
}

/// The virtualenv LangChain core is installed in.
fn venv() -> PathBuf {
    cache_venv("langchain-venv")
}

/// Cargo's target dir, where this run keeps criterion's estimates and the sides' output.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { root().join(t) })
        .unwrap_or_else(|| root().join("target"))
}

/// The `langchain-core==X` pin of `requirements.txt`.
fn pinned_version(requirements: &str) -> Option<&str> {
    requirements
        .lines()
        .find_map(|l| l.trim().strip_prefix("langchain-core=="))
        .map(str::trim)
}

/// The venv's Python with the pinned langchain-core, installed (or brought to the pin) when
/// needed; fails loudly when it cannot be.
fn ensure_venv() -> Result<PathBuf, String> {
    let requirements = bench_dir().join("requirements.txt");
    let text = std::fs::read_to_string(&requirements)
        .map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    let pin = pinned_version(&text)
        .ok_or_else(|| format!("{} pins no langchain-core==X", requirements.display()))?
        .to_owned();
    let python = venv().join("bin/python");
    if installed_version(&python).as_deref() == Some(pin.as_str()) {
        return Ok(python);
    }
    eprintln!(
        "==> installing langchain-core=={pin} from PyPI into {} (pinned with its dependencies in {})",
        venv().display(),
        requirements.display()
    );
    let installed = pip_install(
        &venv(),
        "pip install -r requirements.txt",
        &["-r".as_ref(), requirements.as_os_str()],
    );
    match (installed, installed_version(&python)) {
        (Ok(()), Some(v)) if v == pin => Ok(python),
        (result, version) => {
            let _ = std::fs::remove_dir_all(venv());
            Err(format!(
                "LangChain core is needed by `cargo xtask bench langchain` and could not be installed \
                 ({} -m venv {}, then pip install -r {}): {}. Check that PyPI is \
                 reachable and that the pins in requirements.txt still install.",
                system_python(),
                venv().display(),
                requirements.display(),
                result.err().unwrap_or_else(|| format!(
                    "after the install langchain-core is {}, not {pin}",
                    version.as_deref().unwrap_or("missing")
                ))
            ))
        }
    }
}

/// langchain-core's version in the venv of `python`, if it has one.
fn installed_version(python: &Path) -> Option<String> {
    if !python.exists() {
        return None;
    }
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('langchain-core'))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Runs `cmd` with its output in `log`, for at most [`LIMIT`]; returns the output.
fn run_bounded(what: &str, cmd: &mut Command, log: &Path) -> Result<String, String> {
    let file =
        std::fs::File::create(log).map_err(|e| format!("cannot write {}: {e}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().map_err(|e| e.to_string())?)
        .stderr(file)
        .spawn()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what}: still running after {} s, stopped (output in {}). Is the machine that loaded?",
                    LIMIT.as_secs(),
                    log.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let output = std::fs::read_to_string(log).unwrap_or_default();
    if status.success() {
        Ok(output)
    } else {
        Err(format!("{what}: failed ({status}):\n{output}"))
    }
}

/// A criterion estimate: its point and 95 % interval, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Estimate {
    lower: f64,
    point: f64,
    upper: f64,
}

/// criterion's `estimates.json`: the statistics this bench reads (a missing or `null` one is
/// `None`; the others are ignored).
#[derive(Debug, Deserialize)]
struct Estimates {
    mean: Option<Statistic>,
    median: Option<Statistic>,
    slope: Option<Statistic>,
}

/// One statistic of `estimates.json`, in ns.
#[derive(Debug, Deserialize)]
struct Statistic {
    confidence_interval: Interval,
    point_estimate: f64,
}

#[derive(Debug, Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

impl Statistic {
    fn estimate(&self) -> Estimate {
        Estimate {
            lower: self.confidence_interval.lower_bound,
            point: self.point_estimate,
            upper: self.confidence_interval.upper_bound,
        }
    }
}

impl Estimates {
    fn parse(json: &str) -> Result<Self, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// What criterion prints as a bench's time: the slope of its linear sampling, else the
    /// mean (criterion's own `typical_estimate`).
    fn typical(&self) -> Option<Estimate> {
        self.slope
            .as_ref()
            .or(self.mean.as_ref())
            .map(Statistic::estimate)
    }

    fn median(&self) -> Option<Estimate> {
        self.median.as_ref().map(Statistic::estimate)
    }
}

/// criterion's `sample.json`: each sample's iteration count and total time (ns).
#[derive(Debug, Deserialize)]
struct Samples {
    iters: Vec<f64>,
    times: Vec<f64>,
}

impl Samples {
    fn parse(json: &str) -> Result<Self, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// The fastest time per iteration (ns) among the upper half of the samples by iteration
    /// count (linear sampling: the upper half are criterion's ~30–60 ms samples, the length of
    /// LangChain's repeats); `None` when the two lists differ in length or hold no sample.
    fn best(&self) -> Option<f64> {
        if self.iters.len() != self.times.len() {
            return None;
        }
        let mut samples: Vec<(f64, f64)> = self
            .iters
            .iter()
            .copied()
            .zip(self.times.iter().copied())
            .collect();
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        samples[samples.len() / 2..]
            .iter()
            .filter(|(n, _)| *n > 0.0)
            .map(|(n, t)| t / n)
            .min_by(f64::total_cmp)
    }
}

/// LangChain's round from `round.py`'s line: (median, min) µs per round and the versions.
#[derive(Debug, Clone, PartialEq)]
struct LangChainRound {
    median_us: f64,
    min_us: f64,
    langchain_core: String,
    python: String,
}

fn parse_round(output: &str) -> Option<LangChainRound> {
    let line = output
        .lines()
        .rev()
        .find(|l| l.starts_with("langchain_round "))?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    Some(LangChainRound {
        median_us: field("median_us")?.parse().ok()?,
        min_us: field("min_us")?.parse().ok()?,
        langchain_core: field("langchain_core")?.to_owned(),
        python: field("python")?.to_owned(),
    })
}

/// Our side once, in ns per `Agent::run`: criterion's estimate and its median, from the run's
/// `estimates.json`, and its best sample from `sample.json`.
fn ours(criterion_home: &Path, log: &Path) -> Result<(Estimate, f64, f64), String> {
    let new = criterion_home.join(GROUP).join(BENCH).join("new");
    let estimates = new.join("estimates.json");
    let samples = new.join("sample.json");
    let _ = std::fs::remove_file(&estimates); // never read a previous run's
    let _ = std::fs::remove_file(&samples);
    run_bounded(
        "cargo bench -p toolwright-tool-system --bench loop_overhead",
        cargo()
            .args([
                "bench",
                "-p",
                "toolwright-tool-system",
                "--bench",
                "loop_overhead",
            ])
            .args(["--", &format!("{BENCH}$"), "--noplot"])
            .env("CRITERION_HOME", criterion_home),
        log,
    )?;
    let json = std::fs::read_to_string(&estimates).map_err(|e| {
        format!(
            "criterion wrote no {} ({e}); its output is in {}",
            estimates.display(),
            log.display()
        )
    })?;
    let parsed =
        Estimates::parse(&json).map_err(|e| format!("cannot read {}: {e}", estimates.display()))?;
    let typical = parsed
        .typical()
        .ok_or_else(|| format!("no estimate in {}", estimates.display()))?;
    let middle = parsed
        .median()
        .ok_or_else(|| format!("no median in {}", estimates.display()))?
        .point;
    let json = std::fs::read_to_string(&samples)
        .map_err(|e| format!("criterion wrote no {} ({e})", samples.display()))?;
    let best = Samples::parse(&json)
        .map_err(|e| format!("cannot read {}: {e}", samples.display()))?
        .best()
        .ok_or_else(|| format!("no samples in {}", samples.display()))?;
    Ok((typical, middle, best))
}

/// LangChain's side once.
fn theirs(python: &Path, log: &Path) -> Result<LangChainRound, String> {
    let mut cmd = Command::new(python);
    cmd.arg(bench_dir().join("round.py"));
    for var in LANGCHAIN_TRACING {
        cmd.env_remove(var);
    }
    let output = run_bounded("round.py (LangChain core)", &mut cmd, log)?;
    parse_round(&output).ok_or_else(|| {
        format!(
            "round.py printed no `langchain_round median_us=… min_us=…` line; its output is in {}",
            log.display()
        )
    })
}

/// The 1-minute load average.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn pairs(args: &[String]) -> Result<usize, String> {
    let usage = "usage: cargo xtask bench langchain [--pairs N]   (N = 1..=20, default 3)";
    match args {
        [] => Ok(PAIRS),
        [flag, n] if flag == "--pairs" => n
            .parse()
            .ok()
            .filter(|n| (1..=20).contains(n))
            .ok_or_else(|| usage.to_owned()),
        _ => Err(usage.to_owned()),
    }
}

/// `cargo xtask bench langchain [--pairs N]`.
pub fn bench(args: &[String]) -> Result<(), String> {
    let pairs = pairs(args)?;
    let python = ensure_venv()?;
    run(
        "building the loop bench (release; a first build takes minutes)",
        cargo().args([
            "bench",
            "-p",
            "toolwright-tool-system",
            "--bench",
            "loop_overhead",
            "--no-run",
        ]),
    )?;
    let dir = target_dir().join("langchain-bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let criterion_home = dir.join("criterion");
    let started = Instant::now();
    eprintln!(
        "\n==> {pairs} pairs, alternating: ours = tool_loop/{BENCH} (criterion), LangChain = round.py (median of its repeats); load average (1 min) {} at the start",
        load()
    );
    let mut rows = Vec::new();
    for pair in 1..=pairs {
        let load_before = load();
        let ours_first = pair % 2 == 1;
        let log_ours = dir.join(format!("pair-{pair}-ours.log"));
        let log_theirs = dir.join(format!("pair-{pair}-langchain.log"));
        let ((ours, middle, best), theirs) = if ours_first {
            let o = ours(&criterion_home, &log_ours)?;
            (o, theirs(&python, &log_theirs)?)
        } else {
            let t = theirs(&python, &log_theirs)?;
            (ours(&criterion_home, &log_ours)?, t)
        };
        let row = Row {
            pair,
            ours_first,
            load: load_before,
            ours_us: ours.point / 1000.0,
            ours_interval: (ours.lower / 1000.0, ours.upper / 1000.0),
            ours_median_us: middle / 1000.0,
            ours_best_us: best / 1000.0,
            ratio: theirs.median_us / (ours.point / 1000.0),
            median_ratio: theirs.median_us / (middle / 1000.0),
            best_ratio: theirs.min_us / (best / 1000.0),
            theirs,
        };
        eprintln!("pair {pair}: {}", row.markdown());
        rows.push(row);
    }
    let Some(first) = rows.first().map(|r| &r.theirs) else {
        return Err("no pair ran".into());
    };
    println!(
        "\nlangchain-core {}, Python {}; {} pairs in {:.0} s; load average (1 min) {} at the end\n",
        first.langchain_core,
        first.python,
        rows.len(),
        started.elapsed().as_secs_f64(),
        load()
    );
    println!("{}", Row::HEADER);
    for row in &rows {
        println!("{}", row.markdown());
    }
    println!();
    for (what, ratios) in [
        (
            "central (criterion's estimate / LangChain's median)",
            rows.iter().map(|r| r.ratio).collect::<Vec<_>>(),
        ),
        (
            "of medians (criterion's median / LangChain's median)",
            rows.iter().map(|r| r.median_ratio).collect(),
        ),
        (
            "best (fastest sample / fastest repeat)",
            rows.iter().map(|r| r.best_ratio).collect(),
        ),
    ] {
        let mut ratios = ratios;
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "ratio, {what}: min {min:.0}×, median {:.0}× (target: ≥ 100×)",
            median(&mut ratios)
        );
    }
    Ok(())
}

/// One pair's figures.
struct Row {
    pair: usize,
    ours_first: bool,
    load: String,
    ours_us: f64,
    ours_interval: (f64, f64),
    ours_median_us: f64,
    ours_best_us: f64,
    theirs: LangChainRound,
    /// LangChain's median / our estimate.
    ratio: f64,
    /// LangChain's median / our median.
    median_ratio: f64,
    /// LangChain's fastest repeat / our fastest sample.
    best_ratio: f64,
}

impl Row {
    const HEADER: &str = "| pair | first | load | ours: `Agent::run` µs [criterion's interval] median (best) | LangChain core: round µs, median (best) | ratio | ratio of medians | ratio of bests |\n|---|---|---|---|---|---|---|---|";

    fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {:.2} [{:.2}–{:.2}] {:.2} ({:.2}) | {:.1} ({:.1}) | {:.0}× | {:.0}× | {:.0}× |",
            self.pair,
            if self.ours_first { "ours" } else { "LangChain" },
            self.load,
            self.ours_us,
            self.ours_interval.0,
            self.ours_interval.1,
            self.ours_median_us,
            self.ours_best_us,
            self.theirs.median_us,
            self.theirs.min_us,
            self.ratio,
            self.median_ratio,
            self.best_ratio,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Estimate, Estimates, LangChainRound, Samples, median, pairs, parse_round, pinned_version,
        venv,
    };

    fn typical_estimate(json: &str) -> Option<Estimate> {
        Estimates::parse(json).ok()?.typical()
    }

    fn best_sample(json: &str) -> Option<f64> {
        Samples::parse(json).ok()?.best()
    }

    /// criterion 0.8's `estimates.json` with a slope (linear sampling), abridged.
    const WITH_SLOPE: &str = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":10.5,"upper_bound":12.5},"point_estimate":11.5,"standard_error":0.5},"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":10.0,"upper_bound":11.0},"point_estimate":10.7,"standard_error":0.2},"slope":{"confidence_interval":{"confidence_level":0.95,"lower_bound":9.875e3,"upper_bound":1.0125E4},"point_estimate":10012.25,"standard_error":60.1},"std_dev":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},"point_estimate":1.5,"standard_error":0.1}}"#;

    #[test]
    fn langchain_bench_reads_criterions_slope_as_it_prints_it() {
        assert_eq!(
            typical_estimate(WITH_SLOPE),
            Some(Estimate {
                lower: 9875.0,
                point: 10012.25,
                upper: 10125.0
            })
        );
    }

    #[test]
    fn langchain_bench_reads_criterions_median_beside_its_estimate() {
        let median = |json: &str| Estimates::parse(json).unwrap().median();
        assert_eq!(median(WITH_SLOPE).map(|e| e.point), Some(10.7));
        assert_eq!(median(r#"{"median":null}"#), None);
        assert_eq!(median(r#"{"mean":null}"#), None);
    }

    #[test]
    fn langchain_bench_falls_back_to_the_mean_without_a_slope_and_refuses_garbage() {
        let flat = WITH_SLOPE.replace(
            r#""slope":{"confidence_interval":{"confidence_level":0.95,"lower_bound":9.875e3,"upper_bound":1.0125E4},"point_estimate":10012.25,"standard_error":60.1}"#,
            r#""slope":null"#,
        );
        assert_eq!(
            typical_estimate(&flat),
            Some(Estimate {
                lower: 10.5,
                point: 11.5,
                upper: 12.5
            })
        );
        assert_eq!(typical_estimate(""), None);
        assert_eq!(typical_estimate(r#"{"mean":{"point_estimate":"x"}}"#), None);
    }

    #[test]
    fn langchain_bench_reads_the_round_line_and_only_it() {
        let out = "some warning\nlangchain_round median_us=1114.2 min_us=804.0 max_us=1200.0 rounds=300 repeats=10 langchain_core=1.8.3 python=3.11.7\n";
        assert_eq!(
            parse_round(out),
            Some(LangChainRound {
                median_us: 1114.2,
                min_us: 804.0,
                langchain_core: "1.8.3".into(),
                python: "3.11.7".into()
            })
        );
        assert_eq!(parse_round("Traceback (most recent call last):\n"), None);
        assert_eq!(
            parse_round("langchain_round median_us=? min_us=1 langchain_core=1 python=3"),
            None
        );
    }

    #[test]
    fn langchain_bench_takes_the_pin_from_requirements_and_checks_pairs() {
        let req = "# comment\nanyio==4.16.0\nlangchain-core==1.8.3\nlangchain-protocol==0.0.20\n";
        assert_eq!(pinned_version(req), Some("1.8.3"));
        assert_eq!(pinned_version("langchain-protocol==0.0.20\n"), None);
        assert_eq!(pairs(&[]), Ok(3));
        assert_eq!(pairs(&["--pairs".into(), "5".into()]), Ok(5));
        for bad in [
            &["--pairs", "0"][..],
            &["--pairs", "x"],
            &["--pair"],
            &["5"],
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(pairs(&args).is_err(), "{bad:?}");
        }
        assert!(venv().ends_with("llm-toolkit/langchain-venv"));
    }

    #[test]
    fn langchain_bench_best_sample_is_the_fastest_of_the_longer_half() {
        // per iteration: 5, 20, 12, 11 ns; the short sample's 5 ns is not among the upper half
        let json = r#"{"sampling_mode":"Linear","iters":[10.0,40.0,20.0,30.0],"times":[50.0,800.0,240.0,330.0]}"#;
        assert_eq!(best_sample(json), Some(11.0));
        assert_eq!(best_sample(r#"{"iters":[1.0],"times":[]}"#), None);
        assert_eq!(best_sample(r#"{"iters":[1.0],"times":[x]}"#), None);
        assert_eq!(best_sample("{}"), None);
    }

    #[test]
    fn langchain_bench_median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
