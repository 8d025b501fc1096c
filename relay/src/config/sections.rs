//! Where each setting lives in the configuration file: a flag's section is the struct it is a
//! field of (`max_connections` is a field of [`LimitsConfig`], so `max-connections` is a key of
//! `[limits]`), one struct per [`Section`] in its own file of `config/`, flattened into
//! [`Config`](crate::config::Config). A key in the file is the flag's long name without the
//! dashes; [`settings`] lists every setting with its section, in the structs' order (the order
//! `config show` prints).
//!
//! A flag added to a section's struct is a setting of that section; one that is no setting of
//! the file goes in [`NOT_IN_FILE`] (the test `every_flag_has_a_section` names a flag that is
//! neither). Settings that can change while the relay runs are listed in
//! [`crate::config::reload::LIVE`].

use std::sync::LazyLock;

use clap::{Args, Command};

use super::{
    GitSyncConfig, LimitsConfig, PagesConfig, PurgatoryConfig, RelaySyncConfig, ServerConfig, ServicesConfig, StorageConfig, TrustConfig,
};

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

    /// The section's flags: the arguments of its struct.
    pub fn command(self) -> Command {
        let cmd = Command::new(self.name());
        match self {
            Server => ServerConfig::augment_args(cmd),
            Storage => StorageConfig::augment_args(cmd),
            Limits => LimitsConfig::augment_args(cmd),
            Purgatory => PurgatoryConfig::augment_args(cmd),
            GitSync => GitSyncConfig::augment_args(cmd),
            RelaySync => RelaySyncConfig::augment_args(cmd),
            Trust => TrustConfig::augment_args(cmd),
            Services => ServicesConfig::augment_args(cmd),
            Pages => PagesConfig::augment_args(cmd),
        }
    }

    /// The section named `name` in the file.
    pub fn named(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Arguments that are not settings of the file: the file's own path, and the former
/// millisecond names of the sync delays (fields of [`GitSyncConfig`], kept for old command
/// lines; the file takes the new names).
pub const NOT_IN_FILE: &[&str] = &["config", "sync_user_delay_ms", "sync_delay_ms", "sync_backoff_ms", "sync_backoff_cap_ms"];

/// The sections' flags, built once (the ids of [`settings`] are theirs).
static COMMANDS: LazyLock<Vec<(Section, Command)>> = LazyLock::new(|| Section::ALL.into_iter().map(|s| (s, s.command())).collect());

static SETTINGS: LazyLock<Vec<(&'static str, Section)>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .flat_map(|(section, cmd)| cmd.get_arguments().map(move |a| (a.get_id().as_str(), *section)))
        .filter(|(id, _)| !NOT_IN_FILE.contains(id))
        .collect()
});

/// Every setting of the file, by clap argument id, with its section: the fields of the
/// sections' structs, section by section in the order of the file, each section's in its
/// struct's order (the order `config show` prints them).
pub fn settings() -> &'static [(&'static str, Section)] {
    &SETTINGS
}

/// The section of the setting with clap id `id` (`None`: not a setting of the file).
pub fn section_of(id: &str) -> Option<Section> {
    settings().iter().find(|(i, _)| *i == id).map(|(_, s)| *s)
}
