//! The order `--help` lists the flags in (and each section's table of docs/configuration.md):
//! the order they had when `Config` was one flat struct, kept while the flags now live in the
//! sections' structs. A flag's display order is its place in [`HELP_ORDER`]; a flag not in it
//! comes after them (the test `every_flag_has_a_help_place` asks for a line here).

use clap::Arg;

/// Every flag by clap argument id, in the order `--help` lists them.
pub const HELP_ORDER: &[&str] = &[
    "public_host",
    "bind",
    "data_dir",
    "relay_key_file",
    "config",
    "log",
    "max_message_bytes",
    "max_subscriptions",
    "max_filters",
    "max_limit",
    "max_answer_bytes",
    "no_negentropy",
    "negentropy_max_items",
    "negentropy_max_items_per_connection",
    "negentropy_max_items_total",
    "negentropy_opens_per_minute",
    "negentropy_idle_timeout",
    "max_connections",
    "max_connections_per_ip",
    "ipv6_prefix_len",
    "max_repo_event_bytes",
    "min_free_disk",
    "git_max_requests",
    "git_max_requests_per_ip",
    "max_push_bytes",
    "max_pr_push_bytes",
    "api_bind",
    "metrics_bind",
    "git_idle_timeout",
    "push_lock_wait",
    "git_min_rate",
    "ref_cache_bytes",
    "write_timeout",
    "ws_idle_timeout",
    "event_lock_wait",
    "repo_lock_queue",
    "deferred_total",
    "deferred_per_author",
    "deferred_per_owner",
    "cgi_path",
    "purgatory_ttl",
    "soft_expiry_ttl",
    "checkpoint_interval",
    "purgatory_per_author",
    "purgatory_total",
    "purgatory_per_address",
    "purgatory_total_bytes",
    "purgatory_soft_expired",
    "placeholders_per_repo",
    "placeholders_total",
    "placeholders_per_address",
    "unsigned_bytes_per_address",
    "unsigned_bytes_total",
    "contributor_bytes_per_author",
    "contributor_bytes_per_address",
    "contributor_bytes_total",
    "pr_data_grace",
    "contributor_reconcile_interval",
    "owner_quota",
    "new_owner_bytes_per_address_per_day",
    "quota_exempt_owner",
    "sync_user_delay",
    "sync_delay",
    "sync_backoff",
    "sync_backoff_cap",
    "sync_user_delay_ms",
    "sync_delay_ms",
    "sync_backoff_ms",
    "sync_backoff_cap_ms",
    "sync_domain_concurrency",
    "sync_domain_per_minute",
    "sync_max_parallel",
    "sync_fetch_timeout",
    "sync_attempt_timeout",
    "sync_max_fetch_bytes",
    "sync_allow_private",
    "sync_deny",
    "no_relay_sync",
    "sync_bootstrap_relays",
    "replica",
    "replica_acks",
    "replica_ack_timeout",
    "sync_tls_ca",
    "sync_max_relays",
    "relay_sync_backoff",
    "relay_sync_backoff_cap",
    "relay_sync_cooldown",
    "relay_sync_timeout",
    "relay_sync_parent_request",
    "relay_sync_rate",
    "relay_sync_burst",
    "no_sync_plus",
    "index_relays",
    "no_index_relays",
    "sync_plus_interval",
    "sync_plus_list_refresh",
    "sync_plus_max_relays",
    "grasp06",
    "archive",
    "archive_all",
    "archive_grasp_service",
    "archive_writable",
    "admin_pubkey",
    "private",
    "member",
    "members_file",
    "private_sync_peer",
    "service_key_file",
    "write_burst",
    "write_rate",
    "write_burst_per_ip",
    "write_rate_per_ip",
    "new_repos_per_author_per_hour",
    "max_repos",
    "trusted_proxy",
    "block_author",
    "block_event",
    "allow_repo",
    "deny_repo",
    "curation_file",
    "name",
    "description",
    "software_url",
];

/// Gives `arg` its place in [`HELP_ORDER`] (applied to every argument of [`super::Config`]).
pub fn in_help_order(arg: Arg) -> Arg {
    match HELP_ORDER.iter().position(|id| arg.get_id() == *id) {
        Some(place) => arg.display_order(place),
        None => arg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use clap::CommandFactory;

    #[test]
    fn every_flag_has_a_help_place() {
        let cmd = Config::command();
        let mut wrong = Vec::new();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if !["help", "version"].contains(&id) && HELP_ORDER.iter().filter(|i| **i == id).count() != 1 {
                wrong.push(format!("{id} must be in HELP_ORDER (relay/src/config/help_order.rs) once"));
            }
        }
        for id in HELP_ORDER {
            if !cmd.get_arguments().any(|a| a.get_id() == *id) {
                wrong.push(format!("{id} is in HELP_ORDER but is no flag of Config"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
