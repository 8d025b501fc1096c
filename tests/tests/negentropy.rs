//! NIP-77 negentropy served by the relay, end to end: a stock negentropy client (the
//! `negentropy` crate's initiator, driven over the test WebSocket client the way the rust-nostr
//! SDK drives it) reconciles against the relay and learns exactly which events it lacks and which
//! the relay lacks; limits, closed sessions and bad input are answered with `NEG-ERR` (or a
//! NOTICE) on a connection that stays usable; NEG-OPEN is metered per address, sessions hold
//! bounded events per connection and in total and are closed when idle; `--no-negentropy` makes
//! a relay without NIP-77.

use std::borrow::Cow;
use std::collections::BTreeSet;

use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer};
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use nostr::prelude::*;

/// The frame size limit the rust-nostr SDK uses on the client side.
const CLIENT_FRAME_SIZE_LIMIT: u64 = 60_000;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

/// What a reconciliation taught the client.
#[derive(Debug, Default)]
struct Outcome {
    /// Ids the client has and the relay lacks.
    have: BTreeSet<EventId>,
    /// Ids the relay has and the client lacks.
    need: BTreeSet<EventId>,
    /// NEG-MSG rounds the relay answered.
    rounds: usize,
}

fn ids(events: &[Event]) -> BTreeSet<EventId> {
    events.iter().map(|e| e.id).collect()
}

/// The next NEG-MSG (Ok, hex) or NEG-ERR (Err, reason) for subscription `sub`.
async fn neg_reply(c: &mut NostrClient, sub: &str) -> Result<String, String> {
    c.wait_for(|m| match m {
        RelayMessage::NegMsg {
            subscription_id,
            message,
        } if subscription_id.as_str() == sub => Some(Ok(message.to_string())),
        RelayMessage::NegErr {
            subscription_id,
            message,
        } if subscription_id.as_str() == sub => Some(Err(message.to_string())),
        _ => None,
    })
    .await
    .unwrap()
}

async fn neg_open(c: &mut NostrClient, sub: &str, filter: Filter, hex: String) {
    c.send(ClientMessage::neg_open(SubscriptionId::new(sub), filter, hex))
        .await
        .unwrap();
}

async fn neg_msg(c: &mut NostrClient, sub: &str, hex: String) {
    c.send(ClientMessage::NegMsg {
        subscription_id: Cow::Owned(SubscriptionId::new(sub)),
        message: Cow::Owned(hex),
    })
    .await
    .unwrap();
}

async fn neg_close(c: &mut NostrClient, sub: &str) {
    c.send(ClientMessage::NegClose {
        subscription_id: Cow::Owned(SubscriptionId::new(sub)),
    })
    .await
    .unwrap();
}

/// A client storage holding `mine`.
fn storage(mine: &[Event]) -> NegentropyStorageVector {
    let mut s = NegentropyStorageVector::with_capacity(mine.len());
    for e in mine {
        s.insert(e.created_at.as_secs(), Id::from_byte_array(e.id.to_bytes()))
            .unwrap();
    }
    s.seal().unwrap();
    s
}

/// The initial message of a client holding `mine`, hex-encoded.
fn initial_message(mine: &[Event]) -> String {
    let mut client = Negentropy::owned(storage(mine), CLIENT_FRAME_SIZE_LIMIT).unwrap();
    faster_hex::hex_string(&client.initiate().unwrap())
}

