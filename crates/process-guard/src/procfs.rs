//! Reading the process table from `/proc`.

use std::collections::{HashMap, HashSet};

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// `Z` for a zombie (dead, waiting to be reaped), `T` stopped, …
    pub state: u8,
    /// Clock ticks since boot at which it started: with the pid, it names one process even
    /// if the pid is reused.
    pub start: u64,
}

/// Parses `/proc/PID/stat`. The command name sits in parentheses and may itself contain
/// spaces and parentheses, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcInfo> {
    let open = text.find('(')?;
    let pid = text[..open].trim().parse().ok()?;
    let close = text.rfind(')')?;
    let mut f = text.get(close + 1..)?.split_ascii_whitespace();
    let state = f.next()?.bytes().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgid = f.next()?.parse().ok()?;
    // after pgrp: session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    // cstime priority nice num_threads itrealvalue starttime
    let start = f.nth(16)?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        state,
        start,
    })
}

/// One process, or `None` when it is gone.
pub(crate) fn info(pid: i32) -> Option<ProcInfo> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process visible in `/proc`.
pub(crate) fn all() -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        info(pid)
    })
    .collect()
}

/// Whether process `pid`'s initial environment holds the exact entry `entry` (`KEY=value`).
/// False when it cannot be read (gone, or not ours to read).
pub(crate) fn environ_has(pid: i32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
}

/// The pids of `root`'s descendants (not `root` itself) in `table`.
pub(crate) fn descendants(table: &[ProcInfo], root: i32) -> HashSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = HashSet::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if *c != root && out.insert(*c) {
                stack.push(*c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_with_spaces_and_parentheses_in_the_name() {
        let s = "4242 (we (ird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let p = parse_stat(s).unwrap();
        assert_eq!(
            (p.pid, p.state, p.ppid, p.pgid, p.start),
            (4242, b'S', 17, 4242, 987654)
        );
    }

    #[test]
    fn descendants_follow_parent_links_transitively() {
        let p = |pid, ppid| ProcInfo {
            pid,
            ppid,
            pgid: pid,
            state: b'S',
            start: 0,
        };
        let table = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 1), p(13, 10)];
        let mut d: Vec<i32> = descendants(&table, 10).into_iter().collect();
        d.sort();
        assert_eq!(d, [11, 12, 13]);
    }

    #[test]
    fn this_process_is_in_the_table() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(all().iter().any(|p| p.pid == me));
        assert_eq!(info(me).unwrap().pid, me);
    }
}
