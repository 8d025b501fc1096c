//! `[git-sync]`: background fetches of missing git data from other servers.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::time::Duration;

use clap::Args;
use grasp_state::contract::env_names;
use grasp_state::trust::cidr::Cidr;

use super::{parse_duration};

/// The `[git-sync]` section: background fetches of missing git data from other servers.
#[derive(Debug, Clone, Args)]
pub struct GitSyncConfig {
    /// Background sync: wait this long after a user-submitted event before fetching its missing
    /// git data from other servers (gives the user's `git push` time to arrive). Seconds, or a
    /// number with a unit.
    #[arg(long, env = env_names::SYNC_USER_DELAY, default_value = "3m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_user_delay: Duration,

    /// Former name of --sync-user-delay, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_USER_DELAY_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_user_delay")]
    pub sync_user_delay_ms: Option<u64>,

    /// Background sync: delay after an event that arrived through relay sync (seconds, or a
    /// number with a unit).
    #[arg(long, env = env_names::SYNC_DELAY, default_value = "500ms", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_delay: Duration,

    /// Former name of --sync-delay, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_DELAY_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_delay")]
    pub sync_delay_ms: Option<u64>,

    /// Background sync: first retry delay after an incomplete attempt; the second is twice this
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_BACKOFF, default_value = "20s", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_backoff: Duration,

    /// Former name of --sync-backoff, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_BACKOFF_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_backoff")]
    pub sync_backoff_ms: Option<u64>,

    /// Background sync: retry delay from the third retry on, and upper bound of every retry
    /// delay (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_BACKOFF_CAP, default_value = "2m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_backoff_cap: Duration,

    /// Former name of --sync-backoff-cap, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_BACKOFF_CAP_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_backoff_cap")]
    pub sync_backoff_cap_ms: Option<u64>,

    /// Background sync: most concurrent fetches from one domain.
    #[arg(long, env = env_names::SYNC_DOMAIN_CONCURRENCY, default_value_t = 5)]
    pub sync_domain_concurrency: usize,

    /// Background sync: most fetches started per minute from one domain.
    #[arg(long, env = env_names::SYNC_DOMAIN_PER_MINUTE, default_value_t = 30)]
    pub sync_domain_per_minute: usize,

    /// Background sync: most identifiers synced at once.
    #[arg(long, env = env_names::SYNC_MAX_PARALLEL, default_value_t = 16)]
    pub sync_max_parallel: usize,

    /// Background sync: kill a `git fetch` that runs longer than this (seconds, or a number with
    /// a unit; at least 1s).
    #[arg(long, env = env_names::SYNC_FETCH_TIMEOUT, default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_fetch_timeout: Duration,

    /// Background sync: one attempt for an identifier (every clone URL it tries) ends after
    /// this long; its purgatory entries are not kept past their expiry for longer than this
    /// while it runs (seconds, or a number with a unit; at least 1s).
    #[arg(long, env = env_names::SYNC_ATTEMPT_TIMEOUT, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_attempt_timeout: Duration,

    /// Most bytes one background sync fetch may bring from another server (the pack as
    /// received); beyond, the fetch's git processes are killed and nothing it brought is kept.
    /// Default: --max-push-bytes.
    #[arg(long, env = env_names::SYNC_MAX_FETCH_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub sync_max_fetch_bytes: Option<u64>,

    /// Background sync: also fetch from loopback and private address ranges (denied by default;
    /// for tests and private deployments).
    #[arg(long, env = env_names::SYNC_ALLOW_PRIVATE)]
    pub sync_allow_private: bool,

    /// Background sync: never fetch from these address ranges (ADDRESS/PREFIX, repeatable or
    /// comma separated), in addition to the defaults.
    #[arg(long = "sync-deny", env = env_names::SYNC_DENY, value_name = "CIDR", value_delimiter = ',')]
    pub sync_deny: Vec<Cidr>,
}

impl GitSyncConfig {
    /// `--sync-attempt-timeout`, at least one second.
    pub fn sync_attempt_timeout(&self) -> Duration {
        self.sync_attempt_timeout.max(Duration::from_secs(1))
    }
}

impl Default for GitSyncConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().git_sync
    }
}
