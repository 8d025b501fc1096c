//! Quotas (docs/security.md): every byte an anonymous client can make this server keep or refuse for
//! others is bounded. Each test reproduces the attack and names its row in docs/security.md.

use grasp_state::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

async fn forwarded(server: &TestServer, client: &str) -> anyhow::Result<NostrClient> {
    NostrClient::connect_with_headers(&server.ws_url(), &[("X-Forwarded-For", client)]).await
}

/// A grasp list (kind 10317): accepted from anyone, so only the limits can refuse it.
fn list(keys: &Keys, n: usize) -> Event {
    event(keys, 10317, &[&["g", &format!("ws://example{n}.com")]])
}

/// `template`'s kind and tags with `extra` more tags, signed again by `keys`.
fn with_tags(keys: &Keys, template: &Event, extra: Vec<Vec<String>>) -> Event {
    let mut tags: Vec<Tag> = template.tags.iter().cloned().collect();
    tags.extend(extra.into_iter().map(|t| Tag::parse(t).unwrap()));
    EventBuilder::new(template.kind, template.content.clone()).tags(tags).finalize(keys).unwrap()
}

fn padding(tag: &str, bytes: usize) -> Vec<Vec<String>> {
    vec![vec![tag.to_string(), "x".repeat(bytes)]]
}

/// The status of one raw HTTP request sent from 127.0.0.1 as `client` (behind the trusted proxy).
async fn git_status_as(server: &TestServer, client: &str, path: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let req = format!(
        "GET {path}/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {client}\r\nConnection: close\r\n\r\n"
    );
    http_status(&mut stream, &req).await
}

/// Whether a `git http-backend` the relay started for a request runs now (found by the data
/// directory in its environment).
fn git_runs_for(server: &TestServer) -> bool {
    let needle = server.data_dir().as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        environ.windows(needle.len()).any(|w| w == needle) && String::from_utf8_lossy(&cmd).contains("http-backend")
    })
}

/// Item A: one IPv6 /64 is one client for the connection places and the write rate. Without
/// the prefix key, each of its 2^64 addresses had a share of its own.
#[tokio::test]
async fn one_ipv6_prefix_is_one_client_for_connections_and_writes() {
    let server = TestServer::start_with(&[
        "--max-connections-per-ip",
        "2",
        "--write-burst-per-ip",
        "2",
        "--write-rate-per-ip",
        "0.01",
        "--trusted-proxy",
        "127.0.0.1/32",
    ]);
    let mut a = forwarded(&server, "2001:db8:1:1::1").await.unwrap();
    let mut b = forwarded(&server, "2001:db8:1:1:ffff::2").await.unwrap();
    let third = forwarded(&server, "2001:db8:1:1:1234:5678:9abc:def0").await;
    let err = third.err().expect("a third WebSocket from the same /64 is refused");
    assert!(format!("{err:#}").contains("503"), "{err:#}");
    // The next /64 is another client.
    let mut other = forwarded(&server, "2001:db8:1:2::1").await.unwrap();

    assert!(a.send_event(&list(&Keys::generate(), 0)).await.unwrap().0);
    assert!(b.send_event(&list(&Keys::generate(), 1)).await.unwrap().0);
    let refused = list(&Keys::generate(), 2);
    let (ok, msg) = b.send_event(&refused).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:") && msg.contains("your address"), "{msg}");
    assert!(!stored(&mut other, refused.id).await);
    assert!(other.send_event(&list(&Keys::generate(), 3)).await.unwrap().0);

    // The same prefix length for IPv6 behind --ipv6-prefix-len 128: every address on its own.
    let server = TestServer::start_with(&["--max-connections-per-ip", "1", "--ipv6-prefix-len", "128", "--trusted-proxy", "127.0.0.1/32"]);
    let _a = forwarded(&server, "2001:db8:1:1::1").await.unwrap();
    let _b = forwarded(&server, "2001:db8:1:1::2").await.unwrap();
}

/// Item A for git request slots: a stalled push from one address of a /64 holds that whole
/// /64's share; another /64 is served.
#[tokio::test]
async fn one_ipv6_prefix_holds_one_share_of_git_slots() {
    let server = TestServer::start_with(&[
        "--git-idle-timeout",
        "10m",
        "--git-max-requests-per-ip",
        "1",
        "--trusted-proxy",
        "127.0.0.1/32",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let mut client = NostrClient::connect(&server.ws_url()).await.unwrap();
    let owner = Keys::generate();
    let _published = publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "base").await;
    let path = format!("/{}/base.git", npub_of(&owner.public_key()));

    // A push from 2001:db8:9:9::1 that stalls after its first ref update keeps its slot (git
    // waits for the rest of it).
    let stalled = format!(
        "POST {path}/git-receive-pack HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 2001:db8:9:9::1\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: 1048576\r\n\r\n{}",
        stalled_push_body()
    );
    grasp_tests::wait_until("the publishing push's git to end", TIMEOUT, || (!git_runs_for(&server)).then_some(()))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
    let mut attacker = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut attacker, stalled.as_bytes()).await.unwrap();
    // Once git runs for it (its slot is taken; no other request of that /64 ran meanwhile), any
    // other address of that /64 is refused...
    grasp_tests::wait_until("the relay to start git for the stalled push", TIMEOUT, || git_runs_for(&server).then_some(()))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
    assert_eq!(git_status_as(&server, "2001:db8:9:9:abcd::7", &path).await, 503, "{}", server.logs());
    // ...while another /64 is served.
    assert_eq!(git_status_as(&server, "2001:db8:9:a::1", &path).await, 200, "{}", server.logs());
    drop(attacker);
}

