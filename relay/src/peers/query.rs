//! One short exchange with a relay, as a client: one `REQ` answered until `EOSE` (the lists of
//! Sync+'s participants, the relay's own profile), or one `EVENT` answered with `OK` (publishing
//! the relay's own profile). The relay sync's rules for every connection apply: the URL's
//! addresses checked and pinned ([`RelayUrl::resolve`]), [`super::wire`]'s bounded frames, one
//! deadline for the whole exchange, at most `max_events` events kept, each checked against the
//! filters asked and its signature verified. A query may authenticate first (NIP-42,
//! [`Reach::query_as`]).

use std::time::{Duration, Instant};

use nostr::prelude::*;
use thiserror::Error;

use super::tls::Tls;
use super::wire::{Incoming, Wire, WireError};
use crate::sync::relay_url::{RelayUrl, RelayUrlRejected};
use crate::sync::UrlPolicy;

/// Past the exchange's deadline, the moment left to close it (what came in time is kept).
const CLOSING: Duration = Duration::from_secs(1);

/// Why an exchange failed.
#[derive(Debug, Error)]
pub enum QueryError {
    #[error(transparent)]
    Url(#[from] RelayUrlRejected),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the relay closed the request: {0}")]
    Closed(String),
    #[error("the relay refused the event: {0}")]
    Refused(String),
}

/// How to reach relays.
#[derive(Clone, Copy)]
pub struct Reach<'a> {
    pub policy: &'a UrlPolicy,
    pub tls: &'a Tls,
    /// The whole exchange, connecting included.
    pub timeout: Duration,
}

impl Reach<'_> {
    async fn connect(&self, url: &RelayUrl) -> Result<Wire, QueryError> {
        let addresses = url.resolve(self.policy).await?;
        Ok(Wire::connect(url, &addresses, self.tls, self.timeout).await?)
    }

    /// The stored events matching `filters` (one `REQ`), at most `max_events`, each signed and
    /// matching one of them; what comes after `EOSE` or the deadline is not read.
    pub async fn query(&self, url: &RelayUrl, filters: Vec<Filter>, max_events: usize) -> Result<Vec<Event>, QueryError> {
        self.query_as(url, filters, max_events, &[], "").await
    }

    /// [`Reach::query`], authenticated first (NIP-42) as each of `keys`, with `relay` as the
    /// `AUTH` events' `relay` tag (the relay's public URL). A relay that challenges on connecting
    /// (a private service) is answered; one that does not is sent an `AUTH` it answers with its
    /// challenge (as a public service of this server does, docs/protocol.md#trust). A key the
    /// relay refuses fails the exchange ([`QueryError::Refused`]).
    pub async fn query_as(&self, url: &RelayUrl, filters: Vec<Filter>, max_events: usize, keys: &[Keys], relay: &str) -> Result<Vec<Event>, QueryError> {
        let deadline = Instant::now() + self.timeout;
        let exchange = async {
            let mut wire = self.connect(url).await?;
            if !keys.is_empty() {
                authenticate(&mut wire, keys, relay, deadline).await?;
            }
            let id = SubscriptionId::new("q");
            wire.send(&ClientMessage::req(id.clone(), filters.clone())).await?;
            let mut events = Vec::new();
            let result = loop {
                match wire.recv_until(deadline).await {
                    Ok(Incoming::Message(RelayMessage::Event { subscription_id, event })) if *subscription_id == id => {
                        let event = event.into_owned();
                        let asked = filters.iter().any(|f| f.match_event(&event, MatchEventOptions::new()));
                        if asked && events.len() < max_events && event.verify().is_ok() {
                            events.push(event);
                        }
                    }
                    Ok(Incoming::Message(RelayMessage::EndOfStoredEvents(sub))) if *sub == id => break Ok(events),
                    Ok(Incoming::Message(RelayMessage::Closed { subscription_id, message })) if *subscription_id == id => {
                        break Err(QueryError::Closed(message.chars().take(200).collect()))
                    }
                    Ok(_) => {}
                    // A relay that never says EOSE: what came in time is kept.
                    Err(WireError::ReadTimeout(_)) if !events.is_empty() => break Ok(events),
                    Err(e) => break Err(e.into()),
                }
            };
            let _ = wire.send(&ClientMessage::close(id)).await;
            wire.close().await;
            result
        };
        tokio::time::timeout_at((deadline + CLOSING).into(), exchange).await.unwrap_or(Err(QueryError::Wire(WireError::ReadTimeout(self.timeout))))
    }

    /// Sends `event` and waits for its `OK`.
    pub async fn publish(&self, url: &RelayUrl, event: &Event) -> Result<(), QueryError> {
        let deadline = Instant::now() + self.timeout;
        let exchange = async {
            let mut wire = self.connect(url).await?;
            wire.send(&ClientMessage::event(event.clone())).await?;
            let result = loop {
                match wire.recv_until(deadline).await? {
                    Incoming::Message(RelayMessage::Ok { event_id, status, message }) if event_id == event.id => {
                        break if status { Ok(()) } else { Err(QueryError::Refused(message.chars().take(200).collect())) };
                    }
                    _ => {}
                }
            };
            wire.close().await;
            result
        };
        tokio::time::timeout_at((deadline + CLOSING).into(), exchange).await.unwrap_or(Err(QueryError::Wire(WireError::ReadTimeout(self.timeout))))
    }
}

/// An `AUTH` event of `keys` answering `challenge`, for the relay at `relay`.
fn auth_event(keys: &Keys, relay: &str, challenge: &str) -> Result<Event, QueryError> {
    crate::trust::credentials::auth_event(keys, relay, challenge).map_err(QueryError::Refused)
}

/// NIP-42 on `wire`, as each of `keys` (at least one), before `deadline`: the challenge is the
/// one the relay sent on connecting, or the one it answers an `AUTH` sent before any challenge
/// with; then one `AUTH` per key, each answered `OK true`.
pub(crate) async fn authenticate(wire: &mut Wire, keys: &[Keys], relay: &str, deadline: Instant) -> Result<(), QueryError> {
    // Asks for the challenge (a relay that already sent one answers this `OK false`).
    wire.send(&ClientMessage::auth(auth_event(&keys[0], relay, "-")?)).await?;
    let challenge = loop {
        if let Incoming::Message(RelayMessage::Auth { challenge }) = wire.recv_until(deadline).await? {
            break challenge.into_owned();
        }
    };
    for key in keys {
        let event = auth_event(key, relay, &challenge)?;
        let id = event.id;
        wire.send(&ClientMessage::auth(event)).await?;
        loop {
            match wire.recv_until(deadline).await? {
                Incoming::Message(RelayMessage::Ok { event_id, status, message }) if event_id == id => {
                    if !status {
                        return Err(QueryError::Refused(format!("AUTH: {}", message.chars().take(200).collect::<String>())));
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    Ok(())
}
