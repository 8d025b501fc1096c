//! The purgatory journal: every change to what is held, appended to disk before the relay
//! answers `OK`, so an event answered `OK true` survives a crash (docs/protocol.md#checkpoints).
//!
//! The checkpoint ([`super::checkpoint`]) is the purgatory as a whole, written every minute; the
//! journal is what changed since, one record per change, in the order the changes were made:
//! an entry held or its deadline moved ([`JournalRecord::Announcement`], [`JournalRecord::State`],
//! [`JournalRecord::Pr`]: upserts carrying the whole entry, in the checkpoint's own `Saved*`
//! shapes), an entry gone (released, expired, deleted, soft-expired: the `Remove*` records), an
//! event id remembered as expired ([`JournalRecord::Expired`]).
//!
//! This module is pure: the record format ([`encode`], [`decode`]) and [`replay`], which applies
//! records to a [`PurgatoryState`] read from the checkpoint, before [`super::Purgatory::restore`].
//! The model collects the records of each mutation when its journal is on
//! ([`super::Purgatory::start_journal`], [`super::Purgatory::take_journal`]); the relay writes
//! them (group commit) and truncates the journal once a checkpoint covers it.
//!
//! Format: one record per line, `<crc32 of the JSON, 8 hex digits> <JSON>\n`. JSON never holds
//! a raw newline, so a line is a record. A line that is incomplete (no `\n`: the write was cut
//! by the crash) or whose checksum does not match is skipped and counted, never fatal: a torn
//! last record is an acknowledgement that was never sent.
//!
//! Replay is idempotent in the way restart needs: applying records that the checkpoint already
//! covers (a crash between writing a checkpoint and truncating the journal) gives the same
//! state, because records are upserts and removals applied in order.

use serde::{Deserialize, Serialize};

use super::checkpoint::{PurgatoryState, SavedAnnouncement, SavedPr, SavedState};

/// One change to the purgatory. Offsets (`expires_in_secs`, `age_secs`) inside the entries are
/// relative to the record's `at` (unix seconds when the change was made).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum JournalRecord {
    /// An announcement held, replaced or given a new deadline.
    Announcement { at: u64, entry: SavedAnnouncement },
    /// A state event held or given a new deadline.
    State { at: u64, entry: SavedState },
    /// A pull request event or git-first placeholder held or changed, under event id `id`.
    Pr { at: u64, id: String, entry: SavedPr },
    /// `owner`'s announcement of `identifier` left the purgatory (promoted, removed, expired,
    /// soft-expired).
    RemoveAnnouncement { owner: String, identifier: String },
    /// A state event left the purgatory.
    RemoveState { identifier: String, id: String },
    /// A pull request or placeholder left the purgatory.
    RemovePr { id: String },
    /// An event expired without its git data at `at` (remembered as the checkpoint's
    /// `expired_events`).
    Expired { id: String, at: u64 },
}

/// CRC-32 (IEEE, as zlib) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    const fn table() -> [u32; 256] {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    }
    static TABLE: [u32; 256] = table();
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Appends `record` to `out` as one line: `<crc32 hex> <json>\n`.
pub fn encode(record: &JournalRecord, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(record).expect("journal records serialise");
    out.extend_from_slice(format!("{:08x} ", crc32(&json)).as_bytes());
    out.extend_from_slice(&json);
    out.push(b'\n');
}

/// What [`decode`] read from a journal file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    pub records: Vec<JournalRecord>,
    /// The file ends in an incomplete record (a write cut by a crash): ignored.
    pub torn_tail: bool,
    /// Complete lines that fail their checksum or do not parse: skipped.
    pub corrupt: usize,
}

/// Reads every complete, intact record of a journal file, in order.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            // No newline: the last write did not finish. Zeros a crash left past the end of
            // the data count the same.
            out.torn_tail = true;
            break;
        };
        let line = &rest[..end];
        rest = &rest[end + 1..];
        match decode_line(line) {
            Some(record) => out.records.push(record),
            None if rest.is_empty() || rest.iter().all(|&b| b == 0) => {
                out.torn_tail = true;
                break;
            }
            None => out.corrupt += 1,
        }
    }
    out
}

