//! A replica set (docs/scaling.md): three grasp-relays serving one public domain, each naming the
//! others with `--replica`, on loopback addresses and without `--sync-allow-private` (the
//! operator named them). Whatever one accepts, the others serve: announcements (which list only
//! the public domain, never the replicas), states and their git data, issues. Every wait is on
//! an observable condition with a deadline.

use std::time::Duration;

use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

const WAIT: Duration = Duration::from_secs(30);
const DOMAIN: &str = "grasp.example";

async fn stored(server: &TestServer, id: EventId) -> bool {
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

fn main_ref(server: &TestServer, owner: &PublicKey, identifier: &str) -> Option<String> {
    let dir = repo_dir(server, owner, identifier);
    dir.join("HEAD").exists().then(|| bare_refs(&dir).get("refs/heads/main").cloned()).flatten()
}

/// `owner` announces `identifier` on the public domain to `server` only (as nginx would route
/// it); the client it used and the announcement.
async fn announce(server: &TestServer, owner: &Keys, identifier: &str) -> (NostrClient, Event) {
    let clone = format!("https://{DOMAIN}/{}/{identifier}.git", owner.public_key().to_bech32().unwrap());
    let ann = event(owner, 30617, &[&["d", identifier], &["clone", &clone], &["relays", &format!("wss://{DOMAIN}")]]);
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let (ok, msg) = c.send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    (c, ann)
}

/// Two replicas naming each other; `a_extra` only for the first.
fn pair(a_extra: &[&str]) -> (TestServer, TestServer) {
    let args = ["--public-host", DOMAIN, "--relay-sync-backoff", "300ms", "--relay-sync-backoff-cap", "2s", "--sync-delay", "200ms"];
    let mut a = TestServer::start_with(&args);
    let mut b = TestServer::start_with(&args);
    let (a_url, b_url) = (format!("http://{}", a.addr()), format!("http://{}", b.addr()));
    let mut with = args.to_vec();
    with.extend(["--replica", b_url.as_str()]);
    with.extend_from_slice(a_extra);
    a.restart_with(&with);
    let mut with = args.to_vec();
    with.extend(["--replica", a_url.as_str()]);
    b.restart_with(&with);
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatever_one_replica_accepts_every_replica_serves() {
    let args = ["--public-host", DOMAIN, "--relay-sync-backoff", "300ms", "--relay-sync-backoff-cap", "2s", "--sync-delay", "200ms"];
    let mut set: Vec<TestServer> = (0..3).map(|_| TestServer::start_with(&args)).collect();
    // Each names the others (their ports are known once they listen).
    let urls: Vec<String> = set.iter().map(|s| format!("http://{}", s.addr())).collect();
    for (i, server) in set.iter_mut().enumerate() {
        let mut with: Vec<&str> = args.to_vec();
        for (j, url) in urls.iter().enumerate() {
            if i != j {
                with.extend(["--replica", url.as_str()]);
            }
        }
        server.restart_with(&with);
    }
    let (a, b, c) = (&set[0], &set[1], &set[2]);
    // Each reports ready once relay sync went through its history with the two others.
    for server in [a, b, c] {
        let (api, _) = hook_api(server);
        eventually!("every replica ready, caught up with the others", WAIT, {
            let body = match reqwest::get(format!("http://{api}/readyz")).await {
                Ok(resp) => resp.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            body.contains("ok replicas").then_some(())
        });
    }

    // The owner publishes to one replica only, as nginx would route them.
    let owner = Keys::generate();
    let identifier = "replicated";
    let (mut ca, ann) = announce(a, &owner, identifier).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path(), a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "one");
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = ca.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["main"]).expect("the push to one replica");

    for other in [b, c] {
        eventually!("the announcement on every replica", WAIT, stored(other, ann.id).await.then_some(()));
        eventually!("the state on every replica", WAIT, stored(other, st.id).await.then_some(()));
        eventually!("the pushed data on every replica", WAIT, (main_ref(other, &owner.public_key(), identifier).as_deref() == Some(tip.as_str())).then_some(()));
    }

    // An issue sent to another replica reaches the rest.
    let bug = issue(&Keys::generate(), &owner.public_key(), identifier);
    let (ok, msg) = NostrClient::connect(&b.ws_url()).await.unwrap().send_event(&bug).await.unwrap();
    assert!(ok, "{msg}");
    for other in [a, c] {
        eventually!("the issue on every replica", WAIT, stored(other, bug.id).await.then_some(()));
    }

    // The next push, to the first replica, is everywhere too.
    let next = repo.commit("README", "two");
    let st2 = state_at(&owner, identifier, &[("refs/heads/main", &next)], Some("main"), now() + 1);
    let (ok, msg) = ca.send_event(&st2).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["main"]).expect("the next push");
    for other in [b, c] {
        eventually!("the next push on every replica", WAIT, (main_ref(other, &owner.public_key(), identifier).as_deref() == Some(next.as_str())).then_some(()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acks_an_answer_waits_until_another_replica_holds_it() {
    let (a, mut b) = pair(&["--replica-acks", "1", "--replica-ack-timeout", "3s"]);

    // Answered by A once B holds it: B serves it at once, no waiting.
    let owner = Keys::generate();
    let identifier = "durable";
    let (mut ca, _) = announce(&a, &owner, identifier).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "one");
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = ca.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    let bug = issue(&Keys::generate(), &owner.public_key(), identifier);
    let out = repo.push(&["main"]).expect("the push");
    assert!(out.contains("grasp: held by 1 other replicas of this service"), "{out}");
    assert_eq!(main_ref(&b, &owner.public_key(), identifier).as_deref(), Some(tip.as_str()), "B serves the push when A's hook ends");
    let (ok, msg) = ca.send_event(&bug).await.unwrap();
    assert!(ok, "{msg}");
    assert!(stored(&b, bug.id).await, "B holds the issue when A answers OK true");

    // B is gone: A cannot confirm, and says so.
    b.kill();
    let lost = issue(&Keys::generate(), &owner.public_key(), identifier);
    let (ok, msg) = ca.send_event(&lost).await.unwrap();
    assert!(!ok && msg.starts_with("error: stored here, but only 0 of the 1 other replicas this service waits for confirmed it"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_with_an_empty_disk_catches_up() {
    let (a, mut b) = pair(&[]);
    b.kill();
    std::fs::remove_dir_all(b.data_dir()).unwrap();

    let owner = Keys::generate();
    let identifier = "returning";
    let clone = format!("https://{DOMAIN}/{}/{identifier}.git", owner.public_key().to_bech32().unwrap());
    let ann = event(&owner, 30617, &[&["d", identifier], &["clone", &clone], &["relays", &format!("wss://{DOMAIN}")]]);
    let mut ca = NostrClient::connect(&a.ws_url()).await.unwrap();
    assert!(ca.send_event(&ann).await.unwrap().0);
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "one");
    assert!(ca.send_event(&state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"))).await.unwrap().0);
    repo.push(&["main"]).expect("the push");

    b.restart();
    eventually!("the returning replica to serve the push", WAIT, (main_ref(&b, &owner.public_key(), identifier).as_deref() == Some(tip.as_str())).then_some(()));
}
