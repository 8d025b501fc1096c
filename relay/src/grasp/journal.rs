//! The purgatory journal on disk: what changed in the purgatory since the last checkpoint,
//! appended and synced before an event is answered `OK true` (docs/protocol.md#checkpoints).
//!
//! The record format and the replay are pure ([`grasp_state::purgatory::journal`]); this file
//! owns the files and the one writer:
//!
//! - Files: `<data>/purgatory-journal.<n>`, segments numbered upwards. Records go to the newest
//!   one. A checkpoint *cuts* the journal in the same critical section as its snapshot: later
//!   records go to a new segment, and once the checkpoint file is durably in place the segments
//!   before the cut are deleted ([`Journal::remove_before`]). A crash in between leaves them,
//!   and replaying them over the newer checkpoint gives the same state.
//! - Group commit: one writer thread takes every batch waiting in its queue, appends it with one
//!   `write`, one `fdatasync`, then answers everyone in the batch. A batch nobody waits for
//!   (removals after a release, expiry, deadline extensions) waits up to [`LINGER`] for more
//!   changes first, so a push's deadline extensions (pre-receive) and its release's removals
//!   share one sync, after the push is answered, not beside the release's store write. Records enter the queue inside
//!   the purgatory's critical section ([`crate::grasp::purgatory::SharedPurgatory`]), so the
//!   file's order is the order of the changes; waiting for the sync happens outside it.
//! - Bounded size: past [`SEGMENT_LIMIT`] bytes the writer asks for an early checkpoint
//!   ([`Journal::wants_checkpoint`]), which truncates the journal.
//! - A failed write is truncated back to the last whole record and reported to the waiting
//!   callers (they answer `error:`; the event stays held in memory and is in the next checkpoint).
//!
//! At startup [`read_segments`] reads every segment in order (a torn last record is ignored and
//! logged), the caller replays them over the checkpoint, then starts a journal at the next
//! segment number and writes a checkpoint at once.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;

use grasp_state::contract::layout::JOURNAL_PREFIX;
use grasp_state::purgatory::journal::{decode, encode, JournalRecord};
use tokio::sync::{oneshot, Notify};


/// A segment larger than this asks for an early checkpoint (which truncates the journal).
pub const SEGMENT_LIMIT: u64 = 64 * 1024 * 1024;

/// Most bytes appended with one write.
const BATCH_BYTES: usize = 4 * 1024 * 1024;

/// How long records nobody waits for may wait for company before they are synced: longer than a
/// push takes from its pre-receive to its answer (measured: a 10 ms wait put this sync beside
/// the release's store commit, on the same disk, in most small pushes). Losing them
/// in a crash costs nothing (docs/protocol.md#checkpoints): a released entry replayed as held is
/// released again by the startup reconciliation (storing it again is a no-op), an expired one
/// is due at once, a lost extension only brings a deadline forward.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// Why a change could not be made durable.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the purgatory journal could not be written: {0}")]
pub struct JournalError(String);

enum Msg {
    Append(Vec<JournalRecord>, Option<oneshot::Sender<Result<(), JournalError>>>),
    Cut(oneshot::Sender<u64>),
}

/// The handle of the journal writer. The writer thread ends when the handle is dropped.
pub struct Journal {
    dir: PathBuf,
    tx: mpsc::Sender<Msg>,
    full: Arc<Notify>,
}

/// A change on its way to disk: [`Durable::wait`] returns once it is synced.
#[must_use = "an event is answered only once its change is durable"]
pub struct Durable(Option<oneshot::Receiver<Result<(), JournalError>>>);

impl Durable {
    /// Nothing to wait for (no journal, or nothing changed).
    pub fn now() -> Durable {
        Durable(None)
    }

    /// Waits until the change is synced to disk.
    pub async fn wait(self) -> Result<(), JournalError> {
        match self.0 {
            None => Ok(()),
            Some(rx) => rx.await.unwrap_or_else(|_| Err(JournalError("the journal writer stopped".into()))),
        }
    }