fn decode_line(line: &[u8]) -> Option<JournalRecord> {
    if line.len() < 10 || line[8] != b' ' {
        return None;
    }
    let crc = u32::from_str_radix(std::str::from_utf8(&line[..8]).ok()?, 16).ok()?;
    let json = &line[9..];
    if crc32(json) != crc {
        return None;
    }
    serde_json::from_slice(json).ok()
}

/// `base + delta`, clamped at zero.
fn shifted(base: u64, delta: i128) -> u64 {
    u64::try_from((i128::from(base) + delta).max(0)).unwrap_or(u64::MAX)
}

/// Applies `records`, in order, to `state` (a checkpoint, or an empty state when there is
/// none). Offsets are moved from each record's `at` to `state.saved_at`, so
/// [`super::Purgatory::restore`] subtracts the downtime from them as from the checkpoint's own.
/// An empty state without a save time takes the first record's.
pub fn replay(state: &mut PurgatoryState, records: impl IntoIterator<Item = JournalRecord>) {
    let mut records = records.into_iter().peekable();
    if state.saved_at == 0 {
        if let Some(at) = records.peek().and_then(record_at) {
            state.saved_at = at;
        }
    }
    let saved_at = state.saved_at;
    // A record made `shift` seconds after the checkpoint: its deadlines are that much further
    // from the save, its entries that much younger.
    let shift = |at: u64| i128::from(at) - i128::from(saved_at);
    for record in records {
        match record {
            JournalRecord::Announcement { at, mut entry } => {
                entry.expires_in_secs = shifted(entry.expires_in_secs, shift(at));
                entry.age_secs = shifted(entry.age_secs, -shift(at));
                let key = format!("{}:{}", entry.owner, entry.identifier);
                state.announcement_purgatory.insert(key, entry);
            }
            JournalRecord::State { at, mut entry } => {
                entry.expires_in_secs = shifted(entry.expires_in_secs, shift(at));
                entry.age_secs = shifted(entry.age_secs, -shift(at));
                let id = event_id_of(&entry.event);
                let list = state.state_events.entry(entry.identifier.clone()).or_default();
                match list.iter_mut().find(|s| id.is_some() && event_id_of(&s.event) == id) {
                    Some(held) => *held = entry,
                    None => list.push(entry),
                }
            }
            JournalRecord::Pr { at, id, mut entry } => {
                entry.expires_in_secs = shifted(entry.expires_in_secs, shift(at));
                entry.age_secs = shifted(entry.age_secs, -shift(at));
                state.pr_events.insert(id, entry);
            }
            JournalRecord::RemoveAnnouncement { owner, identifier } => {
                state.announcement_purgatory.remove(&format!("{owner}:{identifier}"));
            }
            JournalRecord::RemoveState { identifier, id } => {
                if let Some(list) = state.state_events.get_mut(&identifier) {
                    list.retain(|s| event_id_of(&s.event).as_deref() != Some(id.as_str()));
                    if list.is_empty() {
                        state.state_events.remove(&identifier);
                    }
                }
            }
            JournalRecord::RemovePr { id } => {
                state.pr_events.remove(&id);
            }
            JournalRecord::Expired { id, at } => {
                state.expired_events.insert(id, at);
            }
        }
    }
}

fn record_at(record: &JournalRecord) -> Option<u64> {
    match record {
        JournalRecord::Announcement { at, .. }
        | JournalRecord::State { at, .. }
        | JournalRecord::Pr { at, .. }
        | JournalRecord::Expired { at, .. } => Some(*at),
        _ => None,
    }
}

/// The hex id of a saved event (parsed, or raw JSON with an `id` field).
fn event_id_of(event: &super::checkpoint::SavedEvent) -> Option<String> {
    match event {
        super::checkpoint::SavedEvent::Parsed(e) => Some(e.id.to_hex()),
        super::checkpoint::SavedEvent::Raw(json) => json.get("id").and_then(|v| v.as_str()).map(str::to_owned),
    }
}

