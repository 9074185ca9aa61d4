//! The public API of each published crate as a text file in `api/` (one line per public item,
//! with its signature), made from rustdoc's JSON output. `cargo xtask api` writes the files;
//! `cargo xtask test` makes them again and fails on any difference, so every change of a crate's
//! public API is a diff someone reviews.
//!
//! rustdoc's JSON output is unstable: it is asked for on the stable toolchain with
//! `RUSTC_BOOTSTRAP=1`, and read here as plain JSON (not through `rustdoc-types`, whose version
//! must match the toolchain's format exactly), tolerating fields it does not know.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The crates whose API is recorded: every published one.
pub fn published(metadata: &Value) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for p in metadata["packages"].as_array().into_iter().flatten() {
        let publishable = !matches!(p["publish"].as_array(), Some(a) if a.is_empty());
        let is_lib = p["targets"].as_array().into_iter().flatten().any(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "lib"))
        });
        if publishable && is_lib {
            let dir = Path::new(p["manifest_path"].as_str().unwrap_or_default())
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            out.push((p["name"].as_str().unwrap_or_default().to_owned(), dir));
        }
    }
    out.sort();
    out
}

/// `cargo package` for every published crate at once (cargo serves the unpublished ones among
/// them to each other from a local overlay) with each `.crate` built on its own: a crate that
/// cannot be packaged or does not build from its package fails here.
///
/// Cargo unpacks each overlaid crate under `$CARGO_HOME/registry/src/-<hash>/<name>-<version>`
/// and, finding that directory again on the next run, builds the old unpacked source instead of
/// today's package while the version number has not moved. Those directories are ours alone
/// (the overlay registry's directory name starts with `-`; crates.io's never does), so they are
/// removed first.
///
/// It also reuses what it compiled from them in the target dir: our packages' builds are removed
/// too, so each package is verified against its neighbours as they are today.
pub fn package(metadata: &Value) -> Result<(), String> {
    forget_unpacked_overlay(metadata)?;
    forget_overlay_builds(&crate::target_dir())?;
    let mut cmd = crate::cargo();
    cmd.args(["package", "--allow-dirty"]);
    for (package, _) in published(metadata) {
        cmd.args(["-p", &package]);
    }
    crate::run("cargo package (every published crate)", &mut cmd)
}

