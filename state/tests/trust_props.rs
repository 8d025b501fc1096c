//! Property tests (proptest) for the trust decisions (docs/protocol.md#trust).
//!
//! - `auth::verify_auth` accepts exactly when kind, challenge, relay URL and clock all agree, and
//!   never panics on arbitrary tags.
//! - `auth::verify_git_proof` never panics on arbitrary headers.
//! - `rate::TokenBucket` never grants more than its burst plus what the elapsed time refills, and
//!   the wait it names is enough; `rate::KeyedBuckets` never remembers more keys than its cap.
//! - `curation::Curation::parse` never panics; repository patterns round-trip through text.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use grasp_state::trust::auth::{verify_auth, verify_git_proof, AUTH_MAX_SKEW_SECS, KIND_AUTH};
use grasp_state::trust::curation::{Curation, RepoPattern};
use grasp_state::trust::rate::{KeyedBuckets, Limited, Rate, TokenBucket};
use nostr::prelude::*;
use proptest::prelude::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(Keys::generate)
}

const HOST: &str = "git.example.com";
const NOW: u64 = 1_700_000_000;

fn auth_event(kind: u16, tags: Vec<Vec<String>>, at: u64) -> Event {
    let tags: Vec<Tag> = tags.into_iter().filter_map(|t| Tag::parse(t).ok()).collect();
    EventBuilder::new(Kind::Custom(kind), "")
        .tags(tags)
        .custom_created_at(Timestamp::from_secs(at))
        .finalize(keys())
        .unwrap()
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn auth_accepts_exactly_when_everything_agrees(
        right_kind in any::<bool>(),
        challenge in "[a-z0-9]{0,8}",
        sent_challenge in "[a-z0-9]{1,8}",
        relay in prop_oneof![
            Just("wss://git.example.com/".to_string()),
            Just("ws://GIT.example.com".to_string()),
            Just("wss://git.example.com.evil.net/".to_string()),
            Just("wss://other.example.com/".to_string()),
            "[a-z:/.]{0,20}",
        ],
        skew in -1200i64..1200,
    ) {
        let kind = if right_kind { KIND_AUTH } else { 1 };
        let at = (NOW as i64 + skew) as u64;
        let ev = auth_event(kind, vec![vec!["relay".into(), relay.clone()], vec!["challenge".into(), challenge.clone()]], at);
        let expected = right_kind
            && challenge == sent_challenge
            && grasp_state::nostr::nip34::url_names_host(&relay, &["ws", "wss"], HOST)
            && skew.unsigned_abs() <= AUTH_MAX_SKEW_SECS;
        let verdict = verify_auth(&ev, &sent_challenge, HOST, NOW);
        prop_assert_eq!(verdict.is_ok(), expected, "{:?}", verdict);
        if let Ok(pk) = verdict {
            prop_assert_eq!(pk, keys().public_key());
        }
    }

    #[test]
    fn auth_never_panics_on_arbitrary_tags(tags in prop::collection::vec(prop::collection::vec(".{0,12}", 0..4), 0..6)) {
        let ev = auth_event(KIND_AUTH, tags, NOW);
        let _ = verify_auth(&ev, "c", HOST, NOW);
    }

    #[test]
    fn git_proofs_never_panic(header in ".{0,200}") {
        let owner = keys().public_key();
        let _ = verify_git_proof(Some(&header), HOST, &owner, "repo", NOW);
        let _ = verify_git_proof(Some(&format!("Nostr {header}")), HOST, &owner, "repo", NOW);
    }

    #[test]
    fn a_bucket_grants_at_most_burst_plus_refill(
        burst in 0u32..20,
        per_second in 0.0f64..50.0,
        steps in prop::collection::vec(0u64..300, 1..80),
    ) {
        let t0 = Instant::now();
        let rate = Rate { burst, per_second };
        let mut bucket = TokenBucket::new(rate, t0);
        let mut now = t0;
        let mut granted = 0u64;
        for ms in steps {
            now += Duration::from_millis(ms);
            match bucket.try_take(now) {
                Ok(()) => granted += 1,
                Err(wait) => {
                    // The named wait is enough (when the bucket can refill at all).
                    if wait != Duration::MAX {
                        let mut probe = bucket.clone();
                        prop_assert!(probe.try_take(now + wait + Duration::from_millis(1)).is_ok());
                    }
                }
            }
            prop_assert!(bucket.available(now) <= burst);
            let elapsed = (now - t0).as_secs_f64();
            prop_assert!(granted as f64 <= burst as f64 + per_second * elapsed + 1e-6, "granted {} burst {} rate {} elapsed {}", granted, burst, per_second, elapsed);
        }
    }

    #[test]
    fn keyed_buckets_stay_bounded(keys in prop::collection::vec(0u16..500, 1..300), cap in 1usize..50) {
        let t0 = Instant::now();
        let mut b = KeyedBuckets::new(Rate { burst: 2, per_second: 1.0 }, cap);
        let mut seen = std::collections::HashSet::new();
        for (i, k) in keys.iter().enumerate() {
            let r = b.try_take(k, t0 + Duration::from_millis(i as u64 * 7));
            prop_assert!(matches!(r, Ok(()) | Err(Limited::Empty(_))));
            // A full table never refuses a new key: it forgets the fullest buckets instead.
            if seen.insert(*k) {
                prop_assert_eq!(r, Ok(()));
            }
            prop_assert!(b.len() <= cap);
        }
    }

    #[test]
    fn curation_parse_never_panics(text in ".{0,300}") {
        let _ = Curation::parse(&text);
    }

    #[test]
    fn repo_patterns_round_trip(identifier in "[a-zA-Z0-9_-][a-zA-Z0-9_. -]{0,20}", which in 0u8..3) {
        let owner = keys().public_key();
        let pattern = match which {
            0 => RepoPattern::Owner(owner),
            1 => RepoPattern::Repo(owner, identifier.trim().to_string()),
            _ => RepoPattern::Identifier(identifier.trim().to_string()),
        };
        let parsed = pattern.to_string().parse::<RepoPattern>();
        prop_assert_eq!(parsed, Ok(pattern));
    }
}
