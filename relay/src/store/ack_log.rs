//! The log of acknowledged events: regular events answered `OK` before the store committed them
//! (`crate::store::group_commit`, docs/architecture.md, "Acknowledged before commit").
//!
//! An event's `OK` waits for one append and one `fdatasync` of this small file instead of an
//! LMDB commit, whose sync writes pages spread over the whole store (measured: the sync of 57
//! pages spread over 2.7 GiB takes 2.6 ms, of adjacent pages 0.2 ms). The store commits the
//! events a little later; until then they are served from memory
//! (`crate::store::acknowledged`), and a crash before that leaves them here, saved again when
//! the store opens ([`AckLog::open`]).
//!
//! - Files: `<events>/acknowledged.0` and `acknowledged.1`, one event (its NIP-01 JSON) a line.
//!   Appends go to the active file. When the gate hands the acknowledged events to the store it
//!   [`AckLog::rotate`]s: later appends go to the other file, and once the store committed every
//!   event of the retired one it is emptied ([`AckLog::empty`]). The next rotation comes only
//!   after that, so a file is always empty when it becomes active, unless the store failed
//!   (then it keeps its events until a later rotation retires it again).
//! - A torn last line (a crash mid-append, never answered) is skipped when read.
//! - Opening saves both files' events into the store with a synced commit, then empties them.

use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nostr::prelude::Event;

/// The two files, by index.
const FILES: [&str; 2] = ["acknowledged.0", "acknowledged.1"];

/// The log: its two files, and which one takes appends. Cheap to clone (the files are shared).
#[derive(Debug, Clone)]
pub struct AckLog {
    dir: PathBuf,
    files: Arc<[Mutex<File>; 2]>,
    active: usize,
}

/// A file retired by [`AckLog::rotate`]: emptied once the store holds its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired(usize);

impl AckLog {
    /// Opens (creating) both files in `dir` and reads the events they still hold (acknowledged,
    /// perhaps not committed: the caller saves them, then calls [`AckLog::empty_all`]).
    pub fn open(dir: &Path) -> std::io::Result<(AckLog, Vec<Event>)> {
        let open = |name: &str| File::options().create(true).read(true).append(true).open(dir.join(name));
        let files = [open(FILES[0])?, open(FILES[1])?];
        // The names must survive a crash before an event in them counts as durable.
        File::open(dir)?.sync_all()?;
        let mut events = Vec::new();
        for (file, name) in files.iter().zip(FILES) {
            let mut skipped = 0usize;
            for line in std::io::BufReader::new(file).lines() {
                match line.map_err(|e| e.to_string()).and_then(|l| Event::from_json(l.as_bytes()).map_err(|e| e.to_string())) {
                    Ok(event) if event.verify().is_ok() => events.push(event),
                    _ => skipped += 1,
                }
            }
            if skipped > 0 {
                // A crash mid-append tears at most the last line, which was never answered.
                tracing::warn!(file = %dir.join(name).display(), skipped, "unreadable lines in the log of acknowledged events skipped");
            }
        }
        Ok((AckLog { dir: dir.to_path_buf(), files: Arc::new(files.map(Mutex::new)), active: 0 }, events))
    }

    /// Appends `events` to the active file and syncs it: once this returns Ok they survive a
    /// crash. On failure the file is cut back to its size before (no half line stays before
    /// later ones).
    pub fn append(&self, events: &[Arc<Event>]) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(events.len() * 512);
        for event in events {
            buf.extend_from_slice(event.as_json().as_bytes());
            buf.push(b'\n');
        }
        let mut file = self.files[self.active].lock().unwrap_or_else(|e| e.into_inner());
        let size = file.metadata()?.len();
        grasp_state::contract::atomic_file::append_synced(&mut file, size, &buf)
    }

    /// Later appends go to the other file; the active one is retired (it holds the events
    /// handed to the store now).
    pub fn rotate(&mut self) -> Retired {
        let retired = Retired(self.active);
        self.active = 1 - self.active;
        retired
    }

    /// Empties a retired file: the store holds every event in it.
    pub fn empty(&self, retired: Retired) -> std::io::Result<()> {
        let file = self.files[retired.0].lock().unwrap_or_else(|e| e.into_inner());
        file.set_len(0)?;
        file.sync_all()
    }

    /// Empties both files (after the events read by [`AckLog::open`] were saved).
    pub fn empty_all(&self) -> std::io::Result<()> {
        self.empty(Retired(0))?;
        self.empty(Retired(1))
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::*;
    use std::io::Write;

    fn note(text: &str) -> Arc<Event> {
        Arc::new(EventBuilder::new(Kind::TextNote, text).finalize(&Keys::generate()).unwrap())
    }

    #[test]
    fn appended_events_are_read_back_until_emptied_and_a_torn_line_is_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut log, found) = AckLog::open(tmp.path()).unwrap();
        assert!(found.is_empty());
        let (a, b, c) = (note("a"), note("b"), note("c"));
        log.append(&[a.clone(), b.clone()]).unwrap();
        let retired = log.rotate();
        log.append(std::slice::from_ref(&c)).unwrap();
        // A crash mid-append: half a line at the end of the active file.
        std::fs::OpenOptions::new().append(true).open(tmp.path().join(FILES[1])).unwrap().write_all(b"{\"id\":\"ab").unwrap();
        drop(log);
        let (log, found) = AckLog::open(tmp.path()).unwrap();
        let ids: Vec<EventId> = found.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![a.id, b.id, c.id]);
        log.empty(retired).unwrap();
        drop(log);
        let (log, found) = AckLog::open(tmp.path()).unwrap();
        assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), vec![c.id], "the emptied file held a and b");
        log.empty_all().unwrap();
        assert!(AckLog::open(tmp.path()).unwrap().1.is_empty());
    }

    #[test]
    fn a_forged_line_is_not_replayed() {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _) = AckLog::open(tmp.path()).unwrap();
        let a = note("a");
        let forged = a.as_json().replace("\"a\"", "\"b\"");
        log.append(std::slice::from_ref(&a)).unwrap();
        std::fs::OpenOptions::new().append(true).open(tmp.path().join(FILES[0])).unwrap().write_all(format!("{forged}\n").as_bytes()).unwrap();
        let (_, found) = AckLog::open(tmp.path()).unwrap();
        assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), vec![a.id]);
    }
}
