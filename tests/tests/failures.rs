//! Failure and bad-input suite (docs/security.md): hostile git requests, hostile events, path
//! escapes, the internal API seen from outside, and concurrent pushes.
//!
//! Every test starts from a [`World`]: a relay with one repository published end to end (its
//! announcement and state served, `main` pushed) and an issue tagging it. After the abuse,
//! [`World::assert_intact`] checks that the relay still answers a REQ on a fresh connection,
//! that everything stored before is still served, and that the repository's refs are unchanged.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use grasp_state::names::identifier::npub_of;
use grasp_tests::git::git;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

const ZERO: &str = "0000000000000000000000000000000000000000";

struct World {
    server: TestServer,
    tmp: tempfile::TempDir,
    client: NostrClient,
    owner: Keys,
    published: Published,
    issue: EventId,
}

impl World {
    async fn start() -> World {
        World::start_with(&[]).await
    }

    async fn start_with(flags: &[&str]) -> World {
        let (server, tmp, mut client) = started(flags).await;
        let owner = Keys::generate();
        let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "base").await;
        let issue_event = issue(&Keys::generate(), &owner.public_key(), "base");
        let (ok, msg) = client.send_event(&issue_event).await.unwrap();
        assert!(ok, "issue refused: {msg}");
        World { server, tmp, client, owner, published, issue: issue_event.id }
    }

    fn repo_dir(&self) -> std::path::PathBuf {
        repo_dir(&self.server, &self.owner.public_key(), "base")
    }

    /// The relay answers on a fresh connection, everything stored is still served, and the
    /// published repository still has exactly its pushed refs.
    async fn assert_intact(&self) {
        let mut c = NostrClient::connect(&self.server.ws_url())
            .await
            .unwrap_or_else(|e| panic!("relay no longer accepts connections: {e}\n{}", self.server.logs()));
        c.ping_relay().await.unwrap();
        let wanted = [self.published.announcement, self.published.state, self.issue];
        let got = c.req(vec![Filter::new().ids(wanted)]).await.unwrap();
        let mut got: Vec<EventId> = got.iter().map(|e| e.id).collect();
        got.sort();
        let mut wanted = wanted.to_vec();
        wanted.sort();
        assert_eq!(got, wanted, "stored events lost");
        let refs = bare_refs(&self.repo_dir());
        assert_eq!(refs.get("refs/heads/main"), Some(&self.published.tip), "served refs changed: {refs:?}");
        assert_eq!(refs.len(), 1, "unexpected refs: {refs:?}");
    }

    fn git_url(&self, rest: &str) -> String {
        format!("{}{rest}", self.published.repo.url)
    }

    /// POSTs `body` to the repository's smart-HTTP `service` (`git-receive-pack`,
    /// `git-upload-pack`) with git's content type; panics, naming the case `what`, without an
    /// HTTP answer.
    async fn post_service(&self, client: &reqwest::Client, service: &str, what: &str, body: Vec<u8>) -> reqwest::Response {
        client
            .post(self.git_url(&format!("/{service}")))
            .header("content-type", format!("application/x-{service}-request"))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: no HTTP answer: {e}"))
    }
}

/// A signed event one second in the future (so replaceable events are not beaten by the
/// published state on a same-second tie).
fn later(keys: &Keys, kind: u16, tags: &[&[&str]]) -> Event {
    let tags: Vec<Tag> = tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap()).collect();
    EventBuilder::new(Kind::from(kind), "").tags(tags).custom_created_at(Timestamp::from(now() + 1)).finalize(keys).unwrap()
}

