//! SIGHUP: the configuration is read again (the same command line and environment, the
//! `--config` file as it is now). The settings that can change while the relay runs
//! (`crate::config::reload::LIVE`: the log filter, the allow/deny lists, the members, the
//! free-disk watermark) take effect at once, a section at a time (the new `[trust]` replaces the
//! lists and members in force together); the others that changed are logged as waiting for a
//! restart. A file that cannot be read or is refused changes nothing (logged at ERROR with
//! every problem), so a typo never takes a running relay down.

use std::collections::BTreeSet;
use std::sync::Arc;

use nostr::prelude::PublicKey;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::reload::{by_section, flag_names, in_force_after, Changes};
use crate::config::sections::Section;
use crate::config::{Config, Setting};
use crate::grasp::Grasp;
use crate::shutdown::Shutdown;

/// Starts catching SIGHUP (whose default action would end the process). Call it first thing
/// at startup.
pub fn listen() -> anyhow::Result<Signal> {
    Ok(signal(SignalKind::hangup())?)
}

/// Re-reads the configuration at every SIGHUP until shutdown. `settings`: those in force;
/// `admin`: the `--admin-pubkey` in force (always a member; it changes only with a restart).
pub async fn run(grasp: Arc<Grasp>, mut settings: Vec<Setting>, admin: Option<PublicKey>, mut hangups: Signal, mut shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = shutdown.recv() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        settings = reload(&grasp, settings, admin);
    }
}

/// One reload: the settings in force afterwards.
fn reload(grasp: &Grasp, current: Vec<Setting>, admin: Option<PublicKey>) -> Vec<Setting> {
    let new = match Config::load() {
        Ok(new) => new,
        Err(e) => {
            tracing::error!(error = %e, "SIGHUP: the configuration is refused; the settings in force stay");
            return current;
        }
    };
    let file = new.config.config.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "none".into());
    let changes = Changes::between(&current, &new.settings);
    if changes.is_empty() {
        tracing::info!(file, "SIGHUP: configuration read again; nothing changed");
        return current;
    }
    let mut applied = Changes { live: Vec::new(), need_restart: changes.need_restart.clone() };
    for (section, ids) in by_section(&changes.live) {
        match apply(grasp, section, &new.config, admin) {
            Ok(()) => applied.live.extend(ids),
            Err(e) => tracing::error!(setting = %flag_names(&new.settings, &ids), error = %e, "SIGHUP: setting not changed; its value in force stays"),
        }
    }
    if !applied.live.is_empty() {
        tracing::info!(file, settings = %flag_names(&new.settings, &applied.live), "SIGHUP: configuration changes in force");
    }
    if !applied.need_restart.is_empty() {
        tracing::warn!(
            file,
            settings = %flag_names(&new.settings, &applied.need_restart),
            "SIGHUP: these changed settings take effect only after a restart (systemctl restart grasp-relay)"
        );
    }
    in_force_after(&current, &new.settings, &applied)
}

/// Puts the live part of `section` as the new configuration has it in force: the section's
/// value replaces the one the running parts hold (`[server]`: the log filter; `[trust]`: the
/// allow/deny lists and the members; `[storage]`: the free-disk watermark).
fn apply(grasp: &Grasp, section: Section, cfg: &Config, admin: Option<PublicKey>) -> Result<(), String> {
    match section {
        Section::Server => crate::logging::set_filter(&cfg.server.log),
        Section::Trust => {
            grasp.trust().set_curation(cfg.trust.curation());
            let mut members: BTreeSet<PublicKey> = cfg.trust.member.iter().copied().collect();
            members.extend(admin);
            grasp.trust().set_members(members);
            Ok(())
        }
        Section::Storage => {
            grasp.trust().disk.set_min_free(cfg.storage.min_free_disk);
            Ok(())
        }
        other => Err(format!("[{}] cannot change while the relay runs", other.name())),
    }
}
