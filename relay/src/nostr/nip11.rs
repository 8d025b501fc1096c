//! The NIP-11 relay information document.

use nostr::prelude::PublicKey;
use serde_json::{json, Value};

use crate::config::{Config, PurgatoryConfig, RelaySyncConfig, ServerConfig, ServicesConfig, TrustConfig};
use crate::trust::Trust;

/// NIPs this relay implements (and 77 unless `--no-negentropy`).
pub const SUPPORTED_NIPS: &[u16] = &[1, 9, 11, 34, 42, 70];

/// The human-readable acceptance criteria required by GRASP, for a purgatory that holds events
/// `purgatory_ttl_secs` seconds. Kept in step with `crate::grasp::acceptance`.
pub fn repo_acceptance_criteria(public_host: &str, purgatory_ttl_secs: u64) -> String {
    let wait = if purgatory_ttl_secs.is_multiple_of(60) {
        format!("{} minutes", purgatory_ttl_secs / 60)
    } else {
        format!("{purgatory_ttl_secs} seconds")
    };
    format!(
        "Git repositories whose NIP-34 announcement (kind 30617) lists this server ({public_host}) \
in both a `clone` URL and a `relays` URL (exact host and port) are accepted; announcements from the \
owner or a maintainer of an accepted announcement with the same identifier are stored even if they \
do not. Accepted too: repository state events (kind 30618) from the owner's recursive maintainer \
set, pull requests for accepted repositories, events that tag (or are tagged by) accepted \
repositories and events, user grasp lists (kind 10317) and deletions (kind 5). New announcements, \
state events and pull requests are held, not served, until their git data is pushed, and dropped \
after {wait} otherwise. Everything else is refused."
    )
}

/// What GRASP-05 adds to the acceptance criteria.
fn archive_criteria(archive: &grasp_state::trust::archive::Archive) -> String {
    let pushes = if archive.writable {
        "take pushes authorised by state events like hosted ones"
    } else {
        "refuse pushes"
    };
    format!(
        " GRASP-05: announcements that do not list this server are accepted too when they belong to the archive \
({}); their repositories follow the servers they list (relay sync and git sync) and {pushes}.",
        archive.summary()
    )
}

/// What GRASP-06 adds to the acceptance criteria.
fn contributor_criteria(public_host: &str) -> String {
    let host = grasp_state::names::host::public_authority(public_host);
    format!(
        " GRASP-06: anyone may push the commits of their own pull requests to \
{host}/prs/<their npub>/<identifier>.git (refs/nostr/<event id> only); a pull request (1618) or \
update (1619) for a repository not announced here is held when its `clone` tag names exactly that \
URL of its signer here, and once its commit is pushed it is also copied into the repositories \
announced here that its `a` tags name."
    )
}

/// GRASP-01 always; GRASP-02 (relay-to-relay sync) when it runs (not with `--no-relay-sync`,
/// nor on a private service without a relay among its `--private-sync-peer`s); GRASP-03 (Sync+)
/// when it runs (with relay sync on a public service, not with `--no-sync-plus`); GRASP-06 with
/// `--grasp06`; GRASP-05 with an archive (`--archive*`); GRASP-08 on a private service.
pub fn supported_grasps(relay_sync: &RelaySyncConfig, trust: &TrustConfig, services: &ServicesConfig) -> Vec<&'static str> {
    let mut grasps = vec!["GRASP-01"];
    if relay_sync.enabled(trust) {
        grasps.push("GRASP-02");
    }
    if relay_sync.sync_plus_enabled(trust) {
        grasps.push("GRASP-03");
    }
    if services.archive().is_active() {
        grasps.push("GRASP-05");
    }
    if services.grasp06 {
        grasps.push("GRASP-06");
    }
    if trust.private {
        grasps.push("GRASP-08");
    }
    grasps
}

/// The document's `repo_acceptance_criteria` for this configuration: GRASP-01's, what GRASP-06
/// and an archive add, or a private service's.
pub fn acceptance_criteria(server: &ServerConfig, purgatory: &PurgatoryConfig, services: &ServicesConfig, trust: &Trust) -> String {
    let criteria = repo_acceptance_criteria(&server.public_host(), purgatory.purgatory_ttl.as_secs());
    if trust.private {
        return format!(
            "A private GRASP-08 service: reading and writing need NIP-42 authentication as a member \
(the operator keeps the member list), and git over HTTP needs a member's `Authorization: Nostr` \
proof. For members: {criteria}"
        );
    }
    criteria
        + &if services.grasp06 { contributor_criteria(&server.public_host()) } else { String::new() }
        + &if services.archive().is_active() { archive_criteria(&services.archive()) } else { String::new() }
}

