//! Replays the tool-search evaluation over cached encoder vectors: the 634-tool mixed catalog
//! (fixtures/tools.json + mixed-tools.json, as the bench builds its tool docs) and the requests
//! of eval/{dev2,test2}.json and of the older dev.json + mixed-dev.json ("olddev") and
//! test.json + mixed-test.json ("oldtest"), searched with the crate's `SearchIndex::search`
//! (BM25) and `search_hybrid` (the encoder's judge and bank, as the bench's `Hybrid`), "no tool
//! fits" read from `fit` at `E5_SMALL_FIT_BELOW`. Recall@5 (recall@1) per request language and
//! description language (the script of the first right tool's embedding text).
//!
//! Env: SPLITS=dev2[,test2,olddev,oldtest] (run test2 and oldtest once per change);
//! VECTORS=file (default /tmp/tool-search-eval-vectors.json; when missing, the texts to encode
//! are written to /tmp/tool-search-eval-texts.json for `encode`); MISSES=all|en>en|…;
//! RANKS=1 (each request's rank); FITS=1 (each request's judge score); QUERY=text (terms and
//! hits of one request); GLOSS=file (extra glossary entries, `word english…` lines);
//! RERANK=a,b,k (+ RR_EN=1: English requests only): the name/description coverage rerank trial;
//! ORACLE=1: how many answerable requests have a right tool in each channel's first 5 and 50.
use serde_json::Value;
use std::collections::HashMap;
use toolwright_tool_search::*;

