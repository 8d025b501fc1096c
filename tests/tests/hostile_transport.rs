//! Hostile clients on the transport (docs/security.md): every wait, socket, process and descriptor an
//! anonymous client can cause is bounded in time. Each test names the bound it proves in
//! docs/security.md.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::processes::{children_of, Reaper};
use grasp_tests::{binary_path, wait_until, TestServer, TIMEOUT};
use nostr::prelude::*;
use tokio_tungstenite::tungstenite::Message;

/// A NOTICE answering a binary frame is a NIP-01 prefixed error saying what to send instead.
#[tokio::test]
async fn binary_frame_gets_an_invalid_notice() {
    let (_server, mut client) = connected(&[]).await;
    client.send_ws(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let notice = client.wait_notice().await.unwrap();
    assert!(notice.starts_with("invalid: ") && notice.contains("text frames"), "{notice}");
}

/// A WebSocket that sends nothing and subscribes to nothing is closed after
/// `--ws-idle-timeout`, freeing its connection place.
#[tokio::test]
async fn an_idle_websocket_is_closed() {
    let server = TestServer::start_with(&["--ws-idle-timeout", "1s"]);
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(TIMEOUT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                None | Some(Err(_)) => return String::new(),
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("an idle connection stayed open for {TIMEOUT:?}\n{}", server.logs()));
    assert!(started.elapsed() >= Duration::from_millis(900), "closed too early: {:?}", started.elapsed());
    assert!(closed.contains("idle"), "close reason: {closed:?}");
}

/// A quiet client with a subscription is pinged, not closed, as long as it answers.
#[tokio::test]
async fn a_subscribed_client_that_answers_pings_stays() {
    let server = TestServer::start_with(&["--ws-idle-timeout", "1s"]);
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url()).await.unwrap();
    ws.send(Message::text(r#"["REQ","live",{"kinds":[1]}]"#)).await.unwrap();
    let until = Instant::now() + Duration::from_millis(3500);
    let mut pings = 0;
    // Reading answers the pings (tungstenite queues the pong and sends it on the next read).
    while let Ok(msg) = tokio::time::timeout_at(until.into(), ws.next()).await {
        match msg {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(Message::Close(f))) => panic!("closed although answering pings: {f:?}\n{}", server.logs()),
            None | Some(Err(_)) => panic!("connection ended although answering pings\n{}", server.logs()),
            Some(Ok(_)) => {}
        }
    }
    assert!(pings >= 1, "never pinged");
    ws.send(Message::text(r#"["CLOSE","live"]"#)).await.unwrap();
}

/// Opens a WebSocket by hand (so nothing answers pings) and sends `text` as one masked frame.
fn raw_websocket(server: &TestServer, text: &str) -> TcpStream {
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    assert!(text.len() < 126);
    // FIN + text; masked with the all-zero key, so the payload goes as is.
    let mut frame = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(text.as_bytes());
    s.write_all(&frame).unwrap();
    s
}

/// A subscribed client that never answers a ping is closed within the pong deadline.
#[test]
fn a_subscribed_client_that_ignores_pings_is_closed() {
    let server = TestServer::start_with(&["--ws-idle-timeout", "1s"]);
    let mut s = raw_websocket(&server, r#"["REQ","live",{"kinds":[1]}]"#);
    let mut sink = Vec::new();
    if let Err(e) = s.read_to_end(&mut sink) {
        panic!("still open after {TIMEOUT:?} without answering pings ({e})\n{}", server.logs());
    }
}

/// Writes `len` bytes no compressor can shrink (xorshift) to `path`.
fn write_incompressible(path: &std::path::Path, len: usize) {
    let bytes: Vec<u8> = grasp_tests::git::xorshift().flat_map(u64::to_le_bytes).take(len).collect();
    std::fs::write(path, bytes).unwrap();
}

fn wait_for_backend(server: &TestServer) {
    wait_until("the relay to start git for the request", TIMEOUT, || {
        children_of(server.data_dir()).iter().any(|(_, c)| grasp_tests::processes::serves_a_request(c)).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
}

/// A clone whose client stops reading the answer is dropped after `--write-timeout`: its git
/// processes end and its git request slot is free for the next client.
#[tokio::test]
async fn a_clone_that_stops_reading_frees_its_slot() {
    let (server, tmp, mut client) = started(&["--git-max-requests", "1", "--write-timeout", "2s"]).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "big", &[]);
    assert!(client.send_event(&ann).await.unwrap().0);
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "big");
    // Far more than the socket buffers between the relay and a client that reads nothing.
    write_incompressible(&repo.work.dir.join("blob"), 24 << 20);
    grasp_tests::git::git(&repo.work.dir, &["add", "blob"]);
    let tip = repo.commit("README", "big\n");
    let st = state(&owner, "big", &[("refs/heads/main", &tip)], Some("main"));
    assert!(client.send_event(&st).await.unwrap().0);
    repo.push(&["main"]).unwrap_or_else(|e| panic!("push refused: {e}\n{}", server.logs()));

    // Ask for the whole pack with a tiny receive buffer, then read nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(server.addr()).await.unwrap();
    let want = format!("want {tip}\n");
    let body = format!("{:04x}{want}00000009done\n", want.len() + 4);
    let request = format!(
        "POST /{}/big.git/git-upload-pack HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n{body}",
        npub_of(&owner.public_key()),
        server.addr(),
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut stalled, request.as_bytes()).await.unwrap();
    wait_for_backend(&server);

    // The one git slot comes free once the relay gives up on the reader.
    let refs = format!("{}/info/refs?service=git-upload-pack", repo.url);
    let http = reqwest::Client::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = http.get(&refs).send().await.unwrap().status();
        if status.is_success() {
            break;
        }
        assert_eq!(status, 503, "unexpected answer");
        assert!(Instant::now() < deadline, "the git slot stayed taken by a client that reads nothing\n{}", server.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_until("the stalled clone's git processes to end", TIMEOUT, || children_of(server.data_dir()).is_empty().then_some(()))
        .unwrap_or_else(|e| panic!("{e:#}: {:?}\n{}", children_of(server.data_dir()), server.logs()));
    drop(stalled);
}

/// A push trickling a byte at a time, never idle for `--git-idle-timeout`, is ended once it
/// falls below `--git-min-rate`, long before its body could end.
#[tokio::test]
async fn a_trickling_push_is_ended() {
    let (server, tmp, mut client) = started(&["--git-idle-timeout", "2s", "--git-min-rate", "200"]).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let owner = Keys::generate();
    publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "base").await;
    // The publishing push's background git work (the ref cache made ready) ends first: the
    // children watched below are the trickling push's.
    wait_until("the publishing push's background work to end", Duration::from_secs(10), || children_of(server.data_dir()).is_empty().then_some(()))
        .unwrap();

    let mut stream = TcpStream::connect(server.addr()).unwrap();
    // The command list whole (as git sends it), then the pack trickles.
    let line = format!("{} {} refs/heads/main\0 report-status\n", "1".repeat(40), "2".repeat(40));
    let head = format!(
        "POST /{}/base.git/git-receive-pack HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n{:04x}{line}0000",
        npub_of(&owner.public_key()),
        server.addr(),
        1 << 20,
        line.len() + 4
    );
    stream.write_all(head.as_bytes()).unwrap();
    // One byte every 250 ms for up to 30 s: never idle, far below the minimum rate.
    let mut trickle = stream.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        for _ in 0..120 {
            if trickle.write_all(b"0").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    });
    wait_for_backend(&server);
    let started = Instant::now();
    wait_until("the trickling push to be ended", Duration::from_secs(10), || {
        children_of(server.data_dir()).is_empty().then_some(())
    })
    .unwrap_or_else(|e| panic!("{e:#}: {:?}\n{}", children_of(server.data_dir()), server.logs()));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(server.logs().contains("--git-min-rate"), "no log line names the minimum rate\n{}", server.logs());
    let _ = stream.shutdown(std::net::Shutdown::Both);
    trickler.join().unwrap();
}

/// Runs `grasp-relay` under `ulimit` settings (`sh` applies them, then execs the relay).
fn relay_under_ulimit(ulimit: &str, data_dir: &std::path::Path) -> std::process::Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit {ulimit} && exec \"$0\" \"$@\""))
        .arg(binary_path("grasp-relay"))
        .args(["--bind", "127.0.0.1:0", "--api-bind", "127.0.0.1:0", "--no-index-relays", "--data-dir"])
        .arg(data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The relay raises its soft open file limit to the hard one before serving.
#[test]
fn the_relay_raises_its_open_file_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let hard: u64 = String::from_utf8(Command::new("sh").args(["-c", "ulimit -Hn"]).output().unwrap().stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap_or(u64::MAX);
    if hard <= 2048 {
        eprintln!("skipped: the hard open file limit ({hard}) leaves no room to raise");
        return;
    }
    let data = tmp.path().join("data");
    let mut relay = relay_under_ulimit("-S -n 1024", &data);
    let addr_file = data.join(grasp_state::contract::layout::RELAY_ADDR_FILE);
    let soft = wait_until("the relay to listen", TIMEOUT, || {
        if let Ok(Some(status)) = relay.try_wait() {
            panic!("the relay exited with {status}");
        }
        std::fs::metadata(&addr_file).ok()?;
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", relay.id())).ok()?;
        let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3).map(str::to_string)
    })
    .unwrap();
    let _ = relay.kill();
    let _ = relay.wait();
    let expected = if hard == u64::MAX { "unlimited".to_string() } else { hard.to_string() };
    assert_eq!(soft, expected, "soft open file limit not raised to the hard one");
}

/// With fewer descriptors than its connection limits need, the relay refuses to start and says
/// what to do.
#[test]
fn the_relay_refuses_to_start_without_enough_descriptors() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = relay_under_ulimit("-n 600", &tmp.path().join("data"));
    let out = wait_until("the relay to refuse to start", TIMEOUT, || {
        let pid = relay.id();
        std::fs::metadata(format!("/proc/{pid}/status")).ok().and_then(|_| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // A zombie has exited.
            stat.split_whitespace().nth(2).filter(|s| *s == "Z").map(|_| ())
        })
    });
    let mut relay = relay;
    if out.is_err() {
        let _ = relay.kill();
    }
    let output = relay.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(out.is_ok(), "the relay started with 600 descriptors and --max-connections 1024\n{stderr}");
    assert!(!output.status.success());
    assert!(stderr.contains("open file limit") && stderr.contains("--max-connections"), "{stderr}");
}
