//! The ref cache: `git http-backend`'s own answers to the small reads of
//! [`grasp_state::git::ref_read`] (the upload-pack ref advertisement, v2 `ls-refs`), kept per
//! repository and request and served again, byte for byte, while the repository's
//! [`Fingerprint`] is unchanged (docs/architecture.md, "The ref cache").
//!
//! An answer is stored with the fingerprint read *before* git ran for it, so it holds a ref
//! state at least as new as its fingerprint; it is served only to a request whose fingerprint,
//! read when it arrives, is the same. Bounded: at most [`MAX_ANSWER_BYTES`] per answer and
//! `budget` bytes (keys included) in all, the least recently used answers going first.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use grasp_state::git::ref_read::ReadKey;
use hyper::header::{HeaderName, HeaderValue};

use super::ref_fingerprint::Fingerprint;
use crate::metrics::RefCacheMetrics;
use super::ref_generation::RepoIdentity;

/// Largest answer kept (a repository with a few thousand refs); a bigger one is streamed from
/// git every time.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// `--ref-cache-bytes`' default.
pub const DEFAULT_BUDGET: usize = 32 * 1024 * 1024;

/// What an entry costs besides its key and body (its headers, the map's own).
const ENTRY_OVERHEAD: usize = 512;

/// Most setups whose `POST git-upload-pack` header block is remembered (one per repository
/// space in practice; a reload can add one).
const MAX_SETUPS: usize = 8;

/// One of git's answers as it sent it: its status, its header fields in order, its body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// Answers by repository and read, each with the fingerprint it was made at.
#[derive(Debug)]
pub struct RefCache {
    budget: usize,
    metrics: RefCacheMetrics,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<(RepoIdentity, ReadKey), Entry>,
    /// The header block git answered a `POST git-upload-pack` with, by how git runs (the
    /// setup digest): learned from kept `ls-refs` answers, at most [`MAX_SETUPS`].
    post_heads: HashMap<Vec<u8>, Bytes>,
    /// The receive-pack advertisement of a repository without refs, by setup, config and read
    /// ([`RefCache::learn_empty`]), at most [`MAX_SETUPS`].
    empty_answers: HashMap<Vec<u8>, std::sync::Arc<Answer>>,
    bytes: usize,
    /// Use counter: an entry's `used` is the value at its last use.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    fingerprint: Fingerprint,
    answer: std::sync::Arc<Answer>,
    used: u64,
    size: usize,
}

impl RefCache {
    /// A cache holding at most `budget` bytes, counting its answers in `metrics`.
    pub fn new(budget: usize, metrics: RefCacheMetrics) -> RefCache {
        RefCache { budget, metrics, inner: Mutex::new(Inner::default()) }
    }

    /// Where hits and misses are counted.
    pub fn metrics(&self) -> &RefCacheMetrics {
        &self.metrics
    }

