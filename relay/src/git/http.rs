//! Git smart HTTP on the relay's public listener: stock `git http-backend` as a CGI/1.1 child,
//! started directly for a plain git request, through `grasp-cgi` for the rest
//! (docs/architecture.md, "Git over HTTP").
//!
//! The relay does not speak git itself. For a `GET` or `POST` to an existing repository of a
//! public service that is not its page (`PlainGitRequest`), it starts `git http-backend` itself,
//! with the command grasp-cgi would build (`grasp_state::contract::git_backend`); for a push it tries the
//! repository's push lock once and hands it to the backend (kept open across the exec). Every
//! other request it hands to [`serve`] (in practice every path other than `/` and the relay's own
//! pages, so unknown paths get grasp-cgi's 404 page) spawns the same `grasp-cgi` program nginx +
//! fcgiwrap would run, with the CGI environment built from the request: pages, 404s, a private
//! service's gate, a push that must wait for its lock. Either way the request body is streamed
//! into the child's stdin by a task, the child's CGI header block (`Status:` and headers) becomes
//! the response head, and the rest of its stdout is streamed as the body.
//!
//! grasp-cgi is told it is supervised (`grasp_state::contract::env_names::CGI_SUPERVISED`): it checks the path,
//! the repository, a private service's gate and, for a push, waits for the repository's push
//! lock, then becomes `git http-backend` by exec (the lock's file stays open across it), since
//! this listener already adds the CORS headers and bounds the body.
//!
//! An abandoned request ends with its git processes ([`super::cgi_child`]): the child runs in its
//! own process group, and it is ended when the request body ends short (client gone), when the
//! client sends nothing for `--git-idle-timeout`, when its body arrives slower than
//! `--git-min-rate` (`grasp_state::contract::transfer`), when the response body is dropped before its end
//! (a client that stops reading it is dropped by the listener's write deadline,
//! `crate::net::write_deadline`), or when the relay shuts down.
//!
//! Before starting the backend for a plain request, the relay looks in its ref cache
//! ([`super::ref_cache`], docs/architecture.md, "The ref cache"): the upload-pack ref
//! advertisement and a v2 `ls-refs` (whose small body is read first to tell) are answered from
//! it, without any process, while the repository's fingerprint is the one the kept answer was
//! made at; a miss runs the backend as above and keeps its answer. A v2 `fetch` whose small body
//! was read whole is answered by `git upload-pack` started without the backend, once the
//! backend's header block is known from a kept `ls-refs` answer.
//!
//! `PATH_INFO` is the percent-decoded path, as RFC 3875 and `git http-backend` expect; a path that
//! cannot be decoded (bad `%` escape, `%00`) gets a 404 here without spawning anything.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use grasp_state::contract::{cgi, env_names, transfer};
use grasp_state::contract::git_backend::{self, BackendSetup, Service};
use grasp_state::names::identifier::{parse_repo_path, RepoLayout, RepoSpace, RepoUrlPath};
use grasp_state::contract::push_lock::PushLock;
use hyper::{Method, Request, Response, StatusCode};
use std::os::fd::AsRawFd;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, ReadBuf};
use std::time::Duration;

use tokio::process::{ChildStdout, Command};

use super::cgi_child::{self, Abandoned, CgiControl};
use super::supervised_push::{self, ReleasingBody, SupervisedPushes};
use grasp_state::purgatory::RepoId;
use grasp_state::git::receive_pack::{self, CommandsRead, SideBand};
use grasp_state::names::refs::RefUpdate;
use super::ref_cache::{Answer, RefCache, MAX_ANSWER_BYTES};
use super::ref_fingerprint::{self, Fingerprint};
use super::ref_generation::RepoIdentity;
use crate::net::http::{empty, full, preflight, text, with_cors, Body, BodyError};
use grasp_state::git::ref_read::{self, Candidate, ReadHeaders, ReadKey};
use std::sync::Arc;
use crate::shutdown::Shutdown;

/// `--git-idle-timeout`'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How to run the CGI wrapper and the backend.
#[derive(Debug, Clone)]
pub struct GitHttpConfig {
    /// The `grasp-cgi` executable.
    pub cgi_path: PathBuf,
    /// How `git http-backend` runs: the git root (passed to grasp-cgi as `GRASP_GIT_ROOT`), the
    /// hooks (`GRASP_HOOKS_DIR`), the programs and the push limit.
    pub backend: BackendSetup,
    /// The relay's data directory (a private service's marker is looked for there).
    pub data_dir: PathBuf,
    /// Extra environment for the child (e.g. what the hooks need to reach the relay).
    pub env: Vec<(String, String)>,
    /// Whether a plain git request starts `git http-backend` without `grasp-cgi`
    /// (`PlainGitRequest`); off, `cgi_path` serves every request (a test's or a benchmark's own
    /// CGI program).
    pub direct: bool,
    /// A request whose client sends nothing for this long is ended (`--git-idle-timeout`).
    pub idle_timeout: Duration,
    /// Past the idle timeout, the body must average this many bytes per second
    /// (`--git-min-rate`, `grasp_state::contract::transfer`; 0: no minimum).
    pub min_rate: u64,
    /// GRASP-06 contributor repositories (`/prs/...`) are served (`--grasp06`; grasp-cgi is told
    /// through `GRASP_GRASP06` in `env`). Off, every `/prs/` path goes to grasp-cgi, which
    /// answers 404.
    pub prs: bool,
    /// The ref cache answering a plain request's ref advertisement and v2 `ls-refs` without git
    /// (`super::ref_cache`); `None`: git answers every request (`--ref-cache-bytes 0`).
    pub ref_cache: Option<Arc<RefCache>>,
    /// Pushes the listener runs from end to end, doing what `post-receive` would itself
    /// (`super::supervised_push`); `None`: both hooks run for every push.
    pub supervised_pushes: Option<SupervisedPushes>,
}

