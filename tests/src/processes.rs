//! The processes a relay started for requests, found by its data directory, for tests that
//! prove none outlives its request ([`children_of`]) and clean up after a failure ([`Reaper`]).

use std::path::PathBuf;

pub use crate::server::children_of;

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
