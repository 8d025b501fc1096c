//! The remaining purgatory rules (docs/protocol.md#purgatory, #differences), lenient parsing where
//! clients differ, and no lost events under races or slow peers, end to end against the real
//! binaries.

use std::future::Future;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_tests::git::git;
use grasp_tests::grasp::*;
use grasp_tests::{wait_until, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

async fn stored(c: &mut NostrClient, id: EventId) -> bool {
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

async fn held(c: &mut NostrClient, event: &Event) {
    let (ok, msg) = c.send_event(event).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "event kind {} not held: {msg}", event.kind);
}

/// A state event with raw tags (for what the fixtures would write correctly).
fn raw_state(keys: &Keys, identifier: &str, tags: &[&[&str]]) -> Event {
    let d = ["d", identifier];
    let mut all: Vec<&[&str]> = vec![&d];
    all.extend_from_slice(tags);
    event(keys, 30618, &all)
}

#[test]
fn a_head_without_the_ref_prefix_is_read_as_that_branch() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        let id = "lenient-head";
        held(&mut c, &announcement(&server, &owner, id, &[])).await;
        let repo = Repo::new(tmp.path(), &server, &owner.public_key(), id);
        let main = repo.commit("a.txt", "a");
        git(&repo.work.dir, &["checkout", "-q", "-b", "dev"]);
        let dev = repo.commit("b.txt", "b");
        let st = raw_state(&owner, id, &[&["refs/heads/main", &main], &["refs/heads/dev", &dev], &["HEAD", "refs/heads/dev"]]);
        held(&mut c, &st).await;
        repo.push(&["main", "dev"]).unwrap();
        assert!(stored(&mut c, st.id).await);
        assert_eq!(bare_head(&repo_dir(&server, &owner.public_key(), id)), "refs/heads/dev");
    });
}

#[test]
fn a_state_naming_an_abbreviated_id_is_held_but_never_authorises_nor_is_served() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        let id = "abbreviated";
        let published = publish_repo(&server, &mut c, tmp.path(), &owner, id).await;
        let next = published.repo.commit("c.txt", "c");
        let short = &next[..7];
        let bad = raw_state(&owner, id, &[&["refs/heads/main", short], &["HEAD", "ref: refs/heads/main"]]);
        held(&mut c, &bad).await;
        assert!(purgatory_ids(&server).await.contains(&bad.id.to_hex()));

        // The commit it abbreviates does not make it match: the push is refused, explained
        // against the stored state (the unsatisfiable one explains nothing).
        let refused = published.repo.push(&["main"]).unwrap_err();
        assert!(refused.contains(&format!("state expects {}", &published.tip[..7])), "{refused}");
        let dir = repo_dir(&server, &owner.public_key(), id);
        assert_eq!(bare_refs(&dir).get("refs/heads/main"), Some(&published.tip));
        assert!(!stored(&mut c, bad.id).await, "an unsatisfiable state is never served");
        assert!(purgatory_ids(&server).await.contains(&bad.id.to_hex()), "still held until it expires");
    });
}

/// A loopback "git server" that accepts connections and never answers.
struct Stall {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Stall {
    fn start() -> Stall {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let mut open = Vec::new();
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                open.push(stream);
            }
        });
        Stall { addr, accepted }
    }
}

#[test]
fn a_push_completes_while_a_background_fetch_of_the_same_repository_hangs() {
    let stall = Stall::start();
    let server = TestServer::start_with(&["--sync-allow-private", "--sync-user-delay", "0"]);
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        let id = "stalled";
        let stalled_url = format!("http://{}/{}.git", stall.addr, id);
        held(&mut c, &announcement_on(&[&server], &owner, id, &[&stalled_url])).await;
        let repo = Repo::new(tmp.path(), &server, &owner.public_key(), id);
        let tip = repo.commit("a.txt", "a");
        let st = state(&owner, id, &[("refs/heads/main", &tip)], Some("main"));
        held(&mut c, &st).await;
        // The background sync is now fetching from the peer that never answers.
        wait_until("the sync to connect to the stalled peer", TIMEOUT, || (stall.accepted.load(Ordering::SeqCst) > 0).then_some(()))
            .unwrap();
        let started = Instant::now();
        repo.push(&["main"]).unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(15), "the push waited {took:?} for the stalled fetch");
        assert!(stored(&mut c, st.id).await, "released before the push returned");
    });
}