/// Serves one request: a plain git request by starting `git http-backend` itself
/// (`PlainGitRequest`), anything else through `grasp-cgi`. Never fails: errors become a 502 with
/// a message. Every response carries the GRASP CORS headers.
pub async fn serve(
    req: Request<Incoming>,
    remote_addr: SocketAddr,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
) -> Response<Body> {
    if grasp_state::contract::cors::is_preflight(req.method().as_str()) {
        return preflight();
    }
    let Some(path_info) = decode_path(req.uri().path()) else {
        return with_cors(text(
            StatusCode::NOT_FOUND,
            format!("Not found: {} is not a valid path.\n", req.uri().path()),
        ));
    };
    let query = req.uri().query().unwrap_or("");
    let plain = plain_git_request(cfg, req.method(), &path_info, query);
    let candidate = match (&plain, &cfg.ref_cache) {
        (Some(plain), Some(_)) => read_candidate(&req, &plain.repo.rest, query),
        _ => None,
    };
    let what = format!("{} {} from {}", req.method(), req.uri().path(), remote_addr.ip());
    let git_protocol = req.headers().get("git-protocol").map(|v| v.as_bytes().to_vec());
    // A push's commands are read from its body only when git reads it as sent (not compressed).
    let follow_push = cfg.supervised_pushes.is_some()
        && plain.as_ref().is_some_and(|p| p.push && p.post)
        && req.headers().get(hyper::header::CONTENT_ENCODING).is_none();
    let vars = cgi_env(&req, path_info, remote_addr);
    let mut body = RequestBody { prefix: Bytes::new(), rest: req.into_body(), started: tokio::time::Instant::now() };
    // A v2 upload-pack request is an `ls-refs` the cache may answer if its (small) body says so,
    // else a `fetch` upload-pack may answer without the backend.
    let shortcut = match candidate {
        Some(Candidate::Advertisement(key)) => Shortcut::Read(key),
        Some(Candidate::UploadPackV2) => match body.read_prefix(ref_read::MAX_LS_REFS_BODY, cfg.idle_timeout).await {
            Ok(true) => ref_read::ls_refs_key(&body.prefix).map_or(Shortcut::Fetch, Shortcut::Read),
            Ok(false) => Shortcut::None,
            Err(resp) => return with_cors(resp),
        },
        None => Shortcut::None,
    };
    let commands = match follow_push {
        true => match body.read_commands(cfg.idle_timeout).await {
            Ok(commands) => commands,
            Err(resp) => return with_cors(resp),
        },
        false => None,
    };
    let direct = match plain {
        Some(plain) => {
            let (git_root, data_dir) = (cfg.backend.git_root.clone(), cfg.data_dir.clone());
            let backend = (!matches!(shortcut, Shortcut::None)).then(|| cfg.backend.clone());
            // A few stats (a walk of `refs/` for a cacheable read) and one try of a lock: off the
            // async workers all the same.
            tokio::task::spawn_blocking(move || {
                let direct = plain.vet(&git_root, &data_dir)?;
                let slot = backend.and_then(|backend| CacheSlot::read(&direct, shortcut, &backend));
                Some((direct, slot))
            })
            .await
            .ok()
            .flatten()
        }
        None => None,
    };
    let result = match direct {
        Some((direct, slot)) => {
            let capture = match (slot, &cfg.ref_cache) {
                (Some(slot), Some(cache)) => match &slot.key {
                    Some(key) => match cache.get(slot.repo, key, slot.fingerprint).or_else(|| cache.empty(slot.empty.as_deref()?)) {
                        Some(answer) => {
                            cache.metrics().answered("hit");
                            tracing::debug!(request = %what, "git http: answered from the ref cache");
                            return with_cors(cached_response(&answer));
                        }
                        None => Some(Capture { cache: cache.clone(), slot }),
                    },
                    // A fetch: upload-pack alone, once the backend's header block is known.
                    None => match cache.post_head(&slot.setup) {
                        Some(head) => {
                            cache.metrics().fetched_directly();
                            return match run_upload_pack(body, head, what, direct, git_protocol, cfg, shutdown).await {
                                Ok(resp) => with_cors(resp),
                                Err(e) => backend_failed(e),
                            };
                        }
                        None => None,
                    },
                },
                _ => None,
            };
            let push = commands.map(|(updates, side_band)| (updates, side_band, remote_addr.ip()));
            run_backend(body, vars, what, direct, capture, cfg, shutdown, push).await
        }
        None => run_cgi(body, vars, what, cfg, shutdown).await,
    };
    match result {
        Ok(resp) => with_cors(resp),
        Err(e) => backend_failed(e),
    }
}

