//! The processes a relay started for requests, found by its data directory, for tests that
//! prove none outlives its request ([`children_of`]) and clean up after a failure ([`Reaper`]),
//! and a process's descendants by parent pid ([`descendants`]: the benchmark's memory samples,
//! a crash of a relay with every git process it started).

use std::path::PathBuf;

pub use crate::server::children_of;

/// Whether `cmdline` (as [`children_of`] gives it) is git serving a client's request body
/// (`receive-pack` or `upload-pack --stateless-rpc`, under `git http-backend`), not one of the
/// relay's own short runs (maintenance, the ref cache made ready after a push).
pub fn serves_a_request(cmdline: &str) -> bool {
    cmdline.contains("--stateless-rpc")
}

/// Kills, when dropped, every process [`children_of`] the data directory finds, so a failing
/// test leaves no git process behind.
pub struct Reaper(pub PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for (pid, _) in children_of(&self.0) {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// The processes descending from `root` (by parent pid).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &pp) in &parent {
            if pp == p {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}