// ---------------------------------------------------------------- the brain in process
//
// The expiry races and the internal entry points are driven on a `Grasp` built in this process
// (store, purgatory with a manual clock, bare repositories on disk without hooks), so a test can
// move time and run the expiry sweep exactly when it wants.

mod in_process {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use grasp_relay::grasp::Grasp;
    use grasp_relay::store::relay::Relay;
    use grasp_relay::store::Store;
    use grasp_state::names::identifier::RepoLayout;
    use grasp_state::purgatory::{ManualClock, Purgatory, PurgatoryConfig, RepoId};
    use grasp_tests::git::{git, WorkTree};
    use grasp_tests::grasp::*;
    use nostr::prelude::*;

    pub const TTL: Duration = Duration::from_secs(30 * 60);

    /// A brain on a temp dir, its clock, and one owner's stored announcement with its repository.
    pub struct Brain {
        pub grasp: Arc<Grasp>,
        pub clock: Arc<ManualClock>,
        pub owner: Keys,
        pub identifier: String,
        pub repo: PathBuf,
        pub work: WorkTree,
        _tmp: tempfile::TempDir,
    }

    impl Brain {
        pub async fn new(identifier: &str) -> Brain {
            Brain::restored(identifier, None).await
        }

        /// With `checkpoint` (JSON) given, the purgatory is restored from it as at startup (on
        /// the system clock); otherwise it starts empty on the manual clock.
        pub async fn restored(identifier: &str, checkpoint: Option<serde_json::Value>) -> Brain {
            let tmp = tempfile::tempdir().unwrap();
            let store = Store::open(&tmp.path().join("events")).await.unwrap();
            let clock = Arc::new(ManualClock::default());
            let layout = RepoLayout::new(tmp.path().join("git"));
            let purgatory = match checkpoint {
                None => Purgatory::new(PurgatoryConfig::default(), clock.clone()),
                Some(json) => {
                    std::fs::write(tmp.path().join(grasp_state::contract::layout::CHECKPOINT_FILE), json.to_string()).unwrap();
                    grasp_relay::grasp::lifecycle::restore(tmp.path(), &layout, PurgatoryConfig::default()).0
                }
            };
            let hooks = tmp.path().join("hooks");
            std::fs::create_dir_all(&hooks).unwrap();
            let metrics = Arc::new(grasp_relay::metrics::Metrics::new());
            let grasp = Arc::new(Grasp::new(Arc::new(Relay::new(store)), purgatory, layout.clone(), hooks.clone(), "127.0.0.1:9".into(), metrics));
            let owner = Keys::generate();
            let repo = grasp_relay::git::repos::create_bare_repo(&layout, &owner.public_key(), identifier, &hooks).unwrap();
            let ann = event(&owner, 30617, &[&["d", identifier], &["clone", "http://127.0.0.1:9/x.git"], &["relays", "ws://127.0.0.1:9"]]);
            grasp.relay.publish(&ann).await.unwrap();
            let work = WorkTree::new(tmp.path().join("work"));
            Brain { grasp, clock, owner, identifier: identifier.into(), repo, work, _tmp: tmp }
        }

        pub fn repo_id(&self) -> RepoId {
            RepoId::new(self.owner.public_key(), &self.identifier)
        }

        /// A git-first push of `commit` to `refs/nostr/<id>`: the placeholder the pre-receive
        /// hook reserves, and the ref the receive-pack writes.
        pub fn git_first_push(&self, id: EventId, commit: &str) {
            let _durable = self.grasp.purgatory.reserve_placeholders(&self.repo_id(), &[(id, commit.to_string())], None, 0).unwrap();
            push_ref(&self.work, &self.repo, commit, &nostr_ref(id));
        }

        pub fn nostr_ref_of(&self, id: EventId) -> Option<String> {
            bare_refs(&self.repo).get(&nostr_ref(id)).cloned()
        }

