//! A replica set (docs/scaling.md): three grasp-relays serving one public domain, each naming the
//! others with `--replica`, on loopback addresses and without `--sync-allow-private` (the
//! operator named them). Whatever one accepts, the others serve: announcements (which list only
//! the public domain, never the replicas), states and their git data, issues. Every wait is on
//! an observable condition with a deadline.

use std::path::Path;
use std::time::Duration;

use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

const WAIT: Duration = Duration::from_secs(30);
const DOMAIN: &str = "grasp.example";

/// Waits until `server` reports ready, caught up with the other replicas (`/readyz`).
async fn caught_up(server: &TestServer) {
    let (api, _) = hook_api(server);
    eventually!("the replica ready, caught up with the others", WAIT, {
        let body = match reqwest::get(format!("http://{api}/readyz")).await {
            Ok(resp) => resp.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        body.contains("ok replicas").then_some(())
    });
}

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
    pair_with(&[], a_extra)
}

/// [`pair`], with `both` for each of them.
fn pair_with(both: &[&str], a_extra: &[&str]) -> (TestServer, TestServer) {
    let mut args = vec!["--public-host", DOMAIN, "--relay-sync-backoff", "300ms", "--relay-sync-backoff-cap", "2s", "--sync-delay", "200ms"];
    args.extend_from_slice(both);
    let mut a = TestServer::start_with(&args);
    let mut b = TestServer::start_with(&args);
    let (a_url, b_url) = (format!("http://{}", a.addr()), format!("http://{}", b.addr()));
    let mut with = args.clone();
    with.extend(["--replica", b_url.as_str()]);
    with.extend_from_slice(a_extra);
    a.restart_with(&with);
    let mut with = args.clone();
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
        caught_up(server).await;
    }

    // The owner publishes to one replica only, as nginx would route them.
    let owner = Keys::generate();
    let identifier = "replicated";
    let (mut ca, ann) = announce(a, &owner, identifier).await;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, tip, st) = stated(tmp.path(), a, &mut ca, &owner, identifier).await;
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

