//! The last purgatory rules of the seed design, lenient parsing where clients differ, and no lost
//! events under races or slow peers (issue 10), end to end against the real binaries.

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