        pub async fn stored(&self, id: EventId) -> bool {
            self.grasp.event_by_id(&id).await.is_some()
        }
    }

    pub fn nostr_ref(id: EventId) -> String {
        format!("refs/nostr/{}", id.to_hex())
    }

    /// Pushes `commit` to `name` of the bare repository on disk (it has no hooks).
    pub fn push_ref(work: &WorkTree, repo: &Path, commit: &str, name: &str) {
        git(&work.dir, &["push", "-q", repo.to_str().unwrap(), &format!("{commit}:{name}")]);
    }
}

use grasp_relay::grasp::lifecycle::expire;
use grasp_state::trust::auth::Submitter;

/// A client that did not authenticate.
const ANONYMOUS: Submitter<'static> = Submitter::ANONYMOUS;
use grasp_state::purgatory::PurgatoryConfig;
use in_process::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_pull_request_accepted_while_its_placeholder_expires_keeps_its_ref() {
    runtime().block_on(async {
        let brain = Brain::new("race").await;
        let contributor = Keys::generate();
        for round in 0..100 {
            let commit = brain.work.commit("f.txt", &format!("{round}"));
            let pr = pull_request_at(&contributor, &brain.owner.public_key(), "race", &commit, now());
            brain.git_first_push(pr.id, &commit);
            brain.clock.advance(TTL + Duration::from_secs(1));
            let grasp = brain.grasp.clone();
            let sweep = tokio::spawn(async move { expire(&grasp).await });
            let (ok, msg) = brain.grasp.submit(&pr, &ANONYMOUS).await;
            sweep.await.unwrap();
            assert!(ok, "round {round}: {msg}");
            assert!(brain.stored(pr.id).await, "round {round}: accepted with its commit present");
            assert_eq!(brain.nostr_ref_of(pr.id), Some(commit.clone()), "round {round}: the accepted pull request lost its ref");
            expire(&brain.grasp).await;
            assert_eq!(brain.nostr_ref_of(pr.id), Some(commit), "round {round}");
        }
    });
}

#[test]
fn a_push_of_the_same_commit_during_placeholder_cleanup_is_not_orphaned() {
    runtime().block_on(async {
        let brain = Brain::new("repush").await;
        let commit = brain.work.commit("f.txt", "x");
        let id = EventId::from_hex(&random_event_id()).unwrap();
        brain.git_first_push(id, &commit);
        brain.clock.advance(TTL + Duration::from_secs(1));
        // The expiry waits for the repository lock while the same commit is pushed again.
        let guard = brain.grasp.locks.lock_within(&brain.repo, TIMEOUT).await.unwrap();
        let grasp = brain.grasp.clone();
        let sweep = tokio::spawn(async move { expire(&grasp).await });
        let deadline = std::time::Instant::now() + TIMEOUT;
        while !brain.grasp.purgatory.placeholder_cleanup_pending(&id, &commit) {
            assert!(std::time::Instant::now() < deadline, "the sweep never ran");
            tokio::task::yield_now().await;
        }
        brain.git_first_push(id, &commit);
        drop(guard);
        sweep.await.unwrap();
        assert_eq!(brain.nostr_ref_of(id), Some(commit.clone()), "the ref of the second push stays");
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 1, "and keeps its record");
        // When that record expires in turn, the ref is removed: it was never orphaned.
        brain.clock.advance(TTL + Duration::from_secs(1));
        expire(&brain.grasp).await;
        assert_eq!(brain.nostr_ref_of(id), None, "the second push's ref is cleaned at its own expiry");
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 0);
    });
}

#[test]
fn an_expired_placeholder_whose_event_is_stored_keeps_its_ref() {
    runtime().block_on(async {
        let brain = Brain::new("stored").await;
        let contributor = Keys::generate();
        let commit = brain.work.commit("f.txt", "x");
        let pr = pull_request_at(&contributor, &brain.owner.public_key(), "stored", &commit, now());
        brain.git_first_push(pr.id, &commit);
        // The event is in the store, yet the placeholder is still held (an older checkpoint).
        brain.grasp.relay.publish(&pr).await.unwrap();
        brain.clock.advance(TTL + Duration::from_secs(1));
        expire(&brain.grasp).await;
        assert_eq!(brain.nostr_ref_of(pr.id), Some(commit));
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 0, "the placeholder is dropped");
    });
}

