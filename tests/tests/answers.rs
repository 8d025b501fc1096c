//! REQ answers within bounds, end to end (docs/security.md): an answer is streamed as it is
//! read, so clients that ask for many large events and read nothing hold one chunk each, not
//! their whole answer; and an answer sends at most `--max-answer-bytes` of events, then EOSE.


use futures_util::SinkExt;
use grasp_tests::grasp::*;
use grasp_tests::{TestServer, TIMEOUT};
use nostr::prelude::*;
use tokio_tungstenite::tungstenite::Message;

/// The relay's private memory (RssAnon, kB of /proc/<pid>/status): not the store's mapped file.
fn rss_anon_kib(server: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid().expect("relay running"))).unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).expect("RssAnon in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A kind 1 note of about `bytes` bytes about repository `repo` (`30617:<owner>:<identifier>`):
/// anyone may publish one, under the general size limit.
fn large_note(keys: &Keys, repo: &str, n: usize, bytes: usize, at: u64) -> Event {
    let content = format!("{n} {}", "x".repeat(bytes));
    EventBuilder::new(Kind::TextNote, content)
        .tag(Tag::parse(["a", repo]).unwrap())
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .unwrap()
}

/// A served repository to talk about; its coordinate.
async fn a_repository(server: &TestServer, c: &mut grasp_tests::NostrClient, dir: &std::path::Path) -> String {
    let owner = Keys::generate();
    publish_repo(server, c, &dir.join("w"), &owner, "r").await;
    coordinate(30617, &owner.public_key(), "r")
}

/// The size of event `e`'s `EVENT` message in subscription `sub`, as the relay writes it.
fn message_len(sub: &SubscriptionId, e: &Event) -> usize {
    RelayMessage::event(sub.clone(), e.clone()).as_json().len()
}

const CONNECTIONS: usize = 100;
const NOTES: usize = 48;
const NOTE_BYTES: usize = 200 * 1024;
/// What each connection may add to the relay's private memory while its answer waits: one
/// chunk of about 128 KiB, one event past it, the WebSocket's write buffer.
const PER_CONNECTION_KIB: u64 = 2 * 1024;

/// 100 connections each ask for `--max-filters` filters of about 9.6 MB of large notes and read
/// nothing (a receive buffer of a few KiB): the relay's private memory grows by at most a couple
/// of MiB per connection, not by the answers (about 1 GB; the relay built each answer whole
/// before writing it until it was streamed).
#[tokio::test]
async fn many_clients_asking_for_large_answers_and_reading_nothing_hold_bounded_memory() {
    let (server, mut c) = connected(&["--max-connections-per-ip", "0", "--write-timeout", "5m"]).await;
    let keys = Keys::generate();
    let tmp = tempfile::tempdir().unwrap();
    let repo = a_repository(&server, &mut c, tmp.path()).await;
    let notes: Vec<Event> = (0..NOTES).map(|n| large_note(&keys, &repo, n, NOTE_BYTES, now() - n as u64)).collect();
    for note in &notes {
        let (ok, msg) = c.send_event(note).await.unwrap();
        assert!(ok, "{msg}");
    }
    // One answer read whole, so whatever one REQ leaves behind is in the baseline.
    assert_eq!(c.req(vec![Filter::new().kind(Kind::TextNote)]).await.unwrap().len(), NOTES);
    let baseline = rss_anon_kib(&server);

    let max_filters = nip11(&server).await["limitation"]["max_filters"].as_u64().unwrap() as usize;
    let filters: Vec<Filter> = (0..max_filters).map(|i| Filter::new().kind(Kind::TextNote).since(Timestamp::from(i as u64)).limit(500)).collect();
    let req = ClientMessage::req(SubscriptionId::new("all"), filters).as_json();
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // A client that reads nothing: its receive buffer is small and never emptied.
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = tokio::time::timeout(TIMEOUT, socket.connect(server.addr())).await.expect("connect timed out").unwrap();
        let (mut ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::client_async(server.ws_url(), stream))
            .await
            .expect("handshake timed out")
            .unwrap();
        ws.send(Message::text(req.clone())).await.unwrap();
        clients.push(ws);
    }
    // Every connection's answer has started coming (its first bytes wait in the client's
    // socket): each REQ has been read and answered as far as the client lets it.
    for ws in &clients {
        let mut first = [0u8; 1];
        let peeked = tokio::time::timeout(TIMEOUT, ws.get_ref().peek(&mut first)).await.expect("no answer started within the timeout");
        assert_eq!(peeked.unwrap(), 1);
    }
    let grown = rss_anon_kib(&server).saturating_sub(baseline);
    let bound = CONNECTIONS as u64 * PER_CONNECTION_KIB;
    eprintln!("RssAnon grew by {} MiB for {CONNECTIONS} stalled answers of {} MiB each (bound {} MiB)", grown / 1024, (NOTES * NOTE_BYTES) >> 20, bound / 1024);
    assert!(grown < bound, "the relay's private memory grew by {grown} KiB for {CONNECTIONS} clients reading nothing (bound {bound} KiB)");

    // The relay still answers others.
    let mut other = connect(&server).await;
    assert_eq!(other.req(vec![Filter::new().kind(Kind::TextNote).limit(2)]).await.unwrap(), notes[..2].to_vec());
    drop(clients);
}