/// Reconciles `mine` with the relay's events matching `filter` as subscription `sub`, to the
/// end, then sends NEG-CLOSE. Err: the relay's NEG-ERR reason.
async fn reconcile(
    c: &mut NostrClient,
    sub: &str,
    filter: Filter,
    mine: &[Event],
) -> Result<Outcome, String> {
    let mut client = Negentropy::owned(storage(mine), CLIENT_FRAME_SIZE_LIMIT).unwrap();
    let first = client.initiate().unwrap();
    neg_open(c, sub, filter, faster_hex::hex_string(&first)).await;
    let mut outcome = Outcome::default();
    loop {
        let hex = neg_reply(c, sub).await?;
        outcome.rounds += 1;
        assert!(outcome.rounds < 100, "reconciliation does not end");
        let mut bytes = vec![0u8; hex.len() / 2];
        faster_hex::hex_decode(hex.as_bytes(), &mut bytes).expect("the relay sends hex");
        let (mut have, mut need) = (Vec::new(), Vec::new());
        let next = client
            .reconcile_with_ids(&bytes, &mut have, &mut need)
            .expect("the relay's message is valid negentropy");
        let to_event_id = |id: Id| EventId::from_byte_array(id.to_bytes());
        outcome.have.extend(have.into_iter().map(to_event_id));
        outcome.need.extend(need.into_iter().map(to_event_id));
        match next {
            Some(msg) => neg_msg(c, sub, faster_hex::hex_string(&msg)).await,
            None => {
                neg_close(c, sub).await;
                return Ok(outcome);
            }
        }
    }
}

/// `n` user grasp lists (kind 10317, accepted from anyone and stored at once), one per new
/// author, with created_at spread over the past so that many share a second.
fn grasp_lists(server: &TestServer, n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let at = now() - 1000 + (i as u64 / 3);
            EventBuilder::new(Kind::from(10317), "")
                .tags([Tag::parse(["g", &format!("ws://{}", host(server))]).unwrap()])
                .custom_created_at(Timestamp::from(at))
                .finalize(&Keys::generate())
                .unwrap()
        })
        .collect()
}

async fn publish_all(c: &mut NostrClient, events: &[Event]) {
    for e in events {
        let (ok, msg) = c.send_event(e).await.unwrap();
        assert!(ok && msg.is_empty(), "{e:?} not stored: {msg}");
    }
}


fn lists_and_announcements() -> Filter {
    Filter::new().kinds([Kind::from(10317), Kind::from(30617)])
}

/// A client holding part of the relay's events and a few of its own learns exactly the ones it
/// lacks (and fetches them by id) and the ones the relay lacks (and uploads them); a second
/// reconciliation then finds nothing. A held announcement is never offered.
#[tokio::test]
async fn client_with_a_subset_gets_exactly_what_it_lacks() {
    let server = TestServer::start();
    assert!(nip11(&server).await["supported_nips"].as_array().unwrap().contains(&77.into()));
    let mut c = connect(&server).await;
    let on_relay = grasp_lists(&server, 200);
    publish_all(&mut c, &on_relay).await;
    let held = announcement(&server, &Keys::generate(), "held", &[]);
    let (ok, msg) = c.send_event(&held).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");

    let only_mine = grasp_lists(&server, 7);
    let mut mine: Vec<Event> = on_relay[..130].to_vec();
    mine.extend(only_mine.iter().cloned());
    let got = reconcile(&mut c, "sync", lists_and_announcements(), &mine).await.unwrap();
    assert_eq!(got.need, ids(&on_relay[130..]), "exactly the relay's events the client lacks");
    assert!(!got.need.contains(&held.id), "held events are never offered");
    assert_eq!(got.have, ids(&only_mine), "exactly the client's events the relay lacks");
    assert!(got.rounds > 1, "a 200-event set with differences takes several rounds");

    // Download what was missing, upload what the relay lacked: both sides then agree.
    let fetched = c.req(vec![Filter::new().ids(got.need.iter().copied())]).await.unwrap();
    assert_eq!(ids(&fetched), got.need);
    publish_all(&mut c, &only_mine).await;
    mine.extend(fetched);
    let again = reconcile(&mut c, "sync", lists_and_announcements(), &mine).await.unwrap();
    assert!(again.need.is_empty() && again.have.is_empty(), "{again:?}");

    // A filter narrows the set the relay reconciles: the client's other events count as extra.
    let authors: Vec<PublicKey> = on_relay[..3].iter().map(|e| e.pubkey).collect();
    let narrow = Filter::new().kind(Kind::from(10317)).authors(authors);
    let got = reconcile(&mut c, "narrow", narrow, &on_relay[..1]).await.unwrap();
    assert_eq!(got.need, ids(&on_relay[1..3]));
    assert!(got.have.is_empty());

    // An empty client learns everything stored, still without the held announcement.
    let all = reconcile(&mut c, "all", lists_and_announcements(), &[]).await.unwrap();
    assert_eq!(all.need, ids(&mine));
    c.ping_relay().await.unwrap();
}