/// The answer when the CGI child (or upload-pack) could not answer.
fn backend_failed(e: String) -> Response<Body> {
    tracing::warn!(error = %e, "git http: CGI child failed");
    with_cors(text(StatusCode::BAD_GATEWAY, format!("git service unavailable: {e}. Try again later or tell the operator.\n")))
}

/// What the relay may do for a plain request besides running the backend for it.
#[derive(Debug)]
enum Shortcut {
    None,
    /// A cacheable read ([`ref_read`]).
    Read(ReadKey),
    /// Any other v2 upload-pack request (a `fetch`) whose whole (small) body was read: `git
    /// upload-pack` may answer it alone, as the backend would have it answer.
    Fetch,
}

/// A `GET` or `POST` for git (not a page) to a well-formed repository path: the relay may run
/// `git http-backend` for it itself, once [`PlainGitRequest::vet`] has checked it as grasp-cgi
/// would. `None` (and every request while `cfg.direct` is off) goes to grasp-cgi.
fn plain_git_request(cfg: &GitHttpConfig, method: &Method, path_info: &OsString, query: &str) -> Option<PlainGitRequest> {
    if !cfg.direct || (method != Method::GET && method != Method::POST) {
        return None;
    }
    let repo = parse_repo_path(path_info.to_str()?).filter(|r| !git_backend::is_page(&r.rest))?;
    if repo.space == RepoSpace::Prs && !cfg.prs {
        return None;
    }
    let push = git_backend::is_push(method.as_str(), &repo.rest, query);
    Some(PlainGitRequest { repo, push, post: method == Method::POST })
}

#[derive(Debug)]
struct PlainGitRequest {
    repo: RepoUrlPath,
    /// Its push's advertisement or receive-pack `POST`.
    push: bool,
    post: bool,
}

impl PlainGitRequest {
    /// The request, when the relay runs the backend for it: a public service's existing
    /// repository and, for a push, a free push lock (an advertisement lets go of it at once, but a
    /// contributor repository's holds it while it runs, as grasp-cgi's does). `None` leaves the request to grasp-cgi, which answers the rest (404s, a
    /// private service's gate, a push that must wait for another within `--push-lock-wait` or be
    /// told 503). Blocking: a few stats and one try of the lock.
    fn vet(self, git_root: &Path, data_dir: &Path) -> Option<Direct> {
        if git_backend::service(Some(data_dir), git_root, |_, _| ()) != Service::Public {
            return None;
        }
        let repo_dir = RepoLayout::new(git_root).repo_path_in(self.repo.space, &self.repo.owner, &self.repo.identifier).ok()?;
        // A contributor path with no repository yet is grasp-cgi's (an empty answer, or the
        // repository made for a push).
        if !repo_dir.is_dir() {
            return None;
        }
        let push_lock = match self.push {
            true => Some(PushLock::take_within(&repo_dir, Duration::ZERO).ok()?),
            false => None,
        };
        // A contributor repository's advertisement keeps the lock while it runs (maintenance
        // removes an empty one under it), as grasp-cgi's does.
        let keep = self.post || self.repo.space == RepoSpace::Prs;
        Some(Direct { repo: self.repo, repo_dir, push_lock: push_lock.filter(|_| keep) })
    }
}

/// The headers a cacheable read depends on ([`ref_read::candidate`]); a request repeating one
/// of them is not a candidate.
fn read_candidate(req: &Request<Incoming>, rest: &str, query: &str) -> Option<Candidate> {
    let one = |name: &str| {
        let mut all = req.headers().get_all(name).iter();
        let first = all.next().map(HeaderValue::as_bytes);
        all.next().is_none().then_some(first)
    };
    let headers = ReadHeaders {
        git_protocol: one("git-protocol")?,
        content_type: one("content-type")?,
        content_encoding: one("content-encoding")?,
    };
    ref_read::candidate(req.method().as_str(), rest, query, headers)
}

/// Where a cacheable read's answer is, or goes: its repository, its key (`None`: a v2 fetch,
/// [`Shortcut::Fetch`]), the repository's fingerprint when the request arrived and how git runs
/// ([`setup_digest`]).
#[derive(Debug)]
struct CacheSlot {
    repo: RepoIdentity,
    key: Option<ReadKey>,
    fingerprint: Fingerprint,
    setup: Vec<u8>,
    /// For the receive-pack advertisement of a repository without refs: the key of the answer
    /// every such repository gets ([`RefCache::learn_empty`]).
    empty: Option<Vec<u8>>,
}

