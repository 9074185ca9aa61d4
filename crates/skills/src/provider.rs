//! Skills as a [`ToolProvider`]: the dispatcher routes calls whose name matches a loaded skill
//! here (000's SkillsSandboxExecutor).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use model_gateway::ToolSpec;
use serde_json::Value;
use tool_system::{ToolContext, ToolError, ToolErrorKind, ToolProvider};

use crate::{Sandbox, SandboxConfig, Skill, SkillError, SkillLoadError, load_skills};

/// Loaded skills plus the sandbox that runs them.
///
/// ```no_run
/// # async fn demo() {
/// use skills::{SandboxConfig, SkillsProvider};
/// use tool_system::ToolProvider;
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
    /// Loads every skill under `root`; returns the provider and the skills that failed to load.
    pub fn load(root: impl AsRef<Path>, config: SandboxConfig) -> (Self, Vec<SkillLoadError>) {
        let (skills, errors) = load_skills(root.as_ref());
        for e in &errors {
            tracing::warn!(error = %e, "skill not loaded");
        }
        (
            Self::from_skills(skills, Arc::new(Sandbox::new(config))),
            errors,
        )
    }

    /// A provider for these skills and this sandbox.
    pub fn from_skills(skills: Vec<Skill>, sandbox: Arc<Sandbox>) -> Self {
        Self {
            skills: skills.into_iter().map(|s| (s.name.clone(), s)).collect(),
            sandbox,
        }
    }

    /// The sandbox (and its [`crate::Protections`]).
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
            .map(|s| ToolSpec::new(s.name.clone(), s.description.clone(), s.parameters.clone()))
            .collect()
    }

    async fn call(&self, name: &str, args: Value, _ctx: ToolContext) -> Result<Value, ToolError> {
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
                SkillError::Spawn { .. } => ToolErrorKind::Unavailable,
                _ => ToolErrorKind::Failed,
            };
            ToolError::new(kind, e.to_string())
        })
    }

    /// The sandbox enforces its own wall-clock limit; the dispatcher's is a backstop a little
    /// longer, so the model reads the sandbox's precise message.
    fn timeout(&self, name: &str) -> Option<Duration> {
        let t = self
            .skills
            .get(name)?
            .timeout
            .unwrap_or(self.sandbox.config().timeout);
        Some(t + Duration::from_secs(2))
    }
}