    /// The `OK` for an event held by this change: `ok`/`message` once it is synced, an `error:`
    /// when the journal could not be written (the event is held in memory and in the next
    /// checkpoint, but `OK true` would promise more than the disk gave).
    pub async fn answer(self, ok: bool, message: String) -> (bool, String) {
        match self.wait().await {
            Ok(()) => (ok, message),
            Err(e) => {
                tracing::error!(error = %e, "held event not journalled; answered error");
                (false, format!("error: {e}; the event is held but may not survive a crash, send it again later"))
            }
        }
    }
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Durable(pending)" } else { "Durable(now)" })
    }
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{JOURNAL_PREFIX}{n}"))
}

/// The journal segments in `dir`, oldest first.
pub fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name();
                    let n = name.to_str()?.strip_prefix(JOURNAL_PREFIX)?.parse().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Reads every segment in `dir`, oldest first: the records, and the number the next segment
/// takes. Torn tails and damaged records are skipped and logged, never fatal.
pub fn read_segments(dir: &Path) -> (Vec<JournalRecord>, u64) {
    let mut records = Vec::new();
    let mut next = 0;
    for (n, path) in segments(dir) {
        next = n + 1;
        match std::fs::read(&path) {
            Ok(bytes) => {
                let decoded = decode(&bytes);
                if decoded.torn_tail {
                    tracing::warn!(file = %path.display(), "purgatory journal: incomplete last record (cut by a crash) ignored");
                }
                if decoded.corrupt > 0 {
                    tracing::error!(file = %path.display(), records = decoded.corrupt, "purgatory journal: damaged records skipped");
                }
                records.extend(decoded.records);
            }
            Err(e) => tracing::error!(file = %path.display(), error = %e, "purgatory journal segment unreadable; skipped"),
        }
    }
    (records, next)
}

impl Journal {
    /// Starts the writer on segment `first` (created) in `dir`.
    pub fn open(dir: &Path, first: u64) -> std::io::Result<Journal> {
        let file = create_segment(dir, first)?;
        let (tx, rx) = mpsc::channel();
        let full = Arc::new(Notify::new());
        let (dir2, full2) = (dir.to_path_buf(), full.clone());
        std::thread::Builder::new()
            .name("purgatory-journal".into())
            .spawn(move || writer(&dir2, first, file, &rx, &full2))?;
        Ok(Journal { dir: dir.to_path_buf(), tx, full })
    }

    fn send(&self, msg: Msg) -> bool {
        self.tx.send(msg).is_ok()
    }

    /// Queues `records` (call inside the purgatory's critical section that made them). With
    /// `ack`, the returned [`Durable`] resolves once they are synced.
    pub fn append(&self, records: Vec<JournalRecord>, ack: bool) -> Durable {
        if records.is_empty() {
            return Durable::now();
        }
        let (tx, rx) = if ack {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if !self.send(Msg::Append(records, tx)) {
            tracing::error!("purgatory journal writer is gone; change not journalled");
        }
        Durable(rx)
    }

    /// Starts a new segment after what is queued now (call inside the critical section that
    /// takes the checkpoint's snapshot). Resolves to the new segment's number: every older one
    /// is covered by that checkpoint.
    pub fn cut(&self) -> oneshot::Receiver<u64> {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Cut(tx));
        rx
    }

    /// Deletes the segments before `segment` (a checkpoint covering them is durable).
    pub fn remove_before(&self, segment: u64) {
        for (n, path) in segments(&self.dir) {
            if n < segment {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(file = %path.display(), error = %e, "could not remove a purgatory journal segment");
                }
            }
        }
    }

    /// Notified when the current segment passed [`SEGMENT_LIMIT`]: checkpoint soon.
    pub fn wants_checkpoint(&self) -> Arc<Notify> {
        self.full.clone()
    }
}

fn create_segment(dir: &Path, n: u64) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(segment_path(dir, n))?;
    // The new name must survive a crash before records in it count as durable.
    std::fs::File::open(dir)?.sync_all()?;
    Ok(file)
}