/// Removes the unpacked copies of this workspace's own packages that an earlier
/// `cargo package` left in cargo's overlay registry (see [`package`]).
fn forget_unpacked_overlay(metadata: &Value) -> Result<(), String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set: cannot find cargo's registry")?;
    let ours: HashSet<String> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(format!(
                "{}-{}",
                p["name"].as_str()?,
                p["version"].as_str()?
            ))
        })
        .collect();
    let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in std::fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if ours.contains(&*unpacked.file_name().to_string_lossy()) {
                std::fs::remove_dir_all(unpacked.path()).map_err(|e| {
                    format!(
                        "could not remove cargo's stale unpacked copy {}: {e}",
                        unpacked.path().display()
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Removes the target dir's builds of this workspace's packages (their fingerprints and
/// libraries): a build taken from cargo's overlay registry is not told from a path build by its
/// fingerprint, and cargo reuses it by version. The next build of a workspace crate compiles it
/// again (dependencies stay built).
fn forget_overlay_builds(target: &Path) -> Result<(), String> {
    let debug = target.join("debug");
    let remove = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> Result<(), String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if keep(&name) {
                continue;
            }
            let path = e.path();
            let gone = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            gone.map_err(|err| {
                format!("could not remove the stale build {}: {err}", path.display())
            })?;
        }
        Ok(())
    };
    remove(&debug.join(".fingerprint"), &|n| {
        !n.starts_with("toolwright-")
    })?;
    remove(&debug.join("deps"), &|n| {
        !(n.starts_with("libtoolwright_") || n.starts_with("toolwright_"))
    })
}

fn snapshot_path(root: &Path, package: &str) -> PathBuf {
    root.join("api").join(format!("{package}.txt"))
}

/// rustdoc's JSON of `package` (all features), then its API as text.
fn api_of(package: &str, target: &Path) -> Result<String, String> {
    let status = crate::cargo()
        .args([
            "rustdoc",
            "--quiet",
            "--lib",
            "--all-features",
            "-p",
            package,
        ])
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .env("RUSTC_BOOTSTRAP", "1")
        .status()
        .map_err(|e| format!("cargo rustdoc: could not start: {e}"))?;
    if !status.success() {
        return Err(format!("cargo rustdoc -p {package} (JSON output) failed"));
    }
    let file = target
        .join("doc")
        .join(format!("{}.json", package.replace('-', "_")));
    let text =
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(render(&doc))
}

/// Writes `api/<crate>.txt` for every published crate.
pub fn write(root: &Path, target: &Path, metadata: &Value) -> Result<(), String> {
    std::fs::create_dir_all(root.join("api")).map_err(|e| e.to_string())?;
    for (package, _) in published(metadata) {
        let api = api_of(&package, target)?;
        std::fs::write(snapshot_path(root, &package), api).map_err(|e| e.to_string())?;
        eprintln!("api/{package}.txt written");
    }
    Ok(())
}

/// Compares every published crate's API with its file in `api/`.
pub fn check(root: &Path, target: &Path, metadata: &Value) -> Result<(), String> {
    let mut stale = Vec::new();
    let mut twice = Vec::new();
    for (package, _) in published(metadata) {
        let now = api_of(&package, target)?;
        if package != FACADE {
            twice.extend(
                reexports_of_siblings(&now)
                    .into_iter()
                    .map(|l| format!("{package}: {l}")),
            );
        }
        let path = snapshot_path(root, &package);
        let before = std::fs::read_to_string(&path).unwrap_or_default();
        if before != now {
            let old: BTreeSet<&str> = before.lines().collect();
            let new: BTreeSet<&str> = now.lines().collect();
            let mut diff = String::new();
            for l in old.difference(&new).take(20) {
                diff.push_str(&format!("\n  - {l}"));
            }
            for l in new.difference(&old).take(20) {
                diff.push_str(&format!("\n  + {l}"));
            }
            stale.push(format!("{package}:{diff}"));
        }
    }
    if !twice.is_empty() {
        return Err(format!(
            "a type is reachable through two crates (only the facade re-exports the others' items; import them from the crate that defines them):\n  {}",
            twice.join("\n  ")
        ));
    }
    if stale.is_empty() {
        eprintln!(
            "==> public API: every crate matches its snapshot in api/, and no crate re-exports another's items"
        );
        Ok(())
    } else {
        Err(format!(
            "the public API changed; if that is meant, run `cargo xtask api` and commit api/ (say in CHANGELOG.md whether it breaks):\n{}",
            stale.join("\n")
        ))
    }
}

/// The facade: the one crate that re-exports the others (its modules and its prelude).
const FACADE: &str = "toolwright";

/// The lines of an API that re-export an item of another toolwright crate.
fn reexports_of_siblings(api: &str) -> Vec<&str> {
    api.lines()
        .filter(|l| l.starts_with("pub use ") && l.contains(" = toolwright_"))
        .collect()
}

/// One line per public item, sorted.
pub fn render(doc: &Value) -> String {
    let mut w = Walker {
        doc,
        lines: BTreeSet::new(),
        seen: HashSet::new(),
    };
    let root = id_str(&doc["root"]);
    let name = doc["index"][&root]["name"]
        .as_str()
        .unwrap_or("crate")
        .to_owned();
    w.item(&root, &name);
    let mut out = String::new();
    for l in &w.lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn id_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

struct Walker<'a> {
    doc: &'a Value,
    lines: BTreeSet<String>,
    seen: HashSet<(String, String)>,
}

impl Walker<'_> {
    fn get(&self, id: &str) -> Option<&Value> {
        self.doc["index"].get(id)
    }

    /// The item `id`, reachable as `path`.
    fn item(&mut self, id: &str, path: &str) {
        if !self.seen.insert((id.to_owned(), path.to_owned())) {
            return;
        }
        let Some(item) = self.get(id).cloned() else {
            return;
        };
        if is_hidden(&item) {
            return;
        }
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        match kind.as_str() {
            "module" => {
                if !inner["is_crate"].as_bool().unwrap_or(false) {
                    self.lines.insert(format!("pub mod {path}"));
                }
                for child in inner["items"].as_array().into_iter().flatten() {
                    let child = id_str(child);
                    let Some(c) = self.get(&child).cloned() else {
                        continue;
                    };
                    if c["visibility"] != "public" {
                        continue;
                    }
                    if let Some(u) = c["inner"].get("use") {
                        self.reexport(u, path);
                    } else if let Some(n) = c["name"].as_str() {
                        self.item(&child, &format!("{path}::{n}"));
                    }
                }
            }
            "struct" => {
                let generics = generics(&inner["generics"]);
                self.lines.insert(format!("pub struct {path}{generics}"));
                if let Some(fields) = inner["kind"]["plain"]["fields"].as_array() {
                    for f in fields {
                        self.field(&id_str(f), path);
                    }
                }
                if let Some(fields) = inner["kind"]["tuple"].as_array() {
                    for (i, f) in fields.iter().enumerate() {
                        if let Some(f) = self.get(&id_str(f)).cloned()
                            && f["visibility"] == "public"
                        {
                            self.lines.insert(format!(
                                "pub {path}.{i}: {}",
                                ty(&f["inner"]["struct_field"])
                            ));
                        }
                    }
                }
                self.impls(&inner["impls"], path);
            }
            "enum" => {
                let generics = generics(&inner["generics"]);
                self.lines.insert(format!("pub enum {path}{generics}"));
                for v in inner["variants"].as_array().into_iter().flatten() {
                    if let Some(v) = self.get(&id_str(v)).cloned() {
                        self.lines.insert(format!(
                            "pub {path}::{}{}",
                            v["name"].as_str().unwrap_or("?"),
                            variant(self, &v)
                        ));
                    }
                }
                self.impls(&inner["impls"], path);
            }
            "union" => {
                self.lines.insert(format!("pub union {path}"));
            }
            "trait" => {
                let generics = generics(&inner["generics"]);
                let unsafety = if inner["is_unsafe"].as_bool().unwrap_or(false) {
                    "unsafe "
                } else {
                    ""
                };
                self.lines
                    .insert(format!("pub {unsafety}trait {path}{generics}"));
                for i in inner["items"].as_array().into_iter().flatten() {
                    if let Some(i) = self.get(&id_str(i)).cloned() {
                        self.assoc(&i, path, true);
                    }
                }
            }
            "function" => {
                self.lines.insert(format!("pub {}", function(path, inner)));
            }
            "constant" => {
                self.lines
                    .insert(format!("pub const {path}: {}", ty(&inner["type"])));
            }
            "static" => {
                self.lines
                    .insert(format!("pub static {path}: {}", ty(&inner["type"])));
            }
            "type_alias" => {
                self.lines
                    .insert(format!("pub type {path} = {}", ty(&inner["type"])));
            }
            "macro" | "proc_macro" => {
                self.lines.insert(format!("pub macro {path}!"));
            }
            "trait_alias" => {
                self.lines.insert(format!("pub trait alias {path}"));
            }
            _ => {}
        }
    }

    fn reexport(&mut self, u: &Value, path: &str) {
        let name = u["name"].as_str().unwrap_or("?");
        let source = u["source"].as_str().unwrap_or("?");
        let target = id_str(&u["id"]);
        let local = !target.is_empty() && self.get(&target).is_some_and(|t| t["crate_id"] == 0);
        if u["is_glob"].as_bool().unwrap_or(false) {
            if local {
                // the module's items appear under this path
                if let Some(m) = self.get(&target).cloned()
                    && let Some(items) = m["inner"]["module"]["items"].as_array()
                {
                    for child in items {
                        let child = id_str(child);
                        if let Some(c) = self.get(&child).cloned()
                            && c["visibility"] == "public"
                            && let Some(n) = c["name"].as_str()
                        {
                            self.item(&child, &format!("{path}::{n}"));
                        }
                    }
                }
            } else {
                self.lines
                    .insert(format!("pub use {path}::* = {source}::*"));
            }
        } else if local {
            self.item(&target, &format!("{path}::{name}"));
        } else {
            // another crate's item: its API is that crate's, but the name is ours to keep.
            // Named by where it is defined (rustdoc's `paths`), not by how the `use` spells it.
            let defined = self.doc["paths"]
                .get(&target)
                .and_then(|p| p["path"].as_array())
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("::")
                })
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| source.to_owned());
            self.lines
                .insert(format!("pub use {path}::{name} = {defined}"));
        }
    }

    fn field(&mut self, id: &str, path: &str) {
        if let Some(f) = self.get(id).cloned()
            && f["visibility"] == "public"
            && !is_hidden(&f)
        {
            self.lines.insert(format!(
                "pub {path}.{}: {}",
                f["name"].as_str().unwrap_or("?"),
                ty(&f["inner"]["struct_field"])
            ));
        }
    }

    fn impls(&mut self, impls: &Value, path: &str) {
        for i in impls.as_array().into_iter().flatten() {
            let Some(imp) = self.get(&id_str(i)).cloned() else {
                continue;
            };
            let inner = &imp["inner"]["impl"];
            if inner["is_synthetic"].as_bool().unwrap_or(false) || !inner["blanket_impl"].is_null()
            {
                continue;
            }
            if is_hidden(&imp) {
                continue;
            }
            if inner["trait"].is_null() {
                for item in inner["items"].as_array().into_iter().flatten() {
                    if let Some(it) = self.get(&id_str(item)).cloned()
                        && it["visibility"] == "public"
                    {
                        self.assoc(&it, path, false);
                    }
                }
            } else {
                let negative = if inner["is_negative"].as_bool().unwrap_or(false) {
                    "!"
                } else {
                    ""
                };
                self.lines.insert(format!(
                    "impl {negative}{} for {path}",
                    path_ty(&inner["trait"])
                ));
            }
        }
    }

    fn assoc(&mut self, it: &Value, owner: &str, in_trait: bool) {
        if is_hidden(it) {
            return;
        }
        let name = it["name"].as_str().unwrap_or("?");
        let Some((kind, inner)) = it["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        let prefix = if in_trait { "" } else { "pub " };
        let line = match kind.as_str() {
            "function" => {
                let provided = if in_trait && inner["has_body"].as_bool().unwrap_or(false) {
                    " {provided}"
                } else {
                    ""
                };
                format!(
                    "{prefix}{}{provided}",
                    function(&format!("{owner}::{name}"), inner)
                )
            }
            "assoc_const" | "constant" => {
                format!("{prefix}const {owner}::{name}: {}", ty(&inner["type"]))
            }
            "assoc_type" => format!("{prefix}type {owner}::{name}"),
            _ => return,
        };
        self.lines.insert(line);
    }
}

