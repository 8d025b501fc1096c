//! The hook API's endpoints: one handler each, routed by one table per method ([`GETS`],
//! [`POSTS`]). A request has passed the token check before it gets here; a `POST`'s body is read
//! (bounded) by the caller. docs/hook-api.md describes each endpoint.

use bytes::Bytes;
use futures_util::future::BoxFuture;
use grasp_state::contract::hook_api::{HookRequest, HOOK_API_VERSION, PATH_POST_RECEIVE, PATH_PRE_RECEIVE};
use grasp_state::names::identifier::RepoSpace;
use grasp_state::purgatory::RepoId;
use hyper::{Response, StatusCode};

use super::{error, git_auth, json, owner, parse, pusher, repos, sync_view, with_sync_levels, PATH_PURGATORY, PATH_SYNC};
use crate::api::views::OperatorViews;
use crate::grasp::Grasp;
use crate::net::http::Body;

/// What a handler is given.
struct Call<'a> {
    grasp: &'a Grasp,
    views: &'a OperatorViews,
    body: &'a [u8],
}

type Handler = for<'a> fn(Call<'a>) -> BoxFuture<'a, Response<Body>>;

/// `GET` endpoints by path (`/v1/repos...` paths are [`repos::route_get`]'s).
const GETS: &[(&str, Handler)] = &[
    (PATH_PURGATORY, get_purgatory),
    (PATH_SYNC, get_sync),
    (grasp_state::contract::hook_api::PATH_AUTHORITY, get_authority),
];

/// `POST` endpoints by path.
const POSTS: &[(&str, Handler)] = &[
    (PATH_PRE_RECEIVE, post_pre_receive),
    (PATH_POST_RECEIVE, post_post_receive),
    (grasp_state::contract::hook_api::PATH_PRS_REPO, post_prs_repo),
    (grasp_state::contract::hook_api::PATH_REPOS_PURGE, post_repos_purge),
    (grasp_state::contract::hook_api::PATH_AUTHORITY, post_authority),
    (grasp_state::contract::hook_api::PATH_PURGE_AUTHOR, post_purge_author),
    (grasp_state::contract::hook_api::PATH_GIT_AUTH, post_git_auth),
];

/// Answers a `GET` of `path`.
pub(super) async fn get(path: &str, grasp: &Grasp, views: &OperatorViews) -> Response<Body> {
    if let Some((_, handler)) = GETS.iter().find(|(p, _)| *p == path) {
        return handler(Call { grasp, views, body: &[] }).await;
    }
    if let Some(resp) = repos::route_get(path, grasp).await {
        return resp;
    }
    error(StatusCode::METHOD_NOT_ALLOWED, "use POST")
}

/// Answers a `POST` of `body` to `path`.
pub(super) async fn post(path: &str, body: &Bytes, grasp: &Grasp, views: &OperatorViews) -> Response<Body> {
    match POSTS.iter().find(|(p, _)| *p == path) {
        Some((_, handler)) => handler(Call { grasp, views, body }).await,
        None => error(StatusCode::NOT_FOUND, format!("no such endpoint {path}")),
    }
}

/// `GET /v1/purgatory`: the operator listing, with the deferred work, the contributor data
/// and each held announcement's relay sync level.
fn get_purgatory(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        json(StatusCode::OK, &with_sync_levels(&c.grasp.purgatory_listing(), c.views))
    })
}

/// `GET /v1/sync`: background sync and relay sync.
fn get_sync(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        match c.views.git_sync.get().and_then(|sync| sync.stats()) {
            Some(stats) => json(StatusCode::OK, &sync_view(&stats, c.views)),
            None => error(StatusCode::SERVICE_UNAVAILABLE, "background sync is not running"),
        }
    })
}

/// `GET /v1/authority`: the authorization-integrity report, changing nothing.
fn get_authority(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move { json(StatusCode::OK, &c.grasp.authority_integrity(false).await) })
}

