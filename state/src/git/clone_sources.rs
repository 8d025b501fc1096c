//! Which clone URLs one background git sync attempt tries, and in which order.
//!
//! Clone URLs come from signed events anyone can publish: a stranger's announcement of the same
//! identifier, or a held pull request, may list thousands of them, slow or hanging on purpose.
//! So an attempt does not take them as they come (docs/protocol.md#background-sync):
//! - sources are tried by trust: announcements by the owners waiting for data and their
//!   maintainer sets first, then the GRASP servers in those people's latest user grasp lists
//!   (kind 10317, [`grasp_server_repo_url`]), then other owners' announcements of the
//!   identifier, then the `clone` tags of held pull requests;
//! - within one trust level, sources take turns (the first URL of each, then the second of
//!   each, ...), so one long list cannot push the others out;
//! - each source gives at most [`UrlLimits::per_source`] URLs and an attempt tries at most
//!   [`UrlLimits::per_attempt`], each URL once.

use std::collections::HashSet;

/// How far the publisher of a clone URL is trusted; lower is tried first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceTrust {
    /// A replica of this service the operator named (`--replica`): it holds everything this
    /// server should.
    Replica,
    /// An announcement by an owner whose repository waits for data, or by someone in that
    /// owner's maintainer set.
    Maintainers,
    /// The user grasp list (kind 10317) of such an owner or maintainer: the owner's repository
    /// on each GRASP server listed.
    GraspList,
    /// Another owner's announcement of the same identifier.
    OtherOwner,
    /// The `clone` tag of a held pull request.
    PullRequest,
}

/// The clone URLs of one event (an announcement or a pull request), as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneSource {
    pub trust: SourceTrust,
    pub urls: Vec<String>,
}

impl CloneSource {
    pub fn new(trust: SourceTrust, urls: Vec<String>) -> CloneSource {
        CloneSource { trust, urls }
    }
}

/// Default of [`UrlLimits::per_source`] (like the relays taken from one announcement).
pub const URLS_PER_SOURCE: usize = 10;
/// Default of [`UrlLimits::per_attempt`].
pub const URLS_PER_ATTEMPT: usize = 20;

/// Caps on the clone URLs of one sync attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlLimits {
    /// Distinct URLs taken from one source (its first ones).
    pub per_source: usize,
    /// URLs one attempt tries at most.
    pub per_attempt: usize,
}

impl Default for UrlLimits {
    fn default() -> Self {
        UrlLimits {
            per_source: URLS_PER_SOURCE,
            per_attempt: URLS_PER_ATTEMPT,
        }
    }
}

/// The URLs one sync attempt tries, in order (see the module doc): by trust, sources taking
/// turns within a trust level, capped per source and per attempt, each (trimmed, non-empty) URL
/// once. Sources of equal trust keep their given order.
pub fn plan_sync_urls(sources: &[CloneSource], limits: UrlLimits) -> Vec<String> {
    let mut by_trust: Vec<&CloneSource> = sources.iter().collect();
    by_trust.sort_by_key(|source| source.trust); // stable: equal trust keeps its order
    let mut planned: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut level = 0;
    while level < by_trust.len() && planned.len() < limits.per_attempt {
        let trust = by_trust[level].trust;
        let end = by_trust[level..]
            .iter()
            .position(|source| source.trust != trust)
            .map_or(by_trust.len(), |n| level + n);
        let heads: Vec<Vec<&str>> = by_trust[level..end]
            .iter()
            .map(|source| first_distinct(&source.urls, limits.per_source))
            .collect();
        'turns: for turn in 0..limits.per_source {
            for head in &heads {
                if planned.len() >= limits.per_attempt {
                    break 'turns;
                }
                if let Some(url) = head.get(turn) {
                    if seen.insert(url) {
                        planned.push((*url).to_string());
                    }
                }
            }
        }
        level = end;
    }
    planned
}