fn pkt(line: &str) -> Vec<u8> {
    format!("{:04x}{line}", line.len() + 4).into_bytes()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// Sends one raw HTTP/1.1 request (paths exactly as given: no client-side normalisation of
/// `..` or percent escapes). Returns (status, body).
fn raw_http(addr: std::net::SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// git's quarantine directories of a receive-pack in progress (must be gone afterwards).
fn quarantine_dirs(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("incoming-") || n.starts_with("tmp_objdir"))
        .collect()
}

// ---------- hostile git requests ----------

#[tokio::test]
async fn malformed_pkt_lines_and_truncated_packs_leave_the_repo_unchanged() {
    let mut w = World::start().await;
    // A real next commit, with a state event declaring it: only the broken transport stands
    // between this push and success, so "unchanged" means the bad bytes were refused.
    let next = w.published.repo.commit("b.txt", "two");
    let st = later(&w.owner, 30618, &[&["d", "base"], &["refs/heads/main", &next]]);
    let (ok, msg) = w.client.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    let tip = w.published.tip.clone();
    let command = format!("{tip} {next} refs/heads/main\0report-status side-band-64k agent=test");
    let flush = b"0000".to_vec();
    let mut pack_header = b"PACK\0\0\0\x02\0\0\0\x03".to_vec();
    pack_header.extend_from_slice(&[0x95, 0x0a, b'x', b'x']);

    let receive_bodies: Vec<(&str, Vec<u8>)> = vec![
        ("not a pkt-line", b"hello, git".to_vec()),
        ("non-hex length", b"zzzz0000".to_vec()),
        ("length longer than the body", b"ffffshort".to_vec()),
        ("length below 4", b"0002".to_vec()),
        ("commands without flush", pkt(&command)),
        ("command with a bad oid", [pkt(&format!("{tip} nothex refs/heads/main\0report-status")), flush.clone()].concat()),
        ("commands, flush, no pack", [pkt(&command), flush.clone()].concat()),
        ("truncated pack", [pkt(&command), flush.clone(), pack_header.clone()].concat()),
        ("pack with garbage objects", [pkt(&command), flush.clone(), pack_header, vec![0xff; 4096]].concat()),
        ("empty body", vec![]),
    ];
    let client = http();
    for (what, body) in receive_bodies {
        let resp = w.post_service(&client, "git-receive-pack", what, body).await;
        let status = resp.status();
        let text = String::from_utf8_lossy(&resp.bytes().await.unwrap()).to_string();
        // git answers in-band (report-status / ERR) or with an HTTP error; never "ok".
        assert!(!text.contains("ok refs/heads/main"), "{what}: reported success: {text}");
        assert!(status.is_success() || status.is_client_error() || status.is_server_error(), "{what}: {status}");
        assert_eq!(bare_refs(&w.repo_dir()).get("refs/heads/main"), Some(&tip), "{what}: ref moved");
    }
    let upload_bodies: Vec<(&str, Vec<u8>)> = vec![
        ("not a pkt-line", b"hello, git".to_vec()),
        ("truncated want", b"0032want 12345".to_vec()),
        ("want of an unknown object", [pkt(&format!("want {}\n", "1".repeat(40))), flush.clone(), pkt("done\n")].concat()),
        ("want of a bad oid", [pkt("want nothex\n"), flush.clone(), pkt("done\n")].concat()),
        ("flush only", flush.clone()),
    ];
    for (what, body) in upload_bodies {
        let resp = w.post_service(&client, "git-upload-pack", what, body).await;
        let text = String::from_utf8_lossy(&resp.bytes().await.unwrap()).to_string();
        assert!(!text.contains("PACK"), "{what}: served a pack: {text}");
    }
    // A wrong content type is refused by http-backend without running receive-pack.
    let resp = client.post(w.git_url("/git-receive-pack")).body(pkt(&command)).send().await.unwrap();
    assert!(!resp.status().is_success(), "wrong content type accepted: {}", resp.status());

    let repo = w.repo_dir();
    eventually!("quarantine directories to be cleaned up", quarantine_dirs(&repo).is_empty().then_some(()));
    git(&repo, &["fsck", "--no-progress"]);
    w.assert_intact().await;
    // The real push of the same commit still works afterwards.
    w.published.repo.push(&["main"]).unwrap();
    assert_eq!(bare_refs(&repo).get("refs/heads/main"), Some(&next));
}

// ---------- hostile events ----------

#[tokio::test]
async fn hostile_events_get_clear_answers() {
    let mut w = World::start().await;
    let tip = w.published.tip.clone();
    let c = &mut w.client;

    // State and announcement without `d`.
    let e = later(&w.owner, 30618, &[&["refs/heads/main", &tip]]);
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:") && msg.contains('d'), "{msg}");
    let e = later(&w.owner, 30617, &[&["name", "x"]]);
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "{msg}");

    // Many tags: a state declaring 3,000 refs at a commit this server does not have (held in
    // purgatory, never served, the stored state stays).
    let missing = "1".repeat(40);
    let names: Vec<String> = (0..3000).map(|i| format!("refs/heads/b{i}")).collect();
    let mut tags: Vec<Vec<&str>> = vec![vec!["d", "base"]];
    tags.extend(names.iter().map(|n| vec![n.as_str(), missing.as_str()]));
    let tag_refs: Vec<&[&str]> = tags.iter().map(Vec::as_slice).collect();
    let e = later(&w.owner, 30618, &tag_refs);
    let (ok, msg) = c.send_event(&e).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "a big state is legitimate: {msg}");
    // An oversized ref name and an oversized tag value.
    let long_ref = format!("refs/heads/{}", "x".repeat(5000));
    let (ok, msg) = c.send_event(&later(&w.owner, 30618, &[&["d", "base"], &[&long_ref, &tip]])).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "{msg}");
    let huge = "y".repeat(300 * 1024);
    let (ok, msg) = c.send_event(&later(&w.owner, 30618, &[&["d", "base"], &["refs/heads/main", &huge]])).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:"), "{msg}");
    // A huge identifier.
    let (ok, msg) = c.send_event(&later(&w.owner, 30618, &[&["d", &"z".repeat(10_000)]])).await.unwrap();
    assert!(!ok && msg.contains("identifier"), "{msg}");

    // Oversized message: answered, connection survives.
    let big = format!("[\"REQ\",\"big\",{{\"#t\":[\"{}\"]}}]", "q".repeat(700 * 1024));
    c.raw_send(big).await.unwrap();
    let notice = c.wait_notice().await.unwrap();
    assert!(notice.contains("too large"), "{notice}");
    c.ping_relay().await.unwrap();

    // Binary frames and invalid UTF-8 text frames.
    c.send_ws(Message::Binary(vec![0xff, 0xfe, 0x00].into())).await.unwrap();
    let notice = c.wait_notice().await.unwrap();
    assert!(notice.contains("binary"), "{notice}");
    let mut bad = NostrClient::connect(&w.server.ws_url()).await.unwrap();
    let frame = Frame::message(vec![b'[', 0xc3, 0x28, 0xff, b']'], OpCode::Data(Data::Text), true);
    bad.send_ws(Message::Frame(frame)).await.unwrap();
    // A protocol error: the relay answers promptly (closes that connection or says why), and
    // never hangs on it.
    let answer = tokio::time::timeout(Duration::from_secs(10), bad.ping_relay()).await;
    eprintln!("after an invalid UTF-8 frame: {answer:?}");
    assert!(answer.is_ok(), "no answer after an invalid UTF-8 frame");

    // Many subscriptions on one connection: the excess is CLOSED, the rest work.
    let mut subs = NostrClient::connect(&w.server.ws_url()).await.unwrap();
    for i in 0..200 {
        subs.raw_send(format!("[\"REQ\",\"s{i}\",{{\"kinds\":[30617],\"limit\":1}}]")).await.unwrap();
    }
    let mut closed = 0;
    let mut eose = 0;
    while closed + eose < 200 {
        match subs.next_message().await.unwrap() {
            RelayMessage::Closed { message, .. } => {
                assert!(!message.is_empty());
                closed += 1
            }
            RelayMessage::EndOfStoredEvents(_) => eose += 1,
            _ => {}
        }
    }
    assert!(closed > 0 && eose > 0, "closed {closed}, eose {eose}");
    // Full until one is closed; then the connection works again.
    assert!(subs.ping_relay().await.is_err());
    subs.close(&SubscriptionId::new("s0")).await.unwrap();
    subs.ping_relay().await.unwrap();

    w.assert_intact().await;
}

