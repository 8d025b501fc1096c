//! Configuration of the daemon: flags, `GRASP_*` environment variables and a TOML file.
//!
//! Every flag can also be set through a `GRASP_*` environment variable; `--help` lists them all.
//! `--config FILE` reads a TOML file with every setting in sections; flags win over environment
//! variables, which win over the file, which wins over the defaults.
//!
//! [`Config`] is made of one typed struct per section of the file, each a clap `Args` struct
//! flattened into it, in a file of its own; a flag's section is the struct it is a field of,
//! and a part of the relay is handed the section(s) it reads:
//!
//! | file | struct | `[section]` |
//! |---|---|---|
//! | `server` | [`ServerConfig`] | `[server]`: listeners, the public host, the relay's key, the helper binaries, logging |
//! | `storage` | [`StorageConfig`] | `[storage]`: the data directory, the free space kept |
//! | `limits` | [`LimitsConfig`] | `[limits]`: what a client, a connection and the server may take |
//! | `purgatory` | [`PurgatoryConfig`] | `[purgatory]`: events and placeholders waiting for git data, deferred work |
//! | `git_sync` | [`GitSyncConfig`] | `[git-sync]`: background fetches of missing git data |
//! | `relay_sync` | [`RelaySyncConfig`] | `[relay-sync]`: following other relays, replicas, Sync+ |
//! | `trust` | [`TrustConfig`] | `[trust]`: curation, a private service's members and peers, proxies |
//! | `services` | [`ServicesConfig`] | `[services]`: GRASP-06, the GRASP-05 archive |
//! | `pages` | [`PagesConfig`] | `[pages]`: what NIP-11 and the pages say |
//!
//! Around them: `sections` (the [`sections::Section`]s, and every setting with its section,
//! read off the structs), `help_order` (the order `--help` lists the flags in), `file` (the TOML
//! file read through the flags' own parsers), `load` ([`Config::load`]: flags > environment >
//! file > defaults, and where each value came from, for `config show`), `reload` (which
//! settings a SIGHUP can change while the relay runs), `reference` (docs/configuration.md).

mod file;
mod git_sync;
pub mod help_order;
mod limits;
mod load;
mod pages;
mod purgatory;
mod relay_sync;
pub mod reload;
pub mod reference;
pub mod sections;
mod server;
mod services;
mod storage;
mod trust;

pub use file::{FileError, FileErrors, Kind};
pub use git_sync::GitSyncConfig;
pub use limits::LimitsConfig;
pub use load::{render, LoadError, Loaded, Setting, Source};
pub use pages::PagesConfig;
pub use purgatory::PurgatoryConfig;
pub use relay_sync::RelaySyncConfig;
pub use server::ServerConfig;
pub use services::ServicesConfig;
pub use storage::StorageConfig;
pub use trust::TrustConfig;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use nostr::prelude::*;

use grasp_state::contract::env_names;

// Defaults the parts that use them also need for their own `Default`s: defined here, at the
// bottom of the crate, so the configuration imports nothing above it.

/// `--negentropy-max-items`'s default: most events one NIP-77 session reconciles.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS: usize = 500_000;
/// `--negentropy-max-items-per-connection`'s default: the items all sessions of one connection
/// hold together.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS_PER_CONNECTION: usize = 1_000_000;
/// `--negentropy-max-items-total`'s default: the items the sessions of every connection hold
/// together.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL: usize = 5_000_000;
/// `--negentropy-opens-per-minute`'s default.
pub const DEFAULT_NEGENTROPY_OPENS_PER_MINUTE: u32 = 60;
/// `--max-answer-bytes`'s default: 32 MiB of `EVENT` messages per REQ. A REQ of ordinary
/// events stays well under it (a full `--max-limit` of 500 events averaging 64 KiB, far larger
/// than the patches, issues and repository events clients ask for); only answers made of many
/// large events are cut. What one answer holds in memory does not depend on it (one chunk).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 << 20;
/// `--relay-sync-rate`'s default (events per second from one relay).
/// Default `--index-relay`s: well-known public indexers of profiles and relay lists
/// (docs/protocol.md, "GRASP-03").
pub const DEFAULT_INDEX_RELAYS: [&str; 3] = ["wss://purplepag.es", "wss://relay.nostr.band", "wss://indexer.coracle.social"];
pub const DEFAULT_RELAY_SYNC_RATE: f64 = 2_000.0;
/// `--relay-sync-burst`'s default.
pub const DEFAULT_RELAY_SYNC_BURST: u32 = 20_000;