/// The URL of `owner`'s repository `identifier` on the GRASP server `server`, as a user grasp
/// list (kind 10317) names it: a WebSocket URL (`wss://host[:port]`, the relay of the server; its
/// git is `https://host[:port]`, `ws://` gives `http://`) or an `http(s)://` base URL; a trailing
/// `/` is tolerated. `None` for anything else (another scheme, credentials, a query or fragment).
pub fn grasp_server_repo_url(server: &str, owner: &nostr::prelude::PublicKey, identifier: &str) -> Option<String> {
    let server = server.trim().trim_end_matches('/');
    let (scheme, rest) = server.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "wss" | "https" => "https",
        "ws" | "http" => "http",
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['@', '?', '#', ' ']) {
        return None;
    }
    Some(format!(
        "{scheme}://{rest}/{}/{}.git",
        crate::names::identifier::npub_of(owner),
        crate::names::identifier::percent_encode_segment(identifier)
    ))
}

/// The first `cap` distinct trimmed non-empty URLs of one source.
fn first_distinct(urls: &[String], cap: usize) -> Vec<&str> {
    let mut seen = HashSet::new();
    urls.iter()
        .map(|url| url.trim())
        .filter(|url| !url.is_empty() && seen.insert(*url))
        .take(cap)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn source(trust: SourceTrust, urls: &[&str]) -> CloneSource {
        CloneSource::new(trust, urls.iter().map(|u| u.to_string()).collect())
    }

    #[test]
    fn grasp_list_servers_name_the_owners_repository_there() {
        let owner = nostr::prelude::Keys::generate().public_key();
        let npub = crate::names::identifier::npub_of(&owner);
        assert_eq!(grasp_server_repo_url("wss://relay.ngit.dev", &owner, "my repo"), Some(format!("https://relay.ngit.dev/{npub}/my%20repo.git")));
        assert_eq!(grasp_server_repo_url("ws://127.0.0.1:8080/", &owner, "r"), Some(format!("http://127.0.0.1:8080/{npub}/r.git")));
        assert_eq!(grasp_server_repo_url("https://git.example.com", &owner, "r"), Some(format!("https://git.example.com/{npub}/r.git")));
        for bad in ["ftp://x", "wss://", "git.example.com", "wss://u:p@x", "wss://x?y", "file:///etc"] {
            assert_eq!(grasp_server_repo_url(bad, &owner, "r"), None, "{bad}");
        }
        // A grasp list comes after the clone URLs of the trusted announcements, before strangers'.
        let sources = [
            source(SourceTrust::OtherOwner, &["https://stranger/1"]),
            source(SourceTrust::GraspList, &["https://listed/x"]),
            source(SourceTrust::Maintainers, &["https://owner/x"]),
        ];
        assert_eq!(plan_sync_urls(&sources, UrlLimits::default()), ["https://owner/x", "https://listed/x", "https://stranger/1"]);
    }

    #[test]
    fn maintainers_first_then_other_owners_then_pull_requests_taking_turns() {
        let sources = [
            source(SourceTrust::PullRequest, &["https://fork/x", "https://owner/x"]),
            source(SourceTrust::OtherOwner, &["https://stranger/1", "https://stranger/2"]),
            source(SourceTrust::Maintainers, &["https://owner/x", " ", "https://owner2/x"]),
            source(SourceTrust::Maintainers, &["https://maint/x"]),
        ];
        assert_eq!(
            plan_sync_urls(&sources, UrlLimits::default()),
            [
                "https://owner/x",
                "https://maint/x",
                "https://owner2/x",
                "https://stranger/1",
                "https://stranger/2",
                "https://fork/x",
            ]
        );
        assert!(plan_sync_urls(&[], UrlLimits::default()).is_empty());
    }

    #[test]
    fn a_stranger_with_thousands_of_urls_neither_comes_first_nor_fills_the_attempt() {
        let flood: Vec<String> = (0..4000).map(|i| format!("https://slow{i}.example/x")).collect();
        let pr_flood: Vec<String> = (0..4000).map(|i| format!("https://pr{i}.example/x")).collect();
        let sources = [
            CloneSource::new(SourceTrust::OtherOwner, flood.clone()),
            CloneSource::new(SourceTrust::PullRequest, pr_flood),
            CloneSource::new(SourceTrust::Maintainers, flood[..3].to_vec()),
            source(SourceTrust::Maintainers, &["https://owner/x"]),
        ];
        let planned = plan_sync_urls(&sources, UrlLimits::default());
        assert_eq!(planned.len(), URLS_PER_ATTEMPT);
        assert_eq!(
            planned[..4],
            ["https://slow0.example/x", "https://owner/x", "https://slow1.example/x", "https://slow2.example/x"]
        );
        // The stranger gives its first ten (three already planned), the pull request the rest.
        assert_eq!(planned[4..11], flood[3..10]);
        assert!(planned[11..].iter().all(|u| u.starts_with("https://pr")));
    }

    fn arb_trust() -> impl Strategy<Value = SourceTrust> {
        prop_oneof![
            Just(SourceTrust::Maintainers),
            Just(SourceTrust::GraspList),
            Just(SourceTrust::OtherOwner),
            Just(SourceTrust::PullRequest)
        ]
    }

    /// Sources whose URLs are unique to them (`s<source>-<n>`, possibly repeated inside the
    /// source, plus blanks), so every planned URL names its source.
    fn arb_sources() -> impl Strategy<Value = Vec<CloneSource>> {
        prop::collection::vec((arb_trust(), prop::collection::vec(0..40usize, 0..60)), 0..30).prop_map(
            |sources| {
                sources
                    .into_iter()
                    .enumerate()
                    .map(|(i, (trust, ns))| {
                        let urls = ns
                            .into_iter()
                            .map(|n| if n == 0 { " ".to_string() } else { format!("s{i}-{n}") })
                            .collect();
                        CloneSource::new(trust, urls)
                    })
                    .collect()
            },
        )
    }

    fn source_of(url: &str) -> usize {
        url[1..url.find('-').unwrap()].parse().unwrap()
    }

    proptest! {
        #[test]
        fn plans_are_capped_distinct_and_ordered_by_trust(
            sources in arb_sources(),
            per_source in 0..12usize,
            per_attempt in 0..40usize,
        ) {
            let limits = UrlLimits { per_source, per_attempt };
            let planned = plan_sync_urls(&sources, limits);
            prop_assert!(planned.len() <= per_attempt);
            let distinct: HashSet<&String> = planned.iter().collect();
            prop_assert_eq!(distinct.len(), planned.len());
            for (i, source) in sources.iter().enumerate() {
                let taken = planned.iter().filter(|u| source_of(u) == i).count();
                prop_assert!(taken <= per_source);
                // Only the source's first `per_source` distinct URLs are ever taken.
                let first = first_distinct(&source.urls, per_source);
                prop_assert!(planned.iter().filter(|u| source_of(u) == i).all(|u| first.contains(&u.as_str())));
            }
            let trusts: Vec<SourceTrust> = planned.iter().map(|u| sources[source_of(u)].trust).collect();
            prop_assert!(trusts.windows(2).all(|w| w[0] <= w[1]), "{:?}", trusts);
            // Everything there is to take is taken, up to the attempt cap.
            let available: usize = sources.iter().map(|s| first_distinct(&s.urls, per_source).len()).sum();
            prop_assert_eq!(planned.len(), available.min(per_attempt));
            // Turns: every most trusted source with a URL gets one in, if the attempt has room.
            let Some(top) = sources.iter().filter(|s| s.urls.iter().any(|u| !u.trim().is_empty())).map(|s| s.trust).min() else {
                return Ok(());
            };
            let heads: Vec<usize> = sources.iter().enumerate()
                .filter(|(_, s)| s.trust == top && s.urls.iter().any(|u| !u.trim().is_empty()))
                .map(|(i, _)| i)
                .collect();
            if per_source > 0 && heads.len() <= per_attempt {
                for i in heads {
                    prop_assert!(planned.iter().any(|u| source_of(u) == i), "source {} left out", i);
                }
            }
        }
    }
}
