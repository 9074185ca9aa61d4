//! Recovery: when a service that a turn or call needs is started (again) — decisions only, no
//! I/O, table-tested below. The lifecycle ([`crate::McpBridge::ensure_running`] in
//! `lifecycle.rs`) carries them out.
//!
//! - A running service is used as it is; a starting one is waited for (at most its startup
//!   timeout).
//! - A service never started because of `"autostart": false` starts on first use.
//! - A server that crashed, broke the protocol or stopped answering is restarted on the next
//!   call that needs it: the first time at once, then after a backoff of 1 s, 2 s, 4 s … (at
//!   most [`MAX_BACKOFF`]); a start that fails also waits out a backoff before the next try.
//! - After [`MAX_FAILURES`] failures in a row (crashes or failed starts, with no successful call
//!   between) it stays in `error` until the operator starts it ([`crate::McpBridge::start`]).
//! - A service the operator stopped, or one disabled in its config, is never started on demand.

use std::time::Duration;

use tokio::time::Instant;

use crate::bridge::{Service, State};

/// Failures in a row after which the bridge stops restarting a service by itself.
pub const MAX_FAILURES: u32 = 5;
/// The longest wait between two automatic starts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What to do for a turn or call that needs a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// It runs: use it.
    Ready,
    /// It is starting: wait for it (bounded by its startup timeout).
    Wait,
    /// Start it now.
    Start,
    /// Not now: the caller answers with the service-unavailable message.
    GiveUp,
}

/// The decision for `svc` at `now`.
pub(crate) fn next_step(svc: &Service, now: Instant) -> Step {
    match &svc.state {
        State::Running(_) => Step::Ready,
        State::Starting => Step::Wait,
        _ if svc.config.disabled || svc.held => Step::GiveUp,
        _ if svc.failures >= MAX_FAILURES => Step::GiveUp,
        _ if svc.retry_at.is_some_and(|t| now < t) => Step::GiveUp,
        State::Stopped | State::Error(_) => Step::Start,
    }
}

/// Counts a failure of `svc` at `now` and sets when it may be tried again. `crashed`: it had
/// been running (the first restart after a crash is immediate); otherwise a start failed.
pub(crate) fn record_failure(svc: &mut Service, now: Instant, crashed: bool) {
    svc.failures = svc.failures.saturating_add(1);
    let steps = if crashed {
        svc.failures - 1
    } else {
        svc.failures
    };
    svc.retry_at = Some(now + backoff(steps));
}

/// A call through the service succeeded: its failure count starts again.
pub(crate) fn record_success(svc: &mut Service) {
    svc.failures = 0;
    svc.retry_at = None;
}

/// The wait before automatic start number `steps` (0: none; then 1 s, 2 s, 4 s … up to
/// [`MAX_BACKOFF`]).
pub(crate) fn backoff(steps: u32) -> Duration {
    if steps == 0 {
        return Duration::ZERO;
    }
    let secs = 1u64.checked_shl(steps - 1).unwrap_or(u64::MAX);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServiceConfig;

    fn svc(state: State) -> Service {
        let mut s = Service::stopped(ServiceConfig::new("s", "x"));
        s.state = state;
        s
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let table = [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 4),
            (5, 16),
            (6, 30),
            (64, 30),
            (200, 30),
        ];
        for (steps, secs) in table {
            assert_eq!(backoff(steps), Duration::from_secs(secs), "steps {steps}");
        }
    }

    #[test]
    fn decisions_table() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        let mut disabled = svc(State::Stopped);
        disabled.config.disabled = true;
        let mut held = svc(State::Stopped);
        held.held = true;
        let mut backing_off = svc(State::Error("crashed".into()));
        backing_off.failures = 2;
        backing_off.retry_at = Some(later);
        let mut backed_off = svc(State::Error("crashed".into()));
        backed_off.failures = 2;
        backed_off.retry_at = Some(now);
        let mut exhausted = svc(State::Error("crashed".into()));
        exhausted.failures = MAX_FAILURES;
        let cases: Vec<(&str, Service, Step)> = vec![
            ("starting: wait", svc(State::Starting), Step::Wait),
            (
                "never started (autostart false): start",
                svc(State::Stopped),
                Step::Start,
            ),
            ("disabled: never", disabled, Step::GiveUp),
            ("stopped by the operator: never", held, Step::GiveUp),
            ("in backoff: not now", backing_off, Step::GiveUp),
            ("backoff over: start", backed_off, Step::Start),
            ("too many failures: give up", exhausted, Step::GiveUp),
        ];
        for (what, s, want) in cases {
            assert_eq!(next_step(&s, now), want, "{what}");
        }
    }

    #[test]
    fn first_restart_after_a_crash_is_immediate_a_failed_start_backs_off() {
        let now = Instant::now();
        let mut s = svc(State::Error("exited".into()));
        record_failure(&mut s, now, true);
        assert_eq!((s.failures, s.retry_at), (1, Some(now)));
        assert_eq!(next_step(&s, now), Step::Start);
        record_failure(&mut s, now, false); // the restart itself failed
        assert_eq!(s.retry_at, Some(now + Duration::from_secs(2)));
        assert_eq!(next_step(&s, now), Step::GiveUp);
        record_success(&mut s);
        assert_eq!((s.failures, s.retry_at), (0, None));
    }
}