/// Runtime configuration of `grasp-relay`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "grasp-relay",
    version,
    about = "GRASP server: a Nostr relay and git smart-HTTP service on one port",
    mut_args = help_order::in_help_order
)]
pub struct Config {
    /// A TOML configuration file with any of these settings, in sections
    /// (docs/grasp-relay.toml is the commented example); flags and environment variables win
    /// over it. Re-read on SIGHUP for the settings that can change while the relay runs.
    #[arg(long, env = env_names::CONFIG, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// Instead of running the daemon: ask the relay running on `--data-dir` something, check
    /// the configuration or the installation.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// `[server]`: listeners, the public host, the relay's key, the helper binaries, logging.
    #[command(flatten)]
    pub server: ServerConfig,

    /// `[storage]`: the data directory and the free space kept on its file system.
    #[command(flatten)]
    pub storage: StorageConfig,

    /// `[limits]`: what one client, one connection and the whole server may take.
    #[command(flatten)]
    pub limits: LimitsConfig,

    /// `[purgatory]`: events and placeholders waiting for their git data.
    #[command(flatten)]
    pub purgatory: PurgatoryConfig,

    /// `[git-sync]`: background fetches of missing git data from other servers.
    #[command(flatten)]
    pub git_sync: GitSyncConfig,

    /// `[relay-sync]`: following other relays for the events of served repositories (GRASP-02, GRASP-03).
    #[command(flatten)]
    pub relay_sync: RelaySyncConfig,

    /// `[trust]`: who may write: curation, a private service's members and peers, proxies.
    #[command(flatten)]
    pub trust: TrustConfig,

    /// `[services]`: optional GRASP services: GRASP-06 contributor repositories, GRASP-05 archive.
    #[command(flatten)]
    pub services: ServicesConfig,

    /// `[pages]`: what the NIP-11 document and the web pages say about this server.
    #[command(flatten)]
    pub pages: PagesConfig,
}

/// Exit status of a refused configuration (the flags, the environment or the file), as clap's
/// for a bad flag; the systemd unit does not restart into it (`RestartPreventExitStatus`).
pub const EXIT_BAD_CONFIGURATION: u8 = 2;

/// One-shot commands: against a running relay (through its loopback API), or checks of the
/// configuration and the installation.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Command {
    /// Print what waits in the purgatory of the relay running on --data-dir.
    Purgatory {
        /// Print the JSON of `GET /v1/purgatory` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the background sync of the relay running on --data-dir: each relay followed by
    /// relay-to-relay sync (state, repositories, events received/accepted/refused, last error;
    /// `+` marks a participant's relay followed for GRASP-03 Sync+), the git-data sync queue,
    /// and Sync+'s figures (participants, lists cached, passes, events gained, failing look-ups).
    Sync {
        /// Print the JSON of `GET /v1/sync` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the repositories of the relay running on --data-dir: owner, identifier,
    /// served/held/orphaned, size; directories left by crashes ("leftovers").
    Repos {
        /// Print the JSON of `GET /v1/repos` (or of the purge) instead of a table.
        #[arg(long)]
        json: bool,
        /// Only orphaned repositories (no stored or held announcement justifies them) and
        /// leftovers.
        #[arg(long)]
        orphans: bool,
        /// Remove orphans and leftovers. Without --yes, only prints what would be removed.
        #[arg(long)]
        purge: bool,
        /// With --purge: really remove (orphans younger than 10 minutes and repositories being
        /// pushed to are kept).
        #[arg(long, requires = "purge")]
        yes: bool,
    },
    /// Check every repository of the relay running on --data-dir against its confirmed
    /// maintainers (NIP-34 roles, reciprocal): report those whose refs another key's state moved
    /// (the authorization-integrity pass; it also runs at every start). A dry run unless --apply.
    Authority {
        /// Print the JSON report instead of lines.
        #[arg(long)]
        json: bool,
        /// Realign the repositories found to their confirmed maintainers' newest state.
        #[arg(long)]
        apply: bool,
    },
    /// Remove everything of one author from the relay running on --data-dir: stored events,
    /// held events and repositories (blocking an author keeps what is stored; this removes it).
    PurgeAuthor {
        /// The author's npub or hex public key.
        author: String,
    },
    /// Check a configuration file, or print the configuration in force and where each value
    /// came from.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Check this installation and print what to fix: git and the features the server needs,
    /// the helper binaries beside the relay, the data directory's owner and permissions, free
    /// disk against --min-free-disk, the open file limit against the connection limits, the
    /// public host and, with --nginx, the nginx site. Run it as the service's user with the
    /// service's configuration (`--config`). Exit status 0: fit to serve.
    Doctor {
        /// An nginx site configuration to check: git routed to grasp-cgi through FastCGI with
        /// request buffering off (docs/nginx/grasp.conf is the example).
        #[arg(long, value_name = "FILE")]
        nginx: Option<PathBuf>,
    },
}

/// `grasp-relay config ...`
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file without starting: every key known and in its section, every
    /// value of the right type and accepted (the file alone; flags and environment variables
    /// are not read). Exit status 0 when the relay would start with it.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print the configuration in force (flags, environment, --config file, defaults) as a
    /// configuration file, each value's source in its comment.
    Show,
}