/// Too many sessions on a connection, or a filter matching more events than a session may
/// hold, are answered with NEG-ERR `blocked:`; re-opening an open id replaces that session.
#[tokio::test]
async fn limits_are_answered_with_neg_err() {
    let (server, mut c) = connected(&["--negentropy-max-items", "5"]).await;
    let events = grasp_lists(&server, 6);
    publish_all(&mut c, &events).await;
    let lists = || Filter::new().kind(Kind::from(10317));

    let err = reconcile(&mut c, "big", lists(), &[]).await.unwrap_err();
    assert!(err.starts_with("blocked:") && err.contains('5'), "{err}");
    // Within the cap (the filter's own limit: the newest 5), it is served.
    let got = reconcile(&mut c, "big", lists().limit(5), &[]).await.unwrap();
    assert_eq!(got.need.len(), 5);

    // Eight sessions may stay open; a ninth is refused until one is closed.
    for i in 0..8 {
        neg_open(&mut c, &format!("s{i}"), lists().limit(1), initial_message(&[])).await;
        neg_reply(&mut c, &format!("s{i}")).await.unwrap();
    }
    neg_open(&mut c, "s8", lists().limit(1), initial_message(&[])).await;
    let err = neg_reply(&mut c, "s8").await.unwrap_err();
    assert!(err.starts_with("blocked:") && err.contains("NEG-CLOSE"), "{err}");
    // A NEG-OPEN for an open id replaces that session: no new slot needed.
    neg_open(&mut c, "s3", lists().limit(2), initial_message(&[])).await;
    neg_reply(&mut c, "s3").await.unwrap();
    neg_close(&mut c, "s0").await;
    let got = reconcile(&mut c, "s8", lists().limit(3), &[]).await.unwrap();
    assert_eq!(got.need.len(), 3);
    c.ping_relay().await.unwrap();
}