fn is_hidden(item: &Value) -> bool {
    item["attrs"].as_array().into_iter().flatten().any(|a| {
        let s = a
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| a.to_string());
        s.contains("doc(hidden)")
    })
}

fn variant(_w: &Walker<'_>, v: &Value) -> String {
    match &v["inner"]["variant"]["kind"] {
        Value::Object(o) if o.contains_key("tuple") => {
            let n = o["tuple"].as_array().map(Vec::len).unwrap_or(0);
            format!("({})", vec!["_"; n].join(", "))
        }
        Value::Object(o) if o.contains_key("struct") => " { .. }".to_owned(),
        _ => String::new(),
    }
}

fn function(path: &str, f: &Value) -> String {
    let header = &f["header"];
    let mut q = String::new();
    if header["is_const"].as_bool().unwrap_or(false) {
        q.push_str("const ");
    }
    if header["is_async"].as_bool().unwrap_or(false) {
        q.push_str("async ");
    }
    if header["is_unsafe"].as_bool().unwrap_or(false) {
        q.push_str("unsafe ");
    }
    let args: Vec<String> = f["sig"]["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let name = a[0].as_str().unwrap_or("_");
            let t = ty(&a[1]);
            if name == "self" {
                t.replace("Self", "self")
            } else {
                format!("{name}: {t}")
            }
        })
        .collect();
    let out = match &f["sig"]["output"] {
        Value::Null => String::new(),
        t => format!(" -> {}", ty(t)),
    };
    let generics = generics(&f["generics"]);
    let bounds = where_clause(&f["generics"]);
    format!("{q}fn {path}{generics}({}){out}{bounds}", args.join(", "))
}

