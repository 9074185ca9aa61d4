//! # skills — tools from `SKILL.md` directories, run in a sandbox
//!
//! A skill is a directory with a `SKILL.md` whose YAML front matter names the tool, describes
//! it, gives its `parameters` JSON Schema and the `entry` command that runs it. Each call runs
//! the entry as a child process with the JSON arguments on stdin and reads a JSON result from
//! stdout, inside a [`Sandbox`]: a bubblewrap container per call (its own mount, IPC, PID and
//! network namespaces; read-only system directories, the skill read-only, a private size- and
//! inode-limited tmpfs), a seccomp filter, wall-clock timeout killing everything of the call,
//! CPU / memory / file-size / process / open-file limits, only the environment the operator
//! granted, no inherited descriptors, capped output and — when the agent runs as root — a
//! dedicated uid per call. Without bubblewrap every call is refused, with a message naming the
//! package to install, unless the operator accepts the weaker boundary (Landlock, seccomp, PID,
//! IPC and network namespaces where the kernel allows user namespaces, no mount namespace) with
//! `SandboxConfig::allow_without_container`;
//! `Protections` says which boundaries are in force on the machine. See `docs/skills.md` for the format
//! and the threat model: the operator (`SandboxConfig`) is trusted, the skill's author and the
//! model are not.
//!
//! ```
//! use toolwright_skills::parse_skill;
//! let md = "---\nname: word_count\ndescription: Count words.\nentry: python3 run.py\nparameters:\n  type: object\n  properties:\n    text: {type: string}\n---\nCounts words.\n";
//! let skill = parse_skill(md, "/skills/wc".as_ref(), "/skills/wc/SKILL.md".as_ref()).unwrap();
//! assert_eq!(skill.entry, ["python3", "run.py"]);
//! ```

mod manifest;
mod provider;
mod sandbox;

pub use manifest::{
    LoadOutcome, MAX_FRONT_MATTER_BYTES, MAX_MODEL_DESCRIPTION_CHARS, MAX_SKILL_DIR_BYTES,
    MAX_SKILL_DIR_ENTRIES, MAX_SKILL_MD_BYTES, MAX_YAML_NESTING, Skill, SkillLoadError,
    load_skills, parse_skill,
};
pub use provider::SkillsProvider;
pub use sandbox::{Sandbox, SkillError};