/// A duration: whole seconds (`90`), or a number with a unit `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: give seconds (90) or a number with ms, s, m, h or d (500ms, 30m, 30d)"))?;
    let secs = |mul: u64| n.checked_mul(mul).map(Duration::from_secs);
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => None,
    }
    .ok_or_else(|| format!("invalid duration {s:?}: give seconds (90) or a number with ms, s, m, h or d (500ms, 30m, 30d)"))
}

fn parse_ipnet(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("invalid address range {s:?}: give ADDRESS/PREFIX, e.g. 10.0.0.0/8 or ::1/128"))
}

fn parse_event_id(s: &str) -> Result<EventId, String> {
    EventId::from_hex(s.trim()).map_err(|_| format!("invalid event id {s:?}: give 64 hex characters"))
}

/// A `--private-sync-peer` entry naming a relay (`ws://` / `wss://`), followed by relay sync.
pub fn is_relay_url(peer: &str) -> bool {
    let lower = peer.trim().to_ascii_lowercase();
    lower.starts_with("ws://") || lower.starts_with("wss://")
}


/// `--software-url`'s default: this software's project (`repository` in the workspace's Cargo.toml).
pub const DEFAULT_SOFTWARE_URL: &str = env!("CARGO_PKG_REPOSITORY");

fn parse_software_url(s: &str) -> Result<String, String> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !s.chars().any(char::is_whitespace) => Ok(s.to_string()),
        _ => Err(format!("invalid software URL {s:?}: give an http:// or https:// URL, e.g. https://git.example.com/grasp-relay")),
    }
}

fn parse_replica(s: &str) -> Result<grasp_state::trust::replica::Replica, String> {
    grasp_state::trust::replica::Replica::parse(s).map_err(|e| e.to_string())
}

fn parse_pubkey(s: &str) -> Result<PublicKey, String> {
    if s.starts_with("npub1") {
        PublicKey::from_bech32(s).map_err(|e| format!("invalid npub: {e}"))
    } else {
        PublicKey::from_str(s).map_err(|e| format!("invalid public key (give hex or npub): {e}"))
    }
}

impl Config {
    /// The purgatory's durations and caps.
    pub fn purgatory(&self) -> grasp_state::purgatory::PurgatoryConfig {
        let mut c = grasp_state::purgatory::PurgatoryConfig {
            entry_ttl: self.purgatory.purgatory_ttl,
            soft_expiry_ttl: self.purgatory.soft_expiry_ttl,
            sync_defer_limit: self.git_sync.sync_attempt_timeout(),
            ..Default::default()
        };
        c.caps.per_author = self.purgatory.purgatory_per_author;
        c.caps.total = self.purgatory.purgatory_total;
        c.caps.per_address = self.purgatory.purgatory_per_address;
        c.caps.total_bytes = self.purgatory.purgatory_total_bytes;
        c.caps.soft_expired = self.purgatory.purgatory_soft_expired;
        c.caps.placeholders_per_repo = self.purgatory.placeholders_per_repo;
        c.caps.placeholders_total = self.purgatory.placeholders_total;
        c.caps.placeholders_per_address = self.purgatory.placeholders_per_address;
        c.unsigned.per_address = self.purgatory.unsigned_bytes_per_address;
        c.unsigned.total = self.purgatory.unsigned_bytes_total;
        c
    }

    /// Where the private service's key is kept (`--service-key-file`, else in the data
    /// directory).
    pub fn service_key_file(&self) -> PathBuf {
        self.trust.service_key_file.clone().unwrap_or_else(|| self.storage.layout().service_key_file())
    }

