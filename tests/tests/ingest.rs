//! Event ingest under pipelining (docs/benchmarks.md, ingest): a client that sends many `EVENT`s without
//! waiting gets every `OK` in the order of its `EVENT`s, with the answers it would get had it
//! waited for each one (a reply to an event still in flight is accepted, a repeat is a
//! duplicate, bad events are refused in their turn), and a `REQ` sent after them sees them all.

use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer};
use nostr::prelude::*;
use serde_json::{json, Value};

/// What the relay must answer to one message of the sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Stored,
    Duplicate,
    Invalid,
    Blocked,
}


fn event_message(v: Value) -> String {
    json!(["EVENT", v]).to_string()
}

/// Reads messages until `n` OKs arrived; returns them in arrival order.
async fn read_oks(c: &mut NostrClient, n: usize) -> Vec<(EventId, bool, String)> {
    let mut oks = Vec::new();
    while oks.len() < n {
        if let RelayMessage::Ok { event_id, status, message } = c.next_message().await.unwrap() {
            oks.push((event_id, status, message.to_string()));
        }
    }
    oks
}

/// A server, a client connected to it, and a repository `identifier` announced there: its `a`
/// coordinate. A held announcement is enough for issues about it to be accepted (and stored) at
/// once.
async fn anchored(identifier: &str) -> (TestServer, NostrClient, String) {
    let (server, mut c) = connected(&[]).await;
    let owner = Keys::generate();
    let (ok, msg) = c.send_event(&announcement(&server, &owner, identifier, &[])).await.unwrap();
    assert!(ok, "{msg}");
    (server, c, coordinate(30617, &owner.public_key(), identifier))
}

#[tokio::test]
async fn oks_keep_the_order_of_pipelined_events() {
    let (_server, mut c, repo) = anchored("piped").await;
    let authors: Vec<Keys> = (0..8).map(|_| Keys::generate()).collect();

    let mut sent: Vec<(String, EventId, Expect)> = Vec::new();
    let mut last_issue: Option<Event> = None;
    for i in 0..160usize {
        let author = &authors[i % authors.len()];
        match i % 16 {
            // A comment that relates only through the issue sent just before it: accepted only
            // if that issue is stored first, as if the client had waited for its OK.
            3 | 11 => {
                let target = last_issue.as_ref().unwrap().id.to_hex();
                let reply = signed_event(author, 1111, now(), &format!("reply {i}"), &[&["e", &target], &["k", "1621"]]);
                sent.push((event_message(serde_json::to_value(&reply).unwrap()), reply.id, Expect::Stored));
            }
            // The same issue again: a duplicate.
            5 => {
                let again = last_issue.clone().unwrap();
                sent.push((event_message(serde_json::to_value(&again).unwrap()), again.id, Expect::Duplicate));
            }
            // Content changed after signing: the id no longer matches.
            7 => {
                let e = signed_event(author, 1621, now(), &format!("issue {i}"), &[&["a", &repo]]);
                let mut v = serde_json::to_value(&e).unwrap();
                v["content"] = json!("tampered");
                sent.push((event_message(v), e.id, Expect::Invalid));
            }
            // Not an event at all (no signature): refused in its turn.
            9 => {
                let e = signed_event(author, 1621, now(), &format!("issue {i}"), &[&["a", &repo]]);
                let mut v = serde_json::to_value(&e).unwrap();
                v.as_object_mut().unwrap().remove("sig");
                sent.push((event_message(v), e.id, Expect::Invalid));
            }
            // Unrelated to any repository here.
            13 => {
                let e = signed_event(author, 1, now(), &format!("note {i}"), &[]);
                sent.push((event_message(serde_json::to_value(&e).unwrap()), e.id, Expect::Blocked));
            }
            _ => {
                let e = signed_event(author, 1621, now(), &format!("issue {i}"), &[&["a", &repo], &["subject", "s"]]);
                sent.push((event_message(serde_json::to_value(&e).unwrap()), e.id, Expect::Stored));
                last_issue = Some(e);
            }
        }
    }
    for (text, _, _) in &sent {
        c.raw_send(text.clone()).await.unwrap();
    }
    let oks = read_oks(&mut c, sent.len()).await;
    let got: Vec<EventId> = oks.iter().map(|(id, _, _)| *id).collect();
    let want: Vec<EventId> = sent.iter().map(|(_, id, _)| *id).collect();
    assert_eq!(got, want, "OKs must come in the order of the EVENTs");
    for ((_, id, expect), (_, ok, msg)) in sent.iter().zip(&oks) {
        let fine = match expect {
            Expect::Stored => *ok && msg.is_empty(),
            Expect::Duplicate => *ok && msg.starts_with("duplicate:"),
            Expect::Invalid => !*ok && msg.starts_with("invalid:"),
            Expect::Blocked => !*ok && msg.starts_with("blocked:"),
        };
        assert!(fine, "event {id}: expected {expect:?}, got {ok} {msg:?}");
    }
    let stored = sent.iter().filter(|(_, _, e)| *e == Expect::Stored).count();
    let found = c.req(vec![Filter::new().kinds([Kind::from(1621), Kind::from(1111)])]).await.unwrap();
    assert_eq!(found.len(), stored);
}

#[tokio::test]
async fn a_req_after_pipelined_events_sees_them_all() {
    let (_server, mut c, repo) = anchored("seen").await;
    let issues: Vec<Event> = (0..60).map(|i| signed_event(&Keys::generate(), 1621, now(), &format!("issue {i}"), &[&["a", &repo]])).collect();
    for e in &issues {
        c.raw_send(event_message(serde_json::to_value(e).unwrap())).await.unwrap();
    }
    // Sent right behind the EVENTs, without waiting for their OKs.
    let sub = SubscriptionId::new("after");
    c.raw_send(json!(["REQ", "after", {"kinds": [1621]}]).to_string()).await.unwrap();
    let mut oks = 0;
    let mut found = 0;
    loop {
        match c.next_message().await.unwrap() {
            RelayMessage::Ok { status, message, .. } => {
                assert!(status, "{message}");
                oks += 1;
            }
            RelayMessage::Event { subscription_id, .. } if *subscription_id == sub => {
                assert_eq!(oks, issues.len(), "every OK comes before the REQ's results");
                found += 1;
            }
            RelayMessage::EndOfStoredEvents(id) if *id == sub => break,
            _ => {}
        }
    }
    assert_eq!(oks, issues.len());
    assert_eq!(found, issues.len(), "the REQ sees every event sent before it");
}