/// Item B: the kinds anyone may publish, and the kinds the purgatory holds, have size caps of
/// their own; issues and comments keep the general limit.
#[tokio::test]
async fn oversized_events_of_capped_kinds_are_refused_and_nothing_is_kept() {
    let server = TestServer::start();
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let anyone = Keys::generate();

    let big_list = with_tags(&anyone, &list(&anyone, 0), padding("x", 20_000));
    let (ok, msg) = c.send_event(&big_list).await.unwrap();
    assert!(!ok && msg.starts_with("invalid: this event is ") && msg.contains("at most 16384 for kind 10317"), "{msg}");
    assert!(!stored(&mut c, big_list.id).await);

    let big_deletion = with_tags(&anyone, &event(&anyone, 5, &[]), padding("x", 20_000));
    let (ok, msg) = c.send_event(&big_deletion).await.unwrap();
    assert!(!ok && msg.contains("for kind 5"), "{msg}");

    // An announcement over its cap creates no repository and holds nothing.
    let owner = Keys::generate();
    let big_ann = with_tags(&owner, &announcement(&server, &owner, "big", &[]), padding("description", 270_000));
    let (ok, msg) = c.send_event(&big_ann).await.unwrap();
    assert!(!ok && msg.contains("for kind 30617"), "{msg}");
    assert!(!repo_dir(&server, &owner.public_key(), "big").exists());
    assert!(!purgatory_ids(&server).await.contains(&big_ann.id.to_hex()));

    // A held announcement of a normal size; a 100 KiB issue about it keeps the general limit,
    // a 270 KB state event for it is over its kind's cap.
    assert!(c.send_event(&announcement(&server, &owner, "small", &[])).await.unwrap().0);
    let big_issue = with_tags(&anyone, &issue(&anyone, &owner.public_key(), "small"), padding("x", 100_000));
    assert_eq!(c.send_event(&big_issue).await.unwrap(), (true, String::new()));
    let tip = "0".repeat(40);
    let big_state = with_tags(&owner, &state(&owner, "small", &[("refs/heads/main", &tip)], Some("main")), padding("x", 270_000));
    let (ok, msg) = c.send_event(&big_state).await.unwrap();
    assert!(!ok && msg.contains("for kind 30618"), "{msg}");
    assert!(!purgatory_ids(&server).await.contains(&big_state.id.to_hex()));

    // The caps are in NIP-11.
    let doc = nip11(&server).await;
    assert_eq!(doc["limitation"]["max_event_bytes_by_kind"]["10317"], serde_json::json!(16384));
}

/// Item B: below --min-free-disk every event is refused `blocked:` and every push rejected in
/// pre-receive (here the watermark is set above the disk's size).
#[tokio::test]
async fn below_the_free_disk_watermark_events_and_pushes_are_refused() {
    let mut server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let published = {
        let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
        publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "repo").await
    };
    server.restart_with(&["--min-free-disk", &u64::MAX.to_string()]);
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let refused = list(&Keys::generate(), 0);
    let (ok, msg) = c.send_event(&refused).await.unwrap();
    assert_eq!(
        (ok, msg.as_str()),
        (false, "blocked: this server is low on disk space; try another relay listed for the repository")
    );
    assert!(!stored(&mut c, refused.id).await);
    // Reads still work: the published state is served.
    assert!(stored(&mut c, published.state).await);
    let tip = published.repo.commit("README", "more\n");
    let err = published.repo.push(&["main"]).expect_err("a push while the disk is low is rejected");
    assert!(err.contains("low on disk space"), "{err}");
    assert_ne!(bare_refs(&repo_dir(&server, &owner.public_key(), "repo")).get("refs/heads/main"), Some(&tip));
}

/// Item D: a full purgatory tells a new announcement to go elsewhere (it has no repository to
/// push to yet), not to push its git data first.
#[tokio::test]
async fn a_full_purgatory_tells_a_new_announcement_what_it_can_do() {
    let server = TestServer::start_with(&["--purgatory-total", "1"]);
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let (first, second) = (Keys::generate(), Keys::generate());
    assert!(c.send_event(&announcement(&server, &first, "one", &[])).await.unwrap().0);
    let (ok, msg) = c.send_event(&announcement(&server, &second, "two", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked: purgatory is full"), "{msg}");
    assert!(msg.contains("another GRASP server") && !msg.contains("push"), "{msg}");
}

/// Item C: the purgatory is bounded in bytes as well as in entries.
#[tokio::test]
async fn the_purgatory_is_bounded_in_bytes() {
    let server = TestServer::start_with(&["--purgatory-total-bytes", "4000"]);
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let mut held = 0;
    let refusal = loop {
        let owner = Keys::generate();
        let ann = with_tags(&owner, &announcement(&server, &owner, "r", &[]), padding("description", 1_000));
        let (ok, msg) = c.send_event(&ann).await.unwrap();
        if !ok {
            assert!(!repo_dir(&server, &owner.public_key(), "r").exists());
            break msg;
        }
        held += 1;
        assert!(held < 10, "4000 bytes hold at most 3 such announcements");
    };
    assert!(refusal.starts_with("blocked: purgatory is full (4000 bytes of events"), "{refusal}");
    assert_eq!(held, 3, "each held announcement counts about 1.4 KB");
}
