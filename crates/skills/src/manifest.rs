//! Loading skills from directories: `SKILL.md` with YAML front matter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// A loaded skill: what the model sees and how to run it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Skill {
    /// Tool name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// One or two sentences for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// Program and arguments; a first word with a `/` is relative to the skill's directory.
    pub entry: Vec<String>,
    /// This skill's own time limit.
    pub timeout: Option<Duration>,
    /// Names of environment variables the skill may receive from the agent's environment.
    pub env: Vec<String>,
    /// The skill's directory.
    pub dir: PathBuf,
}

/// A skill that could not be loaded; the others still load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {message}", file.display())]
#[non_exhaustive]
pub struct SkillLoadError {
    /// The `SKILL.md` (or directory) at fault.
    pub file: PathBuf,
    /// 1-based line in that file (0 when not known).
    pub line: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    name: String,
    description: String,
    #[serde(default)]
    parameters: Option<Value>,
    entry: EntryField,
    #[serde(default)]
    timeout_secs: Option<f64>,
    #[serde(default)]
    env: Vec<String>,
    // Fields of the community Agent Skills format that we accept and ignore.
    #[serde(default)]
    #[allow(dead_code)]
    license: Option<Value>,
    #[serde(default, rename = "allowed-tools")]
    #[allow(dead_code)]
    allowed_tools: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum EntryField {
    Line(String),
    Words(Vec<String>),
}

/// Whether `name` is a tool name every provider accepts.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses one `SKILL.md` text; `dir` is the skill's directory, `file` names it in errors.
pub fn parse_skill(text: &str, dir: &Path, file: &Path) -> Result<Skill, SkillLoadError> {
    let err = |line: usize, message: String| SkillLoadError {
        file: file.to_path_buf(),
        line,
        message,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(err(
            1,
            "SKILL.md must start with a `---` line opening the YAML front matter".into(),
        ));
    }
    let mut yaml = String::new();
    let mut closed = false;
    for l in lines {
        if l.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(l);
    }
    if !closed {
        return Err(err(
            1,
            "the front matter is not closed: add a `---` line after it".into(),
        ));
    }
    // Line 1 is the opening `---`; YAML line N is file line N + 1.
    let fm: FrontMatter = serde_yaml::from_str(&yaml).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line() + 1);
        err(line, format!("invalid front matter: {e}"))
    })?;
    let line_of = |key: &str| {
        yaml.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(0, |i| i + 2)
    };
    if !valid_tool_name(&fm.name) {
        return Err(err(
            line_of("name"),
            format!(
                "name {:?} is not a valid tool name: use 1-64 letters, digits, `_` or `-`",
                fm.name
            ),
        ));
    }
    if fm.description.trim().is_empty() {
        return Err(err(
            line_of("description"),
            "description is empty: say in a sentence what the skill does".into(),
        ));
    }
    let parameters = fm
        .parameters
        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(err(
            line_of("parameters"),
            "parameters must be a JSON Schema with `type: object`".into(),
        ));
    }
    let entry = match fm.entry {
        EntryField::Line(s) => s.split_whitespace().map(str::to_owned).collect(),
        EntryField::Words(w) => w,
    };
    if entry.is_empty() {
        return Err(err(
            line_of("entry"),
            "entry is empty: give the command that runs the skill, e.g. `python3 run.py`".into(),
        ));
    }
    let timeout = match fm.timeout_secs {
        None => None,
        Some(s) => Some(
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    err(
                        line_of("timeout_secs"),
                        format!("timeout_secs {s} must be a positive number of seconds"),
                    )
                })?,
        ),
    };
    Ok(Skill {
        name: fm.name,
        description: fm.description.trim().to_owned(),
        parameters,
        entry,
        timeout,
        env: fm.env,
        dir: dir.to_path_buf(),
    })
}

/// Loads every `*/SKILL.md` under `root`. Bad skills are reported with file and line; the
/// others load. Two skills with the same name: the first (in directory order) wins, the second
/// is reported.
pub fn load_skills(root: &Path) -> (Vec<Skill>, Vec<SkillLoadError>) {
    let mut skills: Vec<Skill> = Vec::new();
    let mut errors = Vec::new();
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(root) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) => {
            errors.push(SkillLoadError {
                file: root.to_path_buf(),
                line: 0,
                message: format!("cannot read the skills directory: {e}"),
            });
            return (skills, errors);
        }
    };
    dirs.sort();
    for dir in dirs {
        let file = dir.join("SKILL.md");
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                errors.push(SkillLoadError {
                    file,
                    line: 0,
                    message: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        match parse_skill(&text, &dir, &file) {
            Ok(s) if skills.iter().any(|k| k.name == s.name) => errors.push(SkillLoadError {
                file,
                line: 0,
                message: format!(
                    "a skill named {:?} is already loaded; rename one of them",
                    s.name
                ),
            }),
            Ok(s) => skills.push(s),
            Err(e) => errors.push(e),
        }
    }
    (skills, errors)
}
