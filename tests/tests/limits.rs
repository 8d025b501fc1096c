//! Limits under load and hostile networks, end to end: a state event declaring thousands of refs
//! whose objects are already here, and the public listener's connection limits.

use std::time::Instant;

use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;
use tokio_tungstenite::tungstenite;

/// `n` chained commits made with `git fast-import` in `work` (on branch `chain`), oldest first.
fn chain_of_commits(work: &grasp_tests::git::WorkTree, n: usize) -> Vec<String> {
    use std::io::Write;
    let mut stream = String::new();
    for i in 0..n {
        let content = format!("{i}\n");
        stream.push_str(&format!(
            "commit refs/heads/chain\nmark :{m}\ncommitter t <t@t> {at} +0000\ndata 2\nc\n{from}M 644 inline f\ndata {len}\n{content}\n",
            m = i + 1,
            at = 1_700_000_000 + i,
            from = if i == 0 { String::new() } else { format!("from :{i}\n") },
            len = content.len(),
        ));
    }
    let mut child = std::process::Command::new("git")
        .args(["fast-import", "--quiet", "--export-marks=marks"])
        .current_dir(&work.dir)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stream.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let marks = std::fs::read_to_string(work.dir.join("marks")).unwrap();
    let mut commits: Vec<(usize, String)> = marks
        .lines()
        .map(|l| {
            let (m, oid) = l.split_once(' ').unwrap();
            (m[1..].parse().unwrap(), oid.to_string())
        })
        .collect();
    commits.sort();
    commits.into_iter().map(|(_, oid)| oid).collect()
}

/// A state declaring 3,000 branches at 3,000 distinct commits the repository already has (put
/// there on disk, behind the relay's back, in a pack) is published at once, and the repository
/// is aligned to it. Not timed: it must simply finish within the test deadline.
#[tokio::test]
async fn state_with_thousands_of_refs_whose_objects_exist_is_accepted() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "big").await;
    let commits = chain_of_commits(&published.repo.work, 3000);
    let bare = repo_dir(&server, &owner.public_key(), "big");
    // Objects only: a ref outside refs/heads and refs/tags, which alignment leaves alone.
    push_on_disk(&published.repo.work, &bare, Some("git -c core.hooksPath=/dev/null receive-pack"), &["chain:refs/scratch/all"])
        .unwrap();

    let names: Vec<String> = (0..3000).map(|i| format!("refs/heads/b{i}")).collect();
    let mut refs: Vec<(&str, &str)> = names.iter().zip(&commits).map(|(n, o)| (n.as_str(), o.as_str())).collect();
    refs.push(("refs/heads/main", &published.tip));
    let st = state_at(&owner, "big", &refs, Some("main"), now() + 1);
    let started = Instant::now();
    let (ok, msg) = c.send_event(&st).await.unwrap();
    eprintln!("3,000-ref state admitted in {:?}", started.elapsed());
    assert!(ok && !msg.starts_with("purgatory:"), "expected the state served at once: {ok} {msg}");
    assert!(!c.req(vec![Filter::new().id(st.id)]).await.unwrap().is_empty(), "state stored");
    let on_disk = bare_refs(&bare);
    assert!(names.iter().zip(&commits).all(|(n, o)| on_disk.get(n) == Some(o)), "every declared branch is aligned");
    assert_eq!(on_disk.get("refs/heads/main"), Some(&published.tip));
    assert!(purgatory_ids(&server).await.is_empty(), "nothing held");
    c.ping_relay().await.unwrap();
}

/// The HTTP refusal a WebSocket connection attempt got: status, CORS origin header, body.
/// Panics if the connection was accepted or failed without an HTTP answer.
async fn refused_websocket(server: &TestServer) -> (u16, Option<String>, String) {
    let res = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async_with_config(server.ws_url(), None, true)).await.expect("connect timed out");
    match res {
        Ok(_) => panic!("connection accepted beyond the limit"),
        Err(tungstenite::Error::Http(resp)) => (
            resp.status().as_u16(),
            resp.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()).map(str::to_string),
            String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).to_string(),
        ),
        Err(e) => panic!("connection attempt failed without an HTTP answer: {e}"),
    }
}

/// Connects once the relay has noticed closed connections (their places are freed when the
/// server side sees the close), within the test deadline.
async fn connect_when_freed(server: &TestServer) -> NostrClient {
    eventually!("a connection accepted after closing one", NostrClient::connect(&server.ws_url()).await.ok())
}

#[tokio::test]
async fn connections_beyond_the_per_address_limit_get_503_and_places_free_on_close() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "3"]);
    let mut open = Vec::new();
    for _ in 0..3 {
        // The start's readiness probe (a TCP connection, closed at once) may still hold a place.
        open.push(connect_when_freed(&server).await);
    }
    let (status, cors, body) = refused_websocket(&server).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(cors.as_deref(), Some("*"), "refusals carry CORS headers");
    assert!(body.contains("maximum of 3 open connections") && body.contains("close some"), "{body}");
    // Plain HTTP is refused the same way (it counts as a connection too).
    let resp = reqwest::get(server.http_url()).await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers().get("access-control-allow-origin").unwrap(), "*");
    // A burst of refusals changes nothing for the open connections.
    for _ in 0..20 {
        refused_websocket(&server).await;
    }
    for c in &mut open {
        c.ping_relay().await.unwrap();
    }
    // Closing one frees its place: a new connection works, and the limit still holds.
    drop(open.pop());
    let mut fresh = connect_when_freed(&server).await;
    fresh.ping_relay().await.unwrap();
    assert_eq!(refused_websocket(&server).await.0, 503);
    for c in &mut open {
        c.ping_relay().await.unwrap();
    }
}

#[tokio::test]
async fn connections_beyond_the_total_limit_get_503() {
    let (server, mut a) = connected(&["--max-connections", "2", "--max-connections-per-ip", "0"]).await;
    // The start's readiness probe (a TCP connection, closed at once) may still hold a place.
    let b = connect_when_freed(&server).await;
    let (status, cors, body) = refused_websocket(&server).await;
    assert_eq!((status, cors.as_deref()), (503, Some("*")), "{body}");
    assert!(body.contains("maximum of 2 connections") && body.contains("try again"), "{body}");
    drop(b);
    let mut c = connect_when_freed(&server).await;
    c.ping_relay().await.unwrap();
    a.ping_relay().await.unwrap();
}
