//! `[relay-sync]`: following other relays for the events of served repositories (GRASP-02, GRASP-03).
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use grasp_state::contract::env_names;

use super::{DEFAULT_RELAY_SYNC_BURST, DEFAULT_RELAY_SYNC_RATE, parse_duration, parse_replica};

/// The `[relay-sync]` section: following other relays for the events of served repositories (GRASP-02, GRASP-03).
#[derive(Debug, Clone, Args)]
pub struct RelaySyncConfig {
    /// Replica set: another grasp-relay serving the same public domain (its own listener,
    /// `http://host:port`; repeatable or comma separated). Followed for every event and every
    /// repository's git data, trusted on private addresses (docs/scaling.md).
    #[arg(long = "replica", env = env_names::REPLICAS, value_name = "URL", value_delimiter = ',', value_parser = parse_replica)]
    pub replica: Vec<grasp_state::trust::replica::Replica>,

    /// Replica set: how many other replicas must hold a client's event before it is answered
    /// `OK true`, and serve a push before its post-receive ends (0: none; at most the number
    /// of --replica). Bounded by --replica-ack-timeout (docs/scaling.md).
    #[arg(long, env = env_names::REPLICA_ACKS, default_value_t = 0)]
    pub replica_acks: usize,

    /// Replica set: the longest an event or a push waits for --replica-acks confirmations.
    #[arg(long, env = env_names::REPLICA_ACK_TIMEOUT, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub replica_ack_timeout: Duration,

    /// Relay sync (GRASP-02): do not follow other relays for events of accepted repositories.
    #[arg(long, env = env_names::NO_RELAY_SYNC)]
    pub no_relay_sync: bool,

    /// Relay sync: a relay always followed for repository announcements, so announcements
    /// listing this server published only there are found (ws:// or wss:// URL; repeatable or
    /// comma separated).
    #[arg(long = "sync-bootstrap-relay", env = env_names::SYNC_BOOTSTRAP_RELAY, value_name = "URL", value_delimiter = ',')]
    pub sync_bootstrap_relays: Vec<String>,

    /// Relay sync: extra trusted root certificates (a PEM file) for `wss://` relays, besides the
    /// Mozilla roots (a private CA; tests).
    #[arg(long, env = env_names::SYNC_TLS_CA, value_name = "FILE")]
    pub sync_tls_ca: Option<PathBuf>,

    /// Relay sync: most relays followed at once (bootstraps first, then those listed by the
    /// most distinct owners of served repositories, then of held ones; each announcement counts
    /// for at most 10 relays, at most 2 URLs per host:port).
    #[arg(long, env = env_names::SYNC_MAX_RELAYS, default_value_t = 50)]
    pub sync_max_relays: usize,

    /// Relay sync: first retry delay after a relay failed; doubled after each further failure
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_BACKOFF, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_backoff: Duration,

    /// Relay sync: longest retry delay (seconds, or a number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_BACKOFF_CAP, default_value = "15m", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_backoff_cap: Duration,

    /// Relay sync: pause after a relay answered `rate-limited:` (seconds, or a number with a
    /// unit).
    #[arg(long, env = env_names::RELAY_SYNC_COOLDOWN, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_cooldown: Duration,

    /// Relay sync: connect deadline and longest wait for each answer; a live connection quiet
    /// this long is pinged, and one that answers nothing to two pings (quiet three times this
    /// long) is dropped and retried with backoff (seconds, or a number with a unit; at least
    /// 100ms).
    #[arg(long, env = env_names::RELAY_SYNC_TIMEOUT, default_value = "15s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_timeout: Duration,

    /// Relay sync: a synced event waiting for what it tags makes the missing event be asked
    /// for by id after this long (one such request open per relay at a time; seconds, or a
    /// number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_PARENT_REQUEST, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_parent_request: Duration,

    /// Relay sync: events per second taken from one relay (its write bucket; reading from a
    /// relay that sends faster pauses). Every event counts, asked for or not.
    #[arg(long, env = env_names::RELAY_SYNC_RATE, default_value_t = DEFAULT_RELAY_SYNC_RATE)]
    pub relay_sync_rate: f64,

    /// Relay sync: events one relay may send at once before `--relay-sync-rate` applies.
    #[arg(long, env = env_names::RELAY_SYNC_BURST, default_value_t = DEFAULT_RELAY_SYNC_BURST)]
    pub relay_sync_burst: u32,

    /// GRASP-03 Sync+: do not fetch the conversations of served repositories from the relays
    /// of their participants (their NIP-65 write relays and GRASP lists). Never runs on a
    /// private service, nor without relay sync.
    #[arg(long, env = env_names::NO_SYNC_PLUS)]
    pub no_sync_plus: bool,

    /// Index relays: where the relay lists (kinds 10002, 10317) of participants are looked up
    /// besides a repository's own relays, and where this relay's profile and relay list are
    /// published when absent (ws:// or wss:// URL; repeatable or comma separated). Default:
    /// wss://purplepag.es, wss://relay.nostr.band, wss://indexer.coracle.social.
    #[arg(long = "index-relay", env = env_names::INDEX_RELAYS, value_name = "URL", value_delimiter = ',', conflicts_with = "no_index_relays")]
    pub index_relays: Vec<String>,

    /// Use no index relay at all (nothing looked up there, nothing published there).
    #[arg(long, env = env_names::NO_INDEX_RELAYS)]
    pub no_index_relays: bool,

    /// Sync+: time between two passes over the served repositories (seconds, or a number with
    /// a unit; at least 100ms).
    #[arg(long, env = env_names::SYNC_PLUS_INTERVAL, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_plus_interval: Duration,

    /// Sync+: a participant's cached relay lists are looked up again after this long
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_PLUS_LIST_REFRESH, default_value = "1h", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_plus_list_refresh: Duration,

    /// Sync+: most discovered relays (participants' relays no announcement lists) followed at
    /// once; with more, each pass continues after the last one taken.
    #[arg(long, env = env_names::SYNC_PLUS_MAX_RELAYS, default_value_t = 32)]
    pub sync_plus_max_relays: usize,
}

impl RelaySyncConfig {
    /// Whether relay sync runs: not with `--no-relay-sync`, nor on a private service without a
    /// relay among its `--private-sync-peer`s (it then follows those relays only).
    pub fn enabled(&self, trust: &super::TrustConfig) -> bool {
        !(self.no_relay_sync || (trust.private && trust.private_sync_relays().is_empty() && self.replica.is_empty()))
    }

    /// Whether GRASP-03 Sync+ runs: with relay sync, on a public service, not with
    /// `--no-sync-plus`.
    pub fn sync_plus_enabled(&self, trust: &super::TrustConfig) -> bool {
        self.enabled(trust) && !trust.private && !self.no_sync_plus
    }

    /// The index relays: `--index-relay`, else [`super::DEFAULT_INDEX_RELAYS`]; none with
    /// `--no-index-relays` or on a private service (it uses no discovered relay).
    pub fn index_relays_used(&self, trust: &super::TrustConfig) -> Vec<String> {
        if self.no_index_relays || trust.private {
            return Vec::new();
        }
        if self.index_relays.is_empty() {
            return super::DEFAULT_INDEX_RELAYS.iter().map(|s| s.to_string()).collect();
        }
        self.index_relays.clone()
    }
}

impl Default for RelaySyncConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().relay_sync
    }
}