impl CacheSlot {
    /// Reads the fingerprint of `direct`'s repository, for how `backend` runs git; `None` when
    /// it has none, which also leaves a fetch to the backend (git answers). Blocking.
    fn read(direct: &Direct, shortcut: Shortcut, backend: &BackendSetup) -> Option<CacheSlot> {
        let key = match shortcut {
            Shortcut::None => return None,
            Shortcut::Read(key) => Some(key),
            Shortcut::Fetch => None,
        };
        let setup = setup_digest(backend, direct.repo.space);
        let (repo, fingerprint) = ref_fingerprint::read(&direct.repo_dir, &setup)?;
        // The receive-pack advertisement also shows the alternates' refs (`.have`): a
        // repository that borrows objects is answered by git every time.
        let empty = match &key {
            Some(key) if key.is_receive_pack() => {
                if std::fs::symlink_metadata(direct.repo_dir.join("objects/info/alternates")).is_ok() {
                    return None;
                }
                ref_fingerprint::empty_for_push(&direct.repo_dir).map(|config| {
                    [&setup[..], b"\0", &config[..], b"\0", key.as_bytes()].concat()
                })
            }
            _ => None,
        };
        Some(CacheSlot { repo, key, fingerprint, setup, empty })
    }
}

/// What of the backend's setup an advertisement depends on: the program (path and file, so an
/// upgraded git is asked again) and the per-request config.
fn setup_digest(backend: &BackendSetup, space: RepoSpace) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let program = backend.http_backend.as_ref().unwrap_or(&backend.git);
    let mut digest = program.as_os_str().as_bytes().to_vec();
    digest.push(0);
    if let Ok(meta) = std::fs::metadata(program) {
        for value in [meta.dev(), meta.ino(), meta.size(), meta.mtime() as u64, meta.mtime_nsec() as u64] {
            digest.extend_from_slice(&value.to_le_bytes());
        }
    }
    for (key, value) in backend.per_request_config_in(space) {
        digest.extend_from_slice(key.as_bytes());
        digest.push(0);
        digest.extend_from_slice(value.as_bytes());
        digest.push(0);
    }
    digest
}

/// A cache miss being answered by git: its answer is kept if git ends well.
struct Capture {
    cache: Arc<RefCache>,
    slot: CacheSlot,
}

impl Capture {
    /// Keeps `answer` once the backend has ended with success (`exit`), at the fingerprint read
    /// before it started; for an `ls-refs`, learns the backend's header block `head` of a
    /// `POST git-upload-pack` too.
    fn keep(self, answer: Answer, head: Bytes, exit: tokio::sync::oneshot::Receiver<bool>) {
        self.cache.metrics().answered("miss");
        tokio::spawn(async move {
            let Some(key) = self.slot.key else { return };
            if exit.await == Ok(true) {
                if key.is_ls_refs() {
                    self.cache.learn_post_head(&self.slot.setup, head);
                }
                if let Some(empty) = self.slot.empty {
                    self.cache.learn_empty(empty, answer.clone());
                }
                self.cache.insert(self.slot.repo, key, self.slot.fingerprint, answer);
            }
        });
    }
}

/// Longest a prewarm's backend may run.
const PREWARM_WAIT: Duration = Duration::from_secs(10);

/// The reads that usually follow a push (the next push's receive-pack advertisement, a
/// fetch's v2 capability advertisement), answered by git right after the push's release and
/// kept in the ref cache, so the next push or fetch starts no process for them
/// (docs/architecture.md, "The ref cache"). In the background, one backend run per read, each
/// within [`PREWARM_WAIT`]; kept as a miss's answer is (the fingerprint read before git ran),
/// counted as `prewarmed`.
struct Prewarm {
    cache: Arc<RefCache>,
    backend: BackendSetup,
    env: Vec<(String, String)>,
    repo: RepoUrlPath,
    repo_dir: PathBuf,
}

impl Prewarm {
    async fn run(self) {
        for (query, protocol) in [("service=git-receive-pack", None), ("service=git-upload-pack", Some("version=2"))] {
            let headers = ReadHeaders { git_protocol: protocol.map(str::as_bytes), ..ReadHeaders::default() };
            if let Some(Candidate::Advertisement(key)) = ref_read::candidate("GET", "/info/refs", query, headers) {
                self.keep(key, query, protocol).await;
            }
        }
    }

