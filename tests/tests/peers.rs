//! Relay-to-relay event sync (GRASP-02) end to end: real relays on loopback follow each other
//! (`--sync-allow-private`), and a scripted fake relay plays the misbehaving peer (events out
//! of order, `rate-limited:`). The operator view `GET /v1/sync` shows each relay followed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grasp_tests::fake_relay::FakeRelay;
use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;
use serde_json::{json, Value};

/// Polls `$cond` (an `Option` expression, may `.await`) until it is `Some`, failing after
/// `$timeout`.
macro_rules! eventually {
    ($what:expr, $timeout:expr, $cond:expr) => {{
        let deadline = Instant::now() + $timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(value) = $cond {
                break value;
            }
            assert!(Instant::now() < deadline, "timed out after {:?} waiting for {}", $timeout, $what);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }};
}

/// A relay following loopback peers, with short retry delays.
fn relay(extra: &[&str]) -> TestServer {
    let mut args = vec![
        "--sync-allow-private",
        "--relay-sync-backoff",
        "300ms",
        "--relay-sync-backoff-cap",
        "2s",
        "--relay-sync-parent-request",
        "1s",
    ];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

async fn send_ok(c: &mut NostrClient, event: &Event) {
    let (ok, msg) = c.send_event(event).await.unwrap();
    assert!(ok, "event kind {} refused: {msg}", event.kind);
}

async fn stored(c: &mut NostrClient, id: EventId) -> bool {
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

/// How many of `ids` the server serves (asked in chunks under its `max_limit`, 100 in some tests).
async fn served(c: &mut NostrClient, ids: &[EventId]) -> usize {
    let mut n = 0;
    for chunk in ids.chunks(100) {
        n += c.req(vec![Filter::new().ids(chunk.iter().copied()).limit(chunk.len())]).await.unwrap().len();
    }
    n
}

/// The entry of relay `url` in `server`'s `GET /v1/sync`.
async fn peer(server: &TestServer, url: &str) -> Option<Value> {
    let view = operator_get(server, "/v1/sync").await.ok()?;
    view["relays"].as_array()?.iter().find(|r| r["url"] == url.trim_end_matches('/')).cloned()
}

fn ws(server: &TestServer) -> String {
    format!("ws://{}", host(server))
}

/// Announces `identifier` (listing every server of `on`) on each of `on` and makes each serve it:
/// state for one commit, pushed to each. Returns the owner's keys and the tip.
async fn served_repo(on: &[&TestServer], identifier: &str, dir: &std::path::Path) -> (Keys, String) {
    let owner = Keys::generate();
    let ann = announcement_on(on, &owner, identifier, &[]);
    let repo = Repo::new(dir, on[0], &owner.public_key(), identifier);
    let tip = repo.commit("README", identifier);
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    for server in on {
        let mut c = connect(server).await;
        send_ok(&mut c, &ann).await;
        send_ok(&mut c, &st).await;
        repo.push_to(&repo_url(server, &owner.public_key(), identifier), &["main"]).unwrap_or_else(|e| panic!("push refused: {e}"));
        eventually!("the announcement to be served", TIMEOUT, stored(&mut c, ann.id).await.then_some(()));
    }
    (owner, tip)
}

/// A NIP-22 comment on `root` (tags only the root event, not the repository).
/// `owner`'s announcement of `lure` on `b`, listing `b` and the relay at `peer_url` in its
/// `relays`: accepted (held), it makes `b` follow that relay.
fn lure_announcement(b: &TestServer, owner: &Keys, peer_url: &str) -> Event {
    let relays = vec!["relays".to_string(), ws(b), peer_url.to_string()];
    let clone = vec!["clone".to_string(), repo_url(b, &owner.public_key(), "lure")];
    EventBuilder::new(Kind::Custom(30617), "")
        .tags([Tag::identifier("lure"), Tag::parse(clone).unwrap(), Tag::parse(relays).unwrap()])
        .finalize(owner)
        .unwrap()
}

fn comment_on(keys: &Keys, root: &Event, at: u64) -> Event {
    EventBuilder::new(Kind::Custom(1111), "a comment")
        .tags([
            Tag::parse(["E", &root.id.to_hex()]).unwrap(),
            Tag::parse(["K", &root.kind.as_u16().to_string()]).unwrap(),
            Tag::parse(["e", &root.id.to_hex()]).unwrap(),
        ])
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .unwrap()
}

fn issue_at(keys: &Keys, owner: &PublicKey, identifier: &str, n: usize, at: u64) -> Event {
    EventBuilder::new(Kind::Custom(1621), format!("issue {n}"))
        .tags([
            Tag::parse(["a", &coordinate(30617, owner, identifier)]).unwrap(),
            Tag::parse(["subject", &format!("bug {n}")]).unwrap(),
        ])
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_an_issue_and_its_comment_published_on_a_are_served_by_b() {
    let (a, b) = (relay(&[]), relay(&[]));
    let dir = tempfile::tempdir().unwrap();
    let (owner, _) = served_repo(&[&a, &b], "live", dir.path()).await;
    // B follows A live for the repository.
    eventually!("B to follow A live", TIMEOUT, peer(&b, &ws(&a)).await.filter(|p| p["state"] == "live"));
    let (mut ca, mut cb) = (connect(&a).await, connect(&b).await);
    let user = Keys::generate();
    let issue = issue(&user, &owner.public_key(), "live");
    assert!(!stored(&mut cb, issue.id).await);
    send_ok(&mut ca, &issue).await;
    let t0 = Instant::now();
    eventually!("B to serve the issue published on A", Duration::from_secs(10), stored(&mut cb, issue.id).await.then_some(()));
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    let comment = comment_on(&user, &issue, now());
    send_ok(&mut ca, &comment).await;
    eventually!("B to serve the comment published on A", Duration::from_secs(15), stored(&mut cb, comment.id).await.then_some(()));
    let p = peer(&b, &ws(&a)).await.unwrap();
    assert!(p["accepted"].as_u64().unwrap() >= 2, "{p}");
    assert_eq!(p["repositories"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["negentropy"], true, "{p}");
    // A protected event is never taken from a peer: publish one on A (A takes it from its
    // author) and see B refuse it.
    let protected = EventBuilder::new(Kind::Custom(1621), "protected")
        .tags([Tag::parse(["a", &coordinate(30617, &owner.public_key(), "live")]).unwrap(), Tag::protected()])
        .finalize(&user)
        .unwrap();
    let (ok, _) = ca.send_event(&protected).await.unwrap();
    if ok {
        let refused_before = p["refused"].as_u64().unwrap();
        eventually!("B to refuse the protected event", Duration::from_secs(10), peer(&b, &ws(&a)).await.filter(|p| p["refused"].as_u64().unwrap() > refused_before));
        assert!(!stored(&mut cb, protected.id).await);
    }
    // NIP-11 advertises GRASP-02.
    let doc: Value = nip11(&b).await;
    assert_eq!(doc["supported_grasps"], json!(["GRASP-01", "GRASP-02", "GRASP-03"]));
}

/// B, started after A holds `count` events of a repository, ends with all of them.
async fn history_case(a_args: &[&str], count: usize, negentropy: bool) {
    history_case_at(a_args, count, negentropy, |base, n| base + n as u64, |_| true).await;
}

/// [`history_case`] with the events' `created_at` given by `at(base, n)`; B must end with the
/// events `wanted(n)` (and has nothing A does not hold). Returns B's view of A.
async fn history_case_at(a_args: &[&str], count: usize, negentropy: bool, at: impl Fn(u64, usize) -> u64, wanted: impl Fn(usize) -> bool) -> Value {
    // A takes the events from one connection as fast as they come.
    let mut args = vec!["--write-burst", "5000"];
    args.extend_from_slice(a_args);
    let a = relay(&args);
    let dir = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let identifier = "history";
    // The announcement lists A and B; B does not exist yet: reserve its address later by
    // announcing on A with a placeholder, then replace. Simpler: A serves it alone first.
    let mut ca = connect(&a).await;
    let user = Keys::generate();
    let b = relay(&[]);
    let ann = announcement_on(&[&a, &b], &owner, identifier, &[]);
    // Keep B from seeing anything before A holds all events: B learns the repository only
    // when it is announced there, after A is filled.
    send_ok(&mut ca, &ann).await;
    let repo = Repo::new(dir.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "history");
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    send_ok(&mut ca, &st).await;
    repo.push(&["main"]).unwrap();
    eventually!("A to serve the announcement", TIMEOUT, stored(&mut ca, ann.id).await.then_some(()));
    let base = now() - 7200;
    let events: Vec<Event> = (0..count).map(|n| issue_at(&user, &owner.public_key(), identifier, n, at(base, n))).collect();
    for e in &events {
        send_ok(&mut ca, e).await;
    }
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    assert_eq!(served(&mut ca, &ids).await, count);
    // Now B takes the repository (A is in its relays).
    let mut cb = connect(&b).await;
    send_ok(&mut cb, &ann).await;
    send_ok(&mut cb, &st).await;
    repo.push_to(&repo_url(&b, &owner.public_key(), identifier), &["main"]).unwrap();
    let started = Instant::now();
    let must: Vec<EventId> = events.iter().enumerate().filter(|(n, _)| wanted(*n)).map(|(_, e)| e.id).collect();
    eventually!("B to hold every event A had", Duration::from_secs(60), (served(&mut cb, &must).await == must.len()).then_some(()));
    let p = peer(&b, &ws(&a)).await.unwrap();
    assert_eq!(p["negentropy"], negentropy, "{p}");
    eprintln!("history of {count} events (negentropy {negentropy}) in {:?}: {p}", started.elapsed());
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_b_started_later_gets_all_1000_events_by_negentropy() {
    history_case(&[], 1000, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_b_gets_all_1000_events_by_req_paging_without_nip77() {
    history_case(&["--no-negentropy"], 1000, false).await;
}

/// 2,000 events, up to 700 in one second, seven times A's REQ page (`--max-limit 100`), and
/// more than A reconciles in one NIP-77 session (`--negentropy-max-items 1000`): the filter is
/// paged, and each crowded second is reconciled alone by NIP-77. (Paging used to stop at the
/// first page of nothing new: 100 events of 2,000.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_same_second_runs_larger_than_a_page_are_reconciled_per_second() {
    history_case_at(&["--max-limit", "100", "--negentropy-max-items", "1000"], 2000, true, |base, n| base + (n / 700) as u64, |_| true).await;
}

/// Without NIP-77 a second holding more events than a REQ page cannot be fully listed: paging
/// takes a page of it, says so, and goes on with the older history (it used to stop there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_req_paging_goes_on_past_a_crowded_second() {
    // Events 500..800 share the newest second; 0..500 are one second apart, older.
    let p = history_case_at(&["--max-limit", "100", "--no-negentropy"], 800, false, |base, n| base + n.min(500) as u64, |n| n < 500).await;
    assert!(p["last_error"].as_str().unwrap_or_default().contains("may be missing"), "{p}");
    assert!(p["accepted"].as_u64().unwrap() >= 600, "a page of the crowded second: {p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_an_announcement_published_only_on_a_is_held_synced_and_released_by_b() {
    let a = relay(&[]);
    // B's git sync waits 3 s after a synced event, so the held state can be seen.
    let b = relay(&["--sync-bootstrap-relay", &ws(&a), "--sync-delay", "3s"]);
    let dir = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let identifier = "found";
    let ann = announcement_on(&[&a, &b], &owner, identifier, &[]);
    // The owner publishes to A and pushes to A only: A serves the announcement and the state.
    let mut ca = connect(&a).await;
    send_ok(&mut ca, &ann).await;
    let repo = Repo::new(dir.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "found");
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    send_ok(&mut ca, &st).await;
    repo.push(&["main"]).unwrap();
    eventually!("A to serve the announcement", TIMEOUT, stored(&mut ca, ann.id).await.then_some(()));
    // B finds it on A (its bootstrap), holds it (no git data yet) and creates the repository;
    // the held announcement is followed at level state-only.
    let bare = repo_dir(&b, &owner.public_key(), identifier);
    eventually!("B to create the repository", TIMEOUT, bare.exists().then_some(()));
    let held = eventually!("B to hold the announcement at sync level state-only", TIMEOUT, {
        let listing = purgatory_listing(&b).await;
        listing["entries"].as_array().unwrap().iter().find(|e| e["event_id"] == ann.id.to_hex() && e["sync_level"] == "state-only").cloned()
    });
    assert_eq!(held["kind"], "announcement");
    // B learns the state from A (held too), its background git sync fetches the data from A's
    // clone URL, and both are released.
    let mut cb = connect(&b).await;
    eventually!("B to serve the state and the announcement", Duration::from_secs(30), (stored(&mut cb, st.id).await && stored(&mut cb, ann.id).await).then_some(()));
    let refs = bare_refs(&bare);
    assert_eq!(refs.get("refs/heads/main"), Some(&tip), "{refs:?}");
    assert!(b.logs().contains("state event held in purgatory"), "the state was not held first");
    let p = peer(&b, &ws(&a)).await.unwrap();
    assert_eq!(p["bootstrap"], true, "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_a_comment_before_its_issue_waits_and_the_issue_is_asked_for_by_id() {
    let b = relay(&[]);
    let dir = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let identifier = "dep";
    let user = Keys::generate();
    let issue = issue_at(&user, &owner.public_key(), identifier, 1, now() - 100);
    let comment = comment_on(&user, &issue, now() - 50);
    // The fake peer sends the comment on every subscription, and the issue only when asked for
    // it by id.
    let (issue_json, comment_json) = (serde_json::to_value(&issue).unwrap(), serde_json::to_value(&comment).unwrap());
    let issue_hex = issue.id.to_hex();
    let asked_by_id = Arc::new(AtomicUsize::new(0));
    let asked = asked_by_id.clone();
    let fake = FakeRelay::start(Arc::new(move |msg: &Value| {
        let kind = msg[0].as_str().unwrap_or_default();
        match kind {
            "NEG-OPEN" => vec![json!(["NOTICE", "unsupported: NEG-OPEN"])],
            "REQ" => {
                let sub = msg[1].clone();
                let by_id = msg[2]["ids"].as_array().is_some_and(|ids| ids.iter().any(|i| i == issue_hex.as_str()));
                if by_id {
                    asked.fetch_add(1, Ordering::SeqCst);
                    vec![json!(["EVENT", sub, issue_json]), json!(["EOSE", sub])]
                } else {
                    vec![json!(["EVENT", sub, comment_json]), json!(["EOSE", sub])]
                }
            }
            _ => vec![],
        }
    }))
    .await;
    // The repository lists B and the fake peer.
    let ann = {
        let mut relays = vec!["relays".to_string(), ws(&b), fake.url()];
        relays.dedup();
        let clone = vec!["clone".to_string(), repo_url(&b, &owner.public_key(), identifier)];
        EventBuilder::new(Kind::Custom(30617), "")
            .tags([Tag::identifier(identifier), Tag::parse(clone).unwrap(), Tag::parse(relays).unwrap()])
            .finalize(&owner)
            .unwrap()
    };
    let mut cb = connect(&b).await;
    send_ok(&mut cb, &ann).await;
    let repo = Repo::new(dir.path(), &b, &owner.public_key(), identifier);
    let tip = repo.commit("README", "dep");
    send_ok(&mut cb, &state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    eventually!("B to serve the repository", TIMEOUT, stored(&mut cb, ann.id).await.then_some(()));
    // The comment arrives first, waits; its issue is asked for by id and both end up stored.
    eventually!("B to store the issue and the comment", Duration::from_secs(30), (stored(&mut cb, issue.id).await && stored(&mut cb, comment.id).await).then_some(()));
    assert!(asked_by_id.load(Ordering::SeqCst) >= 1, "the issue was never asked for by id");
    assert!(b.logs().contains("waiting synced event admitted"), "the comment did not wait for its issue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_forged_copy_sent_first_does_not_keep_the_real_event_from_waiting() {
    let b = relay(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (owner, _) = served_repo(&[&b], "squat", dir.path()).await;
    let user = Keys::generate();
    // An issue B will get from its client later, and a comment on it that a peer sends first,
    // unasked: preceded by a forged copy (same id, other content, so a bad id and signature).
    let parent = issue_at(&user, &owner.public_key(), "squat", 1, now() - 100);
    let comment = comment_on(&user, &parent, now() - 50);
    let genuine = serde_json::to_value(&comment).unwrap();
    let mut forged = genuine.clone();
    forged["content"] = json!("forged");
    let fake = FakeRelay::start(Arc::new(move |msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "NEG-OPEN" => vec![json!(["NOTICE", "unsupported: NEG-OPEN"])],
        "REQ" if msg[2]["limit"] == 0 => {
            vec![json!(["EVENT", msg[1], forged]), json!(["EVENT", msg[1], genuine]), json!(["EOSE", msg[1]])]
        }
        "REQ" => vec![json!(["EOSE", msg[1]])],
        _ => vec![],
    }))
    .await;
    // An accepted (held) announcement lists the peer: B follows it.
    let lure = Keys::generate();
    let ann = lure_announcement(&b, &lure, &fake.url());
    let mut cb = connect(&b).await;
    send_ok(&mut cb, &ann).await;
    eventually!("B to refuse both copies as unrequested", Duration::from_secs(30), {
        peer(&b, &fake.url()).await.filter(|p| p["unrequested"].as_u64() >= Some(2))
    });
    // The issue arrives by B's own client: the genuine comment waiting for it is admitted.
    send_ok(&mut cb, &parent).await;
    eventually!("B to admit the genuine comment", Duration::from_secs(10), stored(&mut cb, comment.id).await.then_some(()));
    let served = cb.req(vec![Filter::new().id(comment.id)]).await.unwrap();
    assert_eq!(served[0].content, "a comment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_peer_answering_with_unrelated_events_and_flooding_is_throttled_and_nothing_it_was_not_asked_for_is_stored() {
    let b = relay(&["--relay-sync-rate", "200", "--relay-sync-burst", "200"]);
    let dir = tempfile::tempdir().unwrap();
    // "home" is served by B and follows no other relay: issues tagging it are accepted on B.
    let (home_owner, _) = served_repo(&[&b], "home", dir.path()).await;
    let home = coordinate(30617, &home_owner.public_key(), "home");
    let user = Keys::generate();
    let junk: Vec<Value> = (0..1000)
        .map(|n| serde_json::to_value(issue_at(&user, &home_owner.public_key(), "home", n, now() - 10 - n as u64)).unwrap())
        .collect();
    // The hostile peer answers any REQ with those issues (about a repository it was never asked
    // about), and does not speak NIP-77.
    let fake = FakeRelay::start(Arc::new(move |msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "NEG-OPEN" => vec![json!(["NOTICE", "unsupported: NEG-OPEN"])],
        "REQ" => {
            let sub = msg[1].clone();
            let mut replies: Vec<Value> = junk.iter().map(|e| json!(["EVENT", sub, e])).collect();
            replies.push(json!(["EOSE", sub]));
            replies
        }
        _ => vec![],
    }))
    .await;
    // An accepted (held) announcement lists the hostile peer: B follows it.
    let owner = Keys::generate();
    let ann = lure_announcement(&b, &owner, &fake.url());
    let mut cb = connect(&b).await;
    send_ok(&mut cb, &ann).await;
    let started = Instant::now();
    let p = eventually!("B to refuse the peer's unrequested events", Duration::from_secs(30), {
        peer(&b, &fake.url()).await.filter(|p| p["unrequested"].as_u64().unwrap_or(0) >= 300)
    });
    let elapsed = started.elapsed().as_secs_f64();
    // Its write bucket: 200 at once, then 200 per second (with room for the moment measured).
    let received = p["received"].as_u64().unwrap();
    assert!((received as f64) <= 200.0 + 200.0 * (elapsed + 1.0), "{received} events taken in {elapsed:.1} s: {p}");
    assert!(p["throttled_ms"].as_u64().unwrap() > 0, "the flood was never throttled: {p}");
    assert_eq!(p["accepted"], 0, "{p}");
    // B stays responsive to its clients meanwhile.
    let asked = Instant::now();
    let mine = issue_at(&user, &home_owner.public_key(), "home", 5000, now());
    send_ok(&mut cb, &mine).await;
    assert!(stored(&mut cb, mine.id).await);
    assert!(asked.elapsed() < Duration::from_secs(5), "B answered its client in {:?}", asked.elapsed());
    // None of the peer's issues were stored.
    let a_tag = SingleLetterTag::from_char('a').unwrap();
    let served = cb.req(vec![Filter::new().custom_tag(a_tag, home).limit(2000)]).await.unwrap();
    assert_eq!(served.iter().filter(|e| e.id != mine.id).count(), 0, "unrequested events were stored");
    assert!(b.logs().contains("relay sends events it was not asked for"), "no INFO log of the refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_a_down_relay_backs_off_a_rate_limiting_one_cools_down_and_others_are_not_delayed() {
    // A port nobody listens on.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let limited = FakeRelay::start(Arc::new(|msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "REQ" => vec![json!(["CLOSED", msg[1], "rate-limited: slow down"])],
        "NEG-OPEN" => vec![json!(["NEG-ERR", msg[1], "rate-limited: slow down"])],
        _ => vec![],
    }))
    .await;
    // Only B follows other relays (the fake one counts B's connections alone).
    let a = relay(&["--no-relay-sync"]);
    let b = relay(&["--relay-sync-cooldown", "3s"]);
    let dir = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let identifier = "fail";
    let relays = [ws(&a), ws(&b), format!("ws://{down}"), limited.url()];
    let ann = {
        let mut r = vec!["relays".to_string()];
        r.extend(relays.iter().cloned());
        let clone = vec!["clone".to_string(), repo_url(&a, &owner.public_key(), identifier), repo_url(&b, &owner.public_key(), identifier)];
        EventBuilder::new(Kind::Custom(30617), "")
            .tags([Tag::identifier(identifier), Tag::parse(clone).unwrap(), Tag::parse(r).unwrap()])
            .finalize(&owner)
            .unwrap()
    };
    let repo = Repo::new(dir.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", "fail");
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    for server in [&a, &b] {
        let mut c = connect(server).await;
        send_ok(&mut c, &ann).await;
        send_ok(&mut c, &st).await;
        repo.push_to(&repo_url(server, &owner.public_key(), identifier), &["main"]).unwrap();
        eventually!("the announcement to be served", TIMEOUT, stored(&mut c, ann.id).await.then_some(()));
    }
    // The others do not delay A: an issue on A reaches B within seconds.
    eventually!("B to follow A live", TIMEOUT, peer(&b, &ws(&a)).await.filter(|p| p["state"] == "live"));
    let issue = issue(&Keys::generate(), &owner.public_key(), identifier);
    send_ok(&mut connect(&a).await, &issue).await;
    let mut cb = connect(&b).await;
    eventually!("B to serve the issue", Duration::from_secs(10), stored(&mut cb, issue.id).await.then_some(()));
    // The down relay is retried with growing delays.
    let p = eventually!("the down relay to fail repeatedly", TIMEOUT, peer(&b, &format!("ws://{down}")).await.filter(|p| p["failures"].as_u64().unwrap_or(0) >= 3));
    assert_eq!(p["state"], "backing-off", "{p}");
    assert!(p["last_error"].as_str().unwrap().contains("connect"), "{p}");
    // The rate-limiting relay is cooled down: no reconnection within the cooldown.
    let p = eventually!("the rate-limiting relay to be cooled down", TIMEOUT, peer(&b, &limited.url()).await.filter(|p| p["cooling_down"] == true));
    assert!(p["last_error"].as_str().unwrap().starts_with("rate-limited:"), "{p}");
    eventually!("a second connection after the cooldown", TIMEOUT, (limited.connections.load(Ordering::SeqCst) >= 2).then_some(()));
    let times = limited.connected_at.lock().unwrap().clone();
    let gap = times[1].duration_since(times[0]);
    assert!(gap >= Duration::from_millis(2500), "reconnected after {gap:?}, within the 3 s cooldown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_b_restarted_resumes_without_downloading_everything_again() {
    let a = relay(&["--no-negentropy"]);
    let mut b = relay(&[]);
    let dir = tempfile::tempdir().unwrap();
    let (owner, _) = served_repo(&[&a, &b], "resume", dir.path()).await;
    let user = Keys::generate();
    let base = now() - 7200;
    let events: Vec<Event> = (0..300).map(|n| issue_at(&user, &owner.public_key(), "resume", n, base + n as u64)).collect();
    let mut ca = connect(&a).await;
    for e in &events {
        send_ok(&mut ca, e).await;
    }
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    let mut cb = connect(&b).await;
    eventually!("B to hold all 300 events", Duration::from_secs(30), (served(&mut cb, &ids).await == 300).then_some(()));
    drop(cb);
    // The cursor is written at shutdown.
    b.restart();
    assert!(b.data_dir().join(grasp_state::contract::layout::RELAY_SYNC_FILE).exists());
    let p = eventually!("B to follow A live again", TIMEOUT, peer(&b, &ws(&a)).await.filter(|p| p["state"] == "live" && p["history_runs"].as_u64() >= Some(1)));
    let received = p["received"].as_u64().unwrap();
    assert!(received < 100, "B downloaded {received} events again after a restart: {p}");
    // And it still follows: a new issue arrives.
    let fresh = issue(&user, &owner.public_key(), "resume");
    send_ok(&mut ca, &fresh).await;
    let mut cb = connect(&b).await;
    eventually!("B to serve a new issue after the restart", Duration::from_secs(10), stored(&mut cb, fresh.id).await.then_some(()));
}

/// A TLS-terminating proxy on `listener` in front of `target`, presenting `cert` (for
/// `localhost`); ends with the test's runtime.
fn spawn_tls_proxy(listener: tokio::net::TcpListener, target: SocketAddr, cert: &rcgen::CertifiedKey<rcgen::KeyPair>) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_b_follows_a_at_its_wss_url_and_a_relay_without_the_ca_refuses_the_certificate() {
    // A sits behind a TLS proxy at wss://localhost:PORT (its public host).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let public = format!("localhost:{port}");
    let a = relay(&["--public-host", &public, "--no-relay-sync"]);
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    spawn_tls_proxy(listener, a.addr(), &cert);
    // B trusts the proxy's certificate; C does not.
    let b = relay(&["--sync-tls-ca", ca.to_str().unwrap()]);
    let c = relay(&[]);
    let owner = Keys::generate();
    let identifier = "tls";
    let wss = format!("wss://{public}");
    let a_clone = format!("https://{public}/{}/{identifier}.git", owner.public_key().to_bech32().unwrap());
    let (b_clone, c_clone) = (repo_url(&b, &owner.public_key(), identifier), repo_url(&c, &owner.public_key(), identifier));
    let ann = event(&owner, 30617, &[&["d", identifier], &["clone", &a_clone, &b_clone, &c_clone], &["relays", &wss, &ws(&b), &ws(&c)]]);
    let repo = Repo::new(dir.path(), &a, &owner.public_key(), identifier);
    let tip = repo.commit("README", identifier);
    let st = state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    for server in [&a, &b, &c] {
        let mut conn = connect(server).await;
        send_ok(&mut conn, &ann).await;
        send_ok(&mut conn, &st).await;
        repo.push_to(&repo_url(server, &owner.public_key(), identifier), &["main"]).unwrap_or_else(|e| panic!("push refused: {e}"));
        eventually!("the announcement to be served", TIMEOUT, stored(&mut conn, ann.id).await.then_some(()));
    }
    // B follows A over TLS: NIP-11 over https (it learns that A speaks NIP-77), then live.
    let p = eventually!("B to follow A live at its wss:// URL", TIMEOUT, peer(&b, &wss).await.filter(|p| p["state"] == "live"));
    assert_eq!(p["negentropy"], true, "the NIP-11 document was not read over https: {p}");
    let issue = issue(&Keys::generate(), &owner.public_key(), identifier);
    send_ok(&mut connect(&a).await, &issue).await;
    let mut cb = connect(&b).await;
    eventually!("B to serve the issue published on A", Duration::from_secs(10), stored(&mut cb, issue.id).await.then_some(()));
    let p = peer(&b, &wss).await.unwrap();
    assert!(p["accepted"].as_u64().unwrap() >= 1, "{p}");
    // C does not trust the certificate: the relay fails with a TLS error, retried with backoff.
    let p = eventually!("C to fail the TLS handshake", TIMEOUT, peer(&c, &wss).await.filter(|p| p["failures"].as_u64().unwrap_or(0) >= 1));
    let error = p["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("TLS handshake") && error.contains("certificate"), "{p}");
    assert!(!b.logs().contains("not supported yet"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_b_follows_only_its_listed_peer_authenticating_with_its_service_key() {
    let alice = Keys::generate();
    let service = Keys::generate();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join(grasp_state::contract::layout::SERVICE_KEY_FILE);
    std::fs::write(&key_file, service.secret_key().to_secret_hex()).unwrap();
    // A relay the announcement lists, never to be contacted by a private service.
    let decoy = FakeRelay::start(Arc::new(|_: &Value| vec![])).await;
    let (alice_hex, service_hex) = (alice.public_key().to_hex(), service.public_key().to_hex());
    let a = TestServer::start_with(&["--private", "--member", &alice_hex, "--member", &service_hex]);
    let b = relay(&["--private", "--member", &alice_hex, "--private-sync-peer", &ws(&a), "--service-key-file", key_file.to_str().unwrap()]);
    // An announcement listing A, B and the decoy, published on A only.
    let identifier = "members";
    let ann = event(
        &alice,
        30617,
        &[
            &["d", identifier],
            &["clone", &repo_url(&a, &alice.public_key(), identifier), &repo_url(&b, &alice.public_key(), identifier)],
            &["relays", &ws(&a), &ws(&b), &decoy.url()],
        ],
    );
    let mut ca = connect(&a).await;
    assert!(ca.auth(&alice).await.unwrap().0);
    send_ok(&mut ca, &ann).await;
    // A serves it once alice pushes the state (with her `Authorization: Nostr` proof).
    let repo = Repo::new(dir.path(), &a, &alice.public_key(), identifier);
    let tip = repo.commit("README", identifier);
    send_ok(&mut ca, &state(&alice, identifier, &[("refs/heads/main", &tip)], Some("main"))).await;
    let url = repo_url(&a, &alice.public_key(), identifier);
    let out = git_with(&repo.work.dir, &git_proof(&alice, &url), &["push", &url, "main"]);
    assert!(out.status.success(), "member push: {}", String::from_utf8_lossy(&out.stderr));
    eventually!("A to serve the announcement", TIMEOUT, stored(&mut ca, ann.id).await.then_some(()));
    // B authenticates to A as its service key, finds the announcement there and holds it.
    eventually!("B to hold the announcement found on A", Duration::from_secs(30), {
        let listing = purgatory_listing(&b).await;
        listing["entries"].as_array().unwrap().iter().find(|e| e["event_id"] == ann.id.to_hex()).cloned()
    });
    assert!(a.logs().contains(&format!("pubkey={service_hex}")) || a.logs().contains(&service_hex), "B did not authenticate to A");
    assert!(b.logs().contains("authenticated to relay (NIP-42)"));
    // B's git sync fetches the data from A with the service key's proof, and serves it.
    let b_repo = repo_dir(&b, &alice.public_key(), identifier);
    eventually!("B to fetch the pushed data from A", Duration::from_secs(30), (b_repo.join("HEAD").exists() && bare_refs(&b_repo).get("refs/heads/main") == Some(&tip)).then_some(()));
    // Only A is followed, never the decoy or B itself.
    let view = operator_get(&b, "/v1/sync").await.unwrap();
    let relays: Vec<&str> = view["relays"].as_array().unwrap().iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(relays, [ws(&a).as_str()], "{view}");
    // Built once, at startup: the few events since never outran relay sync.
    assert_eq!(view["interest"]["builds"], 1, "{view}");
    assert_eq!(decoy.connections.load(Ordering::SeqCst), 0, "the private service contacted a relay it learnt from an announcement");
}


/// Announcements stored on `server`, sent pipelined on one connection; every `OK` must be true.
async fn flood(server: &TestServer, events: &[Event]) {
    let mut c = connect(server).await;
    for chunk in events.chunks(500) {
        for e in chunk {
            c.raw_send(ClientMessage::event(e.clone()).as_json()).await.unwrap();
        }
        let mut left: std::collections::BTreeSet<EventId> = chunk.iter().map(|e| e.id).collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !left.is_empty() {
            assert!(Instant::now() < deadline, "{} announcements not answered", left.len());
            if let RelayMessage::Ok { event_id, status, message } = c.next_message().await.unwrap() {
                assert!(status, "announcement refused: {message}");
                left.remove(&event_id);
            }
        }
    }
}

/// `keys`' announcement of `identifier` at `at`: listing `b` (clone URL and relay) and
/// `maintainers` when `listing`; otherwise elsewhere, with `relays`.
fn announcement_at(b: &TestServer, keys: &Keys, identifier: &str, listing: bool, maintainers: &[PublicKey], relays: &[String], at: u64) -> Event {
    let mut tags = vec![Tag::identifier(identifier)];
    if listing {
        tags.push(Tag::parse(["clone", &repo_url(b, &keys.public_key(), identifier)]).unwrap());
        tags.push(Tag::parse(["relays", &ws(b)]).unwrap());
    } else {
        tags.push(Tag::parse(["clone", &format!("https://elsewhere.example/{identifier}.git")]).unwrap());
    }
    if !relays.is_empty() {
        tags.push(Tag::parse(std::iter::once("relays".to_string()).chain(relays.iter().cloned())).unwrap());
    }
    if !maintainers.is_empty() {
        tags.push(Tag::parse(std::iter::once("maintainers".to_string()).chain(maintainers.iter().map(|m| m.to_hex()))).unwrap());
    }
    EventBuilder::new(Kind::Custom(30617), "").tags(tags).custom_created_at(Timestamp::from(at)).finalize(keys).unwrap()
}

/// Issue 27: relay sync used to follow only the newest 10,000 stored announcements, so a flood
/// of newer ones pushed an older served repository out of it (its relay was dropped). Here
/// 10,100 newer announcements are stored on B (maintainers of held announcements announcing
/// the same identifiers elsewhere: stored at once, docs/protocol.md#acceptance; 100 a second,
/// over 101 seconds to come, so a newest-first listing pages through them); the last lists
/// relay C, so B following C shows the flood was taken in. An issue for the old repository
/// published on A then still reaches B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_newer_announcements_does_not_push_a_served_repository_out_of_relay_sync() {
    let fast = ["--write-burst", "1000000", "--write-rate", "1000000", "--write-burst-per-ip", "1000000", "--write-rate-per-ip", "1000000"];
    let (a, b, c) = (relay(&[]), relay(&fast), relay(&[]));
    let dir = tempfile::tempdir().unwrap();
    let (owner, _) = served_repo(&[&a, &b], "old", dir.path()).await;
    eventually!("B to follow A live", TIMEOUT, peer(&b, &ws(&a)).await.filter(|p| p["state"] == "live"));
    let after = now() + 1;
    let (groups, per_group) = (101, 100);
    let mut held = Vec::new();
    let mut flooded = Vec::new();
    for g in 0..groups {
        let identifier = format!("flood{g}");
        let maintainers: Vec<Keys> = (0..per_group).map(|_| Keys::generate()).collect();
        let keys: Vec<PublicKey> = maintainers.iter().map(Keys::public_key).collect();
        held.push(announcement_at(&b, &Keys::generate(), &identifier, true, &keys, &[], after));
        for (n, m) in maintainers.iter().enumerate() {
            let last = g + 1 == groups && n + 1 == per_group;
            let relays = if last { vec![ws(&c)] } else { Vec::new() };
            flooded.push(announcement_at(&b, m, &identifier, false, &[], &relays, after + g as u64 + u64::from(last)));
        }
    }
    flood(&b, &held).await;
    flood(&b, &flooded).await;
    let mut cb = connect(&b).await;
    assert!(stored(&mut cb, flooded.last().unwrap().id).await, "the flood is stored, not held");
    eventually!("B to follow C (the flood taken in)", Duration::from_secs(60), peer(&b, &ws(&c)).await);
    let mut ca = connect(&a).await;
    let issue = issue(&Keys::generate(), &owner.public_key(), "old");
    send_ok(&mut ca, &issue).await;
    eventually!("the old repository's issue on B", TIMEOUT, stored(&mut cb, issue.id).await.then_some(()));
    assert!(peer(&b, &ws(&a)).await.is_some(), "A is still followed");
}
