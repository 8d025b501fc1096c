//! Wire types of the relay's internal hook API (JSON over HTTP on loopback).
//!
//! `grasp-pre-receive` POSTs a [`PreReceiveRequest`] to [`PATH_PRE_RECEIVE`] and
//! gets a [`PreReceiveResponse`]; `grasp-post-receive` POSTs a
//! [`PostReceiveRequest`] to [`PATH_POST_RECEIVE`] and gets a
//! [`PostReceiveResponse`]. Every request carries the API token in the
//! [`TOKEN_HEADER`] header. Failures come back as [`ApiError`].
//!
//! Every message carries `version` ([`HOOK_API_VERSION`]). Unknown fields are
//! ignored so that additions stay compatible; a peer speaking another version
//! is detected with [`check_version`] and should fail closed with its message.

use serde::{Deserialize, Serialize};

use crate::names::identifier::RepoSpace;
use crate::names::refs::RefUpdate;

/// Version of this API. Bump on incompatible changes.
pub const HOOK_API_VERSION: u32 = 1;
/// Endpoint the pre-receive hook calls.
pub const PATH_PRE_RECEIVE: &str = "/v1/pre-receive";
/// Endpoint the post-receive hook calls.
pub const PATH_POST_RECEIVE: &str = "/v1/post-receive";
/// Header carrying the API token.
pub const TOKEN_HEADER: &str = "x-grasp-token";

/// The other side speaks a different API version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hook API version mismatch: got {found}, this program speaks {HOOK_API_VERSION}: install the same grasp-relay version for the relay and its git hooks")]
pub struct VersionMismatch {
    pub found: u32,
}

/// `Ok` when `found` is [`HOOK_API_VERSION`].
pub fn check_version(found: u32) -> Result<(), VersionMismatch> {
    if found == HOOK_API_VERSION {
        Ok(())
    } else {
        Err(VersionMismatch { found })
    }
}

/// What both hooks send: the repository and the ref updates of the push, as git gave them on
/// stdin. pre-receive asks whether the push may proceed ([`PreReceiveRequest`]); post-receive
/// reports the updates git applied ([`PostReceiveRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRequest {
    pub version: u32,
    /// Repository owner as npub (from the repository path).
    pub owner: String,
    /// Repository identifier (from the repository path).
    pub identifier: String,
    /// The push, as git gave it on stdin.
    pub updates: Vec<RefUpdate>,
    /// A repository announced here (absent), or a GRASP-06 contributor repository
    /// (`"prs"`: `/prs/<owner>/<identifier>.git`, `owner` the contributor).
    #[serde(default, skip_serializing_if = "RepoSpace::is_hosted")]
    pub space: RepoSpace,
    /// The pusher's address, as the web server told git (CGI `REMOTE_ADDR`); absent when
    /// unknown (older hooks). Counts the push's git-first placeholders against its address's
    /// share (docs/protocol.md#caps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Bytes of objects this push brings (its quarantine, as measured for `--max-push-bytes`;
    /// pre-receive only). A push reserving git-first placeholders counts them as unsigned data
    /// of its address (docs/protocol.md#caps); absent (older hooks): 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub incoming_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl HookRequest {
    pub fn new(
        owner: impl Into<String>,
        identifier: impl Into<String>,
        updates: Vec<RefUpdate>,
    ) -> Self {
        Self {
            version: HOOK_API_VERSION,
            owner: owner.into(),
            identifier: identifier.into(),
            updates,
            space: RepoSpace::Hosted,
            client: None,
            incoming_bytes: 0,
        }
    }

    /// The same request for a repository of `space`.
    pub fn in_space(self, space: RepoSpace) -> Self {
        Self { space, ..self }
    }

    /// The same request from the pusher at `client` (CGI `REMOTE_ADDR`).
    pub fn from_client(self, client: Option<String>) -> Self {
        Self { client, ..self }
    }

    /// The same request for a push bringing `incoming_bytes` of objects.
    pub fn bringing(self, incoming_bytes: u64) -> Self {
        Self { incoming_bytes, ..self }
    }
}

