//! `[trust]`: who may write: curation, a private service's members and peers, proxies.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::path::PathBuf;

use clap::Args;
use grasp_state::contract::env_names;
use grasp_state::trust::curation::{Curation, RepoPattern};
use nostr::prelude::EventId;
use nostr::prelude::PublicKey;

use super::{is_relay_url, parse_event_id, parse_ipnet, parse_pubkey};

/// The `[trust]` section: who may write: curation, a private service's members and peers, proxies.
#[derive(Debug, Clone, Args)]
pub struct TrustConfig {
    /// Trust: a reverse proxy (ADDRESS/PREFIX; repeatable or comma separated) whose
    /// `X-Forwarded-For` / `X-Real-IP` give the client address for connection and write limits.
    #[arg(long = "trusted-proxy", env = env_names::TRUSTED_PROXIES, value_name = "CIDR", value_delimiter = ',', value_parser = parse_ipnet)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// Curation: refuse every event by this author (npub or hex; repeatable or comma separated).
    #[arg(long = "block-author", env = env_names::BLOCK_AUTHORS, value_name = "PUBKEY", value_delimiter = ',', value_parser = parse_pubkey)]
    pub block_author: Vec<PublicKey>,

    /// Curation: refuse this event id (hex; repeatable or comma separated).
    #[arg(long = "block-event", env = env_names::BLOCK_EVENTS, value_name = "ID", value_delimiter = ',', value_parser = parse_event_id)]
    pub block_event: Vec<EventId>,

    /// Curation: only host repositories matching these patterns (npub, npub/identifier or
    /// identifier; repeatable or comma separated).
    #[arg(long = "allow-repo", env = env_names::ALLOW_REPOS, value_name = "PATTERN", value_delimiter = ',')]
    pub allow_repo: Vec<RepoPattern>,

    /// Curation: never host repositories matching these patterns.
    #[arg(long = "deny-repo", env = env_names::DENY_REPOS, value_name = "PATTERN", value_delimiter = ',')]
    pub deny_repo: Vec<RepoPattern>,

    /// Curation: a file of rules (`block-author`, `block-event`, `allow-repo`, `deny-repo`, one
    /// per line), re-read when it changes.
    #[arg(long, env = env_names::CURATION_FILE, value_name = "PATH")]
    pub curation_file: Option<PathBuf>,

    /// Trust: run a GRASP-08 private service. Every REQ and EVENT needs NIP-42 AUTH as a member,
    /// git over HTTP needs a member's `Authorization: Nostr` proof (docs/protocol.md#trust).
    #[arg(long, env = env_names::PRIVATE)]
    pub private: bool,

    /// Trust: a member of the private service (npub or hex; repeatable or comma separated). The
    /// admin pubkey is always a member.
    #[arg(long = "member", env = env_names::MEMBERS, value_name = "PUBKEY", value_delimiter = ',', value_parser = parse_pubkey)]
    pub member: Vec<PublicKey>,

    /// Trust: a file of members (one npub or hex key per line, `#` comments), re-read when it
    /// changes.
    #[arg(long, env = env_names::MEMBERS_FILE, value_name = "PATH")]
    pub members_file: Option<PathBuf>,

    /// Trust: a private service's peers (repeatable or comma separated): a `ws://` / `wss://`
    /// relay URL is the only kind of relay its relay sync follows (authenticating with the
    /// service key when asked) and its host a git sync source; a plain `host` or `host:port` is
    /// a git sync source only. Default: none, a private service syncs with nobody.
    #[arg(long = "private-sync-peer", env = env_names::PRIVATE_SYNC_PEERS, value_name = "URL|HOST", value_delimiter = ',')]
    pub private_sync_peer: Vec<String>,

    /// Trust: the private service's own key, answering the NIP-42 challenges of its
    /// `--private-sync-peer` relays (a hex or nsec secret key in a file; created, mode 0600, if
    /// missing; its npub is logged at start). Default: `<data-dir>/service-key`. May be the
    /// `--relay-key-file`, to use one key for both.
    #[arg(long, env = env_names::SERVICE_KEY_FILE, value_name = "PATH")]
    pub service_key_file: Option<PathBuf>,
}

impl TrustConfig {
    /// The `--private-sync-peer` entries that name relays (`ws://` / `wss://`).
    pub fn private_sync_relays(&self) -> Vec<String> {
        self.private_sync_peer.iter().filter(|p| is_relay_url(p)).cloned().collect()
    }

    /// The allow/deny lists given on the command line.
    pub fn curation(&self) -> Curation {
        Curation {
            blocked_authors: self.block_author.iter().copied().collect(),
            blocked_events: self.block_event.iter().copied().collect(),
            repo_allow: self.allow_repo.iter().cloned().collect(),
            repo_deny: self.deny_repo.iter().cloned().collect(),
        }
    }
}

impl Default for TrustConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().trust
    }
}
