//! Durability across machines in a replica set (`--replica-acks N`, docs/scaling.md): an event a
//! client sends is answered `OK true` only once N other replicas hold it, and a push's
//! post-receive finishes only once N other replicas serve its refs. Both waits are bounded by
//! `--replica-ack-timeout`; past it the client is told how many confirmed.
//!
//! Events: one task per replica keeps a WebSocket open to it (reconnecting, bounded backoff) and
//! sends it the events to confirm; the replica's `OK` (true, or `duplicate:`: it had it) is the
//! confirmation. Pushes: the replicas' git listeners are asked for their refs (`git ls-remote`)
//! until they serve the pushed ones (a replica fetches them from this one through background
//! sync once the state event reached it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostr::prelude::{ClientMessage, Event, EventId, RelayMessage};
use tokio::sync::{mpsc, oneshot};

use crate::trust::credentials::ReplicaIdentity;
use crate::peers::tls::Tls;
use crate::peers::wire::{Incoming, Wire};
use crate::shutdown::Shutdown;
use crate::sync::relay_url::RelayUrl;
use crate::sync::UrlPolicy;

/// Events waiting for one replica's link, at most.
const LINK_QUEUE: usize = 4096;

type Request = (Arc<Event>, oneshot::Sender<bool>);

/// The links to the other replicas, and how many must confirm.
pub struct ReplicaAcks {
    required: usize,
    timeout: Duration,
    links: Vec<mpsc::Sender<Request>>,
    /// The replicas' git bases (`http://host:port`), for pushes.
    bases: Vec<String>,
    /// A private set: how this replica is let in by the others (NIP-42, git proofs).
    identity: Option<ReplicaIdentity>,
}

impl ReplicaAcks {
    /// Starts one link per replica; `None` when `required` is 0. `identity`: on a private set,
    /// what this replica authenticates as (its links answer the others' NIP-42 challenges, its
    /// `ls-remote`s carry git proofs).
    pub fn start(replicas: &[grasp_state::trust::replica::Replica], required: usize, timeout: Duration, tls: Option<&std::path::Path>, identity: Option<ReplicaIdentity>, shutdown: &Shutdown) -> anyhow::Result<Option<Arc<ReplicaAcks>>> {
        if required == 0 {
            return Ok(None);
        }
        anyhow::ensure!(
            required <= replicas.len(),
            "--replica-acks {required} asks for more confirmations than there are other replicas ({}): name them with --replica",
            replicas.len()
        );
        let hosts: Vec<String> = replicas.iter().map(|r| r.host_port.clone()).collect();
        let policy = UrlPolicy::new(false, &[], &[]).trusting(&hosts);
        let tls = Arc::new(Tls::new(tls)?);
        let mut links = Vec::new();
        for replica in replicas {
            let link_url = format!("{}?{}", replica.relay, crate::nostr::pipeline::REPLICA_QUERY);
            let url = RelayUrl::parse(&link_url).map_err(|e| anyhow::anyhow!("replica {}: {e}", replica.base))?;
            let (tx, rx) = mpsc::channel(LINK_QUEUE);
            tokio::spawn(link(url, policy.clone(), tls.clone(), identity.clone(), rx, shutdown.clone()));
            links.push(tx);
        }
        Ok(Some(Arc::new(ReplicaAcks { required, timeout, links, bases: replicas.iter().map(|r| r.base.clone()).collect(), identity })))
    }

