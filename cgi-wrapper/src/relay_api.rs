//! The calls grasp-cgi makes to the relay's loopback hook API (address and token from
//! `--data-dir`, like the hooks): the repository page's data (`GET /v1/repo/<npub>/<identifier>`)
//! and, on a private service, whether a git request may be served (`POST /v1/git-auth`); a
//! GRASP-06 push to a contributor repository that does not exist yet has it made
//! (`POST /v1/prs-repo`).
//! grasp-cgi never opens the event store itself.
//!
//! Through the one hook API client (`grasp_hooks::client`), bounded by [`ANSWER_TIMEOUT`] and the
//! client's answer size cap.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use grasp_hooks::client::ApiClient;
use grasp_state::contract::hook_api::{
    check_version, GitAuthRequest, GitAuthResponse, PrsRepoRequest, PrsRepoResponse, RepoInfo, HOOK_API_VERSION, PATH_GIT_AUTH,
    PATH_PRS_REPO, PATH_REPO_PREFIX,
};
use grasp_state::names::identifier::percent_encode_segment;

/// Longest wait for one answer of the relay (connect, send, answer).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The page data of `npub`'s `identifier`; `Ok(None)` when the relay has no such repository.
pub fn repo_info(data_dir: &Path, npub: &str, identifier: &str) -> Result<Option<RepoInfo>> {
    let client = ApiClient::from_data_dir(data_dir, ANSWER_TIMEOUT)?;
    let path = format!("{PATH_REPO_PREFIX}{npub}/{}", percent_encode_segment(identifier));
    let info: Option<RepoInfo> = client.get_json(&path)?;
    if let Some(info) = &info {
        check_version(info.version)?;
    }
    Ok(info)
}

/// A private service's verdict on a git request for `npub`'s `identifier` carrying the HTTP
/// `Authorization` header `authorization` (`POST /v1/git-auth`).
pub fn git_auth(data_dir: &Path, npub: &str, identifier: &str, authorization: Option<String>) -> Result<bool> {
    let client = ApiClient::from_data_dir(data_dir, ANSWER_TIMEOUT)?;
    let request = GitAuthRequest { version: HOOK_API_VERSION, owner: npub.to_string(), identifier: identifier.to_string(), authorization };
    let answer: GitAuthResponse = client.post(PATH_GIT_AUTH, &request)?;
    check_version(answer.version)?;
    Ok(answer.allowed)
}

/// Has the relay make the contributor repository `/prs/<npub>/<identifier>.git` (a push to it
/// arrived and it does not exist): `Ok(true)` when this call made it. The error says why not
/// (GRASP-06 off, no room for another repository, low disk).
pub fn create_prs_repo(data_dir: &Path, npub: &str, identifier: &str) -> Result<bool> {
    let client = ApiClient::from_data_dir(data_dir, ANSWER_TIMEOUT)?;
    let request = PrsRepoRequest { version: HOOK_API_VERSION, npub: npub.to_string(), identifier: identifier.to_string() };
    let answer: PrsRepoResponse = client.post(PATH_PRS_REPO, &request)?;
    check_version(answer.version)?;
    Ok(answer.created)
}
