//! Write limits end to end (docs/protocol.md#trust): token buckets per connection and per client
//! address (`rate-limited:`, the event not stored), caps on new repositories per author and in
//! total (nothing created when refused), and client addresses taken from `X-Forwarded-For` only
//! behind a trusted proxy.

use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer};
use nostr::prelude::*;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

async fn forwarded(server: &TestServer, client: &str) -> NostrClient {
    NostrClient::connect_with_headers(&server.ws_url(), &[("X-Forwarded-For", client)]).await.unwrap()
}

/// A grasp list (kind 10317): accepted from anyone, so only the limits can refuse it.
fn list(keys: &Keys, n: usize) -> Event {
    event(keys, 10317, &[&["g", &format!("ws://example{n}.com")]])
}

async fn stored(c: &mut NostrClient, id: EventId) -> bool {
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

#[tokio::test]
async fn a_connection_beyond_its_burst_is_rate_limited_and_nothing_is_stored() {
    let (server, mut c) = connected(&["--write-burst", "3", "--write-rate", "0.01"]).await;
    for n in 0..3 {
        let e = list(&Keys::generate(), n);
        assert_eq!(c.send_event(&e).await.unwrap(), (true, String::new()));
    }
    let refused = list(&Keys::generate(), 3);
    let (ok, msg) = c.send_event(&refused).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:") && msg.contains("connection"), "{msg}");
    assert!(!stored(&mut c, refused.id).await);
    // Reads still work, and another connection has its own bucket.
    let mut other = connect(&server).await;
    assert_eq!(other.send_event(&refused).await.unwrap(), (true, String::new()));
    let doc: serde_json::Value = nip11(&server).await;
    assert_eq!(doc["limitation"]["max_event_burst_per_connection"], 3);
}

#[tokio::test]
async fn connections_from_one_address_share_its_bucket() {
    let server = TestServer::start_with(&["--write-burst-per-ip", "2", "--write-rate-per-ip", "0.01"]);
    let (mut a, mut b) = (connect(&server).await, connect(&server).await);
    assert!(a.send_event(&list(&Keys::generate(), 0)).await.unwrap().0);
    assert!(b.send_event(&list(&Keys::generate(), 1)).await.unwrap().0);
    let refused = list(&Keys::generate(), 2);
    let (ok, msg) = a.send_event(&refused).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:") && msg.contains("address"), "{msg}");
    assert!(!stored(&mut b, refused.id).await);
}

#[tokio::test]
async fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
    let args = ["--write-burst-per-ip", "1", "--write-rate-per-ip", "0.01", "--trusted-proxy", "127.0.0.0/8"];
    let server = TestServer::start_with(&args);
    let (mut a, mut b) = (forwarded(&server, "203.0.113.1").await, forwarded(&server, "203.0.113.2").await);
    assert!(a.send_event(&list(&Keys::generate(), 0)).await.unwrap().0);
    assert!(b.send_event(&list(&Keys::generate(), 1)).await.unwrap().0, "another client behind the proxy has its own bucket");
    let mut a2 = forwarded(&server, "198.51.100.9, 203.0.113.1").await;
    let (ok, msg) = a2.send_event(&list(&Keys::generate(), 2)).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:"), "the right-most untrusted address is the client: {msg}");

    // Without --trusted-proxy the header is ignored: both share the peer's address.
    let server = TestServer::start_with(&args[..4]);
    let (mut a, mut b) = (forwarded(&server, "203.0.113.1").await, forwarded(&server, "203.0.113.2").await);
    assert!(a.send_event(&list(&Keys::generate(), 0)).await.unwrap().0);
    let (ok, msg) = b.send_event(&list(&Keys::generate(), 1)).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:"), "{msg}");
}

#[tokio::test]
async fn forwarded_clients_hold_their_own_connection_places() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "1", "--trusted-proxy", "127.0.0.1/32"]);
    let mut a = forwarded(&server, "203.0.113.1").await;
    let mut b = forwarded(&server, "203.0.113.2").await;
    let refused = NostrClient::connect_with_headers(&server.ws_url(), &[("X-Forwarded-For", "203.0.113.1")]).await;
    let err = refused.err().expect("a second WebSocket of one forwarded client is refused");
    assert!(format!("{err:#}").contains("503"), "{err:#}");
    a.ping_relay().await.unwrap();
    b.ping_relay().await.unwrap();
    drop(a);
    // The place is given back when the WebSocket closes (asynchronously): retry until then.
    let deadline = std::time::Instant::now() + grasp_tests::TIMEOUT;
    loop {
        if NostrClient::connect_with_headers(&server.ws_url(), &[("X-Forwarded-For", "203.0.113.1")]).await.is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the forwarded client's place was never given back");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn new_repositories_are_capped_per_author_and_in_total() {
    let (server, mut c) = connected(&["--new-repos-per-author-per-hour", "1", "--max-repos", "2"]).await;
    let (alice, bob, carol) = (Keys::generate(), Keys::generate(), Keys::generate());
    let first = announcement(&server, &alice, "one", &[]);
    assert!(c.send_event(&first).await.unwrap().0);
    let (ok, msg) = c.send_event(&announcement(&server, &alice, "two", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:") && msg.contains("per hour"), "{msg}");
    assert!(!repo_dir(&server, &alice.public_key(), "two").exists());
    // Replacing an announcement whose repository exists creates nothing: not capped.
    let again = announcement_at(&server, &alice, "one", &[], now() + 1);
    assert!(c.send_event(&again).await.unwrap().0);
    assert!(purgatory_ids(&server).await.contains(&again.id.to_hex()));
    // The total: one more repository fits, then none.
    assert!(c.send_event(&announcement(&server, &bob, "b", &[])).await.unwrap().0);
    let (ok, msg) = c.send_event(&announcement(&server, &carol, "c", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("maximum"), "{msg}");
    assert!(!repo_dir(&server, &carol.public_key(), "c").exists());
}