    async fn keep(&self, key: ReadKey, query: &str, protocol: Option<&str>) {
        let mut repo = self.repo.clone();
        repo.rest = "/info/refs".to_string();
        let direct = Direct { repo, repo_dir: self.repo_dir.clone(), push_lock: None };
        let backend = self.backend.clone();
        let Ok(Some((direct, slot))) = tokio::task::spawn_blocking(move || {
            let slot = CacheSlot::read(&direct, Shortcut::Read(key), &backend)?;
            Some((direct, slot))
        })
        .await
        else {
            return;
        };
        let Some(key) = slot.key.clone() else { return };
        let mut vars: Vec<(String, OsString)> = vec![
            ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
            ("SERVER_PROTOCOL".into(), "HTTP/1.1".into()),
            ("REQUEST_METHOD".into(), "GET".into()),
            ("QUERY_STRING".into(), query.into()),
            ("REMOTE_ADDR".into(), "127.0.0.1".into()),
        ];
        if let Some(protocol) = protocol {
            vars.push(("HTTP_GIT_PROTOCOL".into(), protocol.into()));
        }
        let env = self.env.iter().map(|(k, v)| (k.clone(), OsString::from(v)));
        let mut cmd = Command::from(self.backend.command(&direct.repo, &direct.repo_dir, vars.into_iter().chain(env)));
        cmd.env_remove("CONTENT_TYPE").env_remove("CONTENT_LENGTH").stdin(Stdio::null()).kill_on_drop(true);
        let Ok(Ok(out)) = tokio::time::timeout(PREWARM_WAIT, cmd.output()).await else { return };
        if !out.status.success() {
            return;
        }
        let Ok(Some(head)) = cgi::parse_head(&out.stdout) else { return };
        if head.status() != Ok(200) {
            return;
        }
        let answer = Answer { status: 200, headers: response_headers(&head), body: Bytes::copy_from_slice(&out.stdout[head.len..]) };
        if answer.body.len() > MAX_ANSWER_BYTES {
            return;
        }
        if let Some(empty) = slot.empty {
            self.cache.learn_empty(empty, answer.clone());
        }
        self.cache.insert(slot.repo, key, slot.fingerprint, answer);
        self.cache.metrics().answered("prewarmed");
    }
}

/// A cached answer as a response: git's status, header fields and body.
fn cached_response(answer: &Answer) -> Response<Body> {
    let mut resp = Response::new(full(answer.body.clone()));
    *resp.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    for (name, value) in &answer.headers {
        resp.headers_mut().append(name.clone(), value.clone());
    }
    resp
}

/// A request body: what was read of it before the child started, then the rest.
struct RequestBody {
    prefix: Bytes,
    rest: Incoming,
    /// When the relay began reading it: the minimum rate (`--git-min-rate`) counts from here,
    /// whatever was read before the child started.
    started: tokio::time::Instant,
}

impl RequestBody {
    /// Reads the body until it ends (`Ok(true)`) or holds more than `max` bytes (`Ok(false)`),
    /// within `idle` in all. The error is the answer to a client that sent too little or went.
    async fn read_prefix(&mut self, max: usize, idle: Duration) -> Result<bool, Response<Body>> {
        self.read_prefix_until(max, idle, |_| false).await
    }

    /// A push's commands at the head of its body ([`receive_pack::read_commands`]), reading
    /// what they need (within `idle`); `None` for a push the listener does not follow.
    async fn read_commands(&mut self, idle: Duration) -> Result<Option<(Vec<RefUpdate>, SideBand)>, Response<Body>> {
        let read = |head: &[u8]| !matches!(receive_pack::read_commands(head), CommandsRead::NeedMore);
        self.read_prefix_until(receive_pack::MAX_COMMANDS_BYTES, idle, read).await?;
        Ok(match receive_pack::read_commands(&self.prefix) {
            CommandsRead::Complete { updates, side_band } => Some((updates, side_band)),
            _ => None,
        })
    }

    /// [`RequestBody::read_prefix`] that also stops once `enough` says so of what was read.
    async fn read_prefix_until(&mut self, max: usize, idle: Duration, enough: impl Fn(&[u8]) -> bool) -> Result<bool, Response<Body>> {
        let deadline = tokio::time::Instant::now() + idle;
        let mut read = bytes::BytesMut::new();
        let ended = loop {
            if read.len() > max || (!read.is_empty() && enough(&read)) {
                break false;
            }
            match tokio::time::timeout_at(deadline, self.rest.frame()).await {
                Err(_) => {
                    return Err(text(
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the request body did not arrive within {} s\n", idle.as_secs()),
                    ))
                }
                Ok(None) => break true,
                Ok(Some(Err(e))) => return Err(text(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}\n"))),
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        read.extend_from_slice(data);
                    }
                }
            }
        };
        self.prefix = read.freeze();
        Ok(ended)
    }
}

/// A git request the relay runs `git http-backend` for itself.
#[derive(Debug)]
struct Direct {
    repo: RepoUrlPath,
    repo_dir: PathBuf,
    /// A push's receive-pack `POST`: its repository's push lock, held, handed to the backend.
    push_lock: Option<PushLock>,
}

/// Percent-decodes a URL path into `PATH_INFO` bytes; `None` for a bad escape or a NUL.
fn decode_path(path: &str) -> Option<OsString> {
    grasp_state::names::identifier::percent_decode_bytes(path)
        .filter(|bytes| !bytes.contains(&0))
        .map(OsString::from_vec)
}