/// Asks whether a push may proceed (sent to [`PATH_PRE_RECEIVE`]).
pub type PreReceiveRequest = HookRequest;
/// Reports the ref updates git applied (sent to [`PATH_POST_RECEIVE`]).
pub type PostReceiveRequest = HookRequest;

/// The verdict; `messages` are printed to the pusher as `remote: ...` lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreReceiveResponse {
    pub version: u32,
    pub accepted: bool,
    #[serde(default)]
    pub messages: Vec<String>,
}

impl PreReceiveResponse {
    pub fn accept(messages: Vec<String>) -> Self {
        Self {
            version: HOOK_API_VERSION,
            accepted: true,
            messages,
        }
    }

    pub fn reject(messages: Vec<String>) -> Self {
        Self {
            version: HOOK_API_VERSION,
            accepted: false,
            messages,
        }
    }
}

/// One event released from purgatory by the push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedEvent {
    /// Event id, hex.
    pub id: String,
    pub kind: u16,
    /// One human line, e.g. `state: main -> abc1234`.
    pub summary: String,
}

/// What the relay did after the push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostReceiveResponse {
    pub version: u32,
    #[serde(default)]
    pub released: Vec<ReleasedEvent>,
    #[serde(default)]
    pub messages: Vec<String>,
}

impl PostReceiveResponse {
    pub fn new(released: Vec<ReleasedEvent>, messages: Vec<String>) -> Self {
        Self {
            version: HOOK_API_VERSION,
            released,
            messages,
        }
    }

    /// The lines the pusher is shown (as `remote:` lines): the messages, then one line per
    /// released event. The `post-receive` hook prints them; the relay's listener, which does
    /// the hook's work itself for a push it runs, puts them in git's answer.
    pub fn lines(&self) -> Vec<String> {
        let released = self.released.iter().map(|ev| format!("grasp: released {} (kind {}): {}", ev.id, ev.kind, ev.summary));
        self.messages.iter().cloned().chain(released).collect()
    }
}

/// Operator listing of every repository directory (`GET`, same token): [`RepoListing`].
pub const PATH_REPOS: &str = "/v1/repos";
/// Removes orphans the listing found (`POST` a [`PurgeRequest`], same token): [`PurgeResponse`].
pub const PATH_REPOS_PURGE: &str = "/v1/repos/purge";
/// One repository's page data (`GET <prefix><npub>/<percent-encoded identifier>`, same token):
/// [`RepoInfo`]. Read-only; `grasp-cgi` renders the repository page from it.
pub const PATH_REPO_PREFIX: &str = "/v1/repo/";

/// The authorization-integrity pass (docs/protocol.md#maintainer-authority): `GET` reports what
/// it would change (a dry run), `POST` an [`AuthorityRequest`] carries it out; both answer an
/// [`AuthorityReport`] (same token).
pub const PATH_AUTHORITY: &str = "/v1/authority";

/// `POST` [`PATH_AUTHORITY`]: carry the pass out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityRequest {
    pub version: u32,
}

/// One repository whose served refs are not those of the newest state of its confirmed
/// maintainers (the earlier, non-reciprocal rule let someone else's state move them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityFinding {
    /// `<npub>/<identifier>`.
    pub repo: String,
    /// The authoritative state the refs are (to be) aligned to, as hex id, and its author's npub.
    pub state: String,
    pub author: String,
    /// The ref changes, one line each (`refs/heads/main <old> -> <new>`, `refs/tags/x deleted`).
    pub changes: Vec<String>,
    /// Carried out (a `POST`), or only found (`GET`, or the repository was busy).
    pub applied: bool,
}

/// What the pass found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityReport {
    pub version: u32,
    /// Repositories checked.
    pub checked: usize,
    /// Repositories whose refs are not their confirmed maintainers' newest state.
    pub findings: Vec<AuthorityFinding>,
}

/// Why a repository directory exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoStatus {
    /// A stored announcement justifies it: it is served.
    Served,
    /// Only an announcement waiting in the purgatory justifies it.
    Held,
    /// Nothing stored or held justifies it (e.g. left by a crash or by a removed event).
    Orphaned,
    /// A GRASP-06 contributor repository (`prs/<npub>/<identifier>.git`): its `refs/nostr/`
    /// refs justify it, and the relay removes it itself once it has none.
    Contributions,
}

