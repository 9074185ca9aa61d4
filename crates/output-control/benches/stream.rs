//! Streaming tag parser vs a naive baseline that accumulates the chunks and re-parses the
//! whole buffer after each one (the quadratic approach the spec warns against).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use toolwright_output_control::{StreamParser, TagEventRef, extract_json};

const KIB: usize = 1024;

fn plain_text(len: usize) -> String {
    let unit = "The quick brown fox jumps over the lazy dog; 思考一下这个问题。 ";
    let mut s = unit.repeat(len / unit.len() + 1);
    let mut cut = len;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}

/// About half tag bytes: a short thought, then a call with two parameters.
fn tag_dense_text(len: usize) -> String {
    let unit = "思考: 我需要搜索... <tool_action name=\"vector-search\"><query value=\"读取文件 &amp; test\" /><limit value=\"5\"/></tool_action>\n";
    let mut s = String::with_capacity(len + unit.len());
    while s.len() < len {
        s.push_str(unit);
    }
    s
}

fn chunks(s: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::with_capacity(s.len() / size + 1);
    let mut i = 0;
    while i < s.len() {
        let mut j = (i + size).min(s.len());
        while !s.is_char_boundary(j) {
            j += 1;
        }
        out.push(&s[i..j]);
        i = j;
    }
    out
}

/// Our parser through the borrowed callback API; returns (text bytes, actions).
fn run_stream(chunks: &[&str]) -> (usize, usize) {
    let mut p = StreamParser::new();
    let (mut text, mut actions) = (0, 0);
    let mut sink = |e: TagEventRef<'_>| match e {
        TagEventRef::Text(t) => text += t.len(),
        TagEventRef::Action(_) => actions += 1,
        _ => {}
    };
    for c in chunks {
        p.push_with(c, &mut sink);
    }
    p.finish_with(&mut sink);
    (text, actions)
}

/// Our parser through the owned `push -> Vec<TagEvent>` API.
fn run_stream_vec(chunks: &[&str]) -> usize {
    let mut p = StreamParser::new();
    let mut n = 0;
    for c in chunks {
        n += p.push(c).len();
    }
    n + p.finish().len()
}

// ---------- naive baseline ----------

enum NaiveSeg {
    Text(usize, usize),
    Action(String, Vec<(String, String)>),
}

/// A simple whole-text parser: find each `<tool_action`, then its `</tool_action>`, and pull
/// the name and `<k value="v"/>` pairs out with `find`.
fn naive_parse(buf: &str) -> Vec<NaiveSeg> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(off) = buf[pos..].find("<tool_action") {
        let start = pos + off;
        let Some(end_off) = buf[start..].find("</tool_action>") else {
            break;
        };
        let end = start + end_off + "</tool_action>".len();
        let tag = &buf[start..end];
        let name = tag
            .split("name=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_owned();
        let mut args = Vec::new();
        for part in tag.split('<').skip(2) {
            if let Some((k, rest)) = part.split_once(" value=\"") {
                let v = rest.split('"').next().unwrap_or("");
                args.push((k.to_owned(), v.to_owned()));
            }
        }
        if start > pos {
            out.push(NaiveSeg::Text(pos, start));
        }
        out.push(NaiveSeg::Action(name, args));
        pos = end;
    }
    // Held back: anything from an unclosed `<tool_action`; the rest is text.
    let held = buf[pos..]
        .find("<tool_action")
        .map_or(buf.len(), |o| pos + o);
    if held > pos {
        out.push(NaiveSeg::Text(pos, held));
    }
    out
}

/// Accumulate, re-parse everything after each chunk, emit what is new.
fn run_naive(chunks: &[&str]) -> (usize, usize) {
    let mut buf = String::new();
    let mut emitted_actions = 0;
    let mut emitted_text = 0; // bytes of text already shown
    for c in chunks {
        buf.push_str(c);
        let segs = naive_parse(&buf);
        let mut seen_actions = 0;
        for s in &segs {
            match s {
                NaiveSeg::Action(name, args) => {
                    seen_actions += 1;
                    if seen_actions > emitted_actions {
                        black_box((name, args));
                        emitted_actions = seen_actions;
                    }
                }
                NaiveSeg::Text(a, b) => {
                    if *b > emitted_text {
                        black_box(&buf[(*a).max(emitted_text)..*b]);
                        emitted_text = *b;
                    }
                }
            }
        }
        if let Some(NaiveSeg::Action(..)) = segs.last() {
            emitted_text = buf.len();
        }
    }
    (emitted_text, emitted_actions)
}

// ---------- benches ----------

fn throughput(c: &mut Criterion) {
    let inputs = [
        ("plain", plain_text(256 * KIB)),
        ("tag_dense", tag_dense_text(256 * KIB)),
    ];
    let mut g = c.benchmark_group("stage2_stream_throughput");
    for (kind, text) in &inputs {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for size in [1usize, 16, 64, 256] {
            let cs = chunks(text, size);
            g.bench_with_input(
                BenchmarkId::new(format!("{kind}/push_with"), size),
                &cs,
                |b, cs| b.iter(|| run_stream(black_box(cs))),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("{kind}/push_vec"), size),
                &cs,
                |b, cs| b.iter(|| run_stream_vec(black_box(cs))),
            );
        }
    }
    g.finish();

    // The baseline is quadratic: run it on 16 KiB only, or it would take minutes.
    let mut g = c.benchmark_group("stage2_naive_throughput_16KiB");
    g.sampling_mode(SamplingMode::Flat);
    for (kind, text) in [
        ("plain", plain_text(16 * KIB)),
        ("tag_dense", tag_dense_text(16 * KIB)),
    ] {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for size in [1usize, 16, 256] {
            let cs = chunks(&text, size);
            g.bench_with_input(BenchmarkId::new(kind, size), &cs, |b, cs| {
                b.iter(|| run_naive(black_box(cs)))
            });
        }
    }
    g.finish();
}

fn scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("stage2_scaling_1KiB_chunks");
    g.sampling_mode(SamplingMode::Flat);
    for (label, len) in [("100KB", 100_000usize), ("1MB", 1_000_000)] {
        let text = tag_dense_text(len);
        // 1 KiB chunks keep the quadratic baseline at ~3 s per 1 MB run.
        let cs = chunks(&text, 1024);
        assert_eq!(
            run_stream(&cs).1,
            run_naive(&cs).1,
            "both find every action"
        );
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("stream", label), &cs, |b, cs| {
            b.iter(|| run_stream(black_box(cs)))
        });
        g.bench_with_input(BenchmarkId::new("naive", label), &cs, |b, cs| {
            b.iter(|| run_naive(black_box(cs)))
        });
    }
    g.finish();
}

fn json(c: &mut Criterion) {
    let answer = format!(
        "Sure, let me look that up.\n```json\n{}\n```\nDone.",
        r#"{"tool": "get_weather", "arguments": {"city": "北京", "days": 3}}"#
    );
    let mut g = c.benchmark_group("stage2_json");
    g.throughput(Throughput::Bytes(answer.len() as u64));
    g.bench_function("extract_json_fenced_chatty", |b| {
        b.iter(|| extract_json(black_box(&answer)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
    targets = throughput, scaling, json
}
criterion_main!(benches);
