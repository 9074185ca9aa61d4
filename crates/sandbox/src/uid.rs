//! Uids of calls, as root: each call runs as a uid of its own from
//! [`crate::SandboxConfig::uid_range`], leased so that no two calls — in this process or in
//! another agent on the machine — ever share one.

/// Leases a uid for one call. The lease is an exclusive `flock` on a file per uid, so two
/// sandboxes — in this process or in another agent on the machine — never share a uid (the
/// sweep after a call kills every process of its uid).
pub(crate) fn take_uid((lo, hi): (u32, u32)) -> Option<(u32, std::fs::File)> {
    let dir = std::env::temp_dir().join("llm-toolkit-skill-uids");
    std::fs::create_dir_all(&dir).ok()?;
    // Calls take turns through the range (a uid just swept is not the next one leased).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = hi.saturating_sub(lo).max(1);
    let turn = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = (std::process::id().wrapping_mul(2_654_435_761)).wrapping_add(turn) % span;
    (0..span).map(|i| lo + (start + i) % span).find_map(|uid| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(uid.to_string()))
            .ok()?;
        file.try_lock().ok()?;
        Some((uid, file))
    })
}