/// The CGI environment for `req` (headers become `HTTP_*`; `Proxy` is dropped, see httpoxy).
fn cgi_env(
    req: &Request<Incoming>,
    path_info: OsString,
    remote_addr: SocketAddr,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vec![
        ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
        (
            "SERVER_PROTOCOL".into(),
            format!("{:?}", req.version()).into(),
        ),
        (
            "SERVER_SOFTWARE".into(),
            concat!("grasp-relay/", env!("CARGO_PKG_VERSION")).into(),
        ),
        ("REQUEST_METHOD".into(), req.method().as_str().into()),
        (
            "REQUEST_URI".into(),
            req.uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .into(),
        ),
        ("SCRIPT_NAME".into(), "".into()),
        ("PATH_INFO".into(), path_info),
        (
            "QUERY_STRING".into(),
            req.uri().query().unwrap_or("").into(),
        ),
        ("REMOTE_ADDR".into(), remote_addr.ip().to_string().into()),
        ("REMOTE_PORT".into(), remote_addr.port().to_string().into()),
    ];
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, value) in req.headers() {
        let key = match name.as_str() {
            "content-type" => "CONTENT_TYPE".to_string(),
            "content-length" => "CONTENT_LENGTH".to_string(),
            "proxy" => continue,
            n => format!("HTTP_{}", n.to_ascii_uppercase().replace('-', "_")),
        };
        match headers.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => {
                v.extend_from_slice(b", ");
                v.extend_from_slice(value.as_bytes());
            }
            None => headers.push((key, value.as_bytes().to_vec())),
        }
    }
    env.extend(headers.into_iter().map(|(k, v)| (k, OsString::from_vec(v))));
    env
}

/// Runs `grasp-cgi` for a request with CGI variables `vars` ([`cgi_env`]).
async fn run_cgi(
    body: RequestBody,
    vars: Vec<(String, OsString)>,
    what: String,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
) -> Result<Response<Body>, String> {
    let mut cmd = Command::new(&cfg.cgi_path);
    for var in [
        "CONTENT_TYPE",
        "CONTENT_LENGTH",
        "GIT_DIR",
        "GIT_CONFIG_PARAMETERS",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(vars)
        .env(env_names::GIT_ROOT, &cfg.backend.git_root)
        .envs(cfg.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env(env_names::GIT_IDLE_TIMEOUT, cfg.idle_timeout.as_secs().max(1).to_string())
        .env(env_names::GIT_MIN_RATE, cfg.min_rate.to_string())
        // This listener adds CORS, bounds the body and ends the group itself: a fetch's grasp-cgi
        // hands over to git http-backend by exec.
        .env(env_names::CGI_SUPERVISED, "1")
        .process_group(0)
        .kill_on_drop(true);
    match &cfg.backend.hooks_dir {
        Some(dir) => cmd.env(env_names::HOOKS_DIR, dir),
        None => cmd.env_remove(env_names::HOOKS_DIR),
    };
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cfg.cgi_path.display()))?;
    run_child(body, child, what, cfg, shutdown, None, None).await
}

/// Runs `git http-backend` for a [`Direct`] request: the request's CGI variables under the
/// backend's setup ([`BackendSetup::command`], the same grasp-cgi uses), in a process group of
/// its own. A push's lock is handed to the backend (kept open across its exec), so it and
/// everything it starts (receive-pack, the hooks) hold it until the last of them ends; this
/// process's copy closes once the backend runs. A cache miss's answer is kept (`capture`).
/// A push the listener follows (`push`: its commands, side band and client) runs the
/// `pre-receive` hook alone, and this process keeps its lock until the release after it has
/// ended ([`supervised_push`]).
#[allow(clippy::too_many_arguments)]
async fn run_backend(
    body: RequestBody,
    vars: Vec<(String, OsString)>,
    what: String,
    mut direct: Direct,
    capture: Option<Capture>,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
    push: Option<(Vec<RefUpdate>, SideBand, std::net::IpAddr)>,
) -> Result<Response<Body>, String> {
    let followed = match (push, &cfg.supervised_pushes) {
        (Some(push), Some(pushes)) if direct.push_lock.is_some() => Some((push, pushes)),
        _ => None,
    };
    let backend = match &followed {
        Some((_, pushes)) => std::borrow::Cow::Owned(BackendSetup { hooks_dir: Some(pushes.hooks_dir.clone()), ..cfg.backend.clone() }),
        None => std::borrow::Cow::Borrowed(&cfg.backend),
    };
    let mut std_cmd = backend.command(
        &direct.repo,
        &direct.repo_dir,
        vars.iter().cloned().chain(cfg.env.iter().map(|(k, v)| (k.clone(), OsString::from(v)))),
    );
    for var in ["CONTENT_TYPE", "CONTENT_LENGTH"] {
        if !vars.iter().any(|(k, _)| k == var) {
            std_cmd.env_remove(var);
        }
    }
    std_cmd.stdin(Stdio::piped());
    let mut cmd = Command::from(std_cmd);
    cmd.kill_on_drop(true);
    if let Some(lock) = &direct.push_lock {
        let fd = lock.as_fd().as_raw_fd();
        // SAFETY: between fork and exec the closure only calls fcntl (async-signal-safe), on a
        // descriptor the parent keeps open until the spawn returns.
        unsafe { cmd.pre_exec(move || grasp_state::contract::push_lock::keep_open_across_exec(fd)) };
    }
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", cfg.backend.running()))?;
    let Some(((updates, side_band, client), pushes)) = followed else {
        drop(direct.push_lock);
        tracing::debug!(request = %what, "git http: backend started without grasp-cgi");
        return run_child(body, child, what, cfg, shutdown, capture, None).await;
    };
    tracing::debug!(request = %what, "git http: push started with pre-receive alone; the relay releases after it");
    let prewarm = cfg.ref_cache.clone().map(|cache| Prewarm {
        cache,
        backend: cfg.backend.clone(),
        env: cfg.env.clone(),
        repo: direct.repo.clone(),
        repo_dir: direct.repo_dir.clone(),
    });
    let push = supervised_push::Push {
        repo: RepoId { owner: direct.repo.owner, identifier: direct.repo.identifier.clone(), space: direct.repo.space },
        repo_dir: direct.repo_dir.clone(),
        updates,
        side_band,
        client: Some(client),
        lock: direct.push_lock.take(),
        arrived: pushes.arrived.clone(),
        after: prewarm.map(|p| Box::new(move || drop(tokio::spawn(p.run()))) as Box<dyn FnOnce() + Send + Sync>),
    };
    let resp = run_child(body, child, what, cfg, shutdown, capture, None).await?;
    Ok(resp.map(|body| BodyExt::boxed(ReleasingBody::new(body, push))))
}

