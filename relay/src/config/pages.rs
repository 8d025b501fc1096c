//! `[pages]`: what the NIP-11 document and the web pages say about this server.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use clap::Args;
use grasp_state::contract::env_names;
use nostr::prelude::PublicKey;

use super::{DEFAULT_SOFTWARE_URL, parse_pubkey, parse_software_url};

/// The `[pages]` section: what the NIP-11 document and the web pages say about this server.
#[derive(Debug, Clone, Args)]
pub struct PagesConfig {
    /// Relay name published in the NIP-11 document.
    #[arg(long, env = env_names::NAME, default_value = "grasp-relay")]
    pub name: String,

    /// Relay description published in the NIP-11 document.
    #[arg(
        long,
        env = env_names::DESCRIPTION,
        default_value = "A GRASP server: Nostr relay and git hosting for NIP-34 repositories."
    )]
    pub description: String,

    /// Public key (hex or npub) of the operator, NIP-11 `pubkey` (the administrative contact;
    /// without it, the relay's own key).
    #[arg(long, env = env_names::ADMIN_PUBKEY, value_parser = parse_pubkey)]
    pub admin_pubkey: Option<PublicKey>,

    /// URL of the software this server runs, published as NIP-11 `software` (clients and the
    /// GRASP conformance suite expect it); an `http://` or `https://` URL. Default: grasp-relay's
    /// project (the workspace's `repository`); set it to the repository a modified build came from.
    #[arg(long, env = env_names::SOFTWARE_URL, value_name = "URL", default_value = DEFAULT_SOFTWARE_URL, value_parser = parse_software_url)]
    pub software_url: String,
}

impl Default for PagesConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().pages
    }
}