/// One ref of a repository's latest state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefView {
    pub name: String,
    pub oid: String,
}

/// What the repository page shows. Every URL in it is built from the relay's configured public
/// host, never from a request's `Host` header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoInfo {
    pub version: u32,
    pub npub: String,
    pub identifier: String,
    pub status: RepoStatus,
    /// `name` tag of the announcement (as published: escape before display).
    #[serde(default)]
    pub name: Option<String>,
    /// `description` tag of the announcement (as published: escape before display).
    #[serde(default)]
    pub description: Option<String>,
    /// The confirmed maintainers (docs/protocol.md#maintainer-authority) as npubs: the owner
    /// first when confirmed, then the others in key order.
    #[serde(default)]
    pub maintainers: Vec<String>,
    /// Listed by a confirmed maintainer but not (yet) confirmed: invited, as npubs.
    #[serde(default)]
    pub invited: Vec<String>,
    /// `http(s)://<public host>/<npub>/<identifier>.git`.
    pub http_clone_url: String,
    /// `nostr://<npub>/<public host>/<identifier>`, for git-remote-nostr (ngit).
    pub nostr_clone_url: String,
    /// The announcement's coordinate as NIP-19 `naddr` (with this relay as hint).
    pub naddr: String,
    /// A web client's page for the repository (issues, patches, pull requests).
    pub web_client_url: String,
    /// `web` tags of the announcement (as published).
    #[serde(default)]
    pub web: Vec<String>,
    /// Branch `HEAD` names in the latest state (`refs/heads/...`), if any.
    #[serde(default)]
    pub default_branch: Option<String>,
    /// Branches and tags of the latest stored state, sorted by name.
    #[serde(default)]
    pub refs: Vec<RefView>,
    /// `created_at` (Unix seconds) of that state; `None` when no state is stored.
    #[serde(default)]
    pub state_created_at: Option<u64>,
}

/// One repository directory under the git root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoEntry {
    /// Owner as npub.
    pub owner: String,
    pub identifier: String,
    pub status: RepoStatus,
    /// Bytes on disk (files under the directory).
    pub size_bytes: u64,
    /// Path relative to the git root (`<npub>/<identifier>.git`).
    pub path: String,
    /// Served and held repositories: the confirmed maintainers as npubs
    /// (docs/protocol.md#maintainer-authority).
    #[serde(default)]
    pub maintainers: Vec<String>,
    /// Served and held repositories: keys a confirmed maintainer lists that have not accepted.
    #[serde(default)]
    pub invited: Vec<String>,
}

/// A directory under the git root that is no repository the layout can name: left by a crash
/// (`.tmp-*` being created, `.del-*` being deleted), an unparseable name, an empty owner
/// directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftover {
    /// Path relative to the git root.
    pub path: String,
    /// Why it is a leftover, in words.
    pub reason: String,
    pub size_bytes: u64,
}

/// One identifier family's object pool (`<git root>/.pools/<identifier>.git`,
/// docs/architecture.md, "Object pools"): the released objects its repositories borrow. Never
/// purged by the operator: maintenance removes it once no repository borrows from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolEntry {
    pub identifier: String,
    /// Repositories of the identifier that borrow from it.
    pub members: usize,
    /// Bytes on disk (files under the directory).
    pub size_bytes: u64,
    /// Path relative to the git root (`.pools/<identifier>.git`).
    pub path: String,
}

/// The answer to `GET /v1/repos`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoListing {
    pub version: u32,
    /// Every repository directory, by owner then identifier.
    pub repos: Vec<RepoEntry>,
    #[serde(default)]
    pub leftovers: Vec<Leftover>,
    /// Every object pool, by identifier.
    #[serde(default)]
    pub pools: Vec<PoolEntry>,
}

/// Asks the relay to remove orphaned repositories and leftovers, by path relative to the git
/// root (as listed). The relay checks each again and removes only what is still an orphan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeRequest {
    pub version: u32,
    pub paths: Vec<String>,
}

/// A path the purge left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeKept {
    pub path: String,
    pub reason: String,
}

