//! The file descriptors the relay needs (docs/security.md).
//!
//! Every public connection holds a socket, every git request two pipes to its grasp-cgi child,
//! and the store, the hook API, the sync and the peers a few more. Out of descriptors, `accept`
//! fails for every listener and git cannot start: the relay must have the descriptors its
//! limits let clients open before it takes the first client. At startup the soft limit is
//! raised to the hard one; below [`required`] the relay refuses to start.

/// Descriptors kept beyond the client-driven ones: the event store, the hook API and metrics
/// listeners and their connections, background sync and peer connections, logs.
pub const RESERVE: u64 = 256;

/// Descriptors the configured limits can make the relay hold at once.
pub fn required(max_connections: u64, max_git_requests: u64) -> u64 {
    max_connections.saturating_add(max_git_requests.saturating_mul(2)).saturating_add(RESERVE)
}

/// What to do with the soft limit `soft` given the hard limit `hard`: the new soft limit
/// (the hard one), or the refusal when even the hard one is below `needed`.
pub fn plan(soft: u64, hard: u64, needed: u64) -> Result<u64, String> {
    if hard < needed {
        return Err(format!(
            "the open file limit is {hard} (hard) but --max-connections and --git-max-requests need {needed} \
             ({RESERVE} kept for the relay itself): raise it (`ulimit -n {needed}`, systemd `LimitNOFILE={needed}`) \
             or lower --max-connections / --git-max-requests"
        ));
    }
    Ok(soft.max(hard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_to_hard_or_refuses() {
        let needed = required(1024, 64);
        assert_eq!(needed, 1024 + 128 + RESERVE);
        assert_eq!(plan(1024, 524_288, needed), Ok(524_288));
        assert_eq!(plan(4096, 4096, needed), Ok(4096));
        let refusal = plan(1024, 1024, needed).unwrap_err();
        assert!(refusal.contains("ulimit -n 1408") && refusal.contains("--max-connections"), "{refusal}");
    }
}