/// A work tree in `dir` for `owner`'s `identifier` on `server` with one commit, and the state
/// naming it sent on `c` and accepted: (the work tree, the commit, the state).
async fn stated(dir: &Path, server: &TestServer, c: &mut NostrClient, owner: &Keys, identifier: &str) -> (Repo, String, Event) {
    let repo = Repo::new(dir, server, &owner.public_key(), identifier);
    let tip = repo.commit("README", "one");
    let st = state(owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    (repo, tip, st)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acks_an_answer_waits_until_another_replica_holds_it() {
    let (a, mut b) = pair(&["--replica-acks", "1", "--replica-ack-timeout", "3s"]);

    // Answered by A once B holds it: B serves it at once, no waiting.
    let owner = Keys::generate();
    let identifier = "durable";
    let (mut ca, _) = announce(&a, &owner, identifier).await;
    let tmp = tempfile::tempdir().unwrap();
    let (repo, tip, _) = stated(tmp.path(), &a, &mut ca, &owner, identifier).await;
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
    let (repo, tip, _) = stated(tmp.path(), &a, &mut ca, &owner, identifier).await;
    repo.push(&["main"]).expect("the push");

    b.restart();
    eventually!("the returning replica to serve the push", WAIT, (main_ref(&b, &owner.public_key(), identifier).as_deref() == Some(tip.as_str())).then_some(()));
}

/// A replica stopped while the others take writes reports ready (`/readyz`) only once it serves
/// them (docs/scaling.md, "Convergence and catch-up"): the events (relay sync), the git data of the pushes
/// made meanwhile (git sync), and a state it held waiting for its push when it was killed, whose
/// push went to another replica. Nothing is waited for after `/readyz` says ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_from_a_stop_is_ready_only_once_it_serves_what_it_missed() {
    let (a, mut b) = pair(&[]);
    caught_up(&a).await;
    caught_up(&b).await;
    let owner = Keys::generate();
    let tmp = tempfile::tempdir().unwrap();

    // Held on the replica about to stop: a repository both serve, whose next state came there
    // and whose next push goes to the other.
    let (mut cb, _) = announce(&b, &owner, "held").await;
    let (mut held, first, _) = stated(&tmp.path().join("held"), &b, &mut cb, &owner, "held").await;
    held.push(&["main"]).expect("the first push");
    eventually!("the first push on the other replica", WAIT, (main_ref(&a, &owner.public_key(), "held").as_deref() == Some(first.as_str())).then_some(()));
    let held_tip = held.commit("README", "two");
    let held_state = state_at(&owner, "held", &[("refs/heads/main", &held_tip)], Some("main"), now() + 1);
    let (ok, msg) = cb.send_event(&held_state).await.unwrap();
    assert!(ok, "{msg}");
    // Held events are not relayed; the owner's client sends it to the other replica too (as
    // through the front once this one is gone).
    let (ok, msg) = NostrClient::connect(&a.ws_url()).await.unwrap().send_event(&held_state).await.unwrap();
    assert!(ok, "{msg}");
    b.kill();
    held.url = repo_url(&a, &owner.public_key(), "held");
    held.push(&["main"]).expect("the held state's push, to the replica that stayed");

    // Written while it is away: a new repository, its push, an issue.
    let (mut ca, ann) = announce(&a, &owner, "missed").await;
    let (repo, tip, st) = stated(&tmp.path().join("missed"), &a, &mut ca, &owner, "missed").await;
    repo.push(&["main"]).expect("the push while a replica is away");
    let bug = issue(&Keys::generate(), &owner.public_key(), "missed");
    let (ok, msg) = ca.send_event(&bug).await.unwrap();
    assert!(ok, "{msg}");

    b.restart();
    caught_up(&b).await;
    for (what, id) in [("announcement", ann.id), ("state", st.id), ("issue", bug.id)] {
        assert!(stored(&b, id).await, "ready without the {what} sent while it was away");
    }
    assert_eq!(main_ref(&b, &owner.public_key(), "missed").as_deref(), Some(tip.as_str()), "ready without the push made while it was away");
    assert_eq!(main_ref(&b, &owner.public_key(), "held").as_deref(), Some(held_tip.as_str()), "ready without the push its held state waited for");
}

/// git's view of `url`'s refs (`git ls-remote`), over HTTP as any client sees them.
fn served_refs(url: &str) -> String {
    let out = std::process::Command::new("git").args(["ls-remote", url]).output().expect("git ls-remote runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A and B name each other as replicas, but B does not follow A (`--no-relay-sync`): whatever B
/// learns from A for a push, it learns by asking A while deciding it (A answers B's request for
/// held events because B is one of its replicas). `b_extra`: more of B's arguments.
fn asker_and_holder(b_extra: &[&str]) -> (TestServer, TestServer) {
    let args = ["--public-host", DOMAIN, "--sync-delay", "200ms"];
    let mut a = TestServer::start_with(&args);
    let mut b = TestServer::start_with(&args);
    let (a_url, b_url) = (format!("http://{}", a.addr()), format!("http://{}", b.addr()));
    let mut with = args.to_vec();
    with.extend(["--replica", b_url.as_str()]);
    a.restart_with(&with);
    let mut with = args.to_vec();
    with.extend(["--no-relay-sync", "--replica", a_url.as_str()]);
    with.extend_from_slice(b_extra);
    b.restart_with(&with);
    (a, b)
}

/// nginx routes git by repository: a client's announcement and state reach replica A over the
/// WebSocket, and its `git push` goes to replica B right after, before relay sync could carry
/// them. B asks A for them before refusing: the first push (B has no repository yet) and the
/// next (B has an older state) both go in, and B serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_routed_to_a_replica_without_its_events_fetches_them_from_the_others() {
    let (a, b) = asker_and_holder(&[]);
    let owner = Keys::generate();
    let identifier = "routed";
    let clone = format!("https://{DOMAIN}/{}/{identifier}.git", owner.public_key().to_bech32().unwrap());
    let ann = event(&owner, 30617, &[&["d", identifier], &["clone", &clone], &["relays", &format!("wss://{DOMAIN}")]]);
    let mut ca = NostrClient::connect(&a.ws_url()).await.unwrap();
    let (ok, msg) = ca.send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    let tmp = tempfile::tempdir().unwrap();
    let (repo, tip, st) = stated(tmp.path(), &b, &mut ca, &owner, identifier).await;
    assert!(!stored(&b, ann.id).await && !repo_dir(&b, &owner.public_key(), identifier).exists(), "B learnt nothing from A by itself");
    // Held events are for the replicas alone: a stranger authenticated on A is not given them.
    let mut stranger = NostrClient::connect(&a.ws_url()).await.unwrap();
    let challenge = stranger.challenge_now().await.unwrap();
    let auth = EventBuilder::new(Kind::Custom(22242), "")
        .tags([Tag::parse(["relay", &format!("wss://{DOMAIN}")]).unwrap(), Tag::parse(["challenge", challenge.as_str()]).unwrap()])
        .finalize(&Keys::generate())
        .unwrap();
    let (ok, msg) = stranger.send_auth(&auth).await.unwrap();
    assert!(ok, "{msg}");
    let asked = Filter::new().kinds([Kind::Custom(30617), Kind::Custom(30618)]).identifier(identifier);
    assert!(stranger.req(vec![asked]).await.unwrap().is_empty(), "held events served to a stranger");

    let out = repo.push(&["main"]).expect("the first push, to the replica that had neither event");
    assert!(out.contains("grasp: push matches repository state"), "{out}");
    assert_eq!(main_ref(&b, &owner.public_key(), identifier).as_deref(), Some(tip.as_str()));
    assert!(served_refs(&repo.url).contains(&format!("{tip}\trefs/heads/main")), "B serves the pushed ref");
    eventually!("the announcement and the state stored on B with their data", WAIT, (stored(&b, ann.id).await && stored(&b, st.id).await).then_some(()));

    // The next push: B has the repository and the older state; the new state went to A only.
    let next = repo.commit("README", "two");
    let st2 = state_at(&owner, identifier, &[("refs/heads/main", &next)], Some("main"), now() + 1);
    let (ok, msg) = ca.send_event(&st2).await.unwrap();
    assert!(ok, "{msg}");
    let out = repo.push(&["main"]).expect("the next push, to the replica with the older state only");
    assert!(out.contains(&format!("grasp: push matches repository state {}", &st2.id.to_hex()[..12])), "{out}");
    assert!(served_refs(&repo.url).contains(&format!("{next}\trefs/heads/main")), "B serves the next push");
    assert!(b.logs().contains("replicas asked"), "B says it asked");
}

/// No replica holds a state for the push: it is refused with the usual message, within the
/// bound of asking, even when one replica accepts connections and never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_no_replica_can_authorise_is_refused_within_the_bound() {
    // A "replica" that accepts connections (the kernel does) and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let (a, b) = asker_and_holder(&["--replica", silent_url.as_str()]);
    let owner = Keys::generate();
    let identifier = "unstated";
    let clone = format!("https://{DOMAIN}/{}/{identifier}.git", owner.public_key().to_bech32().unwrap());
    let ann = event(&owner, 30617, &[&["d", identifier], &["clone", &clone], &["relays", &format!("wss://{DOMAIN}")]]);
    let (ok, msg) = NostrClient::connect(&a.ws_url()).await.unwrap().send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo::new(tmp.path(), &b, &owner.public_key(), identifier);
    repo.commit("README", "one");

    let started = std::time::Instant::now();
    let err = repo.push(&["main"]).expect_err("no state anywhere: refused");
    let took = started.elapsed();
    assert!(err.contains("no repository state event (kind 30618) from a maintainer of this repository is known to this server"), "{err}");
    // Two asks at most (the repository was missing, then the state), each within its deadline
    // (2 s) and the admission's grace (1 s), and git's own work.
    assert!(took < Duration::from_secs(9), "the refusal took {took:?}");
    assert!(repo_dir(&b, &owner.public_key(), identifier).exists(), "the announcement came from A");
    drop(silent);
}

/// A replica that has not caught up with the others answers what the front forwards (a trusted
/// proxy's requests naming their client) `503` with `Retry-After`, so nginx sends it to another
/// replica, and serves it once caught up; requests not forwarded (the other replicas' own) are
/// served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_catching_up_sends_what_the_front_forwards_elsewhere() {
    // The other replica accepts connections and never answers: relay sync gives it up after
    // --relay-sync-timeout, and a replica it cannot reach does not hold readiness back.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let b = TestServer::start_with(&["--public-host", DOMAIN, "--trusted-proxy", "127.0.0.1/32", "--relay-sync-timeout", "2s", "--replica", silent_url.as_str()]);
    let http = reqwest::Client::new();
    let page = format!("{}/", b.http_url().trim_end_matches('/'));
    let git = format!("{}/{}/x.git/info/refs?service=git-upload-pack", b.http_url().trim_end_matches('/'), Keys::generate().public_key().to_bech32().unwrap());
    let forwarded = |url: &str| http.get(url).header("X-Forwarded-For", "203.0.113.9").send();

    let resp = forwarded(&git).await.unwrap();
    assert_eq!(resp.status(), 503, "a forwarded git request while catching up");
    assert_eq!(resp.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    assert!(resp.text().await.unwrap().contains("catching up with the others"));
    assert_eq!(forwarded(&page).await.unwrap().status(), 503, "a forwarded page while catching up");
    let ws = NostrClient::connect_with_headers(&b.ws_url(), &[("X-Forwarded-For", "203.0.113.9")]).await;
    assert!(ws.is_err(), "a forwarded WebSocket while catching up");
    assert_eq!(http.get(&page).send().await.unwrap().status(), 200, "a request not forwarded is served");

    eventually!("the replica to catch up and serve what the front forwards", WAIT, (forwarded(&page).await.unwrap().status() == 200).then_some(()));
    assert!(NostrClient::connect_with_headers(&b.ws_url(), &[("X-Forwarded-For", "203.0.113.9")]).await.is_ok());
    drop(silent);
}

/// A private (GRASP-08) replica set: each replica lets the others in as themselves (their own
/// keys, read from their NIP-11 documents), with no key listed by the operator: relay sync
/// catches up, git sync fetches, `--replica-acks` confirms, all through the members-only doors.
/// A member is served by every replica; a stranger by none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_set_lets_its_replicas_in_and_nobody_else() {
    let member = Keys::generate();
    let hex = member.public_key().to_hex();
    let (a, b) = pair_with(&["--private", "--member", hex.as_str()], &["--replica-acks", "1", "--replica-ack-timeout", "10s"]);
    for server in [&a, &b] {
        caught_up(server).await;
    }
    let public_relay = format!("wss://{DOMAIN}");
    let members_client = |server: &TestServer, who: &Keys| {
        let (url, who, relay) = (server.ws_url(), who.clone(), public_relay.clone());
        async move {
            let mut c = NostrClient::connect(&url).await.unwrap();
            let (ok, msg) = c.auth_naming(&who, &relay).await.unwrap();
            assert!(ok, "{msg}");
            c
        }
    };

    // The member publishes to A: each answer waits until B holds the event (A's link to B is
    // let in as A).
    let identifier = "private-set";
    let npub = member.public_key().to_bech32().unwrap();
    let clone = format!("https://{DOMAIN}/{npub}/{identifier}.git");
    let ann = event(&member, 30617, &[&["d", identifier], &["clone", &clone], &["relays", &public_relay], &["private", "true"]]);
    let mut ca = members_client(&a, &member).await;
    let (ok, msg) = ca.send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    let tmp = tempfile::tempdir().unwrap();
    let (repo, tip, st) = stated(tmp.path(), &a, &mut ca, &member, identifier).await;
    // The push ends once B serves it: B fetched it from A with its own proof, and A's
    // `ls-remote` on B carried A's.
    let out = git_with(&repo.work.dir, &git_proof(&member, &clone), &["push", "--porcelain", &repo.url, "main"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("grasp: held by 1 other replicas of this service"), "{said}");

    // B serves the member: the events over NIP-42, the data over git with the member's proof.
    let mut cb = members_client(&b, &member).await;
    let got: Vec<EventId> = cb.req(vec![Filter::new().ids([ann.id, st.id])]).await.unwrap().iter().map(|e| e.id).collect();
    assert!(got.contains(&ann.id) && got.contains(&st.id), "B serves the member both events: {got:?}");
    let b_url = repo_url(&b, &member.public_key(), identifier);
    let out = git_with(tmp.path(), &git_proof(&member, &clone), &["ls-remote", &b_url]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{tip}\trefs/heads/main")), "{out:?}");

    // B (no acks) to A: relay sync, let in as B.
    let bug = issue(&member, &member.public_key(), identifier);
    let (ok, msg) = cb.send_event(&bug).await.unwrap();
    assert!(ok, "{msg}");
    eventually!("the issue sent to B on A", WAIT, {
        let mut c = members_client(&a, &member).await;
        c.req(vec![Filter::new().id(bug.id)]).await.unwrap().iter().any(|e| e.id == bug.id).then_some(())
    });

    // A stranger is let in by neither, over NIP-42 or git.
    let stranger = Keys::generate();
    for server in [&a, &b] {
        let mut c = members_client(server, &stranger).await;
        let id = SubscriptionId::new("s");
        let outcome = c.req_with_id(&id, vec![Filter::new().id(ann.id)]).await.unwrap();
        assert!(matches!(&outcome, grasp_tests::ReqOutcome::Closed(m) if m.starts_with("restricted:")), "{outcome:?}");
        let url = repo_url(server, &member.public_key(), identifier);
        let out = git_with(tmp.path(), &git_proof(&stranger, &clone), &["ls-remote", &url]);
        assert!(!out.status.success(), "a stranger's proof opens nothing");
    }
}
