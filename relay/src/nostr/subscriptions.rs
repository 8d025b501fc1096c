//! The open subscriptions of one WebSocket connection.
//!
//! Pure bookkeeping: which subscription ids exist, with which filters, and which of them an event
//! matches. Limits are enforced here so the connection only has to turn errors into `CLOSED`.

use std::collections::HashMap;

use nostr::prelude::*;

/// NIP-01 subscription ids are at most 64 characters.
pub const MAX_SUBSCRIPTION_ID_LEN: usize = 64;

/// Why a REQ was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    #[error(
        "rate-limited: too many open subscriptions (limit {0}); CLOSE one before opening another"
    )]
    TooManySubscriptions(usize),
    #[error("invalid: too many filters in one REQ ({given}, limit {limit}); split the REQ")]
    TooManyFilters { given: usize, limit: usize },
    #[error("invalid: a REQ needs at least one filter")]
    NoFilters,
}

/// The subscriptions of one connection.
#[derive(Debug)]
pub struct Subscriptions {
    subs: HashMap<SubscriptionId, Vec<Filter>>,
    max_subscriptions: usize,
    max_filters: usize,
}

impl Subscriptions {
    pub fn new(max_subscriptions: usize, max_filters: usize) -> Self {
        Self {
            subs: HashMap::new(),
            max_subscriptions,
            max_filters,
        }
    }

    /// Checks a REQ against the limits without registering it. Re-using an open id is allowed
    /// (it replaces that subscription, NIP-01).
    pub fn check(&self, id: &SubscriptionId, filters: &[Filter]) -> Result<(), SubscriptionError> {
        if filters.is_empty() {
            return Err(SubscriptionError::NoFilters);
        }
        if filters.len() > self.max_filters {
            return Err(SubscriptionError::TooManyFilters {
                given: filters.len(),
                limit: self.max_filters,
            });
        }
        if !self.subs.contains_key(id) && self.subs.len() >= self.max_subscriptions {
            return Err(SubscriptionError::TooManySubscriptions(
                self.max_subscriptions,
            ));
        }
        Ok(())
    }

    /// Registers (or replaces) a subscription after [`check`](Self::check).
    pub fn insert(
        &mut self,
        id: SubscriptionId,
        filters: Vec<Filter>,
    ) -> Result<(), SubscriptionError> {
        self.check(&id, &filters)?;
        self.subs.insert(id, filters);
        Ok(())
    }

    /// Removes a subscription; false if it was not open.
    pub fn remove(&mut self, id: &SubscriptionId) -> bool {
        self.subs.remove(id).is_some()
    }

    /// Ends every subscription; returns their ids.
    pub fn remove_all(&mut self) -> Vec<SubscriptionId> {
        self.subs.drain().map(|(id, _)| id).collect()
    }

    pub fn len(&self) -> usize {
        self.subs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    /// Ids of the subscriptions with at least one filter matching `event`.
    pub fn matching<'a>(
        &'a self,
        event: &'a Event,
    ) -> impl Iterator<Item = &'a SubscriptionId> + 'a {
        let opts = MatchEventOptions::new();
        self.subs
            .iter()
            .filter(move |(_, filters)| filters.iter().any(|f| f.match_event(event, opts)))
            .map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SubscriptionId {
        SubscriptionId::new(s)
    }

    fn note(kind: u16, tags: Vec<Tag>) -> Event {
        let keys = Keys::new(SecretKey::from_slice(&[7u8; 32]).unwrap());
        EventBuilder::new(Kind::from(kind), "x")
            .tags(tags)
            .finalize(&keys)
            .unwrap()
    }

    #[test]
    fn limits() {
        let mut s = Subscriptions::new(2, 2);
        let f = || vec![Filter::new()];
        assert_eq!(
            s.insert(sid("a"), vec![]),
            Err(SubscriptionError::NoFilters)
        );
        assert_eq!(
            s.insert(sid("a"), vec![Filter::new(); 3]),
            Err(SubscriptionError::TooManyFilters { given: 3, limit: 2 })
        );
        s.insert(sid("a"), f()).unwrap();
        s.insert(sid("b"), f()).unwrap();
        assert_eq!(
            s.insert(sid("c"), f()),
            Err(SubscriptionError::TooManySubscriptions(2))
        );
        s.insert(sid("a"), f())
            .expect("replacing an open id is fine");
        assert!(s.remove(&sid("a")));
        assert!(!s.remove(&sid("a")));
        s.insert(sid("c"), f()).unwrap();
        assert_eq!(s.len(), 2);
        assert!(SubscriptionError::TooManySubscriptions(2)
            .to_string()
            .starts_with("rate-limited:"));
    }

    #[test]
    fn matching_is_or_of_filters() {
        let mut s = Subscriptions::new(10, 10);
        let e = note(1, vec![Tag::hashtag("grasp")]);
        s.insert(sid("kind7"), vec![Filter::new().kind(Kind::from(7))])
            .unwrap();
        s.insert(
            sid("or"),
            vec![
                Filter::new().kind(Kind::from(7)),
                Filter::new().hashtag("grasp"),
            ],
        )
        .unwrap();
        s.insert(
            sid("and"),
            vec![Filter::new().kind(Kind::from(1)).hashtag("other")],
        )
        .unwrap();
        s.insert(sid("author"), vec![Filter::new().author(e.pubkey)])
            .unwrap();
        let mut got: Vec<String> = s.matching(&e).map(|i| i.to_string()).collect();
        got.sort();
        assert_eq!(got, vec!["author", "or"]);
    }
}