fn generics(g: &Value) -> String {
    let params: Vec<String> = g["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| !p["kind"]["type"]["is_synthetic"].as_bool().unwrap_or(false))
        .map(|p| {
            let name = p["name"].as_str().unwrap_or("?").to_owned();
            if let Some(t) = p["kind"].get("type") {
                let b = bounds(&t["bounds"]);
                if b.is_empty() {
                    name
                } else {
                    format!("{name}: {b}")
                }
            } else if p["kind"].get("const").is_some() {
                format!("const {name}: {}", ty(&p["kind"]["const"]["type"]))
            } else {
                name
            }
        })
        .collect();
    if params.is_empty() {
        String::new()
    } else {
        format!("<{}>", params.join(", "))
    }
}

fn where_clause(g: &Value) -> String {
    let preds: Vec<String> = g["where_predicates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let b = p.get("bound_predicate")?;
            Some(format!("{}: {}", ty(&b["type"]), bounds(&b["bounds"])))
        })
        .collect();
    if preds.is_empty() {
        String::new()
    } else {
        format!(" where {}", preds.join(", "))
    }
}

fn bounds(b: &Value) -> String {
    b.as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            if let Some(t) = b.get("trait_bound") {
                path_ty(&t["trait"])
            } else if let Some(l) = b.get("outlives") {
                l.as_str().unwrap_or("'_").to_owned()
            } else if b.get("use").is_some() {
                "use<..>".to_owned()
            } else {
                "?".to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

fn path_ty(p: &Value) -> String {
    let name = p["path"]
        .as_str()
        .or(p["name"].as_str())
        .unwrap_or("?")
        .to_owned();
    format!("{name}{}", generic_args(&p["args"]))
}

fn generic_args(a: &Value) -> String {
    if let Some(ab) = a.get("angle_bracketed") {
        let mut parts: Vec<String> = ab["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                if let Some(t) = g.get("type") {
                    ty(t)
                } else if let Some(l) = g.get("lifetime") {
                    l.as_str().unwrap_or("'_").to_owned()
                } else if let Some(c) = g.get("const") {
                    c["expr"].as_str().unwrap_or("_").to_owned()
                } else {
                    "_".to_owned()
                }
            })
            .collect();
        for c in ab["constraints"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("?");
            if let Some(t) = c["binding"].get("equality").and_then(|e| e.get("type")) {
                parts.push(format!("{name} = {}", ty(t)));
            } else if let Some(b) = c["binding"].get("constraint") {
                parts.push(format!("{name}: {}", bounds(b)));
            }
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("<{}>", parts.join(", "))
        }
    } else if let Some(p) = a.get("parenthesized") {
        let inputs: Vec<String> = p["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(ty)
            .collect();
        let out = if p["output"].is_null() {
            String::new()
        } else {
            format!(" -> {}", ty(&p["output"]))
        };
        format!("({}){out}", inputs.join(", "))
    } else {
        String::new()
    }
}

/// A type as Rust source, near enough to tell two signatures apart.
fn ty(t: &Value) -> String {
    let Some((kind, v)) = t.as_object().and_then(|o| o.iter().next()) else {
        return t
            .as_str()
            .map(|s| {
                if s == "infer" {
                    "_".to_owned()
                } else {
                    s.to_owned()
                }
            })
            .unwrap_or_else(|| "?".into());
    };
    match kind.as_str() {
        "resolved_path" => path_ty(v),
        "primitive" | "generic" => v.as_str().unwrap_or("?").to_owned(),
        "borrowed_ref" => {
            let lt = v["lifetime"]
                .as_str()
                .map(|l| format!("{l} "))
                .unwrap_or_default();
            let m = if v["is_mutable"].as_bool().unwrap_or(false) {
                "mut "
            } else {
                ""
            };
            format!("&{lt}{m}{}", ty(&v["type"]))
        }
        "raw_pointer" => {
            let m = if v["is_mutable"].as_bool().unwrap_or(false) {
                "mut"
            } else {
                "const"
            };
            format!("*{m} {}", ty(&v["type"]))
        }
        "tuple" => {
            let parts: Vec<String> = v.as_array().into_iter().flatten().map(ty).collect();
            format!("({})", parts.join(", "))
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!("[{}; {}]", ty(&v["type"]), v["len"].as_str().unwrap_or("_")),
        "impl_trait" => format!("impl {}", bounds(v)),
        "dyn_trait" => {
            let traits: Vec<String> = v["traits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| path_ty(&p["trait"]))
                .collect();
            let lt = v["lifetime"]
                .as_str()
                .map(|l| format!(" + {l}"))
                .unwrap_or_default();
            format!("dyn {}{lt}", traits.join(" + "))
        }
        "qualified_path" => {
            let tr = if v["trait"].is_null() {
                String::new()
            } else {
                format!(" as {}", path_ty(&v["trait"]))
            };
            format!(
                "<{}{tr}>::{}",
                ty(&v["self_type"]),
                v["name"].as_str().unwrap_or("?")
            )
        }
        "function_pointer" => {
            let inputs: Vec<String> = v["sig"]["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| ty(&a[1]))
                .collect();
            let out = if v["sig"]["output"].is_null() {
                String::new()
            } else {
                format!(" -> {}", ty(&v["sig"]["output"]))
            };
            format!("fn({}){out}", inputs.join(", "))
        }
        "pat" => ty(&v["type"]),
        _ => format!("{kind}?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reexport_of_another_toolwright_crate_is_found_and_one_of_a_foreign_crate_is_not() {
        let api = "pub struct a::B\npub use a::Message = toolwright_core::Message\npub use a::Value = serde_json::Value\n";
        assert_eq!(
            reexports_of_siblings(api),
            ["pub use a::Message = toolwright_core::Message"]
        );
    }

    #[test]
    fn a_public_function_struct_and_reexport_each_give_a_line_and_private_items_none() {
        let doc = json!({
            "root": "0",
            "index": {
                "0": {"name": "demo", "visibility": "public", "crate_id": 0, "attrs": [],
                      "inner": {"module": {"is_crate": true, "items": ["1", "2", "3", "4", "6"]}}},
                "1": {"name": "run", "visibility": "public", "crate_id": 0, "attrs": [],
                      "inner": {"function": {"sig": {"inputs": [["n", {"primitive": "usize"}]], "output": {"primitive": "bool"}},
                                             "generics": {"params": [], "where_predicates": []},
                                             "header": {"is_async": true}}}},
                "2": {"name": "hidden", "visibility": "default", "crate_id": 0, "attrs": [],
                      "inner": {"function": {"sig": {"inputs": [], "output": null}, "generics": {}, "header": {}}}},
                "3": {"name": "Thing", "visibility": "public", "crate_id": 0, "attrs": [],
                      "inner": {"struct": {"kind": {"plain": {"fields": ["5"]}}, "generics": {"params": []}, "impls": []}}},
                "5": {"name": "size", "visibility": "public", "crate_id": 0, "attrs": [],
                      "inner": {"struct_field": {"resolved_path": {"path": "Vec", "args": {"angle_bracketed": {"args": [{"type": {"primitive": "u8"}}], "constraints": []}}}}}},
                "4": {"name": null, "visibility": "public", "crate_id": 0, "attrs": [],
                      "inner": {"use": {"source": "serde_json::Value", "name": "Value", "id": "99", "is_glob": false}}},
                "6": {"name": "Secret", "visibility": "public", "crate_id": 0, "attrs": ["#[doc(hidden)]"],
                      "inner": {"struct": {"kind": "unit", "generics": {"params": []}, "impls": []}}}
            }
        });
        let text = render(&doc);
        assert_eq!(
            text,
            "pub async fn demo::run(n: usize) -> bool\npub demo::Thing.size: Vec<u8>\npub struct demo::Thing\npub use demo::Value = serde_json::Value\n"
        );
    }
}