/// The NIP-11 document for this configuration and these trust settings (the curation summary
/// follows the curation file as it changes). `software` is `--software-url` (this software's
/// project unless the operator names another). `self` is the relay's own key (`relay`,
/// [`crate::identity`]); `pubkey`, NIP-11's administrative contact, is the operator's
/// `--admin-pubkey`, else the relay's key too (as GRASP servers with an identity publish it).
/// The document describes the whole relay, so it reads nearly every section: it takes the whole
/// configuration.
pub fn document(cfg: &Config, trust: &Trust, relay: &PublicKey) -> Value {
    let limits = trust.limits.config;
    let mut doc = json!({
        "name": cfg.pages.name,
        "description": cfg.pages.description,
        "version": env!("CARGO_PKG_VERSION"),
        "supported_nips": SUPPORTED_NIPS.iter().copied().chain(cfg.limits.negentropy_enabled().then_some(77)).collect::<Vec<u16>>(),
        "supported_grasps": supported_grasps(&cfg.relay_sync, &cfg.trust, &cfg.services),
        "repo_acceptance_criteria": acceptance_criteria(&cfg.server, &cfg.purgatory, &cfg.services, trust),
        "limitation": {
            "max_message_length": cfg.limits.max_message_bytes,
            "max_subscriptions": cfg.limits.max_subscriptions,
            "max_filters": cfg.limits.max_filters,
            "max_limit": cfg.limits.max_limit,
            "auth_required": trust.private,
            "payment_required": false,
            "restricted_writes": trust.private,
            "max_event_burst_per_connection": limits.per_connection.burst,
            "max_events_per_second_per_connection": limits.per_connection.per_second,
            "max_event_burst_per_address": limits.per_address.burst,
            "max_events_per_second_per_address": limits.per_address.per_second,
            "max_new_repositories_per_author_per_hour": limits.repos_per_author_per_hour,
            "max_repositories": limits.max_repos,
            "max_push_bytes": cfg.limits.max_push_bytes,
            "max_pr_push_bytes": cfg.limits.max_pr_push_bytes,
            // Kinds with a cap below max_message_length (grasp_state::nostr::event_size), by kind number.
            "max_event_bytes_by_kind": cfg
                .limits.event_sizes()
                .capped_kinds()
                .into_iter()
                .map(|(kind, cap)| (kind.to_string(), json!(cap)))
                .collect::<serde_json::Map<String, Value>>(),
        },
    });
    // The curation in force and the archive's scope (GRASP-05), in one sentence each.
    let curation = trust.curation();
    let archive = cfg.services.archive();
    let scope: Vec<String> = [curation.is_active().then(|| curation.summary()), archive.is_active().then(|| archive.summary())]
        .into_iter()
        .flatten()
        .collect();
    if !scope.is_empty() {
        doc["curation"] = Value::String(scope.join(". "));
    }
    doc["software"] = Value::String(cfg.pages.software_url.clone());
    doc["self"] = Value::String(relay.to_hex());
    doc["pubkey"] = Value::String(cfg.pages.admin_pubkey.as_ref().unwrap_or(relay).to_hex());
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay's key in these tests.
    const RELAY_HEX: &str = "c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5";

    fn relay_key() -> PublicKey {
        PublicKey::from_hex(RELAY_HEX).unwrap()
    }

    /// The document of a relay whose key is [`RELAY_HEX`].
    fn document(cfg: &Config, trust: &Trust) -> Value {
        super::document(cfg, trust, &relay_key())
    }

    #[test]
    fn an_archive_is_listed_and_its_scope_stated_in_curation() {
        let mut cfg = Config::defaults();
        assert!(document(&cfg, &Trust::default()).get("curation").is_none());
        cfg.services.archive_all = true;
        let doc = document(&cfg, &Trust::default());
        assert_eq!(doc["supported_grasps"], json!(["GRASP-01", "GRASP-02", "GRASP-03", "GRASP-05"]));
        assert!(doc["curation"].as_str().unwrap().starts_with("Read-only archive (GRASP-05) of every repository"), "{doc}");
        assert!(doc["repo_acceptance_criteria"].as_str().unwrap().contains("GRASP-05"));
    }

    #[test]
    fn grasp06_is_listed_and_explained_only_when_on() {
        let mut cfg = Config::defaults();
        cfg.services.grasp06 = true;
        let doc = document(&cfg, &Trust::default());
        assert_eq!(doc["supported_grasps"], json!(["GRASP-01", "GRASP-02", "GRASP-03", "GRASP-06"]));
        let criteria = doc["repo_acceptance_criteria"].as_str().unwrap();
        assert!(criteria.contains("127.0.0.1:8080/prs/<their npub>/<identifier>.git"), "{criteria}");
        cfg.services.grasp06 = false;
        let doc = document(&cfg, &Trust::default());
        assert!(!doc["repo_acceptance_criteria"].as_str().unwrap().contains("GRASP-06"));
    }

    #[test]
    fn has_required_fields_and_no_curation() {
        let cfg = Config::defaults();
        let doc = document(&cfg, &Trust::default());
        assert_eq!(doc["supported_grasps"], json!(["GRASP-01", "GRASP-02", "GRASP-03"]));
        let mut off = cfg.clone();
        off.relay_sync.no_sync_plus = true;
        assert_eq!(document(&off, &Trust::default())["supported_grasps"], json!(["GRASP-01", "GRASP-02"]), "--no-sync-plus");
        assert_eq!(doc["supported_nips"], json!([1, 9, 11, 34, 42, 70, 77]));
        assert_eq!(doc["limitation"]["max_event_burst_per_connection"], json!(500));
        assert_eq!(doc["limitation"]["auth_required"], json!(false));
        let criteria = doc["repo_acceptance_criteria"].as_str().unwrap();
        assert!(criteria.contains("30617") && criteria.contains("127.0.0.1:8080"), "{criteria}");
        assert!(criteria.contains("30 minutes"), "{criteria}");
        assert_eq!(doc["limitation"]["max_subscriptions"], json!(32));
        assert_eq!(doc["limitation"]["max_push_bytes"], json!(1u64 << 30));
        assert_eq!(doc["limitation"]["max_pr_push_bytes"], json!(100u64 << 20));
        assert_eq!(doc["limitation"]["max_event_bytes_by_kind"]["5"], json!(16 * 1024));
        assert_eq!(doc["limitation"]["max_event_bytes_by_kind"]["30618"], json!(256 * 1024));
        assert!(doc["limitation"]["max_event_bytes_by_kind"].get("1621").is_none());
        assert!(doc.get("curation").is_none());
        // The relay's own key: `self`, and `pubkey` while no operator is named.
        assert_eq!(doc["self"], json!(RELAY_HEX));
        assert_eq!(doc["pubkey"], json!(RELAY_HEX));
        // NIP-11 `software` identifies this software unless the operator names another URL.
        assert_eq!(doc["software"], json!(crate::config::DEFAULT_SOFTWARE_URL));
        assert!(crate::config::DEFAULT_SOFTWARE_URL.starts_with("https://"));
    }

    #[test]
    fn pubkey_is_the_operators_and_self_the_relays() {
        let mut cfg = Config::defaults();
        let hex = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        cfg.pages.admin_pubkey = Some(::nostr::prelude::PublicKey::from_hex(hex).unwrap());
        let doc = document(&cfg, &Trust::default());
        assert_eq!(doc["pubkey"], json!(hex));
        assert_eq!(doc["self"], json!(RELAY_HEX));
    }

    #[test]
    fn software_is_the_configured_url() {
        use clap::Parser;
        let cfg = Config::parse_from(["grasp-relay", "--software-url", "https://git.example.com/grasp-relay"]);
        assert_eq!(document(&cfg, &Trust::default())["software"], json!("https://git.example.com/grasp-relay"));
        assert!(Config::try_parse_from(["grasp-relay", "--software-url", "grasp-relay"]).is_err());
        assert!(Config::try_parse_from(["grasp-relay", "--software-url", "ftp://example.com/x"]).is_err());
    }

    #[test]
    fn nip77_is_listed_only_when_served() {
        let mut cfg = Config::defaults();
        cfg.limits.no_negentropy = true;
        assert_eq!(document(&cfg, &Trust::default())["supported_nips"], json!([1, 9, 11, 34, 42, 70]));
    }

    /// The trust of a `[trust]` section, the other sections at their defaults.
    fn trust_of(section: &crate::config::TrustConfig) -> Trust {
        Trust::from_sections(section, &crate::config::LimitsConfig::default(), &crate::config::StorageConfig::default(), None, "/nonexistent".into()).unwrap()
    }

    #[test]
    fn private_service_and_curation_are_advertised() {
        use clap::Parser;
        let cfg = Config::parse_from(["grasp-relay", "--private", "--deny-repo", "spam"]);
        let trust = trust_of(&cfg.trust);
        let doc = document(&cfg, &trust);
        assert_eq!(doc["supported_grasps"], json!(["GRASP-01", "GRASP-08"]));
        assert_eq!(doc["limitation"]["auth_required"], json!(true));
        assert!(doc["repo_acceptance_criteria"].as_str().unwrap().contains("member"));
        assert!(doc["curation"].as_str().unwrap().contains("1 repository patterns"));
    }

    #[test]
    fn grasp_02_is_listed_only_when_relay_sync_runs() {
        let mut cfg = Config::defaults();
        cfg.relay_sync.no_relay_sync = true;
        assert_eq!(document(&cfg, &Trust::default())["supported_grasps"], json!(["GRASP-01"]));
    }

    #[test]
    fn a_private_service_with_relay_peers_lists_grasp_02() {
        use clap::Parser;
        let cfg = Config::parse_from(["grasp-relay", "--private", "--private-sync-peer", "wss://peer.example.com,git.example.com"]);
        let trust = trust_of(&cfg.trust);
        assert_eq!(document(&cfg, &trust)["supported_grasps"], json!(["GRASP-01", "GRASP-02", "GRASP-08"]));
        let cfg = Config::parse_from(["grasp-relay", "--private", "--private-sync-peer", "git.example.com"]);
        let trust = trust_of(&cfg.trust);
        assert_eq!(document(&cfg, &trust)["supported_grasps"], json!(["GRASP-01", "GRASP-08"]), "no relay among the peers: no relay sync");
    }

    #[test]
    fn criteria_name_the_purgatory_wait() {
        assert!(repo_acceptance_criteria("h", 90).contains("after 90 seconds"));
        assert!(repo_acceptance_criteria("h", 120).contains("after 2 minutes"));
    }
}