/// What a purge removed and what it kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeResponse {
    pub version: u32,
    #[serde(default)]
    pub removed: Vec<String>,
    #[serde(default)]
    pub kept: Vec<PurgeKept>,
}

/// Body of any non-2xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub version: u32,
    /// What went wrong and what to do.
    pub error: String,
}

impl ApiError {
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            version: HOOK_API_VERSION,
            error: error.into(),
        }
    }
}

/// Operator: remove everything of one author (`POST` a [`PurgeAuthorRequest`], same token):
/// stored events, held events, repositories. Used by `grasp-relay purge-author`.
pub const PATH_PURGE_AUTHOR: &str = "/v1/purge-author";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeAuthorRequest {
    pub version: u32,
    /// npub or hex public key.
    pub author: String,
}

/// What a purge removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeAuthorResponse {
    pub version: u32,
    pub events_removed: usize,
    pub held_removed: usize,
    pub repositories_removed: usize,
}

/// grasp-cgi, private service: may the `Authorization` header of a git request for
/// `/<owner>/<identifier>.git` read or write it? (`POST` a [`GitAuthRequest`], same token.)
pub const PATH_GIT_AUTH: &str = "/v1/git-auth";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitAuthRequest {
    pub version: u32,
    /// The repository asked for: its owner's npub and its identifier.
    pub owner: String,
    pub identifier: String,
    /// The HTTP `Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitAuthResponse {
    pub version: u32,
    /// Serve the request.
    pub allowed: bool,
    /// Why not (for the relay's log; the client only sees `401`).
    pub reason: String,
}

