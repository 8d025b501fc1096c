//! What a re-read of the configuration (SIGHUP) changes: the settings that take effect while
//! the relay runs ([`LIVE`]) and those that need a restart. The reading and the applying are
//! `crate::server::reload`; this is the pure comparison.

use super::load::Setting;
use super::sections::{section_of, Section};

/// Settings the running relay takes over on SIGHUP, by clap argument id: the log filter, the
/// allow/deny lists, the members of a private service and the free-disk watermark. Everything
/// else (listeners, limits sized at startup, the purgatory's caps, sync) needs a restart.
/// The curation and members files are re-read on their own whenever they change.
pub const LIVE: &[&str] = &["log", "block_author", "block_event", "allow_repo", "deny_repo", "member", "min_free_disk"];

/// The settings that differ between the configuration in force and a new one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Take effect now (ids in [`LIVE`]).
    pub live: Vec<&'static str>,
    /// Take effect at the next start.
    pub need_restart: Vec<&'static str>,
}

impl Changes {
    /// Compares the settings in force with newly read ones (both in the same order).
    pub fn between(current: &[Setting], new: &[Setting]) -> Changes {
        let mut changes = Changes::default();
        for setting in new {
            let before = current.iter().find(|s| s.id == setting.id);
            if before.is_some_and(|b| b.values == setting.values) {
                continue;
            }
            if LIVE.contains(&setting.id) {
                changes.live.push(setting.id);
            } else {
                changes.need_restart.push(setting.id);
            }
        }
        changes
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.need_restart.is_empty()
    }
}

/// The settings in force after a reload: the new values of the live ones, the old values of
/// the others (they stay in force until a restart, and are reported again at the next reload).
pub fn in_force_after(current: &[Setting], new: &[Setting], changes: &Changes) -> Vec<Setting> {
    current
        .iter()
        .map(|old| match new.iter().find(|n| n.id == old.id) {
            Some(n) if changes.live.contains(&n.id) => n.clone(),
            _ => old.clone(),
        })
        .collect()
}

/// `ids` grouped by their section, in the order of the file: a reload puts a section's live
/// settings in force together.
pub fn by_section(ids: &[&'static str]) -> Vec<(Section, Vec<&'static str>)> {
    Section::ALL
        .into_iter()
        .map(|section| (section, ids.iter().copied().filter(|id| section_of(id) == Some(section)).collect::<Vec<_>>()))
        .filter(|(_, ids)| !ids.is_empty())
        .collect()
}

/// The long names of `ids`, for logs (`--min-free-disk, --member`).
pub fn flag_names(settings: &[Setting], ids: &[&str]) -> String {
    ids.iter()
        .map(|id| settings.iter().find(|s| s.id == *id).map_or_else(|| id.to_string(), |s| s.key.clone()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn settings(args: &[&str]) -> Vec<Setting> {
        let mut argv = vec!["grasp-relay"];
        argv.extend_from_slice(args);
        Config::load_from(argv).unwrap().settings
    }

    #[test]
    fn live_settings_apply_and_the_rest_waits_for_a_restart() {
        let current = settings(&["--log", "info", "--max-connections", "10"]);
        assert!(Changes::between(&current, &current).is_empty());
        let hex = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let new = settings(&["--log", "debug", "--max-connections", "20", "--block-author", hex, "--bind", "127.0.0.1:9"]);
        let changes = Changes::between(&current, &new);
        assert_eq!(changes.live, ["log", "block_author"]);
        assert_eq!(changes.need_restart, ["bind", "max_connections"]);
        assert_eq!(flag_names(&new, &changes.need_restart), "bind, max-connections");
        let after = in_force_after(&current, &new, &changes);
        let value = |s: &[Setting], id: &str| s.iter().find(|x| x.id == id).unwrap().values.clone();
        assert_eq!(value(&after, "log"), ["debug"]);
        assert_eq!(value(&after, "block_author"), [hex]);
        assert_eq!(value(&after, "max_connections"), ["10"], "a restart setting keeps its value in force");
        // ... and is reported again at the next reload.
        assert_eq!(Changes::between(&after, &new).need_restart, ["bind", "max_connections"]);
        assert!(Changes::between(&after, &new).live.is_empty());
    }

    #[test]
    fn live_settings_apply_by_section() {
        let grouped = by_section(&["member", "log", "block_author", "min_free_disk"]);
        assert_eq!(grouped, [(Section::Server, vec!["log"]), (Section::Storage, vec!["min_free_disk"]), (Section::Trust, vec!["member", "block_author"])]);
        let live: Vec<Section> = by_section(LIVE).into_iter().map(|(s, _)| s).collect();
        assert_eq!(live, [Section::Server, Section::Storage, Section::Trust], "crate::server::reload applies these sections");
    }

    #[test]
    fn every_live_setting_is_a_setting_of_the_file() {
        for id in LIVE {
            assert!(section_of(id).is_some(), "{id} is live but has no section");
        }
    }
}
