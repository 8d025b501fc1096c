//! `[storage]`: the data directory and the free space kept on its file system.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::path::PathBuf;

use clap::Args;
use grasp_state::contract::env_names;

/// The `[storage]` section: the data directory and the free space kept on its file system.
#[derive(Debug, Clone, Args)]
pub struct StorageConfig {
    /// Data directory: `events/` (event store), `git/` (bare repositories), `hooks/`, the
    /// purgatory checkpoint, the hook API files and the relay's key (`relay-key`).
    #[arg(long, env = env_names::DATA_DIR, default_value = "./data", global = true)]
    pub data_dir: PathBuf,

    /// Free bytes the data directory's file system keeps: below it, events are refused
    /// (`blocked:`) and pushes rejected, checked at most every 2 s (0: never refuse); default 1 GiB.
    #[arg(long, env = env_names::MIN_FREE_DISK, default_value_t = grasp_state::trust::free_disk::DEFAULT_MIN_FREE_DISK)]
    pub min_free_disk: u64,
}

impl StorageConfig {
    /// The layout under `--data-dir` (described once, in [`crate::datadir`]).
    pub fn layout(&self) -> crate::datadir::DataLayout {
        crate::datadir::DataLayout::new(&self.data_dir)
    }
}

impl Default for StorageConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().storage
    }
}