    /// The answer to `key` in `repo` if one was stored at `fingerprint`. An answer stored at
    /// another fingerprint is stale: it is dropped.
    pub fn get(&self, repo: RepoIdentity, key: &ReadKey, fingerprint: Fingerprint) -> Option<std::sync::Arc<Answer>> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.clock += 1;
        let clock = inner.clock;
        let map_key = (repo, key.clone());
        let entry = inner.entries.get_mut(&map_key)?;
        if entry.fingerprint == fingerprint {
            entry.used = clock;
            return Some(entry.answer.clone());
        }
        let size = entry.size;
        inner.entries.remove(&map_key);
        inner.bytes -= size;
        None
    }

    /// Stores git's `answer` to `key` in `repo`, made after `fingerprint` was read; evicts the
    /// least recently used answers past the budget. An answer too big is not stored.
    pub fn insert(&self, repo: RepoIdentity, key: ReadKey, fingerprint: Fingerprint, answer: Answer) {
        let size = key.as_bytes().len() + answer.body.len() + ENTRY_OVERHEAD;
        if answer.body.len() > MAX_ANSWER_BYTES || size > self.budget {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.clock += 1;
        let used = inner.clock;
        let entry = Entry { fingerprint, answer: std::sync::Arc::new(answer), used, size };
        if let Some(old) = inner.entries.insert((repo, key), entry) {
            inner.bytes -= old.size;
        }
        inner.bytes += size;
        while inner.bytes > self.budget {
            let Some(oldest) = inner.entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else { break };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= gone.size;
            }
        }
    }

    /// Records `head`, the CGI header block git answered a `POST git-upload-pack` with when run
    /// as `setup` says (the same for every such answer: `git http-backend` writes it before
    /// `upload-pack` runs).
    pub fn learn_post_head(&self, setup: &[u8], head: Bytes) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.post_heads.len() >= MAX_SETUPS && !inner.post_heads.contains_key(setup) {
            inner.post_heads.clear();
        }
        inner.post_heads.insert(setup.to_vec(), head);
    }

    /// The header block git answers a `POST git-upload-pack` with under `setup`, once learned.
    pub fn post_head(&self, setup: &[u8]) -> Option<Bytes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).post_heads.get(setup).cloned()
    }

    /// Records git's `answer` to a receive-pack advertisement of a repository without refs
    /// (`super::ref_fingerprint::empty_for_push`), under `key` (the setup, the repository's
    /// config and the read): every repository of that key gets the same answer. Kept only if
    /// the answer is that of an empty repository
    /// (`grasp_state::git::ref_read::is_empty_receive_advertisement`), whatever happened meanwhile.
    pub fn learn_empty(&self, key: Vec<u8>, answer: Answer) {
        if answer.status != 200 || !grasp_state::git::ref_read::is_empty_receive_advertisement(&answer.body) {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.empty_answers.len() >= MAX_SETUPS && !inner.empty_answers.contains_key(&key) {
            inner.empty_answers.clear();
        }
        inner.empty_answers.insert(key, std::sync::Arc::new(answer));
    }

    /// The answer learned for an empty repository of `key` ([`RefCache::learn_empty`]).
    pub fn empty(&self, key: &[u8]) -> Option<std::sync::Arc<Answer>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).empty_answers.get(key).cloned()
    }

    /// Bytes held (keys, bodies and the per-entry overhead).
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::git::ref_read::{candidate, Candidate, ReadHeaders};

    fn key(protocol: &'static str) -> ReadKey {
        let headers = ReadHeaders { git_protocol: Some(protocol.as_bytes()), ..ReadHeaders::default() };
        match candidate("GET", "/info/refs", "service=git-upload-pack", headers) {
            Some(Candidate::Advertisement(k)) => k,
            other => panic!("{other:?}"),
        }
    }

    fn answer(len: usize) -> Answer {
        Answer { status: 200, headers: vec![], body: Bytes::from(vec![b'x'; len]) }
    }

    fn repo(ino: u64) -> RepoIdentity {
        RepoIdentity { dev: 1, ino }
    }

    fn fp(n: u8) -> Fingerprint {
        // A real fingerprint of a made-up state: only equality matters here.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("refs")).unwrap();
        super::super::ref_fingerprint::read(tmp.path(), &[n]).unwrap().1
    }

    #[test]
    fn an_answer_is_served_at_its_fingerprint_only() {
        let cache = RefCache::new(DEFAULT_BUDGET, RefCacheMetrics::default());
        let (a, b) = (fp(1), fp(2));
        cache.insert(repo(1), key("version=2"), a, answer(10));
        assert_eq!(cache.get(repo(1), &key("version=2"), a).unwrap().body.len(), 10);
        assert!(cache.get(repo(2), &key("version=2"), a).is_none(), "another repository");
        assert!(cache.get(repo(1), &key("version=1"), a).is_none(), "another read");
        assert!(cache.get(repo(1), &key("version=2"), b).is_none(), "the refs changed");
        assert!(cache.get(repo(1), &key("version=2"), a).is_none(), "a stale answer is dropped");
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_go_first() {
        let per = 1000 + ENTRY_OVERHEAD + key("version=2").as_bytes().len();
        let cache = RefCache::new(3 * per, RefCacheMetrics::default());
        let f = fp(1);
        for ino in 1..=3 {
            cache.insert(repo(ino), key("version=2"), f, answer(1000));
        }
        assert!(cache.get(repo(1), &key("version=2"), f).is_some());
        cache.insert(repo(4), key("version=2"), f, answer(1000));
        assert!(cache.bytes() <= 3 * per);
        assert!(cache.get(repo(2), &key("version=2"), f).is_none(), "the least recently used went");
        for ino in [1, 3, 4] {
            assert!(cache.get(repo(ino), &key("version=2"), f).is_some(), "{ino}");
        }
        cache.insert(repo(5), key("version=2"), f, answer(MAX_ANSWER_BYTES + 1));
        assert!(cache.get(repo(5), &key("version=2"), f).is_none(), "too big to keep");
    }

    #[test]
    fn post_heads_are_known_per_setup_and_bounded() {
        let cache = RefCache::new(DEFAULT_BUDGET, RefCacheMetrics::default());
        assert_eq!(cache.post_head(b"a"), None);
        cache.learn_post_head(b"a", Bytes::from_static(b"Content-Type: x\r\n\r\n"));
        assert_eq!(cache.post_head(b"a").as_deref(), Some(&b"Content-Type: x\r\n\r\n"[..]));
        assert_eq!(cache.post_head(b"b"), None);
        for i in 0..100u8 {
            cache.learn_post_head(&[i], Bytes::new());
        }
        assert!(cache.inner.lock().unwrap().post_heads.len() <= MAX_SETUPS);
    }
}
