//! Relay sync against hostile or broken peers, end to end: the relay under test follows a
//! scripted fake relay (`--sync-bootstrap-relay`, so no repository is needed) that answers
//! negentropy for ever, goes silent at TCP level, sends only control or binary frames, or
//! accepts connections and drops them. Each test fails without the bound it checks
//! (docs/security.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use grasp_tests::eventually;
use grasp_tests::fake_relay::{serve, Conn, FakeRelay, Script};
use grasp_tests::grasp::*;
use grasp_tests::TestServer;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A relay following `fake` (a bootstrap relay: followed for announcements) with short retry
/// delays, plus `extra` flags.
fn follower(fake: &FakeRelay, extra: &[&str]) -> TestServer {
    let url = fake.url();
    let mut args = vec!["--sync-allow-private", "--relay-sync-backoff", "300ms", "--relay-sync-backoff-cap", "2s", "--sync-bootstrap-relay", &url];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

/// The entry of relay `url` in `server`'s `GET /v1/sync`.
async fn peer(server: &TestServer, url: &str) -> Option<Value> {
    let view = operator_get(server, "/v1/sync").await.ok()?;
    view["relays"].as_array()?.iter().find(|r| r["url"] == url.trim_end_matches('/')).cloned()
}

/// A REQ for stored events (a history page or fetch), not a live one (`limit: 0`).
fn is_history_req(msg: &Value) -> bool {
    msg[0] == "REQ" && msg[2]["limit"] != 0
}

/// An honest relay with nothing stored and no NIP-77: `EOSE` to every `REQ`, a `NOTICE` to
/// `NEG-OPEN`.
fn empty_relay() -> Script {
    Arc::new(|msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "REQ" => vec![json!(["EOSE", msg[1]])],
        "NEG-OPEN" => vec![json!(["NOTICE", "unsupported: NEG-OPEN"])],
        _ => vec![],
    })
}