    /// The built-in defaults: no flag, environment variable or file read (what the sections'
    /// `Default`s are).
    pub fn defaults() -> Self {
        let matches = Self::command().mut_args(|a| a.env(None::<&'static str>)).get_matches_from(["grasp-relay"]);
        Self::from_arg_matches(&matches).expect("the built-in defaults are a configuration")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Config::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let cfg = Config::parse_from(["grasp-relay"]);
        assert_eq!(cfg.server.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(cfg.server.public_host(), "127.0.0.1:8080");
        assert_eq!(cfg.limits.max_message_bytes, 512 * 1024);
        assert_eq!(cfg.limits.max_subscriptions, 32);
        assert_eq!(cfg.limits.max_filters, 16);
        assert_eq!(cfg.limits.max_limit, 500);
        assert_eq!(cfg.limits.max_answer_bytes, 32 << 20);
        assert_eq!((cfg.limits.max_connections, cfg.limits.max_connections_per_ip), (1024, 64));
        assert!(Config::try_parse_from(["grasp-relay", "--max-connections", "0"]).is_err());
        assert_eq!((cfg.limits.ipv6_prefix_len, cfg.storage.min_free_disk), (64, 1 << 30));
        assert_eq!(cfg.purgatory().caps.total_bytes, 256 << 20);
        assert!(Config::try_parse_from(["grasp-relay", "--ipv6-prefix-len", "129"]).is_err());
        assert!(Config::try_parse_from(["grasp-relay", "--ipv6-prefix-len", "0"]).is_err());
        assert_eq!(cfg.storage.layout().events(), PathBuf::from("./data/events"));
        assert!(cfg.server.cgi_path().ends_with("grasp-cgi"));
    }


    #[test]
    fn metrics_listener_is_off_unless_asked() {
        assert_eq!(Config::parse_from(["grasp-relay"]).server.metrics_bind, None);
        let cfg = Config::parse_from(["grasp-relay", "--metrics-bind", "127.0.0.1:9187"]);
        assert_eq!(cfg.server.metrics_bind, Some("127.0.0.1:9187".parse().unwrap()));
    }

    #[test]
    fn purgatory_durations_take_seconds_or_units() {
        let cfg = Config::parse_from(["grasp-relay"]);
        assert_eq!(cfg.purgatory().entry_ttl, Duration::from_secs(1800));
        assert_eq!(cfg.purgatory().soft_expiry_ttl, Duration::from_secs(86400));
        assert_eq!(cfg.purgatory.checkpoint_interval(), Duration::from_secs(60));
        let cfg = Config::parse_from([
            "grasp-relay",
            "--purgatory-ttl",
            "2",
            "--soft-expiry-ttl",
            "3m",
            "--checkpoint-interval",
            "1ms",
        ]);
        assert_eq!(cfg.purgatory().entry_ttl, Duration::from_secs(2));
        assert_eq!(cfg.purgatory().soft_expiry_ttl, Duration::from_secs(180));
        assert_eq!(cfg.purgatory.checkpoint_interval(), Duration::from_millis(10));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        for bad in ["", "ms", "1.5", "-1", "10w", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn purgatory_subcommand_takes_the_data_dir_after_it() {
        let cfg = Config::parse_from(["grasp-relay", "purgatory", "--data-dir", "/srv/grasp"]);
        assert_eq!(cfg.command, Some(Command::Purgatory { json: false }));
        assert_eq!(cfg.storage.data_dir, PathBuf::from("/srv/grasp"));
        let cfg = Config::parse_from(["grasp-relay", "--data-dir", "d", "purgatory", "--json"]);
        assert_eq!(cfg.command, Some(Command::Purgatory { json: true }));
        assert_eq!(Config::parse_from(["grasp-relay"]).command, None);
    }



    #[test]
    fn public_host_overrides_bind() {
        let cfg = Config::parse_from(["grasp-relay", "--public-host", "git.example.com"]);
        assert_eq!(cfg.server.public_host(), "git.example.com");
    }


    #[test]
    fn admin_pubkey_accepts_hex_and_npub() {
        let hex = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let a = Config::parse_from(["grasp-relay", "--admin-pubkey", hex]);
        let npub = a.pages.admin_pubkey.unwrap().to_bech32().unwrap();
        let b = Config::parse_from(["grasp-relay", "--admin-pubkey", &npub]);
        assert_eq!(a.pages.admin_pubkey, b.pages.admin_pubkey);
        assert!(Config::try_parse_from(["grasp-relay", "--admin-pubkey", "nope"]).is_err());
    }
}
