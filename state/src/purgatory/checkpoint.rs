//! The checkpoint: the purgatory on disk, so in-flight work survives a restart.
//!
//! The relay saves a checkpoint every 60 s and on graceful shutdown, to
//! `<git_data_path>/purgatory-state.json`, and restores it at start. Flow:
//! [`Purgatory::snapshot`] under the relay's lock (clones data, no serialisation), then
//! [`PurgatoryState::to_json`] and [`write_checkpoint`] outside it. At start,
//! [`read_checkpoint`]; on [`CheckpointError`] the caller moves the file aside with [`set_aside`]
//! and starts empty; otherwise [`Purgatory::restore`]. Restore never deletes the file: it stays
//! the crash-safe copy until a newer complete checkpoint replaces it (tmp + fsync + rename).
//!
//! Format (`version` 1, JSON): `saved_at` is unix seconds; every deadline is stored as
//! `expires_in_secs`, an offset from `saved_at`, and ages as `age_secs`; on restore the downtime
//! (`now - saved_at`) is subtracted. Events are stored as their NIP-01 JSON. Every field has a
//! serde default so older version-1 files (e.g. without `announcement_purgatory`) load.
//! Soft-expired announcements are not saved (their bare repository is gone), and neither is the
//! sync-running state (rebuilt by the sync loop).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nostr::prelude::{Event, EventId, PublicKey};
use serde::{Deserialize, Serialize};

use super::entries::{AnnouncementEntry, PrEntry, RepoId, StateEntry};
use super::{Clock, Purgatory, PurgatoryConfig};

/// The only format version this code reads and writes.
pub const CHECKPOINT_VERSION: u32 = 1;

fn default_version() -> u32 {
    CHECKPOINT_VERSION
}

/// The on-disk purgatory. Maps are keyed for readability; entries carry their own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PurgatoryState {
    #[serde(default = "default_version")]
    pub version: u32,
    /// Unix seconds of the save: the reference for every `*_secs` offset.
    #[serde(default)]
    pub saved_at: u64,
    /// `"<owner hex>:<identifier>"` -> announcement (non-soft-expired only).
    #[serde(default)]
    pub announcement_purgatory: BTreeMap<String, SavedAnnouncement>,
    /// identifier -> state events.
    #[serde(default)]
    pub state_events: BTreeMap<String, Vec<SavedState>>,
    /// event id hex -> PR event or placeholder.
    #[serde(default)]
    pub pr_events: BTreeMap<String, SavedPr>,
    /// event id hex -> unix seconds when it expired.
    #[serde(default)]
    pub expired_events: BTreeMap<String, u64>,
}

impl Default for PurgatoryState {
    fn default() -> Self {
        PurgatoryState {
            version: CHECKPOINT_VERSION,
            saved_at: 0,
            announcement_purgatory: BTreeMap::new(),
            state_events: BTreeMap::new(),
            pr_events: BTreeMap::new(),
            expired_events: BTreeMap::new(),
        }
    }
}

/// An event as saved: parsed when it looked like an event, raw JSON otherwise (reported and
/// skipped at restore rather than failing the whole file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SavedEvent {
    Parsed(Event),
    Raw(serde_json::Value),
}

impl Default for SavedEvent {
    fn default() -> Self {
        SavedEvent::Raw(serde_json::Value::Null)
    }
}