#[test]
fn a_failed_placeholder_ref_deletion_is_retried() {
    runtime().block_on(async {
        let brain = Brain::new("retry").await;
        let commit = brain.work.commit("f.txt", "x");
        let id = EventId::from_hex(&random_event_id()).unwrap();
        brain.git_first_push(id, &commit);
        brain.clock.advance(TTL + Duration::from_secs(1));
        // The ref cannot be deleted: another git process holds its lock file.
        let lock = brain.repo.join(format!("{}.lock", nostr_ref(id)));
        std::fs::write(&lock, "").unwrap();
        expire(&brain.grasp).await;
        std::fs::remove_file(&lock).unwrap();
        assert_eq!(brain.nostr_ref_of(id), Some(commit.clone()), "deletion failed");
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 1, "the record is kept for a retry");
        brain.clock.advance(PurgatoryConfig::default().placeholder_retry);
        expire(&brain.grasp).await;
        assert_eq!(brain.nostr_ref_of(id), None, "removed on the retry");
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 0);
    });
}

#[test]
fn a_legacy_placeholder_without_destinations_expires_without_touching_refs() {
    runtime().block_on(async {
        let id = EventId::from_hex(&random_event_id()).unwrap();
        // An old version recorded the placeholder without saying where its ref is.
        let commit = "1".repeat(40);
        let checkpoint = serde_json::json!({
            "saved_at": now(),
            "pr_events": { id.to_hex(): { "commit": commit, "age_secs": 1800, "expires_in_secs": 0 } }
        });
        let brain = Brain::restored("legacy", Some(checkpoint)).await;
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 1, "the legacy record loads");
        let pushed = brain.work.commit("f.txt", "x");
        push_ref(&brain.work, &brain.repo, &pushed, &nostr_ref(id));
        expire(&brain.grasp).await;
        assert_eq!(brain.grasp.purgatory.stats().placeholders, 0, "expired and forgotten");
        assert_eq!(brain.nostr_ref_of(id), Some(pushed), "no ref is touched: the record names none");
    });
}

#[test]
fn the_sync_queue_is_rebuilt_after_a_restart() {
    // A delay long enough that nothing is fetched: only the queue is looked at.
    let mut server = TestServer::start_with(&["--sync-allow-private", "--sync-user-delay", "1h"]);
    let tmp = tempfile::tempdir().unwrap();
    let id = "queued";
    let queued = |stats: &serde_json::Value| stats["identifiers"].as_array().is_some_and(|a| a.iter().any(|e| e["identifier"] == id));
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        held(&mut c, &announcement(&server, &owner, id, &[])).await;
        let repo = Repo::new(tmp.path(), &server, &owner.public_key(), id);
        let tip = repo.commit("a.txt", "a");
        held(&mut c, &state(&owner, id, &[("refs/heads/main", &tip)], Some("main"))).await;
        assert!(queued(&operator_get(&server, "/v1/sync").await.unwrap()));
    });
    server.restart();
    block_on(async {
        let stats = operator_get(&server, "/v1/sync").await.unwrap();
        assert!(queued(&stats), "the identifier the restored purgatory waits for is queued again: {stats}");
    });
}

#[test]
fn a_replacement_of_a_stored_announcement_is_stored_at_once() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        let id = "replaced";
        let published = publish_repo(&server, &mut c, tmp.path(), &owner, id).await;
        assert!(stored(&mut c, published.announcement).await);
        let newer = announcement_at(&server, &owner, id, &[Keys::generate().public_key()], now() + 1);
        let (ok, msg) = c.send_event(&newer).await.unwrap();
        assert!(ok && !msg.starts_with("purgatory:"), "{msg}");
        assert!(stored(&mut c, newer.id).await, "served at once");
        assert!(!purgatory_ids(&server).await.contains(&newer.id.to_hex()), "not held");
        assert!(!stored(&mut c, published.announcement).await, "the older version is replaced");
    });
}

