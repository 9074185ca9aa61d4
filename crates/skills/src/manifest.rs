//! Loading skills from directories: `SKILL.md` with YAML front matter.
//!
//! A skill's files come from its author, who is not trusted: everything here treats them as
//! data. Sizes are checked before a byte is read, the YAML is pre-scanned so the parser cannot go
//! quadratic, and a skill directory is refused when it links outside itself, holds hard-linked or
//! special files, or is too large (sparse files count by their length).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// Largest `SKILL.md` read, in bytes; a larger file is refused before it is read.
pub const MAX_SKILL_MD_BYTES: u64 = 1 << 20;
/// Largest YAML front matter, in bytes.
pub const MAX_FRONT_MATTER_BYTES: usize = 64 << 10;
/// Deepest nesting of YAML collections (flow `[`/`{` and block `-` levels) accepted.
pub const MAX_YAML_NESTING: usize = 32;
/// Characters of a description sent to the model; the rest stays in [`Skill::description`].
pub const MAX_MODEL_DESCRIPTION_CHARS: usize = 1024;
/// Largest skill directory (sum of file lengths, sparse files by their length).
pub const MAX_SKILL_DIR_BYTES: u64 = 64 << 20;
/// Most entries (files, directories, links) in one skill directory.
pub const MAX_SKILL_DIR_ENTRIES: usize = 10_000;

/// A loaded skill: what the model sees and how to run it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Skill {
    /// Tool name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// The full description from `SKILL.md`; the model gets [`Skill::model_description`].
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// Program and arguments; a word naming a file of the skill (`run.py`, `bin/tool`) is run
    /// from the skill's directory.
    pub entry: Vec<String>,
    /// The time limit the skill asks for; the sandbox cuts it to the operator's cap.
    pub timeout: Option<Duration>,
    /// Environment variables the skill asks for; only those the operator granted are passed.
    pub env: Vec<String>,
    /// The skill's directory.
    pub dir: PathBuf,
    /// Its `SKILL.md`, for messages.
    pub file: PathBuf,
    lines: KeyLines,
}

/// Lines (1-based, in `SKILL.md`) of the keys a later check may report.
#[derive(Debug, Clone, PartialEq, Default)]
struct KeyLines {
    timeout: usize,
    env: Vec<usize>,
}

impl Skill {
    /// The description the model reads: at most [`MAX_MODEL_DESCRIPTION_CHARS`] characters,
    /// cut with `…` (the full text is in [`Skill::description`] and the skill's docs).
    pub fn model_description(&self) -> String {
        match self
            .description
            .char_indices()
            .nth(MAX_MODEL_DESCRIPTION_CHARS)
        {
            None => self.description.clone(),
            Some((cut, _)) => format!("{}…", &self.description[..cut]),
        }
    }

    /// The `SKILL.md` line of the `index`-th `env` entry (0 when not known).
    pub fn env_line(&self, index: usize) -> usize {
        self.lines.env.get(index).copied().unwrap_or(0)
    }

    /// The `SKILL.md` line of `timeout_secs` (0 when absent).
    pub fn timeout_line(&self) -> usize {
        self.lines.timeout
    }
}

/// What happened to the skill a [`SkillLoadError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadOutcome {
    /// The skill was not loaded.
    Rejected,
    /// The skill loaded, without what the message names (an ungranted environment variable,
    /// a time limit above the cap).
    Restricted,
}

/// A problem found while loading a skill, with file, line and what to change.
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
    /// Whether the skill was refused or loaded with less than it asked for.
    pub outcome: LoadOutcome,
}

impl SkillLoadError {
    fn rejected(file: &Path, line: usize, message: String) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            message,
            outcome: LoadOutcome::Rejected,
        }
    }

    pub(crate) fn rejected_dir(dir: &Path, message: String) -> Self {
        Self::rejected(dir, 0, message)
    }

    pub(crate) fn restricted(file: &Path, line: usize, message: String) -> Self {
        Self {
            file: file.to_path_buf(),
            line,
            message,
            outcome: LoadOutcome::Restricted,
        }
    }
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

/// Refuses YAML whose collections nest deeper than [`MAX_YAML_NESTING`], before the parser sees
/// it: the YAML scanner's work per token grows with the nesting, so deep nesting is what makes a
/// small file take quadratic time. Counts flow brackets outside quotes and comments, plus block
/// sequence dashes and indentation; errs on the side of counting too deep (a bracket inside a
/// plain scalar counts), which only affects front matter no real skill has.
fn check_nesting(yaml: &str) -> Result<(), (usize, String)> {
    let mut flow: usize = 0;
    for (i, line) in yaml.lines().enumerate() {
        let mut in_single = false;
        let mut in_double = false;
        let mut escaped = false;
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        // Block level: indentation, plus one level per leading `- ` (`- - - x` nests three).
        let dashes = trimmed
            .as_bytes()
            .chunks(2)
            .take_while(|c| c == b"- " || c == b"-")
            .count();
        let block = indent / 2 + dashes;
        for c in line.chars() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_double => escaped = true,
                '"' if !in_single => in_double = !in_double,
                '\'' if !in_double => in_single = !in_single,
                '#' if !in_single && !in_double => break,
                '[' | '{' if !in_single && !in_double => flow += 1,
                ']' | '}' if !in_single && !in_double => flow = flow.saturating_sub(1),
                _ => {}
            }
            if flow + block > MAX_YAML_NESTING {
                return Err((
                    i + 2,
                    format!(
                        "the front matter nests collections deeper than {MAX_YAML_NESTING} levels: flatten it (a skill needs a few levels, for `parameters`)"
                    ),
                ));
            }
        }
        if block > MAX_YAML_NESTING {
            return Err((
                i + 2,
                format!(
                    "the front matter nests collections deeper than {MAX_YAML_NESTING} levels: flatten it"
                ),
            ));
        }
    }
    Ok(())
}

