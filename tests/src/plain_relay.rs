//! A plain NIP-01 relay on loopback, in memory: the relays a real user keeps apart from the GRASP
//! server (the ngit suite points `NGIT_RELAY_*_SET` at one). It stores every event it is sent
//! (replaceable and addressable ones newest only, NIP-01 order), answers `REQ`s from what it
//! stores (newest first, `limit` honoured), then sends matching events live until `CLOSE`; it
//! answers every `EVENT` `OK true` and knows nothing of GRASP, NIP-42 or NIP-77 (`NEG-OPEN` gets a
//! `NOTICE`, as from a relay without NIP-77).
//!
//! [`PlainRelay::start`] runs it on a thread of its own, so a test may block on a child process
//! (ngit, git) while the relay serves; dropping the handle stops it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use nostr::prelude::*;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

/// The relay; stopped on drop.
pub struct PlainRelay {
    pub addr: SocketAddr,
    events: Arc<Mutex<Vec<Event>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PlainRelay {
    /// Starts the relay on a random loopback port.
    pub fn start() -> PlainRelay {
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let store = events.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let (live, _) = broadcast::channel::<Event>(4096);
                let accept = async {
                    while let Ok((stream, _)) = listener.accept().await {
                        let (store, live) = (store.clone(), live.clone());
                        tokio::spawn(async move {
                            if let Ok(ws) = tokio_tungstenite::accept_async(stream).await {
                                serve(ws, store, live).await;
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = addr_rx.recv().expect("plain relay started");
        PlainRelay { addr, events, stop: Some(stop), thread: Some(thread) }
    }

    /// `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Every event the relay holds now.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}

impl Drop for PlainRelay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Stores `event` unless a newer version of the same replaceable or addressable event is there
/// (NIP-01: later `created_at`, then the lower id); returns whether it is new.
fn store(events: &Mutex<Vec<Event>>, event: &Event) -> bool {
    let mut events = events.lock().unwrap();
    if events.iter().any(|e| e.id == event.id) {
        return false;
    }
    let same = |e: &Event| {
        e.kind == event.kind
            && e.pubkey == event.pubkey
            && (event.kind.is_replaceable()
                || (event.kind.is_addressable() && e.tags.identifier() == event.tags.identifier()))
    };
    if event.kind.is_replaceable() || event.kind.is_addressable() {
        let newer = |a: &Event, b: &Event| (a.created_at, std::cmp::Reverse(a.id)) > (b.created_at, std::cmp::Reverse(b.id));
        if events.iter().any(|e| same(e) && !newer(event, e)) {
            return false;
        }
        events.retain(|e| !same(e));
    }
    events.push(event.clone());
    true
}

async fn serve(
    mut ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    events: Arc<Mutex<Vec<Event>>>,
    live: broadcast::Sender<Event>,
) {
    let mut subs: HashMap<String, Vec<Filter>> = HashMap::new();
    let mut feed = live.subscribe();
    loop {
        let mut out: Vec<Value> = Vec::new();
        tokio::select! {
            msg = ws.next() => {
                let Some(Ok(msg)) = msg else { return };
                let Message::Text(text) = msg else { continue };
                let items = match serde_json::from_str::<Value>(text.as_str()) {
                    Ok(Value::Array(items)) => items,
                    _ => vec![json!("not a JSON array")],
                };
                match items.first().and_then(Value::as_str) {
                    Some("EVENT") => match items.get(1).cloned().map(serde_json::from_value::<Event>) {
                        Some(Ok(event)) if event.verify().is_ok() => {
                            if store(&events, &event) {
                                let _ = live.send(event.clone());
                            }
                            out.push(json!(["OK", event.id.to_hex(), true, ""]));
                        }
                        Some(Ok(event)) => out.push(json!(["OK", event.id.to_hex(), false, "invalid: bad id or signature"])),
                        _ => out.push(json!(["NOTICE", "invalid: malformed EVENT"])),
                    },
                    Some("REQ") => {
                        let Some(id) = items.get(1).and_then(Value::as_str) else { continue };
                        let filters: Vec<Filter> = items[2..].iter().filter_map(|f| serde_json::from_value(f.clone()).ok()).collect();
                        let mut matched: Vec<Event> = Vec::new();
                        {
                            let stored = events.lock().unwrap();
                            for f in &filters {
                                let mut hits: Vec<&Event> = stored.iter().filter(|e| f.match_event(e, MatchEventOptions::default())).collect();
                                hits.sort_by_key(|e| std::cmp::Reverse(e.created_at));
                                hits.truncate(f.limit.unwrap_or(usize::MAX));
                                for e in hits {
                                    if !matched.iter().any(|m| m.id == e.id) {
                                        matched.push(e.clone());
                                    }
                                }
                            }
                        }
                        for e in matched {
                            out.push(json!(["EVENT", id, e]));
                        }
                        out.push(json!(["EOSE", id]));
                        subs.insert(id.to_string(), filters);
                    }
                    Some("CLOSE") => {
                        if let Some(id) = items.get(1).and_then(Value::as_str) {
                            subs.remove(id);
                        }
                    }
                    Some(other) => out.push(json!(["NOTICE", format!("unsupported message {other}")])),
                    None => {}
                }
            }
            ev = feed.recv() => {
                let Ok(event) = ev else { continue };
                for (id, filters) in &subs {
                    if filters.iter().any(|f| f.match_event(&event, MatchEventOptions::default())) {
                        out.push(json!(["EVENT", id, event]));
                    }
                }
            }
        }
        for m in out {
            if ws.send(Message::text(m.to_string())).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_addressable_version_only() {
        let keys = Keys::generate();
        let events = Mutex::new(Vec::new());
        let at = |t: u64, content: &str| {
            EventBuilder::new(Kind::Custom(30617), content)
                .tags([Tag::identifier("r")])
                .custom_created_at(Timestamp::from(t))
                .finalize(&keys)
                .unwrap()
        };
        let (old, new) = (at(100, "old"), at(200, "new"));
        assert!(store(&events, &new));
        assert!(!store(&events, &old), "an older version is refused");
        assert!(!store(&events, &new), "a duplicate is refused");
        let newer = at(300, "newer");
        assert!(store(&events, &newer));
        assert_eq!(events.lock().unwrap().iter().map(|e| e.id).collect::<Vec<_>>(), vec![newer.id]);
    }
}
