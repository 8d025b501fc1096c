//! End-to-end NIP-01/09/11 behaviour of the real `grasp-relay` binary.
//!
//! The GRASP acceptance policy refuses events unrelated to git repositories, so every test first
//! announces a repository ([`Anchor`]; the announcement waits in the purgatory, which counts as
//! accepted for related events) and publishes events that tag it with an `a` tag. The NIP-01
//! behaviour checked is the same as for any other event. The policy itself is tested in
//! `acceptance.rs`.

use grasp_tests::grasp::{announcement, connect, connected, signed};
use grasp_tests::{NostrClient, ReqOutcome, TestServer};
use nostr::prelude::*;
use serde_json::Value;


/// A repository announced on the server; events tagging it are accepted.
struct Anchor {
    coordinate: String,
}

impl Anchor {
    /// Announces a fresh repository (its owner is a new key) and checks it was accepted.
    async fn announce(server: &TestServer, c: &mut NostrClient) -> Anchor {
        let owner = Keys::generate();
        let ann = announcement(server, &owner, "anchor", &[]);
        let (ok, msg) = c.send_event(&ann).await.unwrap();
        assert!(ok && msg.starts_with("purgatory:"), "{msg}");
        Anchor { coordinate: format!("30617:{}:anchor", owner.public_key().to_hex()) }
    }

    /// The `a` tag pointing at the repository.
    fn tag(&self) -> Tag {
        Tag::parse(["a", self.coordinate.as_str()]).unwrap()
    }

    /// An event of `kind` that tags the repository, plus `tags`.
    fn event(&self, keys: &Keys, kind: u16, at: u64, content: &str, mut tags: Vec<Tag>) -> Event {
        tags.push(self.tag());
        signed(keys, kind, at, content, tags)
    }
}