#[derive(Default, Clone, Copy)]
struct Row {
    n: usize,
    a1: usize,
    a5: usize,
}
impl Row {
    fn add(&mut self, r: Option<usize>) {
        self.n += 1;
        if let Some(r) = r {
            self.a1 += (r == 1) as usize;
            self.a5 += (r <= 5) as usize;
        }
    }
    fn s(&self) -> String {
        format!(
            "{:.2} ({:.2}) {}/{}",
            self.a5 as f64 / self.n.max(1) as f64,
            self.a1 as f64 / self.n.max(1) as f64,
            self.a5,
            self.n
        )
    }
}
fn read(p: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/");
    let mut docs = Vec::new();
    for f in ["tools.json", "mixed-tools.json"] {
        for s in read(&format!("{root}{f}"))["servers"].as_array().unwrap() {
            let server = s["name"].as_str().unwrap();
            for t in s["tools"].as_array().unwrap() {
                let name = format!("{server}__{}", t["name"].as_str().unwrap());
                let params: Vec<(String, String)> = t["inputSchema"]["properties"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, p)| {
                                (
                                    k.clone(),
                                    p["description"].as_str().unwrap_or_default().to_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut d = ToolDoc::new(name, t["description"].as_str().unwrap_or_default())
                    .with_group(server, "")
                    .with_parameters(params);
                if server == "everything" {
                    d = d.with_keywords(["the everything server"]);
                }
                docs.push(d);
            }
        }
    }
    let texts: Vec<String> = docs.iter().map(embedding_text).collect();
    let sets: Vec<(&str, Vec<&str>)> = vec![
        ("dev2", vec!["dev2.json"]),
        ("test2", vec!["test2.json"]),
        ("olddev", vec!["dev.json", "mixed-dev.json"]),
        ("oldtest", vec!["test.json", "mixed-test.json"]),
    ];
    let mut reqs: Vec<(String, String, bool, Vec<String>)> = Vec::new(); // split, query, zh, expect
    for (split, files) in &sets {
        for f in files {
            for r in read(&format!("{root}eval/{f}")).as_array().unwrap() {
                let expect = r["expect"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        format!(
                            "{}__{}",
                            e["server"].as_str().unwrap(),
                            e["tool"].as_str().unwrap()
                        )
                    })
                    .collect();
                reqs.push((
                    split.to_string(),
                    r["query"].as_str().unwrap().to_owned(),
                    r["lang"] == "zh",
                    expect,
                ));
            }
        }
    }
    let cache = std::env::var("VECTORS").unwrap_or("/tmp/tool-search-eval-vectors.json".into());
    let cache = cache.as_str();
    if !std::path::Path::new(cache).exists() {
        let queries: Vec<&String> = reqs.iter().map(|r| &r.1).collect();
        std::fs::write(
            "/tmp/tool-search-eval-texts.json",
            serde_json::json!({"documents": texts, "queries": queries}).to_string(),
        )
        .unwrap();
        println!(
            "wrote /tmp/tool-search-eval-texts.json: run `encode /tmp/tool-search-eval-texts.json {cache}`"
        );
        return;
    }
    let v = read(cache);
    let f = |x: &Value| -> Vec<Vec<f32>> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|v| {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    };
    let tool_vecs = f(&v["documents"]);
    let qv = f(&v["queries"]);
    assert_eq!(
        tool_vecs.len(),
        docs.len(),
        "tool vectors are stale: delete {cache}"
    );
    assert_eq!(
        qv.len(),
        reqs.len(),
        "query vectors are stale: delete {cache}"
    );
    let qmap: HashMap<&str, &Vec<f32>> = reqs.iter().map(|r| r.1.as_str()).zip(qv.iter()).collect();
    let zh_desc: HashMap<&str, bool> = docs
        .iter()
        .zip(&texts)
        .map(|(d, t)| (d.name.as_str(), Script::of(t) == Script::Cjk))
        .collect();
    let judge = HybridConfig::for_encoder(E5_SMALL_ID, docs.len());
    let threshold = judge.no_fit_below.unwrap();
    let extra: Vec<(String, Vec<String>)> = std::env::var("GLOSS")
        .ok()
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(|l| {
                    let mut it = l.split_whitespace();
                    (
                        it.next().unwrap().to_owned(),
                        it.map(str::to_owned).collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let t0 = std::time::Instant::now();
    let analyzer = Analyzer::with_glossary(extra);
    println!("analyzer built in {:?}", t0.elapsed());
    let t0 = std::time::Instant::now();
    let bm = SearchIndex::with_analyzer(docs.clone(), analyzer.clone());
    println!("bm25 index built in {:?}", t0.elapsed());
    let index = SearchIndex::with_analyzer(docs.clone(), analyzer.clone())
        .with_vectors(tool_vecs.clone())
        .unwrap()
        .with_hybrid(
            HybridConfig::default()
                .with_fit_model(judge.fit_model)
                .with_unserved(judge.unserved),
        );
    // The cosine side alone (language-neutral, as the fusion reads it): BM25's weight 0.
    let cosine = SearchIndex::with_analyzer(docs.clone(), analyzer.clone())
        .with_vectors(tool_vecs.clone())
        .unwrap()
        .with_hybrid(HybridConfig::default().with_weights(0.0, 1.0));
    let mut oracle: HashMap<(String, &str), [usize; 6]> = HashMap::new();
    if let Ok(q) = std::env::var("QUERY") {
        println!("terms {:?}", analyzer.terms(&q));
        for h in bm.search(&q, 10) {
            println!("  bm25 {} {:.2}", h.name, h.score);
        }
        if let Some(v) = qmap.get(q.as_str()) {
            for h in index.search_hybrid(&q, v, 10).unwrap() {
                println!("  hyb {} {:.3}", h.name, h.score);
            }
        }
        return;
    }
    let splits: Vec<String> = std::env::var("SPLITS")
        .unwrap_or("dev2".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let show_miss = std::env::var("MISSES").ok();
    let rerank: Option<(f32, f32, usize)> = std::env::var("RERANK").ok().map(|r| {
        let p: Vec<&str> = r.split(',').collect();
        (
            p[0].parse().unwrap(),
            p[1].parse().unwrap(),
            p[2].parse().unwrap(),
        )
    });
    let fields: HashMap<
        String,
        (
            std::collections::HashSet<String>,
            std::collections::HashSet<String>,
        ),
    > = docs
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                (
                    analyzer.terms(&d.name).into_iter().collect(),
                    analyzer.terms(&d.description).into_iter().collect(),
                ),
            )
        })
        .collect();
    let mut times = Vec::new();
    for split in &splits {
        let mut rows: HashMap<(&str, &str), Row> = HashMap::new();
        let (mut neg, mut fh, mut ans, mut ta) = (0, 0, 0, 0);
        for (sp, q, zh, expect) in &reqs {
            if sp != split {
                continue;
            }
            let v = qmap[q.as_str()];
            let s = std::time::Instant::now();
            let mut hy = index.search_hybrid(q, v, 10).unwrap();
            if let Some((a, b, k)) =
                rerank.filter(|_| std::env::var("RR_EN").is_err() || Script::of(q) == Script::Latin)
            {
                hy = rerank_top(&analyzer, &fields, q, hy, a, b, k);
            }
            times.push(s.elapsed());
            let fitv = index.fit(q, v).unwrap();
            let gated = fitv >= threshold;
            if std::env::var("FITS").is_ok() {
                println!("FIT {split} {} {fitv}", expect.is_empty());
            }
            if expect.is_empty() {
                neg += 1;
                fh += gated as usize;
                continue;
            }
            ans += 1;
            ta += (!gated) as usize;
            let b = bm.search(q, 10);
            let rank = |h: &[Hit]| {
                h.iter()
                    .take(10)
                    .position(|x| expect.contains(&x.name))
                    .map(|p| p + 1)
            };
            let (rb, rh) = (rank(&b), rank(&hy));
            let zd = zh_desc[expect[0].as_str()];
            let slice = match (zh, zd) {
                (false, false) => "en>en",
                (false, true) => "en>zh",
                (true, false) => "zh>en",
                (true, true) => "zh>zh",
            };
            let lang = if *zh { "zh" } else { "en" };
            let within = |h: &[Hit], n: usize| h.iter().take(n).any(|x| expect.contains(&x.name));
            let (b50, c50) = (bm.search(q, 50), cosine.search_hybrid(q, v, 50).unwrap());
            for key in ["all", slice] {
                let o = oracle.entry((split.clone(), key)).or_default();
                o[0] += 1;
                o[1] += within(&hy, 5) as usize;
                o[2] += (within(&b50, 5) || within(&c50, 5)) as usize;
                o[3] += within(&b50, 50) as usize;
                o[4] += within(&c50, 50) as usize;
                o[5] += within(&c50, 5) as usize;
            }
            for key in ["all", lang, slice] {
                rows.entry(("bm25", key)).or_default().add(rb);
                rows.entry(("hyb", key)).or_default().add(rh);
            }
            if std::env::var("RANKS").is_ok() {
                println!("R {split} {slice} {rb:?} {rh:?} {q}");
            }
            if let Some(m) = &show_miss {
                if rh.map_or(true, |r| r > 5) && (m == "all" || m == slice) {
                    println!(
                        "  miss {slice} {q:?} want {:?} bm25 {rb:?} hyb {rh:?} got {:?}",
                        &expect[..expect.len().min(2)],
                        hy.iter()
                            .take(3)
                            .map(|h| h.name.as_str())
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
        println!(
            "{split}: negatives false hits {fh}/{neg} ({:.0}%), answerable turned away {ta}/{ans} ({:.1}%)",
            100.0 * fh as f64 / neg.max(1) as f64,
            100.0 * ta as f64 / ans.max(1) as f64
        );
        for key in ["all", "en", "zh", "en>en", "en>zh", "zh>en", "zh>zh"] {
            if let (Some(b), Some(h)) = (rows.get(&("bm25", key)), rows.get(&("hyb", key))) {
                println!("  {split:7} {key:6} bm25 {:22} hybrid {}", b.s(), h.s());
            }
        }
        if std::env::var("ORACLE").is_ok() {
            for key in ["all", "en>en", "en>zh", "zh>en", "zh>zh"] {
                if let Some(o) = oracle.get(&(split.clone(), key)) {
                    println!(
                        "  {split:7} {key:6} of {}: hybrid top 5 {}, BM25's or cosines' top 5 {}, cosines' top 5 {}, BM25's top 50 {}, cosines' top 50 {}",
                        o[0], o[1], o[2], o[5], o[3], o[4]
                    );
                }
            }
        }
    }
    times.sort();
    println!(
        "hybrid search (encoding excluded) p50 {:?} over {} tools",
        times[times.len() / 2],
        docs.len()
    );
}

type Fields = HashMap<
    String,
    (
        std::collections::HashSet<String>,
        std::collections::HashSet<String>,
    ),
>;
fn rerank_top(
    an: &Analyzer,
    fields: &Fields,
    q: &str,
    hits: Vec<Hit>,
    a: f32,
    b: f32,
    k: usize,
) -> Vec<Hit> {
    let mut terms = an.terms(q);
    terms.sort();
    terms.dedup();
    if terms.is_empty() {
        return hits;
    }
    let n = terms.len() as f32;
    let mut scored: Vec<(f32, Hit)> = hits
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let mut s = -(i as f32);
            if i < k {
                let (nm, de) = &fields[&h.name];
                s += a * terms.iter().filter(|t| nm.contains(*t)).count() as f32 / n
                    + b * terms.iter().filter(|t| de.contains(*t)).count() as f32 / n;
            }
            (s, h)
        })
        .collect();
    scored.sort_by(|x, y| y.0.total_cmp(&x.0));
    scored.into_iter().map(|x| x.1).collect()
}