// ---- The model's side: the records of each mutation ------------------------------------------

use nostr::prelude::EventId;

use super::checkpoint::{saved_announcement, saved_pr, unix_secs, HeldState};
use super::entries::EntryKey;
use super::Purgatory;

impl Purgatory {
    /// Turns the journal on: from now on every mutation leaves its records for
    /// [`Self::take_journal`]. Off by default (tests, tools, a restore in progress).
    pub fn start_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The records of the mutations since the last call, in order (empty when the journal is
    /// off). The relay takes them in the same critical section as the mutation, so the order on
    /// disk is the order of the changes.
    pub fn take_journal(&mut self) -> Vec<JournalRecord> {
        self.journal.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn journal_on(&self) -> bool {
        self.journal.is_some()
    }

    fn push_journal(&mut self, record: JournalRecord) {
        if let Some(journal) = self.journal.as_mut() {
            journal.push(record);
        }
    }

    /// Journals the current form of the entry `key` names (held, or a new deadline). A
    /// soft-expired announcement is journalled as removed: like the checkpoint, the journal only
    /// keeps what still has a repository.
    pub(super) fn journal_entry(&mut self, key: &EntryKey) {
        if !self.journal_on() {
            return;
        }
        let now = self.clock.now();
        let at = unix_secs(self.clock.wall());
        let record = match key {
            EntryKey::Announcement { owner, identifier } => {
                let Some(a) = self.announcements.get(identifier).and_then(|m| m.get(owner)) else { return };
                if a.soft_expired {
                    JournalRecord::RemoveAnnouncement { owner: owner.to_hex(), identifier: identifier.clone() }
                } else {
                    JournalRecord::Announcement { at, entry: saved_announcement(a, now) }
                }
            }
            EntryKey::State { identifier, event_id } => {
                let Some(s) = self.states.get(identifier).and_then(|list| list.iter().find(|s| s.event.id == *event_id)) else { return };
                JournalRecord::State { at, entry: HeldState::of(s).saved(identifier, now) }
            }
            EntryKey::Pr { event_id } => {
                let Some(p) = self.prs.get(event_id) else { return };
                JournalRecord::Pr { at, id: event_id.to_hex(), entry: saved_pr(p, now) }
            }
        };
        self.push_journal(record);
    }

    /// Journals that the entry `key` names left the purgatory.
    pub(super) fn journal_removed(&mut self, key: &EntryKey) {
        if !self.journal_on() {
            return;
        }
        let record = match key {
            EntryKey::Announcement { owner, identifier } => {
                JournalRecord::RemoveAnnouncement { owner: owner.to_hex(), identifier: identifier.clone() }
            }
            EntryKey::State { identifier, event_id } => {
                JournalRecord::RemoveState { identifier: identifier.clone(), id: event_id.to_hex() }
            }
            EntryKey::Pr { event_id } => JournalRecord::RemovePr { id: event_id.to_hex() },
        };
        self.push_journal(record);
    }

    /// Remembers `id` as expired without its git data (and journals it).
    pub(super) fn record_expired(&mut self, id: EventId, wall: std::time::SystemTime) {
        self.expired.record(id, wall, self.config.caps.expired_events);
        self.push_journal(JournalRecord::Expired { id: id.to_hex(), at: unix_secs(wall) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testutil::*;
    use super::super::{ManualClock, SweepAction};
    use proptest::prelude::*;

    /// A mutation of the purgatory, as the relay makes them.
    #[derive(Debug, Clone)]
    enum Op {
        Announce { author: usize, variant: usize, identifier: u8 },
        HoldState { author: usize, variant: usize, identifier: u8 },
        ReleaseState { author: usize, variant: usize, identifier: u8 },
        HoldPr { author: usize, variant: usize },
        Placeholder { n: u8, identifier: u8 },
        ReleasePr { n: u8 },
        Promote { author: usize, identifier: u8 },
        Extend { identifier: u8 },
        /// Minutes pass, then the expiry sweep runs (and cleans placeholders' refs).
        Later { minutes: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let who = || (0..3usize, 0..3usize, 0..2u8);
        prop_oneof![
            who().prop_map(|(author, variant, identifier)| Op::Announce { author, variant, identifier }),
            who().prop_map(|(author, variant, identifier)| Op::HoldState { author, variant, identifier }),
            who().prop_map(|(author, variant, identifier)| Op::ReleaseState { author, variant, identifier }),
            (0..3usize, 0..3usize).prop_map(|(author, variant)| Op::HoldPr { author, variant }),
            (0..4u8, 0..2u8).prop_map(|(n, identifier)| Op::Placeholder { n, identifier }),
            (0..4u8).prop_map(|n| Op::ReleasePr { n }),
            (0..3usize, 0..2u8).prop_map(|(author, identifier)| Op::Promote { author, identifier }),
            (0..2u8).prop_map(|identifier| Op::Extend { identifier }),
            (0..40u64).prop_map(|minutes| Op::Later { minutes }),
        ]
    }

    fn ident(i: u8) -> String {
        format!("repo{i}")
    }

    fn pr_id(n: u8) -> EventId {
        if n < 3 {
            signed(0, PR, n as usize).id
        } else {
            EventId::from_byte_array([n; 32])
        }
    }

    fn apply(clock: &ManualClock, p: &mut Purgatory, op: &Op) {
        match *op {
            Op::Announce { author, variant, identifier } => {
                let _ = add_ann(p, &signed(author, ANNOUNCEMENT, variant), &ident(identifier));
            }
            Op::HoldState { author, variant, identifier } => {
                let ev = signed(author, STATE, variant);
                let _ = p.add_state(ev.clone(), ev.pubkey, ident(identifier));
            }
            Op::ReleaseState { author, variant, identifier } => {
                p.remove_state_event(&ident(identifier), &signed(author, STATE, variant).id);
            }
            Op::HoldPr { author, variant } => {
                let _ = p.add_pr(signed(author, PR, variant), "c0ffee".into(), vec![repo(0, "repo0")]);
            }
            Op::Placeholder { n, identifier } => {
                let _ = p.add_pr_placeholder(pr_id(n), "beef".into(), repo(1, &ident(identifier)));
            }
            Op::ReleasePr { n } => {
                p.remove_pr(&pr_id(n));
            }
            Op::Promote { author, identifier } => {
                p.promote_announcement(&pubkey(author as u8), &ident(identifier));
            }
            Op::Extend { identifier } => {
                let ids: Vec<EventId> = p.states_for(&ident(identifier)).iter().map(|s| s.event.id).collect();
                p.extend_expiry(&ident(identifier), &ids, MIN30);
                for author in 0..3u8 {
                    p.extend_announcement_expiry(&pubkey(author), &ident(identifier), MIN30);
                }
            }
            Op::Later { minutes } => {
                clock.advance(std::time::Duration::from_secs(minutes * 60));
                for action in p.sweep() {
                    if let SweepAction::ExpirePlaceholder { event_id, destinations, .. } = action {
                        p.placeholder_cleaned(&event_id, &destinations);
                    }
                }
            }
        }
    }

    /// Everything but the timing offsets (which depend on when each file was written).
    fn shape(state: &PurgatoryState) -> String {
        let mut s = state.clone();
        s.saved_at = 0;
        for a in s.announcement_purgatory.values_mut() {
            (a.age_secs, a.expires_in_secs) = (0, 0);
        }
        for list in s.state_events.values_mut() {
            for st in list {
                (st.age_secs, st.expires_in_secs) = (0, 0);
            }
        }
        for pr in s.pr_events.values_mut() {
            (pr.age_secs, pr.expires_in_secs) = (0, 0);
        }
        s.to_json()
    }

    /// Absolute unix deadline of every entry still ahead (entries due now compare as due).
    fn deadlines(state: &PurgatoryState) -> Vec<u64> {
        let abs = |secs: u64| if secs == 0 { 0 } else { state.saved_at + secs };
        let mut out: Vec<u64> = state.announcement_purgatory.values().map(|a| abs(a.expires_in_secs)).collect();
        out.extend(state.state_events.values().flatten().map(|s| abs(s.expires_in_secs)));
        out.extend(state.pr_events.values().map(|p| abs(p.expires_in_secs)));
        out.sort();
        out
    }

    /// The records a journalling purgatory writes for `ops`.
    fn journal_of(ops: &[Op]) -> Vec<JournalRecord> {
        let (clock, mut p) = purgatory();
        p.start_journal();
        for op in ops {
            apply(&clock, &mut p, op);
        }
        p.take_journal()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Encoding then decoding gives the records back.
        #[test]
        fn records_round_trip(ops in prop::collection::vec(op(), 0..40)) {
            let records = journal_of(&ops);
            let mut bytes = Vec::new();
            for r in &records {
                encode(r, &mut bytes);
            }
            let d = decode(&bytes);
            prop_assert_eq!(d.records, records);
            prop_assert!(!d.torn_tail);
            prop_assert_eq!(d.corrupt, 0);
        }

        /// A file cut anywhere (a crash mid-write) gives the records written whole before the
        /// cut, and says its tail is torn; never an error.
        #[test]
        fn a_torn_tail_is_ignored(ops in prop::collection::vec(op(), 1..30), cut in any::<prop::sample::Index>()) {
            let records = journal_of(&ops);
            let mut bytes = Vec::new();
            let mut ends = Vec::new();
            for r in &records {
                encode(r, &mut bytes);
                ends.push(bytes.len());
            }
            prop_assume!(!bytes.is_empty());
            let cut = cut.index(bytes.len() + 1);
            let d = decode(&bytes[..cut]);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            prop_assert_eq!(&d.records[..], &records[..whole]);
            prop_assert_eq!(d.torn_tail, !ends.contains(&cut) && cut > 0);
            prop_assert_eq!(d.corrupt, 0);
        }

        /// A checkpoint taken at any point plus the journal written since gives the purgatory
        /// as it is at the end: same entries, same deadlines, same expired ids.
        #[test]
        fn checkpoint_plus_journal_is_the_purgatory(
            before in prop::collection::vec(op(), 0..30),
            after in prop::collection::vec(op(), 0..30),
        ) {
            let (clock, mut p) = purgatory();
            p.start_journal();
            for op in &before {
                apply(&clock, &mut p, op);
            }
            let mut state = p.snapshot().to_state();
            p.take_journal();
            for op in &after {
                apply(&clock, &mut p, op);
            }
            let mut bytes = Vec::new();
            for r in &p.take_journal() {
                encode(r, &mut bytes);
            }
            replay(&mut state, decode(&bytes).records);
            let end = p.snapshot().to_state();
            prop_assert_eq!(shape(&state), shape(&end));
            prop_assert_eq!(deadlines(&state), deadlines(&end));
        }
    }

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn torn_and_corrupt_lines_are_skipped() {
        let a = JournalRecord::RemovePr { id: "aa".into() };
        let b = JournalRecord::Expired { id: "bb".into(), at: 7 };
        let mut bytes = Vec::new();
        encode(&a, &mut bytes);
        let mut bad = Vec::new();
        encode(&b, &mut bad);
        bad[12] ^= 1;
        bytes.extend_from_slice(&bad);
        encode(&b, &mut bytes);
        let whole = bytes.len();
        encode(&a, &mut bytes);
        bytes.truncate(bytes.len() - 3);
        let d = decode(&bytes);
        assert_eq!(d.records, vec![a.clone(), b.clone()]);
        assert_eq!((d.torn_tail, d.corrupt), (true, 1));
        // Zeros after the last complete record (a crash after the size grew) are a torn tail.
        let mut zeros = bytes[..whole].to_vec();
        zeros.extend_from_slice(&[0; 64]);
        let d = decode(&zeros);
        assert_eq!((d.records.len(), d.torn_tail, d.corrupt), (2, true, 1));
    }
}