/// An answer larger than `--max-answer-bytes` sends the newest events that fit, then EOSE; the
/// subscription is then live like any other. An answer within the budget is whole.
#[tokio::test]
async fn an_answer_past_the_byte_budget_sends_what_fits_then_eose() {
    const BUDGET: usize = 300_000;
    let (server, mut c) = connected(&["--max-answer-bytes", &BUDGET.to_string()]).await;
    let keys = Keys::generate();
    let tmp = tempfile::tempdir().unwrap();
    let repo = a_repository(&server, &mut c, tmp.path()).await;
    // Ten notes of about 60 KB, newest first: about 600 KB in all, twice the budget.
    let notes: Vec<Event> = (0..10).map(|n| large_note(&keys, &repo, n, 60_000, now() - 10 - n as u64)).collect();
    for note in &notes {
        let (ok, msg) = c.send_event(note).await.unwrap();
        assert!(ok, "{msg}");
    }
    let sub = SubscriptionId::new("big");
    let got = match c.req_with_id(&sub, vec![Filter::new().kind(Kind::TextNote)]).await.unwrap() {
        grasp_tests::ReqOutcome::Eose(events) => events,
        other => panic!("expected events then EOSE, got {other:?}"),
    };
    let bytes: usize = got.iter().map(|e| message_len(&sub, e)).sum();
    let fits = notes.iter().scan(0, |sum, e| {
        *sum += message_len(&sub, e);
        Some(*sum)
    }).take_while(|sum| *sum <= BUDGET).count();
    eprintln!("{} of {} events, {bytes} bytes, within a budget of {BUDGET}", got.len(), notes.len());
    assert!(bytes <= BUDGET, "sent {bytes} bytes of events, budget {BUDGET}");
    assert!(bytes + message_len(&sub, &notes[got.len()]) > BUDGET, "the next event would have fit");
    assert_eq!(got, notes[..fits].to_vec(), "the newest events that fit, in order");
    assert!(got.len() < notes.len());

    // Live after EOSE.
    let fresh = large_note(&keys, &repo, 99, 10, now());
    let (ok, msg) = c.send_event(&fresh).await.unwrap();
    assert!(ok, "{msg}");
    assert_eq!(tokio::time::timeout(TIMEOUT, c.next_event(&sub)).await.unwrap().unwrap(), fresh);

    // Within the budget: the whole answer.
    assert_eq!(c.req(vec![Filter::new().kind(Kind::TextNote).limit(3)]).await.unwrap(), [vec![fresh], notes[..2].to_vec()].concat());
}
