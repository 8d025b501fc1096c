//! A push the public listener runs from end to end (docs/architecture.md, "A push under the
//! relay's listener"): `git http-backend` with the `pre-receive` hook alone, and the relay doing
//! what `post-receive` would, itself, once git's answer has been read. One hook process and one
//! hook API round trip fewer per push; the pusher sees the same lines, put in git's answer.
//!
//! The listener reads the push's commands at the head of its request
//! (`grasp_state::git::receive_pack::read_commands`); a request it cannot follow that way runs both
//! hooks as before. While git answers, the answer streams to the client but for its last four
//! bytes ([`HeldTail`]). When git's output has ended (its refs written), the release starts in
//! a task of its own, under the push lock the listener kept: the refs are read, the updates git
//! applied are handed to [`PushArrived`] (`Grasp::push_arrived`, the post-receive hook's
//! endpoint), and its lines go before the answer's final flush, in the side band. The pusher's
//! `git push` ends after the release, as it does when the hook runs it. A client gone before
//! the end ends git as any abandoned request does, and the release is left to the background
//! passes, as when a hook is ended.

use std::future::Future as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use grasp_state::contract::hook_api::PostReceiveResponse;
use grasp_state::purgatory::RepoId;
use grasp_state::contract::push_lock::PushLock;
use grasp_state::git::receive_pack::{applied, side_band_lines, HeldTail, SideBand};
use grasp_state::names::refs::RefUpdate;
use hyper::body::Frame;
use nostr::prelude::ToBech32;
use tokio::task::JoinHandle;

use crate::net::http::{Body, BodyError};

/// Longest the answer waits for the release (as the `post-receive` hook waits for its call):
/// after it, the pusher is told and the release goes on.
const RELEASE_WAIT: Duration = Duration::from_secs(120);

/// What the post-receive hook asks the relay: the repository, the updates git applied, the
/// pusher's address.
pub type PushArrived = Arc<dyn Fn(RepoId, Vec<RefUpdate>, Option<IpAddr>) -> BoxFuture<'static, PostReceiveResponse> + Send + Sync>;

/// How the listener runs the pushes it follows.
#[derive(Clone)]
pub struct SupervisedPushes {
    /// A hooks directory holding `pre-receive` alone (and its configuration).
    pub hooks_dir: PathBuf,
    /// The release after the push (`Grasp::push_arrived`).
    pub arrived: PushArrived,
}

impl std::fmt::Debug for SupervisedPushes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedPushes").field("hooks_dir", &self.hooks_dir).finish_non_exhaustive()
    }
}

/// One push being run: what the release needs once git's answer has ended.
pub struct Push {
    pub repo: RepoId,
    pub repo_dir: PathBuf,
    pub updates: Vec<RefUpdate>,
    pub side_band: SideBand,
    pub client: Option<IpAddr>,
    /// The repository's push lock, held by the listener until the release has ended.
    pub lock: Option<PushLock>,
    pub arrived: PushArrived,
    /// Started once the release has ended (the ref cache made ready for what usually comes
    /// next: `super::http`'s prewarm).
    pub after: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Push {
    /// Starts the release in a task of its own (it runs to its end whatever becomes of the
    /// request); the handle yields the side-band packets to put in the answer.
    fn release(self) -> JoinHandle<Vec<u8>> {
        tokio::spawn(async move {
            let Push { repo, repo_dir, updates, side_band, client, lock, arrived, after } = self;
            let shown = format!("{}/{}", repo.owner.to_bech32().unwrap_or_default(), repo.identifier);
            let refs = match tokio::task::spawn_blocking(move || super::read_refs(&repo_dir)).await {
                Ok(Ok(refs)) => refs,
                Ok(Err(e)) => {
                    tracing::warn!(repo = %shown, error = %e, "push: cannot read refs after the push; the background passes release its events");
                    return Vec::new();
                }
                Err(_) => return Vec::new(),
            };
            let applied = applied(&updates, &refs);
            if applied.is_empty() {
                // git applied nothing (refused, or failed): no `post-receive` either.
                return Vec::new();
            }
            // The release runs under the push lock, in a task of its own: never cut short.
            let release = tokio::spawn(async move {
                let answer = arrived(repo, applied, client).await;
                drop(lock);
                if let Some(after) = after {
                    after();
                }
                answer
            });
            let lines = match tokio::time::timeout(RELEASE_WAIT, release).await {
                Ok(Ok(answer)) => answer.lines(),
                Ok(Err(e)) => {
                    tracing::warn!(repo = %shown, error = %e, "push: the release after the push failed");
                    vec!["grasp: warning: the relay could not release this push's events now; it does when it reconciles".to_string()]
                }
                Err(_) => vec![format!(
                    "grasp: the relay is still releasing this push's events after {} s; they are served once released",
                    RELEASE_WAIT.as_secs()
                )],
            };
            side_band_lines(&lines, side_band)
        })
    }
}

/// git's answer to a [`Push`], streamed but for its last bytes, with the release's lines put
/// before its final flush.
pub struct ReleasingBody {
    inner: Body,
    tail: HeldTail,
    push: Option<Push>,
    release: Option<JoinHandle<Vec<u8>>>,
    done: bool,
}

impl ReleasingBody {
    pub fn new(inner: Body, push: Push) -> ReleasingBody {
        ReleasingBody { inner, tail: HeldTail::default(), push: Some(push), release: None, done: false }
    }
}

impl hyper::body::Body for ReleasingBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(release) = &mut this.release {
                let lines = match Pin::new(release).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(lines) => lines.unwrap_or_default(),
                };
                this.done = true;
                let (end, shown) = std::mem::take(&mut this.tail).finish(&lines);
                if !shown {
                    tracing::debug!("push: git's answer did not end with its flush; the release's lines were not added");
                }
                return Poll::Ready((!end.is_empty()).then(|| Ok(Frame::data(Bytes::from(end)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.tail.pass(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(e))) => {
                    // git's answer broke off: the client gets the error; the release is left
                    // to the background passes (git may still be ending).
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => match this.push.take() {
                    // git's output ended: its refs are written.
                    Some(push) => this.release = Some(push.release()),
                    None => {
                        this.done = true;
                        let (end, _) = std::mem::take(&mut this.tail).finish(&[]);
                        return Poll::Ready((!end.is_empty()).then(|| Ok(Frame::data(Bytes::from(end)))));
                    }
                },
            }
        }
    }
}