/// Parses one `SKILL.md` text; `dir` is the skill's directory, `file` names it in errors.
/// Does not look at the directory's files (see [`load_skills`] for that).
pub fn parse_skill(text: &str, dir: &Path, file: &Path) -> Result<Skill, SkillLoadError> {
    let err = |line: usize, message: String| SkillLoadError::rejected(file, line, message);
    if text.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(err(
            0,
            format!(
                "SKILL.md is {} bytes, more than the {} KiB allowed: move long documentation to another file",
                text.len(),
                MAX_SKILL_MD_BYTES >> 10
            ),
        ));
    }
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
        if yaml.len() + l.len() > MAX_FRONT_MATTER_BYTES {
            return Err(err(
                yaml.lines().count() + 2,
                format!(
                    "the front matter is longer than {} KiB: shorten the description (the Markdown body after the closing `---` is the place for long text)",
                    MAX_FRONT_MATTER_BYTES >> 10
                ),
            ));
        }
        yaml.push_str(l);
    }
    if !closed {
        return Err(err(
            1,
            "the front matter is not closed: add a `---` line after it".into(),
        ));
    }
    check_nesting(&yaml).map_err(|(line, message)| err(line, message))?;
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
    if !toolwright_core::is_valid_tool_name(&fm.name) {
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
    let entry: Vec<String> = match fm.entry {
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
    // The line of each `env` entry: the first line at or after `env:` that names it.
    let env_start = line_of("env").saturating_sub(2);
    let yaml_lines: Vec<&str> = yaml.lines().collect();
    let env_lines = fm
        .env
        .iter()
        .map(|var| {
            yaml_lines
                .iter()
                .enumerate()
                .skip(env_start)
                .find(|(_, l)| l.contains(var.as_str()))
                .map_or(env_start + 2, |(i, _)| i + 2)
        })
        .collect();
    Ok(Skill {
        name: fm.name,
        description: fm.description.trim().to_owned(),
        parameters,
        entry,
        timeout,
        env: fm.env,
        dir: dir.to_path_buf(),
        file: file.to_path_buf(),
        lines: KeyLines {
            timeout: line_of("timeout_secs"),
            env: env_lines,
        },
    })
}

/// Reads a `SKILL.md` without trusting its size: refused by its length before a byte is read,
/// and read through a cap in case it grows meanwhile.
fn read_skill_md(file: &Path) -> Result<Option<String>, SkillLoadError> {
    let meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(SkillLoadError::rejected(
                file,
                0,
                format!("cannot read: {e}"),
            ));
        }
    };
    if !meta.file_type().is_file() {
        return Err(SkillLoadError::rejected(
            file,
            0,
            "SKILL.md is not a regular file (a link or special file): replace it with the file itself".into(),
        ));
    }
    if meta.len() > MAX_SKILL_MD_BYTES {
        return Err(SkillLoadError::rejected(
            file,
            0,
            format!(
                "SKILL.md is {} bytes, more than the {} KiB allowed: move long documentation to another file",
                meta.len(),
                MAX_SKILL_MD_BYTES >> 10
            ),
        ));
    }
    let mut text = String::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_SKILL_MD_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| SkillLoadError::rejected(file, 0, format!("cannot read: {e}")))?;
    Ok(Some(text))
}

