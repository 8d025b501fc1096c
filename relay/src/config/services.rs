//! `[services]`: optional GRASP services: GRASP-06 contributor repositories, GRASP-05 archive.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use clap::Args;
use grasp_state::contract::env_names;
use grasp_state::trust::curation::RepoPattern;

/// The `[services]` section: optional GRASP services: GRASP-06 contributor repositories, GRASP-05 archive.
#[derive(Debug, Clone, Args)]
pub struct ServicesConfig {
    /// GRASP-06: serve contributor repositories at `/prs/<npub>/<identifier>.git`, where anyone
    /// pushes the commits of their own pull requests (`refs/nostr/<event-id>` only, each bound to
    /// a pull request signed by that npub), and hold pull requests for repositories not announced
    /// here when their `clone` tag names such a URL on this server (docs/protocol.md). Listed in
    /// NIP-11 `supported_grasps`; off, `/prs/` answers 404. Not with --private.
    #[arg(long, env = env_names::GRASP06, conflicts_with = "private")]
    pub grasp06: bool,

    /// GRASP-05 archive: also accept announcements that do not list this server when they match
    /// one of these patterns (npub: all its repositories; npub/identifier; identifier: whoever
    /// owns it; repeatable or comma separated). Their repositories are made, their events and
    /// git data come by relay sync and background sync from the servers they list, and they
    /// refuse pushes unless --archive-writable (docs/protocol.md#archive-mode).
    #[arg(long = "archive", env = env_names::ARCHIVE, value_name = "PATTERN", value_delimiter = ',')]
    pub archive: Vec<RepoPattern>,

    /// GRASP-05 archive: accept every announcement (read-only unless --archive-writable). The
    /// storage risk: --max-repos, the purgatory budgets, --min-free-disk and the sync byte caps
    /// bound it.
    #[arg(long, env = env_names::ARCHIVE_ALL)]
    pub archive_all: bool,

    /// GRASP-05 archive: accept the announcements with a `clone` URL on this GRASP service
    /// (host[:port], compared as an announcement's URLs are with --public-host; repeatable or
    /// comma separated).
    #[arg(long = "archive-grasp-service", env = env_names::ARCHIVE_GRASP_SERVICES, value_name = "HOST", value_delimiter = ',')]
    pub archive_grasp_service: Vec<String>,

    /// GRASP-05 archive: archived repositories take pushes authorised by state events, as the
    /// hosted ones do (default: refused, naming where the repository is hosted).
    #[arg(long, env = env_names::ARCHIVE_WRITABLE)]
    pub archive_writable: bool,
}

impl ServicesConfig {
    /// The GRASP-05 archive configuration (`--archive*`).
    pub fn archive(&self) -> grasp_state::trust::archive::Archive {
        grasp_state::trust::archive::Archive {
            all: self.archive_all,
            patterns: self.archive.clone(),
            services: self.archive_grasp_service.iter().map(|h| grasp_state::names::host::public_authority(h).to_string()).collect(),
            writable: self.archive_writable,
        }
    }
}

impl Default for ServicesConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().services
    }
}
