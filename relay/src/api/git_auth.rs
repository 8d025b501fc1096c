//! The git side of a private GRASP-08 service: grasp-cgi asks `POST /v1/git-auth` before it
//! starts `git http-backend` (so the check holds behind nginx + fcgiwrap too), and the relay
//! answers from the proof in the request's `Authorization` header and the current member list.
//! A public service allows everything. The client of a refused request only sees `401` with
//! `WWW-Authenticate: Nostr` and an empty body, the same for unknown repositories.
//!
//! A data directory that served a private service is marked, in its root and in its git root
//! ([`crate::datadir::DataLayout::private_markers`]): grasp-cgi asks the relay for every request
//! while it sees either (or cannot tell), and the relay refuses to start without `--private` on
//! it (docs/deployment.md: migrating a private service deliberately).

use grasp_state::trust::auth::verify_git_proof;
use grasp_state::contract::hook_api::{GitAuthRequest, GitAuthResponse, HOOK_API_VERSION};
use nostr::prelude::Timestamp;

use crate::grasp::Grasp;

/// The relay's answer to grasp-cgi.
pub async fn answer(grasp: &Grasp, req: &GitAuthRequest) -> GitAuthResponse {
    let (allowed, reason) = decide(grasp, req).await;
    let repo = format!("{}/{}", req.owner, req.identifier);
    if grasp.trust().private {
        tracing::info!(repo, allowed, reason = %reason, "private git request");
    }
    GitAuthResponse { version: HOOK_API_VERSION, allowed, reason }
}

async fn decide(grasp: &Grasp, req: &GitAuthRequest) -> (bool, String) {
    if !grasp.trust().private {
        return (true, "public service".into());
    }
    let Some(owner) = grasp_state::names::identifier::parse_npub(&req.owner) else {
        return (false, "not a repository path".into());
    };
    match verify_git_proof(req.authorization.as_deref(), grasp.public_host(), &owner, &req.identifier, Timestamp::now().as_secs()) {
        // A member, or another replica of this set fetching what it lacks.
        Ok(pk) if grasp.is_member(&pk).await => (true, format!("member {}", grasp_state::names::identifier::npub_of(&pk))),
        Ok(pk) => (false, format!("{} is not a member", grasp_state::names::identifier::npub_of(&pk))),
        Err(e) => (false, e.to_string()),
    }
}