/// `POST /v1/pre-receive`: may this push go in?
fn post_pre_receive(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        let req = match parse::<HookRequest>(c.body) {
            Ok(r) => r,
            Err(resp) => return *resp,
        };
        let Some(owner) = owner(&req.owner) else { return error(StatusCode::BAD_REQUEST, "owner is not an npub") };
        let (grasp, address) = (c.grasp, pusher(c.grasp, &req));
        let verdict = match req.space {
            RepoSpace::Hosted => grasp.metrics().push_authorization(grasp.authorize_push(&owner, &req.identifier, &req.updates, address, req.incoming_bytes)).await,
            RepoSpace::Prs => grasp.metrics().push_authorization(grasp.authorize_contribution(&owner, &req.identifier, &req.updates, address, req.incoming_bytes)).await,
        };
        json(StatusCode::OK, &verdict)
    })
}

/// `POST /v1/post-receive`: the push's data arrived; release what it satisfies
/// ([`Grasp::push_arrived`]).
fn post_post_receive(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        let req = match parse::<HookRequest>(c.body) {
            Ok(r) => r,
            Err(resp) => return *resp,
        };
        let Some(owner) = owner(&req.owner) else { return error(StatusCode::BAD_REQUEST, "owner is not an npub") };
        let client = req.client.as_deref().and_then(|a| a.parse().ok());
        let repo = RepoId { owner, identifier: req.identifier, space: req.space };
        json(StatusCode::OK, &c.grasp.push_arrived(repo, &req.updates, client).await)
    })
}

/// `POST /v1/prs-repo`: make a GRASP-06 contributor repository for its first push.
fn post_prs_repo(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        let req: grasp_state::contract::hook_api::PrsRepoRequest = match parse(c.body) {
            Ok(r) => r,
            Err(resp) => return *resp,
        };
        let Some(contributor) = grasp_state::names::identifier::parse_npub(&req.npub) else {
            return error(StatusCode::BAD_REQUEST, "npub is not a canonical npub");
        };
        if grasp_state::names::identifier::validate_identifier(&req.identifier).is_err() {
            return error(StatusCode::BAD_REQUEST, "not a valid identifier");
        }
        match c.grasp.create_contributor_repo(&contributor, &req.identifier).await {
            Ok(created) => json(StatusCode::OK, &grasp_state::contract::hook_api::PrsRepoResponse { version: HOOK_API_VERSION, created }),
            Err(e @ crate::grasp::contributions::ContributorRepoError::Off) => error(StatusCode::NOT_FOUND, e.to_string()),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        }
    })
}

/// `POST /v1/repos/purge`: remove orphaned repositories.
fn post_repos_purge(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(repos::route_purge(c.body, c.grasp))
}

/// `POST /v1/authority`: the authorization-integrity pass, applied.
fn post_authority(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        match parse::<grasp_state::contract::hook_api::AuthorityRequest>(c.body) {
            Ok(_) => json(StatusCode::OK, &c.grasp.authority_integrity(true).await),
            Err(resp) => *resp,
        }
    })
}

/// `POST /v1/purge-author`: everything of one author goes.
fn post_purge_author(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        let req: grasp_state::contract::hook_api::PurgeAuthorRequest = match parse(c.body) {
            Ok(r) => r,
            Err(resp) => return *resp,
        };
        let Some(author) = grasp_state::trust::curation::parse_pubkey(&req.author) else {
            return error(StatusCode::BAD_REQUEST, "author is not an npub or hex public key");
        };
        match crate::grasp::purge::purge_author(c.grasp, &author).await {
            Ok(r) => json(StatusCode::OK, &r),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("purge failed: {e}")),
        }
    })
}

/// `POST /v1/git-auth`: may this request reach a private service's git?
fn post_git_auth(c: Call<'_>) -> BoxFuture<'_, Response<Body>> {
    Box::pin(async move {
        let req: grasp_state::contract::hook_api::GitAuthRequest = match parse(c.body) {
            Ok(r) => r,
            Err(resp) => return *resp,
        };
        json(StatusCode::OK, &git_auth::answer(c.grasp, &req).await)
    })
}
