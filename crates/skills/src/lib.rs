//! # skills — tools from `SKILL.md` directories, run in a sandbox
//!
//! A skill is a directory with a `SKILL.md` whose YAML front matter names the tool, describes
//! it, gives its `parameters` JSON Schema and the `entry` command that runs it. Each call runs
//! the entry as a child process with the JSON arguments on stdin and reads a JSON result from
//! stdout, inside a [`Sandbox`]: wall-clock timeout killing the whole process group, CPU /
//! memory / file-size / process / open-file limits, a cleared environment, a fresh working
//! directory removed afterwards, capped output, Landlock filesystem confinement, no network,
//! and — when the agent runs as root — a dedicated uid per call. [`Protections`] says which of
//! these are in force on the machine. See `docs/skills.md` for the format.
//!
//! ```
//! use skills::parse_skill;
//! let md = "---\nname: word_count\ndescription: Count words.\nentry: python3 run.py\nparameters:\n  type: object\n  properties:\n    text: {type: string}\n---\nCounts words.\n";
//! let skill = parse_skill(md, "/skills/wc".as_ref(), "/skills/wc/SKILL.md".as_ref()).unwrap();
//! assert_eq!(skill.entry, ["python3", "run.py"]);
//! ```

mod manifest;
mod provider;
mod sandbox;
mod sys;

pub use manifest::{Skill, SkillLoadError, load_skills, parse_skill, valid_tool_name};
pub use provider::SkillsProvider;
pub use sandbox::{Protections, Sandbox, SandboxConfig, SkillError};
