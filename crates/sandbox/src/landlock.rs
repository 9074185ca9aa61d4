//! Landlock rulesets: the filesystem (and TCP) boundary of a call without a container, and the
//! scope that keeps a call's abstract unix sockets to itself in the shared network namespace.

use std::path::Path;

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, path_beneath_rules,
};
/// The filesystem boundary of a call without a container: read-only system directories and the
/// program's directory, the few device nodes, and the call's working directory writable; with
/// `allow_network` off, TCP too (ABI ≥ 4). Best effort: what the kernel's ABI lacks is not
/// enforced ([`crate::Protections::landlock_abi`] says which ABI is in force); `None` where no
/// ruleset can be made.
pub(crate) fn ruleset(
    allow_network: bool,
    program_dir: &Path,
    work: &Path,
) -> Option<RulesetCreated> {
    let abi = ABI::V6;
    let read_only = [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
    ];
    let devices = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .ok()?;
    if !allow_network {
        rs = rs.handle_access(AccessNet::from_all(abi)).ok()?;
    }
    rs.create()
        .ok()?
        .add_rules(path_beneath_rules(read_only, AccessFs::from_read(abi)))
        .ok()?
        .add_rules(path_beneath_rules([program_dir], AccessFs::from_read(abi)))
        .ok()?
        .add_rules(path_beneath_rules(devices, AccessFs::from_all(abi)))
        .ok()?
        .add_rules(path_beneath_rules([work], AccessFs::from_all(abi)))
        .ok()
}

/// A Landlock ruleset that handles nothing but abstract unix sockets: restricting a process with
/// it makes a new domain (one per call) whose processes cannot connect to an abstract socket
/// made outside it. A kernel without the scope (ABI < 6) is an error, never a silent no-op.
pub(crate) fn scope_ruleset() -> Result<RulesetCreated, String> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::AbstractUnixSocket)
        .and_then(Ruleset::create)
        .map_err(|e| format!("cannot scope the call's abstract unix sockets (Landlock): {e}"))
}
