//! The NIP-11 relay information document.

use serde_json::{json, Value};

use crate::config::Config;

/// Where the software lives (placeholder until the project has a public home).
pub const SOFTWARE_URL: &str = "https://example.invalid/grasp-relay";

/// NIPs this relay implements.
pub const SUPPORTED_NIPS: &[u16] = &[1, 9, 11, 34];

/// The human-readable acceptance criteria required by GRASP.
pub const REPO_ACCEPTANCE_CRITERIA: &str =
    "Repositories whose NIP-34 announcement (kind 30617) lists this \
server in both its `clone` and `relays` tags are accepted. State, patch, PR and issue events about \
accepted repositories are stored; new announcements, state events and PRs are held until their git \
data has been pushed, and discarded after 30 minutes otherwise.";

/// The NIP-11 document for this configuration.
pub fn document(cfg: &Config) -> Value {
    let mut doc = json!({
        "name": cfg.name,
        "description": cfg.description,
        "software": SOFTWARE_URL,
        "version": env!("CARGO_PKG_VERSION"),
        "supported_nips": SUPPORTED_NIPS,
        "supported_grasps": ["GRASP-01"],
        "repo_acceptance_criteria": REPO_ACCEPTANCE_CRITERIA,
        "limitation": {
            "max_message_length": cfg.max_message_bytes,
            "max_subscriptions": cfg.max_subscriptions,
            "max_filters": cfg.max_filters,
            "max_limit": cfg.max_limit,
            "auth_required": false,
            "payment_required": false,
        },
    });
    if let Some(pk) = &cfg.admin_pubkey {
        doc["pubkey"] = Value::String(pk.to_hex());
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_required_fields_and_no_curation() {
        let cfg = Config::for_tests("/tmp/x".into());
        let doc = document(&cfg);
        assert_eq!(doc["supported_grasps"], json!(["GRASP-01"]));
        assert_eq!(doc["supported_nips"], json!([1, 9, 11, 34]));
        assert!(doc["repo_acceptance_criteria"].as_str().unwrap().len() > 20);
        assert_eq!(doc["limitation"]["max_subscriptions"], json!(32));
        assert!(doc.get("curation").is_none());
        assert!(doc.get("pubkey").is_none());
    }
}