#[tokio::test]
async fn maintainer_cycle_terminates_and_confirms_nobody() {
    let mut w = World::start().await;
    let (a, b, cc) = (Keys::generate(), Keys::generate(), Keys::generate());
    // A -> B -> C -> A, each announcing "ring": nobody lists the one who listed them back.
    for (who, next) in [(&a, &b), (&b, &cc), (&cc, &a)] {
        let (ok, msg) = w.client.send_event(&announcement(&w.server, who, "ring", &[next.public_key()])).await.unwrap();
        assert!(ok, "{msg}");
    }
    let repo = Repo::new(&w.tmp.path().join("ring"), &w.server, &a.public_key(), "ring");
    let tip = repo.commit("r", "ring");
    // C, reachable from the owner A through the cycle, is confirmed in its own repository only:
    // its state is taken there, and moves nothing in A's (docs/protocol.md#maintainer-authority).
    let (ok, msg) = w.client.send_event(&state(&cc, "ring", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
    assert!(ok, "{msg}");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("is not a maintainer of"), "{err}");
    // The owner's own state does.
    let (ok, msg) = w.client.send_event(&state(&a, "ring", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["main"]).unwrap();
    // A stranger outside the ring cannot.
    let stranger = Keys::generate();
    let other = repo.commit("s", "stranger");
    let (ok, msg) = w.client.send_event(&state(&stranger, "ring", &[("refs/heads/main", &other)], Some("main"))).await.unwrap();
    assert!(!ok, "{msg}");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("refs/heads/main"), "{err}");
    assert_eq!(bare_refs(&repo_dir(&w.server, &a.public_key(), "ring")).get("refs/heads/main"), Some(&tip));
    w.assert_intact().await;
}

#[tokio::test]
async fn ten_thousand_maintainers_are_bounded() {
    let mut w = World::start_with(&["--max-message-bytes", "4000000", "--max-repo-event-bytes", "4000000"]).await;
    let owner = Keys::generate();
    let maintainers: Vec<PublicKey> = (0..10_000).map(|_| Keys::generate().public_key()).collect();
    let ann = announcement(&w.server, &owner, "crowd", &maintainers);
    let (ok, msg) = w.client.send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    let repo = Repo::new(&w.tmp.path().join("crowd"), &w.server, &owner.public_key(), "crowd");
    let tip = repo.commit("c", "crowd");
    let (ok, msg) = w.client.send_event(&state(&owner, "crowd", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
    assert!(ok, "{msg}");
    let started = std::time::Instant::now();
    repo.push(&["main"]).unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "push took {:?}", started.elapsed());
    w.assert_intact().await;
}

// ---------- identifiers escaping the git root ----------

#[tokio::test]
async fn identifiers_cannot_escape_the_git_root() {
    let mut w = World::start().await;
    let bad = ["..", ".", "../escape", "a/b", "..\\escape", "x\0y", "/abs", "tab\there", ""];
    for d in bad {
        let (ok, msg) = w.client.send_event(&announcement(&w.server, &w.owner, d, &[])).await.unwrap();
        assert!(!ok && msg.starts_with("invalid:"), "announcement {d:?}: {msg}");
        let (ok, msg) = w.client.send_event(&state(&w.owner, d, &[("refs/heads/main", &w.published.tip)], None)).await.unwrap();
        assert!(!ok, "state {d:?}: {msg}");
        let (ok, msg) = w.client.send_event(&pull_request(&Keys::generate(), &w.owner.public_key(), d, &w.published.tip, &[])).await.unwrap();
        assert!(!ok, "pull request {d:?}: {msg}");
    }
    // Percent escapes in a `d` tag are just characters: the repository is named literally.
    let (ok, msg) = w.client.send_event(&announcement(&w.server, &w.owner, "..%2f..%2fx", &[])).await.unwrap();
    assert!(ok, "{msg}");
    assert!(repo_dir(&w.server, &w.owner.public_key(), "..%2f..%2fx").is_dir());

    let npub = npub_of(&w.owner.public_key());
    let addr = w.server.addr();
    let paths = [
        format!("/{npub}/..%2f..%2f..%2fetc.git/info/refs"),
        format!("/{npub}/%2e%2e.git/info/refs"),
        format!("/{npub}/%2e%2e/%2e%2e/base.git/info/refs"),
        format!("/{npub}/..%5c..%5cx.git/info/refs"),
        format!("/{npub}/x%00y.git/info/refs"),
        format!("/{npub}/base.git/..%2f..%2f..%2fapi-token"),
        format!("/{npub}/base.git/%2e%2e/%2e%2e/%2e%2e/api-token"),
        format!("/{npub}/base.git/../../../api-token"),
        format!("/{npub}/../../api-token"),
        format!("/{npub}/base.git/config"),
        format!("/{npub}/base.git/objects/../../../api-token"),
        "/npub1%2e%2e/x.git/info/refs".to_string(),
        "/npub1/../../etc/passwd".to_string(),
    ];
    let token = hook_api(&w.server).1;
    for path in &paths {
        for method in ["GET", "POST"] {
            let (status, body) = raw_http(addr, method, path, b"0000");
            assert!(matches!(status, 400 | 403 | 404), "{method} {path}: {status} {body}");
            assert!(!body.contains(&token) && !body.contains("[core]") && !body.contains("root:"), "{method} {path}: leaked {body}");
        }
    }
    // Nothing was created outside <data>/git/<npub>/<identifier>.git.
    let git_root = w.server.data_dir().join(grasp_state::contract::layout::GIT_DIR);
    for owner_dir in std::fs::read_dir(&git_root).unwrap() {
        let owner_dir = owner_dir.unwrap();
        let name = owner_dir.file_name().to_string_lossy().to_string();
        assert!(name.starts_with("npub1"), "unexpected entry in the git root: {name}");
        for repo in std::fs::read_dir(owner_dir.path()).unwrap() {
            let repo = repo.unwrap().file_name().to_string_lossy().to_string();
            assert!(repo.ends_with(".git") && !repo.contains(['/', '\\']), "unexpected repository {repo}");
        }
    }
    let outside: Vec<String> = std::fs::read_dir(w.server.data_dir().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(outside.iter().all(|n| n == "data" || n == "relay.log"), "created outside the data dir: {outside:?}");
    w.assert_intact().await;
}

// ---------- the internal API ----------

#[tokio::test]
async fn internal_api_is_not_on_the_public_port_and_needs_its_token() {
    let w = World::start().await;
    let (api_addr, token) = hook_api(&w.server);
    let body = serde_json::json!({
        "version": 1, "owner": npub_of(&w.owner.public_key()), "identifier": "base",
        "updates": [{"old": w.published.tip, "new": ZERO, "name": "refs/heads/main"}]
    });
    let client = http();
    for path in ["/v1/pre-receive", "/v1/post-receive", "/v1/purgatory", "//v1/pre-receive", "/v1/../v1/pre-receive"] {
        for get in [true, false] {
            let url = format!("{}{path}", w.server.http_url());
            let req = if get { client.get(&url) } else { client.post(&url).json(&body) };
            let resp = req.header("x-grasp-token", &token).send().await.unwrap();
            assert_eq!(resp.status(), 404, "public {path}");
            let text = resp.text().await.unwrap();
            assert!(text.to_lowercase().contains("not found"), "public {path}: {text}");
        }
    }
    // The API itself: no token or a wrong token is 401, the right one works.
    let api = format!("http://{api_addr}");
    let resp = client.post(format!("{api}/v1/pre-receive")).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client.post(format!("{api}/v1/pre-receive")).header("x-grasp-token", "0".repeat(64)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client.get(format!("{api}/v1/purgatory")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client.get(format!("{api}/v1/purgatory")).header("x-grasp-token", &token).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    w.assert_intact().await;
}

// ---------- concurrent pushes ----------

#[tokio::test]
async fn concurrent_pushes_to_one_repo_end_consistent() {
    let mut w = World::start().await;
    let base = w.published.tip.clone();
    let dir = w.published.repo.work.dir.clone();
    let next = w.published.repo.commit("n", "next");
    git(&dir, &["checkout", "-q", "-b", "rogue", &base]);
    let rogue = w.published.repo.commit("r", "rogue");
    git(&dir, &["checkout", "-q", "main"]);
    let (ok, msg) = w.client.send_event(&later(&w.owner, 30618, &[&["d", "base"], &["refs/heads/main", &next]])).await.unwrap();
    assert!(ok, "{msg}");

    let url = w.published.repo.url.clone();
    let mut handles = Vec::new();
    for i in 0..4 {
        let (dir, url) = (dir.clone(), url.clone());
        let refspec = if i == 3 { "+rogue:refs/heads/main" } else { "main" };
        handles.push(std::thread::spawn(move || {
            let out = grasp_tests::git::git_output(&dir, &["push", "--porcelain", &url, refspec]);
            (refspec, out.status.success(), String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout))
        }));
    }
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let good: Vec<_> = results.iter().filter(|r| r.0 == "main").collect();
    assert!(good.iter().any(|r| r.1), "no push of the declared commit landed: {results:#?}");
    let rogue_push = results.iter().find(|r| r.0 != "main").unwrap();
    assert!(!rogue_push.1, "an undeclared commit was accepted: {rogue_push:?}");
    let refs = bare_refs(&w.repo_dir());
    assert_eq!(refs.get("refs/heads/main"), Some(&next), "{results:#?}");
    assert!(!refs.values().any(|o| o == &rogue));
    // The new state is served now; the old one was replaced, so check the rest by hand.
    let mut c = NostrClient::connect(&w.server.ws_url()).await.unwrap();
    let served = c.req(vec![Filter::new().ids([w.published.announcement, w.issue])]).await.unwrap();
    assert_eq!(served.len(), 2);
    let states = c.req(vec![Filter::new().kind(Kind::from(30618u16)).author(w.owner.public_key())]).await.unwrap();
    assert_eq!(states.len(), 1);
    assert!(states[0].tags.iter().any(|t| t.as_slice().get(1) == Some(&next)));
}

/// A held state that loses the NIP-01 tie to the stored state (same second, higher id) must not
/// move the served refs: either the push is refused, or the refs end where the push put them
/// and that state is the one served. Today the push is accepted (the held state matches) and
/// post-receive then realigns the refs to the older-ranked stored state, silently undoing it.
#[tokio::test]
async fn same_second_state_that_loses_the_tie_does_not_undo_a_push() {
    let mut w = World::start().await;
    let stored = w.client.req(vec![Filter::new().id(w.published.state)]).await.unwrap().remove(0);
    let next = w.published.repo.commit("t", "tie");
    // Same created_at as the stored state, and a higher id: the stored one wins the tie.
    // A random id is higher with probability 1 - stored/max: bounded tries, enough even when the
    // stored id happens to be near the top (a fixed 64 failed now and then).
    let loser = (0..100_000)
        .map(|i| {
            let tags = vec![Tag::parse(["d", "base"]).unwrap(), Tag::parse(["refs/heads/main", next.as_str()]).unwrap()];
            EventBuilder::new(Kind::from(30618u16), format!("{i}")).tags(tags).custom_created_at(stored.created_at).finalize(&w.owner).unwrap()
        })
        .find(|e| e.id > stored.id)
        .unwrap();
    let (ok, msg) = w.client.send_event(&loser).await.unwrap();
    if !ok {
        return; // refused up front: fine
    }
    let pushed = w.published.repo.push(&["main"]);
    let refs = bare_refs(&w.repo_dir());
    if pushed.is_ok() {
        assert_eq!(refs.get("refs/heads/main"), Some(&next), "push accepted ({msg}) but its refs were undone");
    } else {
        assert_eq!(refs.get("refs/heads/main"), Some(&w.published.tip));
    }
}

// ---------- the relay dies during a push ----------

#[tokio::test]
async fn relay_killed_during_a_push_leaves_the_repo_unchanged() {
    let mut w = World::start().await;
    let dir = w.published.repo.work.dir.clone();
    // Enough random data that the push is still streaming when the relay dies.
    std::fs::create_dir_all(dir.join("big")).unwrap();
    let mut urandom = std::fs::File::open("/dev/urandom").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..40 {
        urandom.read_exact(&mut buf).unwrap();
        std::fs::write(dir.join("big").join(format!("b{i}")), &buf).unwrap();
    }
    git(&dir, &["-c", "core.compression=0", "add", "big"]);
    git(&dir, &["commit", "-q", "-m", "big"]);
    let next = git(&dir, &["rev-parse", "HEAD"]);
    let st = later(&w.owner, 30618, &[&["d", "base"], &["refs/heads/main", &next]]);
    let (ok, msg) = w.client.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");

    let url = w.published.repo.url.clone();
    let pusher = {
        let dir = dir.clone();
        std::thread::spawn(move || grasp_tests::git::git_output(&dir, &["-c", "http.postBuffer=65536", "push", &url, "main"]))
    };
    let repo = w.repo_dir();
    // Packing 40 MiB of random data takes a while on a loaded machine: a generous deadline.
    eventually!("the push to reach receive-pack", TIMEOUT * 4, (!quarantine_dirs(&repo).is_empty()).then_some(()));
    w.server.kill();
    let out = pusher.join().unwrap();
    assert!(!out.status.success(), "push succeeded although the relay died: {}", String::from_utf8_lossy(&out.stderr));
    // The orphaned git processes see the end of their input (or a hook that cannot reach the
    // relay) and give up. Known issue: git may leave its quarantine directory behind
    // (objects/incoming-*): not visible to readers, but disk space until someone removes it.
    assert_eq!(bare_refs(&repo).get("refs/heads/main"), Some(&w.published.tip));
    let visible = grasp_tests::git::git_output(&repo, &["cat-file", "-e", &next]);
    assert!(!visible.status.success(), "objects of the killed push became visible");
    let left = quarantine_dirs(&repo);
    if !left.is_empty() {
        eprintln!("known issue: quarantine left behind after the relay died: {left:?}");
    }

    w.server.restart();
    w.assert_intact().await;
    // After the restart the same push goes through (the held state may not have been
    // checkpointed before the kill: send it again).
    let mut c = NostrClient::connect(&w.server.ws_url()).await.unwrap();
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    w.published.repo.push(&["main"]).unwrap();
    assert_eq!(bare_refs(&repo).get("refs/heads/main"), Some(&next));
}
