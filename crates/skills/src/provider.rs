//! Skills as a [`ToolProvider`]: the dispatcher routes calls whose name matches a loaded skill
//! here (000's SkillsSandboxExecutor).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toolwright_core::{ToolContext, ToolError, ToolErrorKind, ToolProvider, ToolSpec};

use toolwright_sandbox::SandboxConfig;

use crate::{LoadOutcome, Sandbox, Skill, SkillError, SkillLoadError, load_skills};

/// Loaded skills plus the sandbox that runs them.
///
/// ```no_run
/// # async fn demo() {
/// use toolwright_skills::{SkillsProvider};
/// use toolwright_sandbox::{SandboxConfig};
/// use toolwright_core::ToolProvider;
/// let (provider, errors) = SkillsProvider::load("./skills", SandboxConfig::default());
/// for e in &errors { eprintln!("skipped: {e}"); }       // file:line: what to fix
/// println!("{}", provider.sandbox().protections());     // what is in force on this machine
/// let tools = provider.list().await;                     // one tool per skill
/// # let _ = tools; }
/// ```
pub struct SkillsProvider {
    skills: BTreeMap<String, Skill>,
    sandbox: Arc<Sandbox>,
}

impl SkillsProvider {
    /// Loads every skill under `root`; returns the provider and what it found wrong, with file
    /// and line: skills that were refused ([`crate::LoadOutcome::Rejected`]; also a skill with
    /// a file the sandbox's uid could not read, see [`Sandbox::check_requests`]) and skills that
    /// loaded with less than they asked for ([`crate::LoadOutcome::Restricted`]: an
    /// environment variable the operator did not grant, a time limit above the cap).
    ///
    /// Blocking (it reads the disk and checks bubblewrap): from async code use
    /// [`SkillsProvider::load_async`].
    pub fn load(root: impl AsRef<Path>, config: SandboxConfig) -> (Self, Vec<SkillLoadError>) {
        let (mut skills, mut errors) = load_skills(root.as_ref());
        let sandbox = Sandbox::new(config);
        let mut refused = std::collections::BTreeSet::new();
        for s in &skills {
            let found = sandbox.check_requests(s);
            if found
                .iter()
                .any(|e| matches!(e.outcome, LoadOutcome::Rejected))
            {
                refused.insert(s.name.clone());
            }
            errors.extend(found);
        }
        skills.retain(|s| !refused.contains(&s.name));
        for e in &errors {
            match e.outcome {
                LoadOutcome::Rejected => tracing::warn!(error = %e, "skill not loaded"),
                _ => tracing::warn!(error = %e, "skill loaded with less than it asked for"),
            }
        }
        (Self::from_skills(skills, Arc::new(sandbox)), errors)
    }

    /// [`SkillsProvider::load`] on a blocking thread, so the async runtime's threads go on
    /// serving other tasks meanwhile.
    pub async fn load_async(
        root: impl AsRef<Path>,
        config: SandboxConfig,
    ) -> (Self, Vec<SkillLoadError>) {
        let root = root.as_ref().to_path_buf();
        let fallback_root = root.clone();
        match tokio::task::spawn_blocking(move || Self::load(root, config)).await {
            Ok(loaded) => loaded,
            Err(e) => (
                Self::from_skills(Vec::new(), Arc::new(Sandbox::new(SandboxConfig::default()))),
                vec![SkillLoadError::rejected_dir(
                    &fallback_root,
                    format!("loading stopped: {e}"),
                )],
            ),
        }
    }

    /// A provider for these skills and this sandbox.
    pub fn from_skills(skills: Vec<Skill>, sandbox: Arc<Sandbox>) -> Self {
        Self {
            skills: skills.into_iter().map(|s| (s.name.clone(), s)).collect(),
            sandbox,
        }
    }

    /// The sandbox (and its `crate::Protections`).
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The loaded skills, by name.
    pub fn skills(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }
}

#[async_trait::async_trait]
impl ToolProvider for SkillsProvider {
    fn provider_name(&self) -> &str {
        "skills"
    }

    async fn list(&self) -> Vec<ToolSpec> {
        self.skills
            .values()
            .map(|s| ToolSpec::new(s.name.clone(), s.model_description(), s.parameters.clone()))
            .collect()
    }

    async fn call(
        &self,
        name: &str,
        args: Value,
        _ctx: ToolContext,
    ) -> Result<toolwright_core::ToolOutput, ToolError> {
        let result: Result<Value, ToolError> = async {
            let skill = self
                .skills
                .get(name)
                .ok_or_else(|| ToolError::not_found(name))?;
            self.sandbox.run(skill, &args).await.map_err(|e| {
                let kind = match &e {
                    SkillError::Timeout { .. } => ToolErrorKind::Timeout,
                    SkillError::Failed { .. } | SkillError::OutputTooLarge { .. } => {
                        ToolErrorKind::Crashed
                    }
                    SkillError::Spawn { .. } | SkillError::Refused { .. } => {
                        ToolErrorKind::Unavailable
                    }
                    _ => ToolErrorKind::Failed,
                };
                ToolError::new(kind, e.to_string())
            })
        }
        .await;
        result.map(toolwright_core::ToolOutput::from)
    }

    /// The sandbox enforces its own wall-clock limit (the skill's request cut to the operator's
    /// cap); the dispatcher's is a backstop a little longer, so the model reads the sandbox's
    /// precise message.
    fn timeout(&self, name: &str) -> Option<Duration> {
        let skill = self.skills.get(name)?;
        Some(self.sandbox.timeout_for(skill) + Duration::from_secs(2))
    }
}
