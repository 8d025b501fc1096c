//! The relay's profile (kind 0) and relay list (kind 10002) under its own key, published at
//! startup to each index relay that holds none for the key yet (docs/protocol.md, "Relay
//! identity"; what they say is [`grasp_state::nostr::relay_profile`]). One look-up and at most two
//! publications per index relay, each a [`Reach`] exchange bounded by `--relay-sync-timeout`;
//! a relay that fails is logged and left alone until the next start. Never on a private service
//! (it has no index relays), never with `--no-index-relays`.

use std::time::Duration;

use grasp_state::nostr::outbox::KIND_RELAY_LIST;
use grasp_state::nostr::relay_profile::{profile_content, relay_list_tags, KIND_PROFILE};
use nostr::prelude::*;

use super::parse_relays;
use super::query::{QueryError, Reach};
use super::tls::Tls;
use crate::shutdown::Shutdown;
use crate::sync::relay_url::RelayUrl;
use crate::sync::UrlPolicy;

/// What to publish, and where.
pub struct SelfPublication {
    pub keys: Keys,
    pub public_host: String,
    /// The NIP-11 description, the profile's `about`.
    pub about: String,
    pub index_relays: Vec<String>,
    pub policy: UrlPolicy,
    pub tls: Tls,
    pub timeout: Duration,
}

impl SelfPublication {
    /// The two events, signed now.
    fn events(&self) -> Result<[Event; 2], String> {
        let profile = EventBuilder::new(Kind::Custom(KIND_PROFILE), profile_content(&self.public_host, &self.about)).finalize(&self.keys).map_err(|e| e.to_string())?;
        let tags: Vec<Tag> = relay_list_tags(&self.public_host).into_iter().filter_map(|t| Tag::parse(t).ok()).collect();
        let relays = EventBuilder::new(Kind::Custom(KIND_RELAY_LIST), "").tags(tags).finalize(&self.keys).map_err(|e| e.to_string())?;
        Ok([profile, relays])
    }

    /// Publishes to every index relay what it lacks (all at once); ends at shutdown.
    pub async fn run(self, mut shutdown: Shutdown) {
        let relays: Vec<RelayUrl> = parse_relays(&self.index_relays, "index relay").into_iter().collect();
        if relays.is_empty() {
            return;
        }
        let events = match self.events() {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "signing the relay's profile failed");
                return;
            }
        };
        let reach = Reach { policy: &self.policy, tls: &self.tls, timeout: self.timeout };
        let author = self.keys.public_key();
        let work = futures_util::future::join_all(relays.iter().map(|url| publish_missing(reach, url, &author, &events)));
        tokio::select! {
            _ = work => {}
            _ = shutdown.recv() => {}
        }
    }
}

/// Publishes each of `events` whose kind `url` holds none of by `author`.
async fn publish_missing(reach: Reach<'_>, url: &RelayUrl, author: &PublicKey, events: &[Event; 2]) {
    let filters: Vec<Filter> = events.iter().map(|e| Filter::new().kind(e.kind).author(*author).limit(1)).collect();
    let held = match reach.query(url, filters, 4).await {
        Ok(held) => held,
        Err(e) => return failed(url, "looking up the relay's profile", &e),
    };
    for event in events {
        if held.iter().any(|h| h.kind == event.kind) {
            tracing::info!(relay = %url, kind = event.kind.as_u16(), "the index relay already holds the relay's own event of this kind; not replaced");
            continue;
        }
        match reach.publish(url, event).await {
            Ok(()) => tracing::info!(relay = %url, kind = event.kind.as_u16(), event = %event.id, "published the relay's own event to the index relay"),
            Err(e) => failed(url, "publishing the relay's profile", &e),
        }
    }
}

fn failed(url: &RelayUrl, what: &str, error: &QueryError) {
    tracing::info!(relay = %url, error = %error, "{what} on the index relay failed; tried again at the next start");
}