/// Appends `buf` and syncs ([`grasp_state::contract::atomic_file::append_synced`]: on failure the file is
/// cut back to `size`), counting it in `size`.
fn write_synced(file: &mut std::fs::File, size: &mut u64, buf: &[u8]) -> Result<(), JournalError> {
    match grasp_state::contract::atomic_file::append_synced(file, *size, buf) {
        Ok(()) => {
            *size += buf.len() as u64;
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "purgatory journal write failed");
            Err(JournalError(e.to_string()))
        }
    }
}

/// The writer thread: group commit until every sender is gone.
fn writer(dir: &Path, mut segment: u64, mut file: std::fs::File, rx: &mpsc::Receiver<Msg>, full: &Notify) {
    let mut size = file.metadata().map_or(0, |m| m.len());
    let mut buf = Vec::new();
    let mut acks: Vec<oneshot::Sender<Result<(), JournalError>>> = Vec::new();
    let flush = |file: &mut std::fs::File, size: &mut u64, buf: &mut Vec<u8>, acks: &mut Vec<oneshot::Sender<Result<(), JournalError>>>| {
        let result = write_synced(file, size, buf);
        buf.clear();
        for ack in acks.drain(..) {
            let _ = ack.send(result.clone());
        }
    };
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        let lingering_since = std::time::Instant::now();
        loop {
            while let Some(msg) = next.take().or_else(|| rx.try_recv().ok()) {
                match msg {
                    Msg::Append(records, ack) => {
                        for record in &records {
                            encode(record, &mut buf);
                        }
                        acks.extend(ack);
                    }
                    Msg::Cut(reply) => {
                        flush(&mut file, &mut size, &mut buf, &mut acks);
                        match create_segment(dir, segment + 1) {
                            Ok(new) => {
                                segment += 1;
                                file = new;
                                size = 0;
                                let _ = reply.send(segment);
                            }
                            // Keep appending to the old segment; the checkpoint deletes nothing.
                            Err(e) => tracing::error!(error = %e, "could not start a new purgatory journal segment"),
                        }
                    }
                }
                if buf.len() >= BATCH_BYTES {
                    break;
                }
            }
            // Nobody waits for these records (an entry released or expired, a deadline
            // extended): give the changes that follow them (a release removes several entries)
            // a moment to share their sync, which also leaves the path of the push being
            // answered. A record waited for ends the wait at once.
            let left = LINGER.saturating_sub(lingering_since.elapsed());
            if acks.is_empty() && !buf.is_empty() && buf.len() < BATCH_BYTES && !left.is_zero() {
                if let Ok(msg) = rx.recv_timeout(left) {
                    next = Some(msg);
                    continue;
                }
            }
            break;
        }
        flush(&mut file, &mut size, &mut buf, &mut acks);
        if size > SEGMENT_LIMIT {
            full.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> JournalRecord {
        JournalRecord::Expired { id: format!("{n:064x}"), at: n }
    }

    #[tokio::test]
    async fn appends_are_durable_in_order_and_cut_segments_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), 3).unwrap();
        let waits: Vec<Durable> = (0..50).map(|n| journal.append(vec![record(n)], true)).collect();
        for w in waits {
            w.wait().await.unwrap();
        }
        let cut = journal.cut();
        journal.append(vec![record(50)], true).wait().await.unwrap();
        let next = cut.await.unwrap();
        assert_eq!(next, 4);
        let (records, following) = read_segments(dir.path());
        assert_eq!(records, (0..51).map(record).collect::<Vec<_>>());
        // Records nobody waits for go to disk in order, at the latest with the next one waited
        // for (which does not wait for the linger).
        let _ = journal.append(vec![record(60)], false);
        let _ = journal.append(vec![record(61)], false);
        let started = std::time::Instant::now();
        journal.append(vec![record(62)], true).wait().await.unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(read_segments(dir.path()).0[51..], [record(60), record(61), record(62)]);
        assert_eq!(following, 5);
        journal.remove_before(next);
        let (records, _) = read_segments(dir.path());
        assert_eq!(records, vec![record(50), record(60), record(61), record(62)]);
        assert!(journal.append(Vec::new(), true).wait().await.is_ok());
    }
}
