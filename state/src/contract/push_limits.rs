//! How many bytes one push may bring (`--max-push-bytes`, `--max-pr-push-bytes`), decided on the
//! size of the push's quarantine before anything lands (docs/security.md).
//!
//! The relay writes the limits into the hooks' configuration ([`super::hook_config`]) as
//! [`MAX_PUSH_BYTES`] and [`MAX_PR_PUSH_BYTES`]; `grasp-pre-receive` measures git's quarantine
//! directory and asks [`PushLimits::check`]. A refused push's objects are dropped with the
//! quarantine.

use super::env_names::{MAX_PR_PUSH_BYTES, MAX_PUSH_BYTES};
use crate::names::identifier::RepoSpace;
use crate::names::refs::RefUpdate;

/// `--max-push-bytes`' default: 1 GiB.
pub const DEFAULT_MAX_PUSH_BYTES: u64 = 1 << 30;
/// `--max-pr-push-bytes`' default: 100 MiB.
pub const DEFAULT_MAX_PR_PUSH_BYTES: u64 = 100 << 20;

/// The size limits of one push, in bytes of objects received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushLimits {
    /// Any push.
    pub max_push_bytes: u64,
    /// A push touching `refs/nostr/*` (anyone may push a pull request's commits there).
    pub max_pr_push_bytes: u64,
}

impl Default for PushLimits {
    fn default() -> Self {
        PushLimits { max_push_bytes: DEFAULT_MAX_PUSH_BYTES, max_pr_push_bytes: DEFAULT_MAX_PR_PUSH_BYTES }
    }
}

impl PushLimits {
    /// Reads the limits from `var` (e.g. `std::env::var`); a missing or unreadable value keeps
    /// the default.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> PushLimits {
        let read = |name: &str, default: u64| var(name).and_then(|v| v.trim().parse().ok()).unwrap_or(default);
        PushLimits {
            max_push_bytes: read(MAX_PUSH_BYTES, DEFAULT_MAX_PUSH_BYTES),
            max_pr_push_bytes: read(MAX_PR_PUSH_BYTES, DEFAULT_MAX_PR_PUSH_BYTES),
        }
    }

    /// The most bytes git reads of one push to a repository of `space` (its
    /// `receive.maxInputSize`): a contributor repository (`/prs/`) takes only anonymous pull
    /// request pushes, so their limit holds for every push there.
    pub fn input_limit(&self, space: RepoSpace) -> u64 {
        match space {
            RepoSpace::Hosted => self.max_push_bytes,
            RepoSpace::Prs => self.max_pr_push_bytes.min(self.max_push_bytes),
        }
    }

    /// Whether a push of `updates` that brought `incoming_bytes` of objects may go in; the
    /// rejection message otherwise.
    pub fn check(&self, updates: &[RefUpdate], incoming_bytes: u64) -> Result<(), String> {
        self.check_in(RepoSpace::Hosted, updates, incoming_bytes)
    }

    /// [`PushLimits::check`] for a push to a repository of `space`: every push to a contributor
    /// repository counts as a pull request push.
    pub fn check_in(&self, space: RepoSpace, updates: &[RefUpdate], incoming_bytes: u64) -> Result<(), String> {
        let pr = space == RepoSpace::Prs || updates.iter().any(|u| u.name.starts_with("refs/nostr/"));
        if pr && incoming_bytes > self.max_pr_push_bytes {
            return Err(format!(
                "blocked: this push to refs/nostr/ brings {incoming_bytes} bytes of objects, more than this \
                 server's {} for pull request pushes (--max-pr-push-bytes); push a smaller change, or ask the \
                 repository's maintainers to fetch it from your own clone URL",
                self.max_pr_push_bytes
            ));
        }
        if incoming_bytes > self.max_push_bytes {
            return Err(format!(
                "blocked: this push brings {incoming_bytes} bytes of objects, more than this server's {} per \
                 push (--max-push-bytes); push the history in smaller parts (e.g. `git push <url> <older \
                 commit>:refs/heads/<branch>` first)",
                self.max_push_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn update(name: &str) -> RefUpdate {
        RefUpdate { old: "0".repeat(40), new: "1".repeat(40), name: name.into() }
    }

    #[test]
    fn pull_request_pushes_have_the_smaller_limit() {
        let limits = PushLimits { max_push_bytes: 1000, max_pr_push_bytes: 100 };
        assert!(limits.check(&[update("refs/heads/main")], 500).is_ok());
        let err = limits.check(&[update("refs/nostr/abc")], 500).unwrap_err();
        assert!(err.starts_with("blocked:") && err.contains("--max-pr-push-bytes"), "{err}");
        let err = limits.check(&[update("refs/heads/main")], 1001).unwrap_err();
        assert!(err.starts_with("blocked:") && err.contains("--max-push-bytes"), "{err}");
        // Every push to a contributor repository is an anonymous pull request push.
        let err = limits.check_in(RepoSpace::Prs, &[update("refs/heads/main")], 500).unwrap_err();
        assert!(err.contains("--max-pr-push-bytes"), "{err}");
        assert_eq!((limits.input_limit(RepoSpace::Hosted), limits.input_limit(RepoSpace::Prs)), (1000, 100));
    }

    #[test]
    fn limits_come_from_the_variables() {
        let limits = PushLimits::from_vars(|k| (k == MAX_PR_PUSH_BYTES).then(|| "7".to_string()));
        assert_eq!(limits, PushLimits { max_push_bytes: DEFAULT_MAX_PUSH_BYTES, max_pr_push_bytes: 7 });
    }

    proptest! {
        #[test]
        fn accepted_exactly_within_the_limit(max in 0u64..1 << 40, pr_max in 0u64..1 << 40, bytes in 0u64..1 << 41, pr: bool) {
            let limits = PushLimits { max_push_bytes: max, max_pr_push_bytes: pr_max };
            let name = if pr { "refs/nostr/x" } else { "refs/heads/x" };
            let within = bytes <= max && (!pr || bytes <= pr_max);
            prop_assert_eq!(limits.check(&[update(name)], bytes).is_ok(), within);
        }
    }
}