/// Answers a v2 `fetch` ([`Shortcut::Fetch`]) with `git upload-pack --stateless-rpc` started
/// without `git http-backend` ([`BackendSetup::upload_pack_command`]), the backend's own header
/// block `head` (learned from its `ls-refs` answers, [`RefCache::post_head`]) before
/// upload-pack's output: what the backend would have answered, one process start less.
async fn run_upload_pack(
    body: RequestBody,
    head: Bytes,
    what: String,
    direct: Direct,
    git_protocol: Option<Vec<u8>>,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
) -> Result<Response<Body>, String> {
    let mut cmd = Command::from(cfg.backend.upload_pack_command(&direct.repo, &direct.repo_dir, git_protocol.as_deref()));
    cmd.stdin(Stdio::piped()).kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| format!("running git upload-pack: {e}"))?;
    tracing::debug!(request = %what, "git http: upload-pack started without the backend");
    run_child(body, child, what, cfg, shutdown, None, Some(head)).await
}

/// Streams the request body into `child` and its CGI answer back as the response, supervised
/// ([`cgi_child`]): the shared half of [`run_cgi`] and [`run_backend`]. With `capture`, a
/// successful answer small enough is read whole first and kept in the ref cache once the
/// child has ended well.
async fn run_child(
    body: RequestBody,
    mut child: tokio::process::Child,
    what: String,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
    capture: Option<Capture>,
    known_head: Option<Bytes>,
) -> Result<Response<Body>, String> {
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let (control, exit) = match capture {
        Some(_) => {
            let (control, exit) = cgi_child::supervise_reporting(child, what, shutdown);
            (control, Some(exit))
        }
        None => (cgi_child::supervise(child, what, shutdown), None),
    };
    // Until the response head is out, any failure ends the child.
    let mut armed = AbortOnDrop(Some(control.clone()), Abandoned::BadAnswer);

    // Request body -> child stdin, concurrently with reading the response. A body that ends
    // short or stalls ends the request.
    let RequestBody { prefix, rest: mut body, started } = body;
    let (feeder, idle, min_rate) = (control.clone(), cfg.idle_timeout, cfg.min_rate);
    tokio::spawn(async move {
        // What was read already goes first.
        if stdin.write_all(&prefix).await.is_err() {
            return;
        }
        let (mut bytes, mut last_frame) = (prefix.len() as u64, tokio::time::Instant::now());
        loop {
            // The next frame is due within the idle timeout, and before the body falls below
            // the minimum rate.
            let mut due = last_frame + idle;
            if let Some(slow) = transfer::slow_at(bytes, idle, min_rate) {
                due = due.min(started + slow);
            }
            match tokio::time::timeout_at(due, body.frame()).await {
                // A body that stopped is idle, whatever its rate.
                Err(_) if last_frame.elapsed() >= idle => return feeder.abort(Abandoned::Idle(idle)),
                Err(_) if transfer::too_slow(bytes, started.elapsed(), idle, min_rate) => {
                    return feeder.abort(Abandoned::TooSlow(min_rate))
                }
                Err(_) => continue,
                Ok(Some(Err(_))) => return feeder.abort(Abandoned::ClientGone),
                Ok(None) => break,
                Ok(Some(Ok(frame))) => {
                    last_frame = tokio::time::Instant::now();
                    if let Some(data) = frame.data_ref() {
                        bytes += data.len() as u64;
                        if stdin.write_all(data).await.is_err() {
                            break; // the child answered without reading the whole body
                        }
                    }
                }
            }
        }
        let _ = stdin.shutdown().await;
    });

    let mut stdout = BufReader::new(stdout);
    let mut raw = Vec::new();
    let head = match &known_head {
        // The backend's header block, learned: the child (upload-pack) writes the body only.
        Some(known) => cgi::parse_head(known)
            .ok()
            .flatten()
            .ok_or_else(|| "the learned header block does not parse".to_string())?,
        None => loop {
            let n = stdout.read_until(b'\n', &mut raw).await.map_err(|e| format!("reading CGI headers: {e}"))?;
            if let Some(head) = cgi::parse_head(&raw).map_err(|e| format!("the CGI program sent a bad header block: {e}"))? {
                break head;
            }
            if n == 0 {
                return Err("the CGI program ended before sending its headers".into());
            }
        },
    };
    let status = head.status().map_err(|e| e.to_string())?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::from_u16(status).map_err(|e| format!("bad CGI Status {status}: {e}"))?;
    for (name, value) in response_headers(&head) {
        resp.headers_mut().append(name, value);
    }
    let mut pending = None;
    if let (Some(capture), Some(exit), 200) = (capture, exit, status) {
        let mut answer = Vec::new();
        (&mut stdout)
            .take(MAX_ANSWER_BYTES as u64 + 1)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| format!("reading the CGI answer: {e}"))?;
        if answer.len() <= MAX_ANSWER_BYTES {
            // The whole answer: the child's output ended.
            armed.0 = None;
            drop(control);
            let body = Bytes::from(answer);
            let headers = resp.headers().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
            capture.keep(Answer { status, headers, body: body.clone() }, Bytes::from(raw), exit);
            *resp.body_mut() = full(body);
            return Ok(resp);
        }
        // Too big to keep: what was read goes first, the rest as it comes.
        pending = Some(Bytes::from(answer));
    }
    armed.0 = None;
    let length = resp.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse().ok());
    *resp.body_mut() = BodyExt::boxed(CgiBody {
        stdout,
        pending,
        control: Some(control),
        buf: vec![0; 32 * 1024].into_boxed_slice(),
        delivery: Delivery { length, sent: 0 },
    });
    Ok(resp)
}