/// NEG-MSG after NEG-CLOSE, for an id never opened, or after a NEG-ERR is answered NEG-ERR
/// `closed:`; bad hex and bad negentropy bytes get NEG-ERR `invalid:`, unreadable messages a
/// NOTICE; a replaced session continues with the new filter. The connection stays usable.
#[tokio::test]
async fn closed_unknown_and_malformed_sessions() {
    let (server, mut c) = connected(&[]).await;
    let events = grasp_lists(&server, 40);
    publish_all(&mut c, &events).await;
    let lists = || Filter::new().kind(Kind::from(10317));
    let valid_round = initial_message(&events[..1]);

    neg_open(&mut c, "a", lists(), initial_message(&[])).await;
    neg_reply(&mut c, "a").await.unwrap();
    neg_close(&mut c, "a").await;
    neg_msg(&mut c, "a", valid_round.clone()).await;
    let err = neg_reply(&mut c, "a").await.unwrap_err();
    assert!(err.starts_with("closed:"), "{err}");
    neg_msg(&mut c, "never-opened", valid_round.clone()).await;
    let err = neg_reply(&mut c, "never-opened").await.unwrap_err();
    assert!(err.starts_with("closed:"), "{err}");

    // Bad hex, bad negentropy bytes, a bad filter: NEG-ERR, and the session is gone.
    neg_open(&mut c, "b", lists(), "not hex".into()).await;
    assert!(neg_reply(&mut c, "b").await.unwrap_err().starts_with("invalid:"));
    neg_open(&mut c, "b", lists(), initial_message(&[])).await;
    neg_reply(&mut c, "b").await.unwrap();
    neg_msg(&mut c, "b", "00".into()).await;
    let err = neg_reply(&mut c, "b").await.unwrap_err();
    assert!(err.starts_with("invalid:"), "{err}");
    neg_msg(&mut c, "b", valid_round.clone()).await;
    assert!(neg_reply(&mut c, "b").await.unwrap_err().starts_with("closed:"));
    c.raw_send(r#"["NEG-OPEN","f",{"kinds":"x"},"61"]"#).await.unwrap();
    assert!(neg_reply(&mut c, "f").await.unwrap_err().starts_with("invalid: malformed filter"));
    c.raw_send(r#"["NEG-OPEN","g"]"#).await.unwrap();
    assert!(neg_reply(&mut c, "g").await.unwrap_err().starts_with("invalid:"));
    c.raw_send(r#"["NEG-MSG"]"#).await.unwrap();
    assert!(c.wait_notice().await.unwrap().starts_with("invalid:"));

    // Re-opening "r" on a filter matching nothing, then on the lists: the second session
    // answers, for the lists.
    neg_open(&mut c, "r", Filter::new().kind(Kind::from(1)), initial_message(&[])).await;
    neg_reply(&mut c, "r").await.unwrap();
    let got = reconcile(&mut c, "r", lists(), &events[..10]).await.unwrap();
    assert_eq!(got.need, ids(&events[10..]));
    c.ping_relay().await.unwrap();
}

/// With `--no-negentropy` the relay behaves as one without NIP-77: NEG-OPEN gets a NOTICE
/// naming it, never a NEG-MSG, and NIP-11 does not list 77.
#[tokio::test]
async fn switched_off_relay_does_not_speak_nip77() {
    let server = TestServer::start_with(&["--no-negentropy"]);
    assert!(!nip11(&server).await["supported_nips"].as_array().unwrap().contains(&77.into()));
    let mut c = connect(&server).await;
    publish_all(&mut c, &grasp_lists(&server, 3)).await;
    neg_open(&mut c, "off", Filter::new(), initial_message(&[])).await;
    let notice = c.wait_notice().await.unwrap();
    assert!(notice.starts_with("invalid:") && notice.contains("NEG-OPEN"), "{notice}");
    c.ping_relay().await.unwrap();
    assert!(
        !c.backlog().any(|m| matches!(m, RelayMessage::NegMsg { .. } | RelayMessage::NegErr { .. })),
        "no NIP-77 answer from a relay without it"
    );
}

/// NEG-OPEN is metered per client address (every connection of it shares one bucket, apart from
/// the write bucket): beyond it NEG-ERR `rate-limited:`, and REQ and EVENT go on.
#[tokio::test]
async fn neg_open_is_metered_per_address() {
    let server = TestServer::start_with(&["--negentropy-opens-per-minute", "3"]);
    let (mut c1, mut c2) = (connect(&server).await, connect(&server).await);
    let events = grasp_lists(&server, 4);
    publish_all(&mut c1, &events[..2]).await;
    let lists = || Filter::new().kind(Kind::from(10317));
    for sub in ["a", "b"] {
        neg_open(&mut c1, sub, lists(), initial_message(&[])).await;
        neg_reply(&mut c1, sub).await.unwrap();
    }
    neg_open(&mut c2, "c", lists(), initial_message(&[])).await;
    neg_reply(&mut c2, "c").await.unwrap();
    // The fourth NEG-OPEN of the address, on either connection, is refused.
    neg_open(&mut c2, "d", lists(), initial_message(&[])).await;
    let err = neg_reply(&mut c2, "d").await.unwrap_err();
    assert!(err.starts_with("rate-limited:") && err.contains("3 per minute"), "{err}");
    // Re-opening an open id is a NEG-OPEN too: refused, and (NIP-77) that session is closed.
    neg_open(&mut c1, "a", lists(), initial_message(&[])).await;
    assert!(neg_reply(&mut c1, "a").await.unwrap_err().starts_with("rate-limited:"));
    neg_msg(&mut c1, "a", initial_message(&[])).await;
    assert!(neg_reply(&mut c1, "a").await.unwrap_err().starts_with("closed:"));
    // Open sessions go on, and so do writes and REQs.
    neg_msg(&mut c1, "b", initial_message(&[])).await;
    neg_reply(&mut c1, "b").await.unwrap();
    publish_all(&mut c2, &events[2..]).await;
    c2.ping_relay().await.unwrap();
}

/// A session that gets no NEG-MSG for `--negentropy-idle-timeout` is closed with NEG-ERR
/// `closed:`, each in its turn, on a connection that stays open.
#[tokio::test]
async fn idle_sessions_are_closed() {
    let (server, mut c) = connected(&["--negentropy-idle-timeout", "2s"]).await;
    publish_all(&mut c, &grasp_lists(&server, 3)).await;
    let lists = || Filter::new().kind(Kind::from(10317));
    let opened = std::time::Instant::now();
    neg_open(&mut c, "idle", lists(), initial_message(&[])).await;
    neg_reply(&mut c, "idle").await.unwrap();
    neg_open(&mut c, "busy", lists(), initial_message(&[])).await;
    neg_reply(&mut c, "busy").await.unwrap();
    // "busy" is used again while "idle" waits.
    neg_msg(&mut c, "busy", initial_message(&[])).await;
    neg_reply(&mut c, "busy").await.unwrap();
    let err = neg_reply(&mut c, "idle").await.unwrap_err();
    assert!(err.starts_with("closed:") && err.contains("NEG-OPEN"), "{err}");
    assert!(opened.elapsed() >= std::time::Duration::from_secs(2), "closed before the idle timeout");
    neg_msg(&mut c, "idle", initial_message(&[])).await;
    assert!(neg_reply(&mut c, "idle").await.unwrap_err().starts_with("closed:"));
    // "busy" expires in its turn; the connection stays usable.
    assert!(neg_reply(&mut c, "busy").await.unwrap_err().starts_with("closed:"));
    c.ping_relay().await.unwrap();
}

/// The sessions of one connection hold at most `--negentropy-max-items-per-connection` events
/// together (NEG-ERR `blocked:` naming NEG-CLOSE), and those of all connections at most
/// `--negentropy-max-items-total` (NEG-ERR `rate-limited:`); closing a session gives its events
/// back.
#[tokio::test]
async fn sessions_hold_bounded_items_per_connection_and_in_total() {
    let server = TestServer::start_with(&[
        "--negentropy-max-items-per-connection",
        "6",
        "--negentropy-max-items-total",
        "8",
    ]);
    let mut c1 = connect(&server).await;
    publish_all(&mut c1, &grasp_lists(&server, 6)).await;
    let lists = |n: usize| Filter::new().kind(Kind::from(10317)).limit(n);
    neg_open(&mut c1, "a", lists(4), initial_message(&[])).await;
    neg_reply(&mut c1, "a").await.unwrap();
    neg_open(&mut c1, "b", lists(3), initial_message(&[])).await;
    let err = neg_reply(&mut c1, "b").await.unwrap_err();
    assert!(err.starts_with("blocked:") && err.contains("NEG-CLOSE"), "{err}");
    neg_open(&mut c1, "b", lists(2), initial_message(&[])).await;
    neg_reply(&mut c1, "b").await.unwrap();
    // 6 held by the first connection: the second may take 2 more of the 8, not 3.
    let mut c2 = connect(&server).await;
    neg_open(&mut c2, "c", lists(3), initial_message(&[])).await;
    let err = neg_reply(&mut c2, "c").await.unwrap_err();
    assert!(err.starts_with("rate-limited:") && err.contains('8'), "{err}");
    neg_open(&mut c2, "c", lists(2), initial_message(&[])).await;
    neg_reply(&mut c2, "c").await.unwrap();
    // Closing a session gives its events back.
    neg_close(&mut c1, "a").await;
    let got = reconcile(&mut c2, "d", lists(4), &[]).await.unwrap();
    assert_eq!(got.need.len(), 4);
    c1.ping_relay().await.unwrap();
    c2.ping_relay().await.unwrap();
}