/// Checks a skill directory's files as data: every entry is a regular file with one link, a
/// directory, or a symlink that stays inside the skill; the total length (sparse files by their
/// length) is at most [`MAX_SKILL_DIR_BYTES`]. Nothing is read.
fn check_skill_tree(dir: &Path) -> Result<(), String> {
    let canonical = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve the skill directory: {e}"))?;
    let mut total: u64 = 0;
    let mut entries: usize = 0;
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        if depth > 32 {
            return Err(format!(
                "{} is nested more than 32 directories deep: flatten the skill",
                d.display()
            ));
        }
        let rd = std::fs::read_dir(&d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
        for entry in rd {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", d.display()))?;
            entries += 1;
            if entries > MAX_SKILL_DIR_ENTRIES {
                return Err(format!(
                    "the skill has more than {MAX_SKILL_DIR_ENTRIES} files: remove what it does not need"
                ));
            }
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let ty = meta.file_type();
            if ty.is_dir() {
                stack.push((path, depth + 1));
            } else if ty.is_symlink() {
                let inside = path
                    .canonicalize()
                    .map(|t| t.starts_with(&canonical))
                    .unwrap_or(false);
                if !inside {
                    return Err(format!(
                        "{} is a symbolic link that leads outside the skill (or nowhere): replace it with the file it points to",
                        path.display()
                    ));
                }
            } else if ty.is_file() {
                if meta.nlink() > 1 {
                    return Err(format!(
                        "{} is a hard link ({} names for one file): replace it with a copy",
                        path.display(),
                        meta.nlink()
                    ));
                }
                total = total.saturating_add(meta.len());
                if total > MAX_SKILL_DIR_BYTES {
                    return Err(format!(
                        "the skill's files add up to more than {} MiB (sparse files count by their length): remove large files",
                        MAX_SKILL_DIR_BYTES >> 20
                    ));
                }
            } else {
                return Err(format!(
                    "{} is a special file (device, FIFO or socket): a skill holds only files, directories and links within itself",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// Whether `word` is a relative path made of plain names (`run.py`, `./bin/tool`; not
/// `/bin/sh`, not `../other/run.py`): the sandbox's own rule for the entry words it passes as
/// files of the skill, so what is checked here is what runs.
pub(crate) use toolwright_sandbox::is_plain_relative;

/// Loads every `*/SKILL.md` under `root`. Bad skills are reported with file and line; the
/// others load. Two skills with the same name: the first (in directory order) wins, the second
/// is reported. A skill directory that is a link resolving outside `root`, or whose files break
/// the rules of `check_skill_tree` (links out, hard links, special files, over 64 MiB), is
/// refused.
///
/// This reads the disk and blocks: from async code, call it through
/// `tokio::task::spawn_blocking` (as [`crate::SkillsProvider::load_async`] does).
pub fn load_skills(root: &Path) -> (Vec<Skill>, Vec<SkillLoadError>) {
    let mut skills: Vec<Skill> = Vec::new();
    let mut errors = Vec::new();
    let canonical_root = match root.canonicalize() {
        Ok(r) => r,
        Err(e) => {
            errors.push(SkillLoadError::rejected(
                root,
                0,
                format!("cannot read the skills directory: {e}"),
            ));
            return (skills, errors);
        }
    };
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(root) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) => {
            errors.push(SkillLoadError::rejected(
                root,
                0,
                format!("cannot read the skills directory: {e}"),
            ));
            return (skills, errors);
        }
    };
    dirs.sort();
    for dir in dirs {
        let file = dir.join("SKILL.md");
        match dir.canonicalize() {
            Ok(real) if real.starts_with(&canonical_root) && real != canonical_root => {}
            Ok(real) => {
                errors.push(SkillLoadError::rejected(
                    &dir,
                    0,
                    format!(
                        "the skill directory is a link to {}, outside the skills directory: copy the skill in instead of linking it",
                        real.display()
                    ),
                ));
                continue;
            }
            Err(e) => {
                errors.push(SkillLoadError::rejected(
                    &dir,
                    0,
                    format!("cannot resolve: {e}"),
                ));
                continue;
            }
        }
        let text = match read_skill_md(&file) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let skill = match parse_skill(&text, &dir, &file) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if let Err(message) = check_skill_tree(&dir) {
            errors.push(SkillLoadError::rejected(&dir, 0, message));
            continue;
        }
        if skills.iter().any(|k| k.name == skill.name) {
            errors.push(SkillLoadError::rejected(
                &file,
                0,
                format!(
                    "a skill named {:?} is already loaded; rename one of them",
                    skill.name
                ),
            ));
            continue;
        }
        skills.push(skill);
    }
    (skills, errors)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nesting_counts_flow_and_block_levels_but_not_quoted_brackets() {
        assert!(check_nesting("a: [[[1]]]\nb: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\n").is_ok());
        let deep = format!("a: {}{}\n", "[".repeat(40), "]".repeat(40));
        assert_eq!(check_nesting(&deep).map_err(|e| e.0), Err(2));
        let dashes = format!("a:\n{}x\n", "- ".repeat(40));
        assert_eq!(check_nesting(&dashes).map_err(|e| e.0), Err(3));
    }

    #[test]
    fn model_description_is_cut_on_a_character_boundary() {
        let md = format!(
            "---\nname: d\ndescription: {}\nentry: x\n---\n",
            "é".repeat(3000)
        );
        let s = parse_skill(&md, "/s".as_ref(), "/s/SKILL.md".as_ref()).unwrap();
        let cut = s.model_description();
        assert_eq!(cut.chars().count(), MAX_MODEL_DESCRIPTION_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(s.description.chars().count(), 3000);
    }

    #[test]
    fn plain_relative_words() {
        assert!(is_plain_relative("run.py"));
        assert!(is_plain_relative("bin/tool"));
        assert!(!is_plain_relative("../x"));
        assert!(!is_plain_relative("/bin/sh"));
        assert!(is_plain_relative("./run.py"));
        assert!(!is_plain_relative("."));
    }
}