/// A CGI header block's fields (its `Status` aside) as response headers, in order; a field
/// that is not a valid HTTP header is dropped, with a warning.
fn response_headers(head: &cgi::CgiHead) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = Vec::new();
    for (name, value) in head.fields() {
        match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
            (Ok(n), Ok(v)) => headers.push((n, v)),
            _ => tracing::warn!(header = name, "git http: dropping invalid CGI header"),
        }
    }
    headers
}

/// Ends the child with the given reason when dropped still armed.
struct AbortOnDrop(Option<CgiControl>, Abandoned);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(control) = self.0.take() {
            control.abort(self.1);
        }
    }
}

/// The rest of the child's stdout as a streamed body. Dropping it before the end ends the child
/// (and its git processes); at the end the supervisor reaps it.
struct CgiBody {
    stdout: BufReader<ChildStdout>,
    /// Output read before the body was made, sent first.
    pending: Option<Bytes>,
    /// `None` once the body has ended.
    control: Option<CgiControl>,
    buf: Box<[u8]>,
    delivery: Delivery,
}

/// How much of an answer went out, against its `Content-Length`.
#[derive(Debug, Clone, Copy)]
struct Delivery {
    length: Option<u64>,
    sent: u64,
}

impl Delivery {
    /// Why the child is ended when its body is dropped before its output ended: an answer of a
    /// known length sent whole was delivered (hyper stops reading there; the child is ended
    /// quietly), anything else was not.
    fn dropped(&self) -> Abandoned {
        match self.length {
            Some(length) if self.sent >= length => Abandoned::Answered,
            _ => Abandoned::AnswerUndelivered,
        }
    }
}

impl Drop for CgiBody {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            control.abort(self.delivery.dropped());
        }
    }
}

impl hyper::body::Body for CgiBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.control.is_none() {
            return Poll::Ready(None);
        }
        if let Some(pending) = this.pending.take() {
            this.delivery.sent += pending.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(pending))));
        }
        let mut rb = ReadBuf::new(&mut this.buf);
        match Pin::new(&mut this.stdout).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                if let Some(control) = this.control.take() {
                    control.abort(Abandoned::BadAnswer);
                }
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                this.control = None; // finished: the supervisor reaps the child
                Poll::Ready(None)
            }
            Poll::Ready(Ok(())) => {
                this.delivery.sent += rb.filled().len() as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(rb.filled())))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_dropped_after_its_whole_length_was_answered() {
        let sent = |length, sent| Delivery { length, sent }.dropped();
        assert_eq!(sent(Some(5), 5), Abandoned::Answered);
        assert_eq!(sent(Some(5), 4), Abandoned::AnswerUndelivered);
        assert_eq!(sent(None, 1 << 20), Abandoned::AnswerUndelivered, "no length: only the end of the output tells");
        assert_eq!(sent(Some(0), 0), Abandoned::Answered);
    }

    #[test]
    fn decodes_paths_for_path_info() {
        assert_eq!(
            decode_path("/npub1x/my%20repo.git/info/refs").unwrap(),
            OsString::from("/npub1x/my repo.git/info/refs")
        );
        assert_eq!(decode_path("/a%2Fb").unwrap(), OsString::from("/a/b"));
        assert_eq!(
            decode_path("/%FF").unwrap(),
            OsString::from_vec(vec![b'/', 0xff])
        );
        for bad in ["/a%00b", "/a%zz", "/a%2", "/%"] {
            assert_eq!(decode_path(bad), None, "{bad}");
        }
    }
}