    /// Sends `event` to every replica and waits for `required` of them to hold it. `Err`: the
    /// `OK` line for the client (NIP-01 `error:`).
    pub async fn confirm(&self, event: &Arc<Event>) -> Result<(), String> {
        let mut answers = Vec::new();
        for link in &self.links {
            let (tx, rx) = oneshot::channel();
            if link.try_send((event.clone(), tx)).is_ok() {
                answers.push(rx);
            }
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut confirmed = 0;
        let mut pending: futures_util::stream::FuturesUnordered<_> = answers.into_iter().collect();
        use futures_util::StreamExt;
        while confirmed < self.required {
            match tokio::time::timeout_at(deadline, pending.next()).await {
                Ok(Some(Ok(true))) => confirmed += 1,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if confirmed >= self.required {
            return Ok(());
        }
        tracing::warn!(event = %event.id, confirmed, required = self.required, "replica acknowledgements missing");
        Err(format!(
            "error: stored here, but only {confirmed} of the {} other replicas this service waits for confirmed it within {} s; \
             send it again",
            self.required,
            self.timeout.as_secs()
        ))
    }

    /// Waits until `required` replicas serve `refs` (name → oid) for `npub`'s repository
    /// `identifier`. One line for the pusher either way.
    pub async fn confirm_push(&self, npub: &str, identifier: &str, refs: &grasp_state::names::refs::RefMap) -> String {
        let started = Instant::now();
        let want: Vec<(String, String)> = refs.iter().filter(|(n, _)| grasp_state::names::refs::is_served_ref(n)).map(|(n, o)| (n.clone(), o.clone())).collect();
        let mut confirmed: Vec<bool> = vec![false; self.bases.len()];
        while started.elapsed() < self.timeout {
            for (i, base) in self.bases.iter().enumerate() {
                if confirmed[i] {
                    continue;
                }
                let path = format!("/{npub}/{}.git", grasp_state::names::identifier::percent_encode_segment(identifier));
                let mut ls_remote = crate::git::GitCommand::without_repo().network_safety();
                if let Some(header) = self.identity.as_ref().and_then(|me| me.git_credential(&path).header().ok()) {
                    ls_remote = ls_remote.secret_config("http.extraHeader", format!("Authorization: {header}"));
                }
                let served = ls_remote.args(["ls-remote", "--refs", &format!("{base}{path}")]).run_async(Duration::from_secs(5)).await;
                if let Ok(out) = served {
                    let text = String::from_utf8_lossy(&out);
                    let theirs: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('\t')).map(|(o, n)| (n, o)).collect();
                    confirmed[i] = want.iter().all(|(n, o)| theirs.get(n.as_str()) == Some(&o.as_str()));
                }
            }
            let n = confirmed.iter().filter(|c| **c).count();
            if n >= self.required {
                return format!("grasp: held by {n} other replicas of this service");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let n = confirmed.iter().filter(|c| **c).count();
        tracing::warn!(repo = %format!("{npub}/{identifier}"), confirmed = n, required = self.required, "replica acknowledgements of a push missing");
        format!(
            "grasp: warning: only {n} of the {} other replicas this service waits for serve this push after {} s; it reaches them \
             later, or push again to be sure",
            self.required,
            self.timeout.as_secs()
        )
    }
}

impl crate::grasp::replica_set::Confirmations for ReplicaAcks {
    fn confirm<'a>(&'a self, event: &'a Arc<Event>) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(ReplicaAcks::confirm(self, event))
    }

    fn confirm_push<'a>(&'a self, npub: &'a str, identifier: &'a str, refs: &'a grasp_state::names::refs::RefMap) -> futures_util::future::BoxFuture<'a, String> {
        Box::pin(ReplicaAcks::confirm_push(self, npub, identifier, refs))
    }
}

/// One replica's link: events in, confirmations out, reconnecting with a bounded backoff (at
/// most 2 s). While it is down, requests wait in the bounded queue.
async fn link(url: RelayUrl, policy: UrlPolicy, tls: Arc<Tls>, identity: Option<ReplicaIdentity>, mut rx: mpsc::Receiver<Request>, mut shutdown: Shutdown) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = async {
            let addresses = url.resolve(&policy).await.map_err(|e| e.to_string())?;
            let mut wire = Wire::connect(&url, &addresses, &tls, Duration::from_secs(5)).await.map_err(|e| e.to_string())?;
            // A private set: authenticated before any event is sent, so none meets `auth-required:`.
            if let Some(me) = &identity {
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                crate::peers::query::authenticate(&mut wire, std::slice::from_ref(me.keys()), &me.relay_tag(), deadline).await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(wire)
        };
        let mut wire = tokio::select! {
            _ = shutdown.recv() => return,
            w = connected => match w {
                Ok(w) => w,
                Err(error) => {
                    // Requests wait in the queue meanwhile (their senders give up at their own
                    // deadline); sent once the link is back, they still replicate.
                    tracing::info!(replica = %url, %error, "replica link down; retried");
                    let pause = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    tokio::select! {
                        _ = shutdown.recv() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    continue;
                }
            },
        };
        backoff = Duration::from_millis(100);
        let mut waiting: HashMap<EventId, Vec<oneshot::Sender<bool>>> = HashMap::new();
        loop {
            tokio::select! {
                _ = shutdown.recv() => return,
                req = rx.recv() => {
                    let Some((event, tx)) = req else { return };
                    if wire.send(&ClientMessage::event((*event).clone())).await.is_err() {
                        let _ = tx.send(false);
                        break;
                    }
                    waiting.entry(event.id).or_default().push(tx);
                }
                incoming = wire.recv(Duration::from_secs(60)) => match incoming {
                    Ok(Incoming::Message(RelayMessage::Ok { event_id, status, message })) => {
                        let held = status || message.starts_with("duplicate:");
                        if !held {
                            tracing::info!(replica = %url, event = %event_id, reason = %message, "a replica refused an event to confirm");
                        }
                        for tx in waiting.remove(&event_id).unwrap_or_default() {
                            let _ = tx.send(held);
                        }
                    }
                    Ok(_) => {}
                    Err(crate::peers::wire::WireError::ReadTimeout(_)) if waiting.is_empty() => {
                        if wire.ping().await.is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                },
            }
        }
        for (_, txs) in waiting.drain() {
            for tx in txs {
                let _ = tx.send(false);
            }
        }
    }
}
