//! Where each setting lives in the configuration file: one table from the clap argument id (the
//! [`Config`](crate::config::Config) field name) to its TOML section. A key in the file is the
//! flag's long name without the dashes (`--max-connections` is `max-connections` in
//! `[limits]`).
//!
//! A flag added to `Config` needs one line in [`SECTIONS`] (or in [`NOT_IN_FILE`]); the test
//! `every_flag_has_a_section` names the flags that have none. Settings that can change while
//! the relay runs are listed in [`crate::config::reload::LIVE`].

/// A section of the configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    Server,
    Storage,
    Limits,
    Purgatory,
    GitSync,
    RelaySync,
    Trust,
    Services,
    Pages,
}

use Section::*;

impl Section {
    /// Every section, in the order of the file.
    pub const ALL: [Section; 9] = [Server, Storage, Limits, Purgatory, GitSync, RelaySync, Trust, Services, Pages];

    /// The name in the file: `[server]`, `[git-sync]`, ...
    pub fn name(self) -> &'static str {
        match self {
            Server => "server",
            Storage => "storage",
            Limits => "limits",
            Purgatory => "purgatory",
            GitSync => "git-sync",
            RelaySync => "relay-sync",
            Trust => "trust",
            Services => "services",
            Pages => "pages",
        }
    }

    /// What the section holds, one line.
    pub fn about(self) -> &'static str {
        match self {
            Server => "listeners, the public host, the relay's key, the helper binaries, logging",
            Storage => "the data directory and the free space kept on its file system",
            Limits => "what one client, one connection and the whole server may take",
            Purgatory => "events and placeholders waiting for their git data",
            GitSync => "background fetches of missing git data from other servers",
            RelaySync => "following other relays for the events of served repositories (GRASP-02, GRASP-03)",
            Trust => "who may write: curation, a private service's members and peers, proxies",
            Services => "optional GRASP services: GRASP-06 contributor repositories, GRASP-05 archive",
            Pages => "what the NIP-11 document and the web pages say about this server",
        }
    }

    /// The section named `name` in the file.
    pub fn named(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Arguments that are not settings of the file: the file's own path, and the former
/// millisecond names of the sync delays (kept for old command lines; the file takes the new
/// names).
pub const NOT_IN_FILE: &[&str] = &["config", "sync_user_delay_ms", "sync_delay_ms", "sync_backoff_ms", "sync_backoff_cap_ms"];

/// The section of every setting, by clap argument id, in the order `config show` prints them.
pub const SECTIONS: &[(&str, Section)] = &[
    ("bind", Server),
    ("public_host", Server),
    ("api_bind", Server),
    ("metrics_bind", Server),
    ("cgi_path", Server),
    ("relay_key_file", Server),
    ("log", Server),
    ("data_dir", Storage),
    ("min_free_disk", Storage),
    ("max_connections", Limits),
    ("max_connections_per_ip", Limits),
    ("ipv6_prefix_len", Limits),
    ("write_timeout", Limits),
    ("ws_idle_timeout", Limits),
    ("max_message_bytes", Limits),
    ("max_repo_event_bytes", Limits),
    ("max_subscriptions", Limits),
    ("max_filters", Limits),
    ("max_limit", Limits),
    ("max_answer_bytes", Limits),
    ("write_burst", Limits),
    ("write_rate", Limits),
    ("write_burst_per_ip", Limits),
    ("write_rate_per_ip", Limits),
    ("new_repos_per_author_per_hour", Limits),
    ("max_repos", Limits),
    ("git_max_requests", Limits),
    ("git_max_requests_per_ip", Limits),
    ("git_idle_timeout", Limits),
    ("git_min_rate", Limits),
    ("ref_cache_bytes", Limits),
    ("push_lock_wait", Limits),
    ("max_push_bytes", Limits),
    ("max_pr_push_bytes", Limits),
    ("event_lock_wait", Limits),
    ("repo_lock_queue", Limits),
    ("no_negentropy", Limits),
    ("negentropy_max_items", Limits),
    ("negentropy_max_items_per_connection", Limits),
    ("negentropy_max_items_total", Limits),
    ("negentropy_opens_per_minute", Limits),
    ("negentropy_idle_timeout", Limits),
    ("purgatory_ttl", Purgatory),
    ("soft_expiry_ttl", Purgatory),
    ("checkpoint_interval", Purgatory),
    ("purgatory_per_author", Purgatory),
    ("purgatory_total", Purgatory),
    ("purgatory_per_address", Purgatory),
    ("purgatory_total_bytes", Purgatory),
    ("purgatory_soft_expired", Purgatory),
    ("placeholders_per_repo", Purgatory),
    ("placeholders_total", Purgatory),
    ("placeholders_per_address", Purgatory),
    ("unsigned_bytes_per_address", Purgatory),
    ("unsigned_bytes_total", Purgatory),
    ("contributor_bytes_per_author", Purgatory),
    ("contributor_bytes_per_address", Purgatory),
    ("contributor_bytes_total", Purgatory),
    ("pr_data_grace", Purgatory),
    ("contributor_reconcile_interval", Purgatory),
    ("replica", RelaySync),
    ("replica_acks", RelaySync),
    ("replica_ack_timeout", RelaySync),
    ("owner_quota", Limits),
    ("new_owner_bytes_per_address_per_day", Limits),
    ("quota_exempt_owner", Limits),
    ("deferred_total", Purgatory),
    ("deferred_per_author", Purgatory),
    ("deferred_per_owner", Purgatory),
    ("sync_user_delay", GitSync),
    ("sync_delay", GitSync),
    ("sync_backoff", GitSync),
    ("sync_backoff_cap", GitSync),
    ("sync_domain_concurrency", GitSync),
    ("sync_domain_per_minute", GitSync),
    ("sync_max_parallel", GitSync),
    ("sync_fetch_timeout", GitSync),
    ("sync_attempt_timeout", GitSync),
    ("sync_max_fetch_bytes", GitSync),
    ("sync_allow_private", GitSync),
    ("sync_deny", GitSync),
    ("no_relay_sync", RelaySync),
    ("sync_bootstrap_relays", RelaySync),
    ("sync_tls_ca", RelaySync),
    ("sync_max_relays", RelaySync),
    ("relay_sync_backoff", RelaySync),
    ("relay_sync_backoff_cap", RelaySync),
    ("relay_sync_cooldown", RelaySync),
    ("relay_sync_timeout", RelaySync),
    ("relay_sync_parent_request", RelaySync),
    ("relay_sync_rate", RelaySync),
    ("relay_sync_burst", RelaySync),
    ("no_sync_plus", RelaySync),
    ("index_relays", RelaySync),
    ("no_index_relays", RelaySync),
    ("sync_plus_interval", RelaySync),
    ("sync_plus_list_refresh", RelaySync),
    ("sync_plus_max_relays", RelaySync),
    ("trusted_proxy", Trust),
    ("block_author", Trust),
    ("block_event", Trust),
    ("allow_repo", Trust),
    ("deny_repo", Trust),
    ("curation_file", Trust),
    ("private", Trust),
    ("member", Trust),
    ("members_file", Trust),
    ("private_sync_peer", Trust),
    ("service_key_file", Trust),
    ("grasp06", Services),
    ("archive", Services),
    ("archive_all", Services),
    ("archive_grasp_service", Services),
    ("archive_writable", Services),
    ("name", Pages),
    ("description", Pages),
    ("admin_pubkey", Pages),
    ("software_url", Pages),
];

/// The section of the setting with clap id `id` (`None`: not a setting of the file).
pub fn section_of(id: &str) -> Option<Section> {
    SECTIONS.iter().find(|(i, _)| *i == id).map(|(_, s)| *s)
}
