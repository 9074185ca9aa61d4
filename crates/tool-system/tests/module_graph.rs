//! The crate's modules import one another without a circle: every `crate::…` (and
//! `super::…`) path in `src/` is an edge from the file's module to the module it names, and the
//! edges must form a DAG, both between top-level modules (`crate::x`) and between files. A
//! name re-exported by `lib.rs` (`crate::Dispatcher`) counts as an edge to the module that
//! defines it. Comments are not read (doc links are not imports); `#[cfg(test)]` modules are.
//!
//! `cargo test -p toolwright-tool-system --test module_graph -- --nocapture` prints the edges;
//! `MODULE_GRAPH_SRC=<dir>` reads another `src/` (another checkout) instead of this crate's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under `src/` as (module path, text): `runner`, `approval`, `approval::token`.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                walk(&p, &format!("{prefix}{stem}::"), out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let module = match stem.as_str() {
                    "lib" => "crate".to_owned(),
                    "mod" => prefix.trim_end_matches("::").to_owned(),
                    _ => format!("{prefix}{stem}"),
                };
                out.push((module, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    let src = std::env::var_os("MODULE_GRAPH_SRC").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        std::path::PathBuf::from,
    );
    walk(&src, "", &mut out);
    out
}

/// The code without comments and string contents (a path in a message is no import).
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' && !(i > 0 && b[i - 1] == b'\'') {
            // a raw string `r#"…"#` ends at `"#`; a plain one at an unescaped `"`
            let raw = i > 0 && (b[i - 1] == b'#' || b[i - 1] == b'r');
            i += 1;
            while i < b.len() {
                if raw && b[i] == b'"' && (b.get(i + 1) == Some(&b'#') || b[i - 1] != b'\\') {
                    break;
                }
                if !raw && b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if !raw && b[i] == b'"' {
                    break;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths a `use`-tree (or an inline path) starting at `s` names, each as its segments;
/// `{a::{B, C}, D}` gives `a::B`, `a::C`, `D`.
fn paths(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut i = 0;
    let mut segs = prefix;
    loop {
        let rest = &s[i..];
        let trimmed = rest.trim_start();
        i += rest.len() - trimmed.len();
        if let Some(inner) = trimmed.strip_prefix('{') {
            i += 1;
            let mut j = 0;
            loop {
                let r = &inner[j..];
                let t = r.trim_start();
                j += r.len() - t.len();
                if t.starts_with('}') {
                    j += 1;
                    break;
                }
                if t.starts_with(',') {
                    j += 1;
                    continue;
                }
                if t.is_empty() {
                    break;
                }
                j += paths(&inner[j..], segs.clone(), out);
                // skip `as alias`
                let r = &inner[j..];
                let t = r.trim_start();
                if let Some(a) = t.strip_prefix("as ") {
                    j += r.len() - t.len() + 3;
                    let a2 = a.trim_start();
                    j += a.len() - a2.len() + ident_at(a2).len();
                }
            }
            return i + j;
        }
        let id = ident_at(trimmed);
        if id.is_empty() {
            if trimmed.starts_with('*') {
                i += 1;
            }
            out.push(segs);
            return i;
        }
        segs.push(id.to_owned());
        i += id.len();
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(segs);
            return i;
        }
    }
}

/// Names `lib.rs` re-exports from each of its modules: `Dispatcher` → `dispatch`.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let lib = code(lib);
    for (at, _) in lib.match_indices("pub use ") {
        let mut found = Vec::new();
        paths(&lib[at + 8..], Vec::new(), &mut found);
        for p in found {
            if p.len() >= 2 {
                map.insert(p[p.len() - 1].clone(), p[0].clone());
            }
        }
    }
    map
}

/// Edges file module → file module.
fn edges() -> BTreeSet<(String, String)> {
    let files = sources();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let lib = &files.iter().find(|(m, _)| m == "crate").unwrap().1;
    let names = reexports(lib);
    let mut edges = BTreeSet::new();
    for (module, text) in &files {
        if module == "crate" {
            continue; // the root only declares modules and re-exports them
        }
        let text = code(text);
        let parent = module.rsplit_once("::").map(|(p, _)| p.to_owned());
        for (kw, base) in [("crate::", None), ("super::", parent.clone())] {
            for (at, _) in text.match_indices(kw) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue; // `$crate::`, `a::crate::`
                }
                // `super::` in an indented line is inside a nested (test) module: the file's own.
                let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
                let nested = text[line_start..at].starts_with(char::is_whitespace);
                let start: Vec<String> = match (&base, kw, nested) {
                    (_, "crate::", _) => Vec::new(),
                    (_, _, true) => module.split("::").map(str::to_owned).collect(),
                    (Some(p), _, false) => p.split("::").map(str::to_owned).collect(),
                    (None, _, false) => Vec::new(),
                };
                let mut found = Vec::new();
                paths(&text[at + kw.len()..], start, &mut found);
                for p in found {
                    // the longest prefix that is a module; else a name lib.rs re-exports
                    let target = (1..=p.len())
                        .rev()
                        .map(|n| p[..n].join("::"))
                        .find(|m| modules.contains(m))
                        .or_else(|| p.first().and_then(|n| names.get(n)).cloned())
                        .filter(|t| modules.contains(t)); // not `toolwright_core::…` re-exported
                    if let Some(t) = target
                        && t != *module
                        && t != "crate"
                    {
                        edges.insert((module.clone(), t));
                    }
                }
            }
        }
    }
    edges
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap()
}

/// A circle in `edges`, if there is one (depth-first search).
fn circle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    fn visit<'a>(
        n: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|s| *s == n).unwrap_or(0);
                let mut c: Vec<String> = stack[from..].iter().map(|s| (*s).to_owned()).collect();
                c.push(n.to_owned());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n, 1);
        stack.push(n);
        for m in next.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, next, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in next.keys() {
        if let Some(c) = visit(n, &next, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn modules_import_one_another_without_a_circle() {
    let files = edges();
    let modules: BTreeSet<(String, String)> = files
        .iter()
        .filter(|(a, b)| top(a) != top(b))
        .map(|(a, b)| (top(a).to_owned(), top(b).to_owned()))
        .collect();
    println!("top-level module edges (crate::x):");
    for (a, b) in &modules {
        println!("  {a} -> {b}");
    }
    println!("file edges inside modules:");
    for (a, b) in files.iter().filter(|(a, b)| top(a) == top(b)) {
        println!("  {a} -> {b}");
    }
    assert_eq!(circle(&modules), None, "a circle between modules");
    assert_eq!(circle(&files), None, "a circle between files");
}

#[test]
fn the_graph_reader_sees_imports_and_circles() {
    let mut found = Vec::new();
    paths("{a::{B, C as D}, e::F, self} ;", Vec::new(), &mut found);
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["a::B", "a::C", "e::F", "self"]);
    assert_eq!(code("x // crate::a\n\"crate::b\" y"), "x \n\"\" y");
    let e = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    let dag: BTreeSet<_> = [e("a", "b"), e("b", "c"), e("a", "c")].into();
    assert_eq!(circle(&dag), None);
    let cyc: BTreeSet<_> = [e("a", "b"), e("b", "c"), e("c", "a")].into();
    assert!(circle(&cyc).is_some());
}