impl SavedEvent {
    fn into_verified(self) -> Result<Event, String> {
        match self {
            SavedEvent::Parsed(event) => match event.verify() {
                Ok(()) => Ok(event),
                Err(e) => Err(format!("event fails verification: {e}")),
            },
            SavedEvent::Raw(json) => Err(match Event::from_json(json.to_string()) {
                Err(e) => format!("not a nostr event: {e}"),
                Ok(_) => "not a nostr event".to_owned(),
            }),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedAnnouncement {
    #[serde(default)]
    pub event: SavedEvent,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub identifier: String,
    #[serde(default)]
    pub repo_path: PathBuf,
    #[serde(default)]
    pub relays: Vec<String>,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
    /// Never written as true; a file that says so is honoured by skipping the entry.
    #[serde(default)]
    pub soft_expired: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedState {
    #[serde(default)]
    pub event: SavedEvent,
    #[serde(default)]
    pub author: String,
    #[serde(default)]
    pub identifier: String,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedRepo {
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub identifier: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedPr {
    /// `None`: a git-first placeholder.
    #[serde(default)]
    pub event: Option<SavedEvent>,
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub repos: Vec<SavedRepo>,
    /// Legacy records without destinations load, but cannot drive ref cleanup.
    #[serde(default)]
    pub destinations: Vec<SavedRepo>,
    #[serde(default)]
    pub age_secs: u64,
    #[serde(default)]
    pub expires_in_secs: u64,
}

/// Why a checkpoint file cannot be used. The caller moves it aside ([`set_aside`]) and starts
/// with an empty purgatory.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read the purgatory checkpoint: {0}")]
    Io(#[from] io::Error),
    #[error("purgatory checkpoint is not valid JSON of the expected shape ({0}); it was moved aside, the purgatory starts empty")]
    Corrupt(#[from] serde_json::Error),
    #[error("purgatory checkpoint has version {0}, this relay reads version {CHECKPOINT_VERSION}; it was moved aside, the purgatory starts empty")]
    UnsupportedVersion(u32),
}

impl PurgatoryState {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("purgatory state serialises")
    }

    /// Parses a checkpoint and checks its version.
    pub fn from_json(json: &str) -> Result<Self, CheckpointError> {
        let state: PurgatoryState = serde_json::from_str(json)?;
        if state.version != CHECKPOINT_VERSION {
            return Err(CheckpointError::UnsupportedVersion(state.version));
        }
        Ok(state)
    }
}

/// One entry restore skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// e.g. `state 3f2a…` or `announcement <owner>:<identifier>`.
    pub entry: String,
    pub reason: String,
}

/// What [`Purgatory::restore`] did, for the startup log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub downtime: Duration,
    pub announcements: usize,
    pub states: usize,
    pub prs: usize,
    pub placeholders: usize,
    pub expired_events: usize,
    /// Restored entries whose deadline passed while the relay was down (due at once).
    pub expired_during_downtime: usize,
    pub skipped: Vec<Skipped>,
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Whole seconds from `now` to `at`, rounded up (a round trip never shortens a deadline).
fn secs_until(now: Instant, at: Instant) -> u64 {
    let d = at.saturating_duration_since(now);
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn saved_repo(r: &RepoId) -> SavedRepo {
    SavedRepo {
        owner: r.owner.to_hex(),
        identifier: r.identifier.clone(),
    }
}

fn parse_repos(repos: &[SavedRepo]) -> Result<Vec<RepoId>, String> {
    repos
        .iter()
        .map(|r| {
            PublicKey::from_hex(&r.owner)
                .map(|owner| RepoId::new(owner, r.identifier.clone()))
                .map_err(|e| format!("bad repository owner {:?}: {e}", r.owner))
        })
        .collect()
}

impl Purgatory {
    /// Copies the data for a checkpoint. Cheap enough to run under the relay's lock: events are
    /// cloned, not serialised.
    pub fn snapshot(&self) -> PurgatoryState {
        let now = self.clock.now();
        let mut state = PurgatoryState {
            saved_at: unix_secs(self.clock.wall()),
            ..PurgatoryState::default()
        };
        let age = |created: Instant| now.saturating_duration_since(created).as_secs();
        for a in self.announcements().filter(|a| !a.soft_expired) {
            state.announcement_purgatory.insert(
                format!("{}:{}", a.owner.to_hex(), a.identifier),
                SavedAnnouncement {
                    event: SavedEvent::Parsed(a.event.clone()),
                    owner: a.owner.to_hex(),
                    identifier: a.identifier.clone(),
                    repo_path: a.repo_path.clone(),
                    relays: a.relays.iter().cloned().collect(),
                    age_secs: age(a.created_at),
                    expires_in_secs: secs_until(now, a.expires_at),
                    soft_expired: false,
                },
            );
        }
        for (identifier, list) in &self.states {
            state.state_events.insert(
                identifier.clone(),
                list.iter()
                    .map(|s| SavedState {
                        event: SavedEvent::Parsed(s.event.clone()),
                        author: s.author.to_hex(),
                        identifier: s.identifier.clone(),
                        age_secs: age(s.created_at),
                        expires_in_secs: secs_until(now, s.expires_at),
                    })
                    .collect(),
            );
        }
        for (id, p) in &self.prs {
            state.pr_events.insert(
                id.to_hex(),
                SavedPr {
                    event: p.event.clone().map(SavedEvent::Parsed),
                    commit: p.commit.clone(),
                    repos: p.repos.iter().map(saved_repo).collect(),
                    destinations: p.destinations.iter().map(saved_repo).collect(),
                    age_secs: age(p.created_at),
                    // Pending cleanup: due at once after a restart.
                    expires_in_secs: if p.cleanup_pending {
                        0
                    } else {
                        secs_until(now, p.expires_at)
                    },
                },
            );
        }
        for (id, at) in self.expired.iter() {
            state.expired_events.insert(id.to_hex(), unix_secs(*at));
        }
        state
    }

    /// Rebuilds a purgatory from a checkpoint. Downtime (`clock.wall() - saved_at`) is subtracted
    /// from every deadline; entries that expired meanwhile are due now (the next sweep expires
    /// them). Soft-expired announcements and announcements whose repository no longer exists
    /// (`repo_exists`) are not restored; entries whose event does not parse or verify, or that
    /// exceed the caps, are skipped. All skips are reported.
    pub fn restore(
        state: PurgatoryState,
        config: PurgatoryConfig,
        clock: Arc<dyn Clock>,
        repo_exists: impl Fn(&Path) -> bool,
    ) -> (Purgatory, RestoreReport) {
        let mut p = Purgatory::new(config, clock);
        let mut report = RestoreReport::default();
        if state.version != CHECKPOINT_VERSION {
            report.skipped.push(Skipped {
                entry: "checkpoint".to_owned(),
                reason: format!("unsupported version {}", state.version),
            });
            return (p, report);
        }
        let now = p.clock.now();
        let wall = p.clock.wall();
        let saved_at = UNIX_EPOCH + Duration::from_secs(state.saved_at);
        let downtime = wall.duration_since(saved_at).unwrap_or(Duration::ZERO);
        report.downtime = downtime;
        let mut timing = |age_secs: u64, expires_in_secs: u64| {
            let remaining = Duration::from_secs(expires_in_secs).saturating_sub(downtime);
            if remaining.is_zero() {
                report.expired_during_downtime += 1;
            }
            let created = now
                .checked_sub(Duration::from_secs(age_secs) + downtime)
                .unwrap_or(now);
            (created, now + remaining)
        };
        let mut skipped = Vec::new();
        let caps = p.config.caps;

        for (key, a) in state.announcement_purgatory {
            let entry = format!("announcement {key}");
            if a.soft_expired {
                skipped.push(Skipped {
                    entry,
                    reason: "soft-expired: its bare repository was deleted".into(),
                });
                continue;
            }
            if !repo_exists(&a.repo_path) {
                skipped.push(Skipped {
                    entry,
                    reason: format!("repository {} no longer exists", a.repo_path.display()),
                });
                continue;
            }
            let parsed = a.event.into_verified().and_then(|event| {
                let owner = PublicKey::from_hex(&a.owner).map_err(|e| format!("bad owner: {e}"))?;
                if owner != event.pubkey {
                    return Err("owner is not the event's author".into());
                }
                p.counts
                    .check_entry(&caps, &owner)
                    .map_err(|e| e.to_string())?;
                Ok((event, owner))
            });
            match parsed {
                Ok((event, owner)) => {
                    let (created_at, expires_at) = timing(a.age_secs, a.expires_in_secs);
                    p.attach_announcement(AnnouncementEntry {
                        event,
                        owner,
                        identifier: a.identifier,
                        repo_path: a.repo_path,
                        relays: a.relays.into_iter().collect::<BTreeSet<_>>(),
                        created_at,
                        expires_at,
                        soft_expired: false,
                    });
                    report.announcements += 1;
                }
                Err(reason) => skipped.push(Skipped { entry, reason }),
            }
        }

        for (identifier, list) in state.state_events {
            for s in list {
                let parsed = s.event.into_verified().and_then(|event| {
                    if p.by_id.contains_key(&event.id) {
                        return Err("duplicate".into());
                    }
                    p.counts
                        .check_entry(&caps, &event.pubkey)
                        .map_err(|e| e.to_string())?;
                    Ok(event)
                });
                match parsed {
                    Ok(event) => {
                        let (created_at, expires_at) = timing(s.age_secs, s.expires_in_secs);
                        p.attach_state(StateEntry {
                            author: event.pubkey,
                            event,
                            identifier: identifier.clone(),
                            created_at,
                            expires_at,
                        });
                        report.states += 1;
                    }
                    Err(reason) => skipped.push(Skipped {
                        entry: format!("state for {identifier}"),
                        reason,
                    }),
                }
            }
        }

        for (id_hex, saved) in state.pr_events {
            let entry = format!("pr {id_hex}");
            let parsed = (|| -> Result<(EventId, PrEntry), String> {
                let id = EventId::from_hex(&id_hex).map_err(|e| format!("bad event id: {e}"))?;
                let event = match saved.event {
                    Some(e) => {
                        let event = e.into_verified()?;
                        if event.id != id {
                            return Err("event id does not match its key".into());
                        }
                        p.counts
                            .check_entry(&caps, &event.pubkey)
                            .map_err(|e| e.to_string())?;
                        Some(event)
                    }
                    None => {
                        if p.counts.placeholders_total >= caps.placeholders_total {
                            return Err("over the placeholder cap".into());
                        }
                        None
                    }
                };
                let (created_at, expires_at) = (now, now); // filled below
                Ok((
                    id,
                    PrEntry {
                        event,
                        commit: saved.commit,
                        repos: parse_repos(&saved.repos)?,
                        destinations: parse_repos(&saved.destinations)?,
                        created_at,
                        expires_at,
                        cleanup_pending: false,
                    },
                ))
            })();
            match parsed {
                Ok((id, mut pr)) => {
                    (pr.created_at, pr.expires_at) = timing(saved.age_secs, saved.expires_in_secs);
                    if pr.is_placeholder() {
                        report.placeholders += 1;
                    } else {
                        report.prs += 1;
                    }
                    p.attach_pr(id, pr);
                }
                Err(reason) => skipped.push(Skipped { entry, reason }),
            }
        }

        let ttl = p.config.expired_events_ttl;
        for (id_hex, secs) in state.expired_events {
            let Ok(id) = EventId::from_hex(&id_hex) else {
                skipped.push(Skipped {
                    entry: format!("expired event {id_hex}"),
                    reason: "bad event id".into(),
                });
                continue;
            };
            let at = UNIX_EPOCH + Duration::from_secs(secs);
            if wall.duration_since(at).unwrap_or(Duration::ZERO) < ttl {
                p.expired.record(id, at, caps.expired_events);
                report.expired_events += 1;
            }
        }
        report.skipped = skipped;
        (p, report)
    }
}

/// `<path>` + `suffix`, e.g. `purgatory-state.json.tmp`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Writes `state` to `path` atomically: `<path>.tmp`, fsync, rename over `path`, fsync the
/// directory. A crash at any point leaves either the old or the new complete file.
pub fn write_checkpoint(path: &Path, state: &PurgatoryState) -> io::Result<()> {
    let tmp = with_suffix(path, ".tmp");
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(state.to_json().as_bytes())?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

/// Reads a checkpoint; `Ok(None)` if there is none. Corrupt JSON or an unknown version is an
/// error: move the file aside with [`set_aside`] and start empty.
pub fn read_checkpoint(path: &Path) -> Result<Option<PurgatoryState>, CheckpointError> {
    match fs::read_to_string(path) {
        Ok(json) => PurgatoryState::from_json(&json).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Renames an unusable checkpoint to `<path>.corrupt-<unix seconds>` and returns the new path.
pub fn set_aside(path: &Path) -> io::Result<PathBuf> {
    let aside = with_suffix(path, &format!(".corrupt-{}", unix_secs(SystemTime::now())));
    fs::rename(path, &aside)?;
    Ok(aside)
}
