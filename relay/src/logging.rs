//! Logging: `tracing` to stderr with the `--log` filter, which a SIGHUP can replace while the
//! relay runs ([`set_filter`]; `crate::server::reload`).

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the process's subscriber with `filter` (`info` if it does not parse, said on
/// stderr). Once per process; later calls do nothing.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("grasp-relay: invalid --log filter {filter:?} ({e}); using \"info\"");
        EnvFilter::new("info")
    });
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    if tracing_subscriber::registry().with(filter).with(fmt).try_init().is_ok() {
        let _ = FILTER.set(handle);
    }
}

/// Replaces the filter in force; a filter that does not parse is refused and the old one kept.
pub fn set_filter(filter: &str) -> Result<(), String> {
    let parsed = EnvFilter::try_new(filter).map_err(|e| format!("invalid --log filter {filter:?}: {e}"))?;
    let handle = FILTER.get().ok_or("logging is not set up in this process")?;
    handle.reload(parsed).map_err(|e| e.to_string())
}