#[test]
fn a_fully_expired_announcement_sent_again_is_blocked_without_a_new_repository() {
    let server = TestServer::start_with(&["--purgatory-ttl", "1", "--soft-expiry-ttl", "1"]);
    block_on(async {
        let mut c = connect(&server).await;
        let owner = Keys::generate();
        let id = "expired-ann";
        let ann = announcement(&server, &owner, id, &[]);
        held(&mut c, &ann).await;
        let dir = repo_dir(&server, &owner.public_key(), id);
        assert!(dir.exists());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let listing = purgatory_listing(&server).await;
            let expired = listing["expired_events"].as_array().is_some_and(|a| a.iter().any(|e| e["event_id"] == ann.id.to_hex()));
            if expired {
                break;
            }
            assert!(Instant::now() < deadline, "the announcement never fully expired: {listing}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!dir.exists(), "soft expiry deleted the repository");
        // The same event again (e.g. from a peer relay): no new 30-minute cycle, no repository.
        let (ok, msg) = c.send_event(&ann).await.unwrap();
        assert!(!ok && msg.starts_with("blocked:") && msg.contains("expired"), "{msg}");
        assert!(!dir.exists(), "no new bare repository");
        assert!(!purgatory_ids(&server).await.contains(&ann.id.to_hex()));
        // A new announcement (a new event) from the owner starts over.
        let fresh = announcement_at(&server, &owner, id, &[], now() + 1);
        held(&mut c, &fresh).await;
        assert!(dir.exists());
    });
}

/// The queue entry of `identifier` in the syncer's figures: its last scheduling delay in ms.
fn sync_delay_ms(sync: &grasp_relay::sync::SyncHandle, identifier: &str) -> Option<u64> {
    let stats = sync.stats()?;
    stats.identifiers.iter().find(|e| e.identifier == identifier).map(|e| e.last_delay_ms)
}

#[test]
fn events_from_relay_sync_are_fetched_after_500ms_and_user_events_after_3_minutes() {
    let from_sync = Submitter { authenticated: &[], from_sync: true, address: None };
    runtime().block_on(async {
        let brain = Brain::new("origins").await;
        let shutdown = grasp_relay::shutdown::ShutdownController::new();
        let (syncer, stats) = grasp_relay::sync::start(&brain.grasp, grasp_relay::sync::SyncConfig::default(), shutdown.subscribe());
        let st = |n: u64| state_at(&brain.owner, "origins", &[("refs/heads/main", &"a".repeat(40))], Some("main"), now() + n);
        let (ok, msg) = brain.grasp.submit(&st(0), &ANONYMOUS).await;
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        assert_eq!(sync_delay_ms(&stats, "origins"), Some(180_000), "a user's event waits for the push");
        let (ok, msg) = brain.grasp.submit(&st(1), &from_sync).await;
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        assert_eq!(sync_delay_ms(&stats, "origins"), Some(500), "a synced event is fetched at once");

        // A soft-expired announcement keeps its state events syncing: one arriving through relay
        // sync revives it and is fetched for after 500 ms.
        let ann = event(&brain.owner, 30617, &[&["d", "soft"], &["clone", "http://127.0.0.1:9/x.git"], &["relays", "ws://127.0.0.1:9"]]);
        let (ok, msg) = brain.grasp.submit(&ann, &ANONYMOUS).await;
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        brain.clock.advance(TTL + Duration::from_secs(1));
        expire(&brain.grasp).await;
        let soft = brain.grasp.purgatory.listing();
        assert!(soft.entries.iter().any(|e| e.soft_expired && e.identifier.as_deref() == Some("soft")), "soft-expired");
        let registrations = brain.grasp.purgatory.state_sync_registrations();
        assert!(registrations.iter().any(|r| r.identifier == "soft" && r.soft_expired), "still registered for state sync");
        let late = state_at(&brain.owner, "soft", &[("refs/heads/main", &"b".repeat(40))], Some("main"), now());
        let (ok, msg) = brain.grasp.submit(&late, &from_sync).await;
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        assert_eq!(sync_delay_ms(&stats, "soft"), Some(500));
        assert!(brain.grasp.repo_path(&brain.owner.public_key(), "soft").unwrap().exists(), "revived");
        shutdown.trigger();
        syncer.await.unwrap();
    });
}

#[test]
fn a_release_the_store_fails_stays_held_and_is_retried() {
    runtime().block_on(async {
        let brain = Brain::new("store-error").await;
        let shutdown = grasp_relay::shutdown::ShutdownController::new();
        let config = grasp_relay::sync::SyncConfig { tick: Duration::from_millis(20), ..Default::default() };
        let (syncer, _) = grasp_relay::sync::start(&brain.grasp, config, shutdown.subscribe());
        let tip = brain.work.commit("f.txt", "x");
        let st = state(&brain.owner, "store-error", &[("refs/heads/main", &tip)], Some("main"));
        let (ok, msg) = brain.grasp.submit(&st, &ANONYMOUS).await;
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        // The release after the push cannot store the state: it stays held, nothing is lost.
        // The failure is armed before the push, so whichever pass releases first (this one or a
        // background one) meets it: no save happens here but the release's.
        brain.grasp.relay.store().fail_next_saves(1);
        push_ref(&brain.work, &brain.repo, &tip, "refs/heads/main");
        brain.grasp.process_identifier("store-error").await;
        assert_eq!(brain.grasp.relay.store().failing_saves_left(), 0, "the first release met the failure");
        // The background sync retries the release (the data is all here: nothing is fetched).
        let deadline = std::time::Instant::now() + TIMEOUT;
        while !brain.stored(st.id).await {
            assert!(std::time::Instant::now() < deadline, "the release was never retried");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(brain.grasp.purgatory.stats().states, 0);
        shutdown.trigger();
        syncer.await.unwrap();
    });
}

#[test]
fn a_promotion_prunes_its_authors_older_states_whose_objects_are_missing() {
    runtime().block_on(async {
        let brain = Brain::new("prune").await;
        let maintainer = Keys::generate();
        // Replaces the announcement made with the brain: a later second, so it always wins.
        let listed = maintainer.public_key().to_hex();
        let tags = [
            vec!["d", "prune"],
            vec!["clone", "http://127.0.0.1:9/x.git"],
            vec!["relays", "ws://127.0.0.1:9"],
            vec!["maintainers", listed.as_str()],
        ];
        let ann = EventBuilder::new(Kind::from(30617u16), "")
            .tags(tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()))
            .custom_created_at(Timestamp::from(now() + 5))
            .finalize(&brain.owner)
            .unwrap();
        brain.grasp.relay.publish(&ann).await.unwrap();
        let tip = brain.work.commit("f.txt", "x");
        let (never, other) = ("1".repeat(40), "2".repeat(40));
        let at = now();
        let older = state_at(&brain.owner, "prune", &[("refs/heads/main", &never)], Some("main"), at);
        let theirs = state_at(&maintainer, "prune", &[("refs/heads/main", &other)], Some("main"), at);
        let promoted = state_at(&brain.owner, "prune", &[("refs/heads/main", &tip)], Some("main"), at + 1);
        let newer = state_at(&brain.owner, "prune", &[("refs/heads/main", &never)], Some("main"), at + 2);
        for ev in [&older, &theirs, &promoted, &newer] {
            let (ok, msg) = brain.grasp.submit(ev, &ANONYMOUS).await;
            assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        }
        push_ref(&brain.work, &brain.repo, &tip, "refs/heads/main");
        brain.grasp.process_identifier("prune").await;
        assert!(brain.stored(promoted.id).await);
        let held = purgatory_event_ids(&brain.grasp);
        assert!(!held.contains(&older.id), "the author's older state without its objects is pruned");
        assert!(held.contains(&theirs.id), "another maintainer's state stays");
        assert!(held.contains(&newer.id), "a newer state of the author stays");
    });
}

fn purgatory_event_ids(grasp: &grasp_relay::grasp::Grasp) -> Vec<EventId> {
    grasp.purgatory.listing().entries.iter().filter_map(|e| EventId::from_hex(&e.event_id).ok()).collect()
}
