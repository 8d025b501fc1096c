//! End-to-end NIP-01/09/11 behaviour of the real `grasp-relay` binary.

use grasp_tests::{NostrClient, ReqOutcome, TestServer};
use nostr::prelude::*;
use serde_json::Value;

fn note(keys: &Keys, kind: u16, at: u64, content: &str, tags: Vec<Tag>) -> Event {
    EventBuilder::new(Kind::from(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .unwrap()
}

fn ids(events: &[Event]) -> Vec<EventId> {
    events.iter().map(|e| e.id).collect()
}

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

#[tokio::test]
async fn event_ok_and_duplicate() {
    let server = TestServer::start();
    let mut c = connect(&server).await;
    let keys = Keys::generate();
    let e = note(&keys, 1, 1_700_000_000, "hello", vec![]);
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
    let server = TestServer::start();
    let mut c = connect(&server).await;
    let keys = Keys::generate();
    let good = note(&keys, 1, 1_700_000_000, "original", vec![]);

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
    let other = note(&keys, 1, 1_700_000_001, "other", vec![]);
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
}

#[tokio::test]
async fn req_filter_fields_or_and_limit() {
    let server = TestServer::start();
    let mut c = connect(&server).await;
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let a1 = note(&alice, 1, 1000, "a1", vec![Tag::hashtag("grasp")]);
    let a2 = note(
        &alice,
        7,
        2000,
        "a2",
        vec![Tag::public_key(bob.public_key())],
    );
    let b1 = note(&bob, 1, 3000, "b1", vec![Tag::hashtag("other")]);
    let b2 = note(&bob, 1621, 4000, "b2", vec![Tag::hashtag("grasp")]);
    for e in [&a1, &a2, &b1, &b2] {
        assert!(c.send_event(e).await.unwrap().0);
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
            .req(q(Filter::new().kinds([Kind::from(1)])))
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
        Filter::new().kind(Kind::from(7)),
        Filter::new().hashtag("grasp"),
        Filter::new().id(a2.id),
    ];
    assert_eq!(ids(&c2.req(fs).await.unwrap()), vec![b2.id, a2.id, a1.id]);
    // limit: the newest n
    let f = Filter::new()
        .authors([alice.public_key(), bob.public_key()])
        .limit(2);
    assert_eq!(ids(&c2.req(q(f)).await.unwrap()), vec![b2.id, b1.id]);
}

#[tokio::test]
async fn max_limit_caps_results() {
    let server = TestServer::start_with(&["--max-limit", "2"]);
    let mut c = connect(&server).await;
    let keys = Keys::generate();
    for i in 0..4 {
        assert!(
            c.send_event(&note(&keys, 1, 1000 + i, "n", vec![]))
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
    let server = TestServer::start();
    let mut sub = connect(&server).await;
    let mut publisher = connect(&server).await;
    let keys = Keys::generate();
    let old = note(&keys, 1, 1000, "stored", vec![]);
    assert!(publisher.send_event(&old).await.unwrap().0);

    let (sid, stored) = sub
        .subscribe(vec![Filter::new()
            .author(keys.public_key())
            .kind(Kind::from(1))])
        .await
        .unwrap();
    assert_eq!(ids(&stored), vec![old.id]);

    // A non-matching event is not delivered: the next event seen is the matching one sent after it.
    let other_kind = note(&keys, 7, 1001, "not for you", vec![]);
    let live = note(&keys, 1, 1002, "live", vec![]);
    assert!(publisher.send_event(&other_kind).await.unwrap().0);
    assert!(publisher.send_event(&live).await.unwrap().0);
    assert_eq!(sub.next_event(&sid).await.unwrap().id, live.id);

    // After CLOSE nothing more arrives on that subscription (checked with a second, open one).
    sub.close(&sid).await.unwrap();
    let (sid2, _) = sub
        .subscribe(vec![Filter::new().author(keys.public_key())])
        .await
        .unwrap();
    let later = note(&keys, 1, 1003, "later", vec![]);
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
    let server = TestServer::start();
    let mut c = connect(&server).await;
    let keys = Keys::generate();

    // replaceable: newer replaces, older refused
    let r1 = note(&keys, 10002, 1000, "r1", vec![]);
    let r2 = note(&keys, 10002, 2000, "r2", vec![]);
    assert!(c.send_event(&r1).await.unwrap().0);
    assert!(c.send_event(&r2).await.unwrap().0);
    let (ok, msg) = c.send_event(&r1).await.unwrap();
    assert!(!ok || msg.starts_with("duplicate:"), "{ok} {msg}");
    let r0 = note(&keys, 10002, 500, "r0", vec![]);
    let (ok, msg) = c.send_event(&r0).await.unwrap();
    assert!(!ok, "an older replaceable event must be refused: {msg}");
    assert_eq!(
        ids(&c
            .req(vec![Filter::new()
                .author(keys.public_key())
                .kind(Kind::from(10002))])
            .await
            .unwrap()),
        vec![r2.id]
    );

    // addressable, same second: lower id wins, higher id refused afterwards
    let d = || vec![Tag::identifier("repo")];
    let x = note(&keys, 30618, 3000, "x", d());
    let y = note(&keys, 30618, 3000, "y", d());
    let (low, high) = if x.id < y.id { (x, y) } else { (y, x) };
    assert!(c.send_event(&high).await.unwrap().0);
    assert!(
        c.send_event(&low).await.unwrap().0,
        "lower id must replace at the same second"
    );
    let again = note(&keys, 30618, 3000, "z", d());
    let (ok, _) = c.send_event(&again).await.unwrap();
    assert_eq!(ok, again.id < low.id);
    let got = c
        .req(vec![Filter::new()
            .kind(Kind::from(30618))
            .author(keys.public_key())
            .identifier("repo")])
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, low.id.min(again.id));
    // a different d tag is independent
    let other = note(&keys, 30618, 10, "o", vec![Tag::identifier("other")]);
    assert!(c.send_event(&other).await.unwrap().0);
}

#[tokio::test]
async fn deletion_removes_and_blocks_republish() {
    let server = TestServer::start();
    let mut c = connect(&server).await;
    let (alice, mallory) = (Keys::generate(), Keys::generate());
    let e = note(&alice, 1, 1000, "regret", vec![]);
    assert!(c.send_event(&e).await.unwrap().0);

    let bad = note(&mallory, 5, 1001, "", vec![Tag::event(e.id)]);
    let (ok, msg) = c.send_event(&bad).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "{msg}");
    assert_eq!(c.req(vec![Filter::new().id(e.id)]).await.unwrap().len(), 1);

    let del = note(&alice, 5, 1001, "", vec![Tag::event(e.id)]);
    assert!(c.send_event(&del).await.unwrap().0);
    assert!(c
        .req(vec![Filter::new().id(e.id)])
        .await
        .unwrap()
        .is_empty());
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");

    // addressable by coordinate
    let ann = note(&alice, 30617, 2000, "", vec![Tag::identifier("r")]);
    assert!(c.send_event(&ann).await.unwrap().0);
    let coord = Coordinate::new(Kind::from(30617), alice.public_key()).identifier("r");
    let del = note(&alice, 5, 2001, "", vec![Tag::coordinate(coord, None)]);
    assert!(c.send_event(&del).await.unwrap().0);
    assert!(c
        .req(vec![Filter::new().id(ann.id)])
        .await
        .unwrap()
        .is_empty());
    let (ok, _) = c.send_event(&ann).await.unwrap();
    assert!(!ok);
}

#[tokio::test]
async fn too_many_subscriptions_and_filters_are_closed() {
    let server = TestServer::start_with(&["--max-subscriptions", "2", "--max-filters", "2"]);
    let mut c = connect(&server).await;
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
    let server = TestServer::start_with(&["--max-message-bytes", "2048"]);
    let mut c = connect(&server).await;
    let keys = Keys::generate();
    let big = note(&keys, 1, 1000, &"x".repeat(4096), vec![]);
    let (ok, msg) = c.send_event(&big).await.unwrap();
    assert!(!ok && msg.contains("too large"), "{msg}");
    c.raw_send(format!(
        r#"["REQ","s",{{"search":"{}"}}]"#,
        "y".repeat(4096)
    ))
    .await
    .unwrap();
    assert!(c.wait_notice().await.unwrap().contains("too large"));
    let small = note(&keys, 1, 1001, "fits", vec![]);
    assert!(c.send_event(&small).await.unwrap().0);
    assert!(c
        .req(vec![Filter::new().id(big.id)])
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn garbage_gets_notice_and_connection_survives() {
    let server = TestServer::start();
    let mut c = connect(&server).await;
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
    let keys = Keys::generate();
    assert!(
        c.send_event(&note(&keys, 1, 1, "still here", vec![]))
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
    assert_eq!(doc["supported_grasps"], serde_json::json!(["GRASP-01"]));
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
    let e = note(&keys, 1, 1000, "persist me", vec![]);
    {
        let mut c = connect(&server).await;
        assert!(c.send_event(&e).await.unwrap().0);
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
    assert_eq!(
        ids(&c.req(vec![Filter::new().id(e.id)]).await.unwrap()),
        vec![e.id]
    );
    // after SIGKILL the lock is released too
    server.kill();
    server.restart();
    let mut c = connect(&server).await;
    c.ping_relay().await.unwrap();
}

#[tokio::test]
async fn ephemeral_events_are_broadcast_not_stored() {
    let server = TestServer::start();
    let mut sub = connect(&server).await;
    let mut publisher = connect(&server).await;
    let keys = Keys::generate();
    let (sid, _) = sub
        .subscribe(vec![Filter::new().author(keys.public_key())])
        .await
        .unwrap();
    let eph = note(&keys, 20001, 1000, "fleeting", vec![]);
    assert!(publisher.send_event(&eph).await.unwrap().0);
    assert_eq!(sub.next_event(&sid).await.unwrap().id, eph.id);
    assert!(publisher
        .req(vec![Filter::new().id(eph.id)])
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn req_with_open_id_replaces_the_subscription() {
    let server = TestServer::start();
    let mut sub = connect(&server).await;
    let mut publisher = connect(&server).await;
    let keys = Keys::generate();
    let id = SubscriptionId::new("same");
    let kind1 = Filter::new().author(keys.public_key()).kind(Kind::from(1));
    let kind7 = Filter::new().author(keys.public_key()).kind(Kind::from(7));
    assert!(matches!(
        sub.req_with_id(&id, vec![kind1]).await.unwrap(),
        ReqOutcome::Eose(_)
    ));
    assert!(matches!(
        sub.req_with_id(&id, vec![kind7]).await.unwrap(),
        ReqOutcome::Eose(_)
    ));
    let one = note(&keys, 1, 1000, "old filter", vec![]);
    let seven = note(&keys, 7, 1001, "new filter", vec![]);
    assert!(publisher.send_event(&one).await.unwrap().0);
    assert!(publisher.send_event(&seven).await.unwrap().0);
    assert_eq!(sub.next_event(&id).await.unwrap().id, seven.id);
}