/// The answer of the review's reproduction: an empty id list over [0, 50) and a random
/// fingerprint over the rest, which keeps a negentropy client going for ever.
const ENDLESS_NEG_MSG: &str = "6133000200000001abababababababababababababababab";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_answering_negentropy_for_ever_is_cut_off_and_the_filter_paged() {
    let fake = FakeRelay::start(Arc::new(|msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "NEG-OPEN" | "NEG-MSG" => vec![json!(["NEG-MSG", msg[1], ENDLESS_NEG_MSG])],
        "REQ" => vec![json!(["EOSE", msg[1]])],
        _ => vec![],
    }))
    .await;
    let b = follower(&fake, &[]);
    // The reconciliation stops at its round budget and the filter is paged with REQ instead.
    eventually!("B to page the filter after giving up the reconciliation", Duration::from_secs(60), {
        fake.received("REQ").iter().any(is_history_req).then_some(())
    });
    let rounds = fake.received("NEG-MSG").len();
    // 64 + (0 local items + 100,000 missing at most) / 64 rounds.
    assert!(rounds <= 64 + 100_000 / 64, "{rounds} rounds");
    eventually!("B to follow the relay live", peer(&b, &fake.url()).await.filter(|p| p["state"] == "live"));
    assert!(b.logs().contains("went past"), "no log of the cut-off reconciliation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_gone_silent_is_pinged_then_dropped_and_its_cursor_stays_where_it_was_heard() {
    // The first connection answers the history, then stops reading (so pings go unanswered);
    // later ones are closed at once.
    let script = empty_relay();
    let silent_since = Arc::new(std::sync::Mutex::new(None::<u64>));
    let since = silent_since.clone();
    let fake = FakeRelay::start_with(Arc::new(move |conn: Conn| {
        let (script, since) = (script.clone(), since.clone());
        Box::pin(async move {
            if conn.n > 0 {
                return;
            }
            let Some(conn) = serve(conn, &script, is_history_req).await else { return };
            *since.lock().unwrap() = Some(now());
            // Hold the connection without reading for the rest of the test.
            tokio::time::sleep(Duration::from_secs(600)).await;
            drop(conn);
        })
    }))
    .await;
    // A timeout above the follower's 10 s cursor timer, which used to restart the wait.
    let b = follower(&fake, &["--relay-sync-timeout", "11s"]);
    eventually!("B to follow the relay live", peer(&b, &fake.url()).await.filter(|p| p["state"] == "live"));
    let started = Instant::now();
    let p = eventually!("B to give the silent relay up", Duration::from_secs(60), {
        peer(&b, &fake.url()).await.filter(|p| p["last_error"].as_str().is_some_and(|e| e.contains("stopped answering pings")))
    });
    // Two pings 11 s apart, then given up 11 s after the second.
    assert!(started.elapsed() >= Duration::from_secs(25), "given up after {:?}: {p}", started.elapsed());
    eventually!("B to try the relay again", (fake.connections.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(()));
    // The resume point is the last moment the relay was heard from, not the time it was given up.
    let silent = silent_since.lock().unwrap().unwrap();
    let live_until = eventually!("the cursor to be saved", Duration::from_secs(30), {
        let cursors: Value = serde_json::from_slice(&std::fs::read(b.data_dir().join(grasp_state::contract::layout::RELAY_SYNC_FILE)).unwrap_or_default()).unwrap_or(Value::Null);
        cursors["relays"].as_object().and_then(|r| r.iter().find(|(url, _)| url.contains(&fake.addr.to_string()))).and_then(|(_, c)| c["live_until"].as_u64()).filter(|t| *t > 0)
    });
    assert!(live_until <= silent + 2, "live until {live_until}, silent since {silent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_cannot_hold_a_wait_open_and_a_binary_frame_ends_the_connection() {
    // The first connection never answers the history request but pings every 200 ms; the second
    // answers it with a binary frame; later ones are honest.
    let script = empty_relay();
    let fake = FakeRelay::start_with(Arc::new(move |conn: Conn| {
        let script = script.clone();
        Box::pin(async move {
            if conn.n >= 2 {
                serve(conn, &script, |_| false).await;
                return;
            }
            let quiet: Script = Arc::new(|msg: &Value| if is_history_req(msg) { vec![] } else { empty_relay()(msg) });
            let Some(mut conn) = serve(conn, &quiet, is_history_req).await else { return };
            if conn.n == 1 {
                let _ = conn.ws.send(Message::Binary(vec![0u8; 1000].into())).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
            for _ in 0..600 {
                if conn.ws.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    }))
    .await;
    let b = follower(&fake, &["--relay-sync-timeout", "2s"]);
    eventually!("B to give up the wait despite the pings", Duration::from_secs(30), {
        peer(&b, &fake.url()).await.filter(|p| p["last_error"].as_str().is_some_and(|e| e.contains("no message from the relay within")))
    });
    let p = eventually!("B to refuse the binary frame", Duration::from_secs(30), {
        peer(&b, &fake.url()).await.filter(|p| p["last_error"].as_str().is_some_and(|e| e.contains("binary frame")))
    });
    assert!(p["bytes_in"].as_u64().unwrap() >= 1000, "the binary frame was not counted: {p}");
    eventually!("B to follow the honest third connection live", Duration::from_secs(30), peer(&b, &fake.url()).await.filter(|p| p["state"] == "live"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_accepts_and_drops_backs_off_longer_each_time() {
    // Every connection is closed as soon as the first request arrives.
    let fake = FakeRelay::start_with(Arc::new(|mut conn: Conn| {
        Box::pin(async move {
            use futures_util::StreamExt;
            let _ = conn.ws.next().await;
            let _ = conn.ws.close(None).await;
        })
    }))
    .await;
    let b = follower(&fake, &[]);
    // 300 ms, 600 ms, 1.2 s, 2 s, ...: the streak is not ended by the handshake.
    let p = eventually!("the failures to add up", Duration::from_secs(30), peer(&b, &fake.url()).await.filter(|p| p["failures"].as_u64() >= Some(4)));
    assert_eq!(p["state"], "backing-off", "{p}");
    let times = fake.connected_at.lock().unwrap().clone();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 3 && gaps[2] > gaps[0] + Duration::from_millis(300), "retried after {gaps:?}");
}

/// A signed comment tagging `n` random event ids (none of them anywhere).
fn comment_tagging_random_ids(n: usize) -> Value {
    use nostr::prelude::*;
    let tags: Vec<Tag> = (0..n).map(|_| Tag::parse(["e", &random_event_id()]).unwrap()).collect();
    serde_json::to_value(EventBuilder::new(Kind::Custom(1111), "junk").tags(tags).finalize(&Keys::generate()).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_tagging_many_ids_asks_for_few_of_them_one_fetch_at_a_time_and_unanswered_fetches_expire() {
    // On its first live subscription the relay sends 20 comments nobody asked for, each tagging
    // 64 random ids; it never answers a fetch by id.
    let junk: Vec<Value> = (0..20).map(|_| comment_tagging_random_ids(64)).collect();
    let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fake = FakeRelay::start(Arc::new(move |msg: &Value| match msg[0].as_str().unwrap_or_default() {
        "REQ" if msg[2]["ids"].is_array() => vec![],
        "REQ" if msg[2]["limit"] == 0 && !sent.swap(true, std::sync::atomic::Ordering::SeqCst) => {
            let mut replies: Vec<Value> = junk.iter().map(|e| json!(["EVENT", msg[1], e])).collect();
            replies.push(json!(["EOSE", msg[1]]));
            replies
        }
        _ => empty_relay()(msg),
    }))
    .await;
    let b = follower(&fake, &["--relay-sync-parent-request", "1s", "--relay-sync-timeout", "2s"]);
    // The unanswered fetch is closed after the timeout.
    eventually!("B to close its unanswered fetch", Duration::from_secs(30), {
        fake.received("CLOSE").iter().any(|m| m[1].as_str().is_some_and(|s| s.starts_with("fetch-"))).then_some(())
    });
    let p = peer(&b, &fake.url()).await.unwrap();
    assert_eq!(p["unrequested"], 20, "{p}");
    // Two ids per unasked child, never 64; one fetch subscription open at a time.
    let log = fake.received.lock().unwrap().clone();
    let asked: usize = log.iter().filter(|m| m[0] == "REQ" && m[2]["ids"].is_array()).map(|m| m[2]["ids"].as_array().unwrap().len()).sum();
    assert!(asked > 0 && asked <= 2 * 20, "{asked} ids asked for");
    let mut open = 0i32;
    for m in &log {
        let fetch = m[1].as_str().is_some_and(|s| s.starts_with("fetch-"));
        match m[0].as_str() {
            Some("REQ") if fetch => open += 1,
            Some("CLOSE") if fetch => open -= 1,
            _ => {}
        }
        assert!(open <= 1, "two fetch subscriptions open at once: {log:?}");
    }
}