/// grasp-cgi, GRASP-06: a push to `/prs/<npub>/<identifier>.git` arrived and that repository
/// does not exist yet: create it (`POST` a [`PrsRepoRequest`], same token). `200` with
/// [`PrsRepoResponse`]; `404` when GRASP-06 is off; `503` ([`ApiError`]) when the server cannot
/// take another repository now (the error says why).
pub const PATH_PRS_REPO: &str = "/v1/prs-repo";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrsRepoRequest {
    pub version: u32,
    /// The contributor's npub and the identifier of the URL.
    pub npub: String,
    pub identifier: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrsRepoResponse {
    pub version: u32,
    /// The repository was made by this request (false: it existed).
    pub created: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::refs::ZERO_OID;
    use serde::de::DeserializeOwned;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: T) {
        let json = serde_json::to_string(&value).unwrap();
        assert_eq!(serde_json::from_str::<T>(&json).unwrap(), value, "{json}");
    }

    #[test]
    fn round_trips() {
        let updates = vec![RefUpdate::new(ZERO_OID, A, "refs/heads/main")];
        round_trip(PreReceiveRequest::new("npub1x", "repo", updates.clone()));
        round_trip(PreReceiveRequest::new("npub1x", "repo", updates.clone()).in_space(RepoSpace::Prs));
        round_trip(PrsRepoRequest { version: HOOK_API_VERSION, npub: "npub1x".into(), identifier: "r".into() });
        round_trip(PrsRepoResponse { version: HOOK_API_VERSION, created: true });
        round_trip(PreReceiveResponse::accept(vec!["ok".into()]));
        round_trip(PreReceiveResponse::reject(vec![
            "no".into(),
            "because".into(),
        ]));
        round_trip(PostReceiveRequest::new(
            "npub1x",
            "répo with space",
            updates,
        ));
        round_trip(PostReceiveResponse::new(
            vec![ReleasedEvent {
                id: "ab".repeat(32),
                kind: 30618,
                summary: "state".into(),
            }],
            vec![],
        ));
        round_trip(ApiError::new("bad token"));
        round_trip(RepoInfo {
            version: HOOK_API_VERSION,
            npub: "npub1x".into(),
            identifier: "r".into(),
            status: RepoStatus::Served,
            name: Some("<b>".into()),
            description: None,
            maintainers: vec!["npub1x".into()],
            invited: Vec::new(),
            http_clone_url: "http://h/npub1x/r.git".into(),
            nostr_clone_url: "nostr://npub1x/h/r".into(),
            naddr: "naddr1".into(),
            web_client_url: "https://gitworkshop.dev/naddr1".into(),
            web: vec![],
            default_branch: Some("refs/heads/main".into()),
            refs: vec![RefView { name: "refs/heads/main".into(), oid: A.into() }],
            state_created_at: Some(1),
        });
        round_trip(RepoListing {
            version: HOOK_API_VERSION,
            repos: vec![RepoEntry {
                owner: "npub1x".into(),
                identifier: "r".into(),
                status: RepoStatus::Orphaned,
                size_bytes: 3,
                path: "npub1x/r.git".into(),
                maintainers: vec!["npub1x".into()],
                invited: vec!["npub1y".into()],
            }],
            leftovers: vec![Leftover { path: "npub1x/.tmp-1".into(), reason: "crash".into(), size_bytes: 0 }],
            pools: vec![PoolEntry { identifier: "r".into(), members: 2, size_bytes: 9, path: ".pools/r.git".into() }],
        });
        // A listing from before pools still reads.
        let old: RepoListing = serde_json::from_str(&format!(r#"{{"version":{HOOK_API_VERSION},"repos":[]}}"#)).unwrap();
        assert!(old.pools.is_empty());
        round_trip(PurgeRequest { version: HOOK_API_VERSION, paths: vec!["npub1x/r.git".into()] });
        round_trip(PurgeResponse {
            version: HOOK_API_VERSION,
            removed: vec!["a".into()],
            kept: vec![PurgeKept { path: "b".into(), reason: "served".into() }],
        });
        assert_eq!(serde_json::to_value(RepoStatus::Held).unwrap(), serde_json::json!("held"));
    }

    #[test]
    fn field_names_are_stable() {
        let req = PreReceiveRequest::new(
            "npub1x",
            "repo",
            vec![RefUpdate::new(ZERO_OID, A, "refs/heads/main")],
        );
        let value = serde_json::to_value(&req).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "version": 1,
                "owner": "npub1x",
                "identifier": "repo",
                "updates": [{"old": ZERO_OID, "new": A, "name": "refs/heads/main"}],
            })
        );
        let prs = serde_json::to_value(req.clone().in_space(RepoSpace::Prs)).unwrap();
        assert_eq!(prs["space"], "prs", "{prs}");
        let err = serde_json::to_value(ApiError::new("x")).unwrap();
        assert_eq!(err, serde_json::json!({"version": 1, "error": "x"}));
    }

    #[test]
    fn unknown_fields_tolerated_and_defaults() {
        let resp: PreReceiveResponse =
            serde_json::from_str(r#"{"version":1,"accepted":true,"future":"x","messages":["m"]}"#)
                .unwrap();
        assert_eq!(resp, PreReceiveResponse::accept(vec!["m".into()]));
        let resp: PostReceiveResponse =
            serde_json::from_str(r#"{"version":1,"extra":{}}"#).unwrap();
        assert!(resp.released.is_empty() && resp.messages.is_empty());
        let req: PostReceiveRequest = serde_json::from_str(
            r#"{"version":1,"owner":"o","identifier":"i","updates":[{"old":"a","new":"b","name":"n","x":1}],"y":2}"#,
        )
        .unwrap();
        assert_eq!(req.updates[0], RefUpdate::new("a", "b", "n"));
    }

    #[test]
    fn wrong_version_is_detectable() {
        let resp: PreReceiveResponse =
            serde_json::from_str(r#"{"version":2,"accepted":true}"#).unwrap();
        let err = check_version(resp.version).unwrap_err();
        assert_eq!(err, VersionMismatch { found: 2 });
        assert!(err.to_string().contains("install the same"));
        assert!(check_version(HOOK_API_VERSION).is_ok());
        // A message without a version is not accepted silently.
        assert!(serde_json::from_str::<PreReceiveResponse>(r#"{"accepted":true}"#).is_err());
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(serde_json::from_str::<PreReceiveRequest>(r#"{"version":1,"owner":"o"}"#).is_err());
        assert!(serde_json::from_str::<PreReceiveRequest>("not json").is_err());
        assert!(
            serde_json::from_str::<ReleasedEvent>(r#"{"id":"x","kind":70000,"summary":""}"#)
                .is_err()
        );
    }
}