fn ids(events: &[Event]) -> Vec<EventId> {
    events.iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn event_ok_and_duplicate() {
    let (server, mut c) = connected(&[]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();
    let e = repo.event(&keys, 1621, 1_700_000_000, "hello", vec![]);
    assert_eq!(c.send_event(&e).await.unwrap(), (true, String::new()));
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(ok && msg.starts_with("duplicate:"), "{msg}");
    assert_eq!(
        ids(&c.req(vec![Filter::new().id(e.id)]).await.unwrap()),
        vec![e.id]
    );
}

#[tokio::test]
async fn bad_signature_and_wrong_id_are_rejected() {
    let (server, mut c) = connected(&[]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();
    // Would be accepted with a valid id and signature (it tags an announced repository).
    let good = repo.event(&keys, 1621, 1_700_000_000, "original", vec![]);

    // Content changed after signing: the id no longer matches.
    let mut json: Value = serde_json::from_str(&good.as_json()).unwrap();
    json["content"] = "tampered".into();
    c.raw_send(format!(r#"["EVENT",{json}]"#)).await.unwrap();
    let (ok, msg) = c.wait_ok(good.id).await.unwrap();
    assert!(
        !ok && msg.starts_with("invalid:") && msg.contains("id"),
        "{msg}"
    );

    // Correct id, signature from another event.
    let other = repo.event(&keys, 1621, 1_700_000_001, "other", vec![]);
    let mut json: Value = serde_json::from_str(&good.as_json()).unwrap();
    json["sig"] = other.sig.to_string().into();
    c.raw_send(format!(r#"["EVENT",{json}]"#)).await.unwrap();
    let (ok, msg) = c.wait_ok(good.id).await.unwrap();
    assert!(
        !ok && msg.starts_with("invalid:") && msg.contains("signature"),
        "{msg}"
    );

    assert!(c
        .req(vec![Filter::new().author(keys.public_key())])
        .await
        .unwrap()
        .is_empty());
    // The untampered event is accepted: the refusals above were about id and signature only.
    assert_eq!(c.send_event(&good).await.unwrap(), (true, String::new()));
}

#[tokio::test]
async fn req_filter_fields_or_and_limit() {
    let (server, mut c) = connected(&[]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let a1 = repo.event(&alice, 1621, 1000, "a1", vec![Tag::hashtag("grasp")]);
    let a2 = repo.event(
        &alice,
        1630,
        2000,
        "a2",
        vec![Tag::public_key(bob.public_key())],
    );
    let b1 = repo.event(&bob, 1621, 3000, "b1", vec![Tag::hashtag("other")]);
    let b2 = repo.event(&bob, 1111, 4000, "b2", vec![Tag::hashtag("grasp")]);
    for e in [&a1, &a2, &b1, &b2] {
        assert_eq!(c.send_event(e).await.unwrap(), (true, String::new()));
    }
    let q = |f: Filter| vec![f];
    let mut c2 = connect(&server).await;
    // ids
    assert_eq!(
        ids(&c2.req(q(Filter::new().ids([a1.id, b2.id]))).await.unwrap()),
        vec![b2.id, a1.id]
    );
    // authors, newest first
    assert_eq!(
        ids(&c2
            .req(q(Filter::new().author(alice.public_key())))
            .await
            .unwrap()),
        vec![a2.id, a1.id]
    );
    // kinds
    assert_eq!(
        ids(&c2
            .req(q(Filter::new().kinds([Kind::from(1621)])))
            .await
            .unwrap()),
        vec![b1.id, a1.id]
    );
    // #t and #p
    assert_eq!(
        ids(&c2.req(q(Filter::new().hashtag("grasp"))).await.unwrap()),
        vec![b2.id, a1.id]
    );
    assert_eq!(
        ids(&c2
            .req(q(Filter::new().pubkey(bob.public_key())))
            .await
            .unwrap()),
        vec![a2.id]
    );
    // since / until (inclusive)
    let f = Filter::new()
        .since(Timestamp::from(2000))
        .until(Timestamp::from(3000));
    assert_eq!(ids(&c2.req(q(f)).await.unwrap()), vec![b1.id, a2.id]);
    // AND within a filter
    let f = Filter::new().author(bob.public_key()).hashtag("grasp");
    assert_eq!(ids(&c2.req(q(f)).await.unwrap()), vec![b2.id]);
    // OR of filters, no duplicates
    let fs = vec![
        Filter::new().kind(Kind::from(1630)),
        Filter::new().hashtag("grasp"),
        Filter::new().id(a2.id),
    ];
    assert_eq!(ids(&c2.req(fs).await.unwrap()), vec![b2.id, a2.id, a1.id]);
    // limit: the newest n
    let f = Filter::new()
        .authors([alice.public_key(), bob.public_key()])
        .limit(2);
    assert_eq!(ids(&c2.req(q(f)).await.unwrap()), vec![b2.id, b1.id]);
    // #a: everything tagging the repository (the held announcement itself is not served)
    let f = Filter::new().custom_tag(SingleLetterTag::from_char('a').unwrap(), repo.coordinate.clone());
    assert_eq!(ids(&c2.req(q(f)).await.unwrap()), vec![b2.id, b1.id, a2.id, a1.id]);
}

#[tokio::test]
async fn max_limit_caps_results() {
    let (server, mut c) = connected(&["--max-limit", "2"]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();
    for i in 0..4 {
        assert!(
            c.send_event(&repo.event(&keys, 1621, 1000 + i, "n", vec![]))
                .await
                .unwrap()
                .0
        );
    }
    assert_eq!(
        c.req(vec![Filter::new().author(keys.public_key())])
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        c.req(vec![Filter::new().author(keys.public_key()).limit(100)])
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn live_broadcast_close_and_eose() {
    let (server, mut sub) = connected(&[]).await;
    let mut publisher = connect(&server).await;
    let repo = Anchor::announce(&server, &mut publisher).await;
    let keys = Keys::generate();
    let old = repo.event(&keys, 1621, 1000, "stored", vec![]);
    assert!(publisher.send_event(&old).await.unwrap().0);

    let (sid, stored) = sub
        .subscribe(vec![Filter::new()
            .author(keys.public_key())
            .kind(Kind::from(1621))])
        .await
        .unwrap();
    assert_eq!(ids(&stored), vec![old.id]);

    // A non-matching event is not delivered: the next event seen is the matching one sent after it.
    let other_kind = repo.event(&keys, 1630, 1001, "not for you", vec![]);
    let live = repo.event(&keys, 1621, 1002, "live", vec![]);
    assert!(publisher.send_event(&other_kind).await.unwrap().0);
    assert!(publisher.send_event(&live).await.unwrap().0);
    assert_eq!(sub.next_event(&sid).await.unwrap().id, live.id);

    // After CLOSE nothing more arrives on that subscription (checked with a second, open one).
    sub.close(&sid).await.unwrap();
    let (sid2, _) = sub
        .subscribe(vec![Filter::new().author(keys.public_key())])
        .await
        .unwrap();
    let later = repo.event(&keys, 1621, 1003, "later", vec![]);
    assert!(publisher.send_event(&later).await.unwrap().0);
    assert_eq!(sub.next_event(&sid2).await.unwrap().id, later.id);
    // The relay answers in order, so after this round trip anything sent for `later` has arrived.
    sub.ping_relay().await.unwrap();
    let leaked = sub.backlog().any(
        |m| matches!(m, RelayMessage::Event { subscription_id, .. } if **subscription_id == sid),
    );
    assert!(!leaked, "closed subscription still received events");
}

#[tokio::test]
async fn replaceable_and_addressable_replacement() {
    let (server, mut c) = connected(&[]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();

    // replaceable (10317, the user's grasp list, is always accepted): newer replaces, older refused
    let r1 = signed(&keys, 10317, 1000, "r1", vec![]);
    let r2 = signed(&keys, 10317, 2000, "r2", vec![]);
    assert!(c.send_event(&r1).await.unwrap().0);
    assert!(c.send_event(&r2).await.unwrap().0);
    let (ok, msg) = c.send_event(&r1).await.unwrap();
    assert!(!ok || msg.starts_with("duplicate:"), "{ok} {msg}");
    let r0 = signed(&keys, 10317, 500, "r0", vec![]);
    let (ok, msg) = c.send_event(&r0).await.unwrap();
    assert!(!ok, "an older replaceable event must be refused: {msg}");
    assert_eq!(
        ids(&c
            .req(vec![Filter::new()
                .author(keys.public_key())
                .kind(Kind::from(10317))])
            .await
            .unwrap()),
        vec![r2.id]
    );

    // addressable (an application-data event about the repository), same second: lower id
    // wins, higher id refused afterwards
    let d = || vec![Tag::identifier("repo")];
    let x = repo.event(&keys, 30078, 3000, "x", d());
    let y = repo.event(&keys, 30078, 3000, "y", d());
    let (low, high) = if x.id < y.id { (x, y) } else { (y, x) };
    assert!(c.send_event(&high).await.unwrap().0);
    assert!(
        c.send_event(&low).await.unwrap().0,
        "lower id must replace at the same second"
    );
    let again = repo.event(&keys, 30078, 3000, "z", d());
    let (ok, _) = c.send_event(&again).await.unwrap();
    assert_eq!(ok, again.id < low.id);
    let got = c
        .req(vec![Filter::new()
            .kind(Kind::from(30078))
            .author(keys.public_key())
            .identifier("repo")])
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, low.id.min(again.id));
    // a different d tag is independent
    let other = repo.event(&keys, 30078, 10, "o", vec![Tag::identifier("other")]);
    assert!(c.send_event(&other).await.unwrap().0);
    let older = repo.event(&keys, 30078, 2999, "older", d());
    let (ok, msg) = c.send_event(&older).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "an older addressable event must be refused: {msg}");
}

#[tokio::test]
async fn deletion_removes_and_blocks_republish() {
    let (server, mut c) = connected(&[]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let (alice, mallory) = (Keys::generate(), Keys::generate());
    let e = repo.event(&alice, 1621, 1000, "regret", vec![]);
    assert!(c.send_event(&e).await.unwrap().0);

    let bad = signed(&mallory, 5, 1001, "", vec![Tag::event(e.id)]);
    let (ok, msg) = c.send_event(&bad).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "{msg}");
    assert_eq!(c.req(vec![Filter::new().id(e.id)]).await.unwrap().len(), 1);

    let del = signed(&alice, 5, 1001, "", vec![Tag::event(e.id)]);
    assert!(c.send_event(&del).await.unwrap().0);
    assert!(c
        .req(vec![Filter::new().id(e.id)])
        .await
        .unwrap()
        .is_empty());
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");

    // addressable by coordinate
    let addr = repo.event(&alice, 30078, 2000, "", vec![Tag::identifier("r")]);
    assert!(c.send_event(&addr).await.unwrap().0);
    assert_eq!(c.req(vec![Filter::new().id(addr.id)]).await.unwrap().len(), 1);
    let coord = Coordinate::new(Kind::from(30078), alice.public_key()).identifier("r");
    let del = signed(&alice, 5, 2001, "", vec![Tag::coordinate(coord, None)]);
    assert!(c.send_event(&del).await.unwrap().0);
    assert!(c
        .req(vec![Filter::new().id(addr.id)])
        .await
        .unwrap()
        .is_empty());
    let (ok, msg) = c.send_event(&addr).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    // a version newer than the deletion is a new event and accepted
    let newer = repo.event(&alice, 30078, 2002, "again", vec![Tag::identifier("r")]);
    assert_eq!(c.send_event(&newer).await.unwrap(), (true, String::new()));
}

#[tokio::test]
async fn too_many_subscriptions_and_filters_are_closed() {
    let (_server, mut c) = connected(&["--max-subscriptions", "2", "--max-filters", "2"]).await;
    c.subscribe(vec![Filter::new().limit(0)]).await.unwrap();
    c.subscribe(vec![Filter::new().limit(0)]).await.unwrap();
    let third = SubscriptionId::new("third");
    match c.req_with_id(&third, vec![Filter::new()]).await.unwrap() {
        ReqOutcome::Closed(msg) => assert!(msg.starts_with("rate-limited:"), "{msg}"),
        other => panic!("expected CLOSED, got {other:?}"),
    }
    c.close(&SubscriptionId::new("sub1")).await.unwrap();
    match c.req_with_id(&third, vec![Filter::new(); 3]).await.unwrap() {
        ReqOutcome::Closed(msg) => assert!(msg.starts_with("invalid:"), "{msg}"),
        other => panic!("expected CLOSED, got {other:?}"),
    }
    assert!(matches!(
        c.req_with_id(&third, vec![Filter::new().limit(0)])
            .await
            .unwrap(),
        ReqOutcome::Eose(_)
    ));
}

#[tokio::test]
async fn oversized_message_is_answered_and_connection_survives() {
    let (server, mut c) = connected(&["--max-message-bytes", "2048"]).await;
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();
    let big = repo.event(&keys, 1621, 1000, &"x".repeat(4096), vec![]);
    let (ok, msg) = c.send_event(&big).await.unwrap();
    assert!(!ok && msg.contains("too large"), "{msg}");
    c.raw_send(format!(
        r#"["REQ","s",{{"search":"{}"}}]"#,
        "y".repeat(4096)
    ))
    .await
    .unwrap();
    assert!(c.wait_notice().await.unwrap().contains("too large"));
    let small = repo.event(&keys, 1621, 1001, "fits", vec![]);
    assert_eq!(c.send_event(&small).await.unwrap(), (true, String::new()));
    assert!(c
        .req(vec![Filter::new().id(big.id)])
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn garbage_gets_notice_and_connection_survives() {
    let (server, mut c) = connected(&[]).await;
    for garbage in [
        "not json",
        "{}",
        "[]",
        "[1,2]",
        r#"["NOPE"]"#,
        r#"["EVENT"]"#,
        r#"["EVENT",{"kind":"x"}]"#,
        r#"["CLOSE"]"#,
        r#"["REQ"]"#,
    ] {
        c.raw_send(garbage).await.unwrap();
        let notice = c.wait_notice().await.unwrap();
        assert!(notice.starts_with("invalid:"), "{garbage} -> {notice}");
    }
    c.raw_send(r#"["REQ","bad",{"kinds":"nope"}]"#)
        .await
        .unwrap();
    match c.next_message().await.unwrap() {
        RelayMessage::Closed { message, .. } => {
            assert!(message.starts_with("invalid:"), "{message}")
        }
        other => panic!("expected CLOSED, got {other:?}"),
    }
    c.send_ws(tokio_tungstenite::tungstenite::Message::binary(vec![
        0u8, 159, 146, 150,
    ]))
    .await
    .unwrap();
    assert!(c.wait_notice().await.unwrap().contains("binary"));
    c.ping_relay().await.unwrap();
    c.ws_ping().await.unwrap();
    let repo = Anchor::announce(&server, &mut c).await;
    let keys = Keys::generate();
    assert!(
        c.send_event(&repo.event(&keys, 1621, 1, "still here", vec![]))
            .await
            .unwrap()
            .0
    );
}

#[tokio::test]
async fn nip11_home_page_options_and_cors() {
    let server = TestServer::start_with(&["--max-subscriptions", "7"]);
    let http = reqwest::Client::new();
    let resp = http
        .get(server.http_url() + "/")
        .header("Accept", "application/nostr+json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*");
    assert_eq!(resp.headers()["content-type"], "application/nostr+json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["supported_grasps"], serde_json::json!(["GRASP-01", "GRASP-02", "GRASP-03"]), "GRASP-02: relay-to-relay sync is on by default, GRASP-03 Sync+ with it");
    for nip in [1, 9, 11, 34] {
        assert!(
            doc["supported_nips"]
                .as_array()
                .unwrap()
                .contains(&nip.into()),
            "{doc}"
        );
    }
    assert!(doc["repo_acceptance_criteria"].is_string());
    assert!(
        doc["name"].is_string() && doc["description"].is_string() && doc["software"].is_string()
    );
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["limitation"]["max_subscriptions"], 7);
    assert!(doc.get("curation").is_none());

    let home = http.get(server.http_url() + "/").send().await.unwrap();
    assert_eq!(home.status(), 200);
    assert!(home.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(home.headers()["access-control-allow-origin"], "*");

    let opts = http
        .request(
            reqwest::Method::OPTIONS,
            server.http_url() + "/anything/at/all",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(opts.status(), 204);
    assert_eq!(opts.headers()["access-control-allow-origin"], "*");
    assert_eq!(opts.headers()["access-control-max-age"], grasp_state::contract::cors::MAX_AGE);
    assert!(opts.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));

    let missing = http.get(server.http_url() + "/nope").send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.headers()["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn data_dir_lock_refuses_second_instance() {
    let server = TestServer::start();
    let out = server.run_second_instance();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already in use"), "{stderr}");
    // the first one is unaffected
    let mut c = connect(&server).await;
    c.ping_relay().await.unwrap();
}

#[tokio::test]
async fn sigterm_exits_cleanly_and_restart_keeps_events() {
    let mut server = TestServer::start();
    let keys = Keys::generate();
    {
        let mut c = connect(&server).await;
        let repo = Anchor::announce(&server, &mut c).await;
        let e = repo.event(&keys, 1621, 1000, "persist me", vec![]);
        assert_eq!(c.send_event(&e).await.unwrap(), (true, String::new()));
        // an open connection must not block shutdown
        let mut idle = connect(&server).await;
        idle.subscribe(vec![Filter::new().limit(0)]).await.unwrap();
        let status = server.stop();
        assert!(status.success(), "exit status {status}\n{}", server.logs());
        assert!(
            idle.next_message().await.is_err(),
            "connection must be closed on shutdown"
        );
    }
    server.restart();
    let mut c = connect(&server).await;
    let kept = c.req(vec![Filter::new().author(keys.public_key())]).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].content, "persist me");
    // after SIGKILL the lock is released too
    server.kill();
    server.restart();
    let mut c = connect(&server).await;
    c.ping_relay().await.unwrap();
}

#[tokio::test]
async fn ephemeral_events_about_a_repository_are_broadcast_not_stored() {
    let (server, mut sub) = connected(&[]).await;
    let mut publisher = connect(&server).await;
    let repo = Anchor::announce(&server, &mut publisher).await;
    let keys = Keys::generate();
    let (sid, _) = sub
        .subscribe(vec![Filter::new().author(keys.public_key())])
        .await
        .unwrap();
    // An ephemeral event unrelated to any repository is refused by the GRASP policy, clearly.
    let unrelated = signed(&keys, 20001, 999, "chatter", vec![]);
    let (ok, msg) = publisher.send_event(&unrelated).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("repository"), "{msg}");
    // One about a repository is broadcast (and is the first event the subscription sees).
    let eph = repo.event(&keys, 20001, 1000, "fleeting", vec![]);
    assert_eq!(publisher.send_event(&eph).await.unwrap(), (true, String::new()));
    assert_eq!(sub.next_event(&sid).await.unwrap().id, eph.id);
    assert!(publisher
        .req(vec![Filter::new().id(eph.id)])
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn req_with_open_id_replaces_the_subscription() {
    let (server, mut sub) = connected(&[]).await;
    let mut publisher = connect(&server).await;
    let repo = Anchor::announce(&server, &mut publisher).await;
    let keys = Keys::generate();
    let id = SubscriptionId::new("same");
    let kind1 = Filter::new().author(keys.public_key()).kind(Kind::from(1621));
    let kind7 = Filter::new().author(keys.public_key()).kind(Kind::from(1630));
    assert!(matches!(
        sub.req_with_id(&id, vec![kind1]).await.unwrap(),
        ReqOutcome::Eose(_)
    ));
    assert!(matches!(
        sub.req_with_id(&id, vec![kind7]).await.unwrap(),
        ReqOutcome::Eose(_)
    ));
    let one = repo.event(&keys, 1621, 1000, "old filter", vec![]);
    let seven = repo.event(&keys, 1630, 1001, "new filter", vec![]);
    assert_eq!(publisher.send_event(&one).await.unwrap(), (true, String::new()));
    assert_eq!(publisher.send_event(&seven).await.unwrap(), (true, String::new()));
    assert_eq!(sub.next_event(&id).await.unwrap().id, seven.id);
}

/// NIP-01: `CLOSED` ends the subscription. A REQ refused for a malformed filter under the id of
/// an open subscription is answered `CLOSED` and that subscription delivers nothing more.
#[tokio::test]
async fn malformed_req_with_open_id_ends_the_subscription() {
    let (server, mut sub) = connected(&[]).await;
    let mut publisher = connect(&server).await;
    let repo = Anchor::announce(&server, &mut publisher).await;
    let keys = Keys::generate();
    let id = SubscriptionId::new("same");
    let issues = Filter::new().author(keys.public_key()).kind(Kind::from(1621));
    assert!(matches!(sub.req_with_id(&id, vec![issues.clone()]).await.unwrap(), ReqOutcome::Eose(_)));
    // A second, live subscription shows when the relay has forwarded the event.
    let (witness, _) = sub.subscribe(vec![issues]).await.unwrap();
    sub.raw_send(r#"["REQ","same",{"kinds":"not a list"}]"#).await.unwrap();
    let closed = sub
        .wait_for(|m| match m {
            RelayMessage::Closed { subscription_id, message } if **subscription_id == id => Some(message.to_string()),
            _ => None,
        })
        .await
        .unwrap();
    assert!(closed.starts_with("invalid: malformed filter"), "{closed}");
    let issue = repo.event(&keys, 1621, 1000, "after CLOSED", vec![]);
    assert_eq!(publisher.send_event(&issue).await.unwrap(), (true, String::new()));
    assert_eq!(sub.next_event(&witness).await.unwrap().id, issue.id);
    sub.ping_relay().await.unwrap();
    assert!(
        !sub.backlog().any(|m| matches!(m, RelayMessage::Event { subscription_id, .. } if **subscription_id == id)),
        "the closed subscription still delivers"
    );
}
