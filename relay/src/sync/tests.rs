//! Integration-style tests of the syncer against real git over smart HTTP.
//!
//! Each test serves bare repositories with `git http-backend` behind a tiny hyper CGI server on
//! 127.0.0.1 (so `allow_private` is on), and drives the [`Syncer`] with a mock context and a
//! manual clock: no test waits for real backoff time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::*;
use grasp_state::git::clone_sources::SourceTrust;

// ---------------------------------------------------------------- git fixtures

fn run_git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn init_bare(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    run_git(path, &["init", "--quiet", "--bare"]);
}

/// A work repository with two commits: `a`, then its child `b`.
struct History {
    work: PathBuf,
    a: String,
    b: String,
}

fn history(dir: &Path) -> History {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    run_git(&work, &["init", "--quiet"]);
    run_git(&work, &["commit", "--quiet", "--allow-empty", "-m", "a"]);
    let a = run_git(&work, &["rev-parse", "HEAD"]);
    run_git(&work, &["commit", "--quiet", "--allow-empty", "-m", "b"]);
    let b = run_git(&work, &["rev-parse", "HEAD"]);
    History { work, a, b }
}

/// Publish `oid` (and its history) as `refs/heads/main` of the bare repository `bare`.
/// A repository `name` served from `<dir>/served`, holding `history` up to the commit `tip` picks,
/// and an empty bare `<dir>/dst.git` to fetch into: (the served root, the history, dst).
fn served(dir: &Path, name: &str, tip: fn(&History) -> &String) -> (PathBuf, History, PathBuf) {
    let root = dir.join("served");
    let history = history(dir);
    init_bare(&root.join(name));
    publish(&history, &root.join(name), tip(&history));
    let dst = dir.join("dst.git");
    init_bare(&dst);
    (root, history, dst)
}

fn publish(history: &History, bare: &Path, oid: &str) {
    let bare = bare.to_str().unwrap();
    run_git(
        &history.work,
        &["push", "--quiet", bare, &format!("{oid}:refs/heads/main")],
    );
}

/// Sync quarantines left in the repository's object directory (removed off the runtime: polled).
fn quarantines(bare: &Path) -> usize {
    let count = || {
        std::fs::read_dir(bare.join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("tmp_objdir-incoming-grasp-sync-"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    count()
}

fn refs(bare: &Path) -> String {
    run_git(bare, &["for-each-ref"])
}

// ---------------------------------------------------------------- git http-backend server

struct ServerState {
    root: PathBuf,
    /// Requests for `info/refs` wait while the gate is closed (false).
    gate: watch::Receiver<bool>,
    current: AtomicUsize,
    max: AtomicUsize,
    paths: Mutex<Vec<String>>,
    /// Evaluated at every request; results in `observations`.
    observer: Mutex<Option<Observer>>,
    observations: Mutex<Vec<bool>>,
}

type Observer = Box<dyn Fn() -> bool + Send + Sync>;

struct GitServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    gate: watch::Sender<bool>,
}

impl GitServer {
    async fn start(root: &Path) -> GitServer {
        let (gate, gate_rx) = watch::channel(true);
        let state = Arc::new(ServerState {
            root: root.to_path_buf(),
            gate: gate_rx,
            current: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
            paths: Mutex::new(Vec::new()),
            observer: Mutex::new(None),
            observations: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept_state = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                let service = hyper::service::service_fn(move |req| cgi(req, state.clone()));
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        GitServer { addr, state, gate }
    }

    fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}", self.addr)
    }

    fn requests_for(&self, repo: &str) -> usize {
        let prefix = format!("/{repo}/");
        self.state
            .paths
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(&prefix))
            .count()
    }

    fn requests(&self) -> usize {
        self.state.paths.lock().unwrap().len()
    }
}

/// Counts a request as in flight while alive.
struct InFlight<'a>(&'a ServerState);

impl<'a> InFlight<'a> {
    fn enter(state: &'a ServerState) -> Self {
        let now = state.current.fetch_add(1, Ordering::SeqCst) + 1;
        state.max.fetch_max(now, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Run `git http-backend` as a CGI for one request.
async fn cgi(
    req: Request<Incoming>,
    state: Arc<ServerState>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    state.paths.lock().unwrap().push(path.clone());
    if let Some(observer) = state.observer.lock().unwrap().as_ref() {
        let observation = observer();
        state.observations.lock().unwrap().push(observation);
    }
    let _in_flight = InFlight::enter(&state);
    if path.ends_with("/info/refs") {
        let mut gate = state.gate.clone();
        while !*gate.borrow_and_update() {
            if gate.changed().await.is_err() {
                break;
            }
        }
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string)
    };
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &state.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", &path)
        .env("REQUEST_METHOD", req.method().as_str())
        .env("QUERY_STRING", req.uri().query().unwrap_or(""))
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default());
    if let Some(protocol) = header("git-protocol") {
        command.env("GIT_PROTOCOL", protocol);
    }
    if let Some(encoding) = header("content-encoding") {
        command.env("HTTP_CONTENT_ENCODING", encoding);
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    command
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let write = async move {
        let _ = stdin.write_all(&body).await;
    };
    let read = async move {
        let mut output = Vec::new();
        let _ = stdout.read_to_end(&mut output).await;
        output
    };
    let ((), output) = tokio::join!(write, read);
    let _ = child.wait().await;

    let (head, body) = match find(&output, b"\r\n\r\n") {
        Some(at) => (&output[..at], &output[at + 4..]),
        None => match find(&output, b"\n\n") {
            Some(at) => (&output[..at], &output[at + 2..]),
            None => (&output[..0], &output[..]),
        },
    };
    let mut response = Response::builder();
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value
                .split(' ')
                .next()
                .unwrap_or("500")
                .parse()
                .unwrap_or(500);
            response = response.status(StatusCode::from_u16(code).unwrap());
        } else {
            response = response.header(name.trim(), value);
        }
    }
    Ok(response
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

// ---------------------------------------------------------------- mock context and clock

/// Repositories and the oids purgatory waits for in each.
type Waiting = Vec<(PathBuf, Vec<String>)>;

#[derive(Default)]
struct MockContext {
    /// identifier -> what purgatory waits for
    waiting: Mutex<HashMap<String, Waiting>>,
    urls: Mutex<HashMap<String, Vec<CloneSource>>>,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    candidate_calls: AtomicUsize,
    process_calls: AtomicUsize,
    running: Mutex<Vec<(String, bool)>>,
    /// identifier -> how many more releases fail: its events stay held although their data is
    /// all there (a store error).
    stuck: Mutex<HashMap<String, (PathBuf, usize)>>,
}

impl MockContext {
    fn wait_for(&self, identifier: &str, repo: &Path, oids: &[&str], urls: &[String]) {
        self.waiting
            .lock()
            .unwrap()
            .entry(identifier.to_string())
            .or_default()
            .push((
                repo.to_path_buf(),
                oids.iter().map(|oid| oid.to_string()).collect(),
            ));
        let sources = urls.iter().map(|url| CloneSource::new(SourceTrust::Maintainers, vec![url.clone()])).collect();
        self.urls
            .lock()
            .unwrap()
            .insert(identifier.to_string(), sources);
    }

    /// Like [`MockContext::wait_for`], with the clone URLs grouped into sources.
    fn wait_for_sources(&self, identifier: &str, repo: &Path, oids: &[&str], sources: Vec<CloneSource>) {
        self.wait_for(identifier, repo, oids, &[]);
        self.urls.lock().unwrap().insert(identifier.to_string(), sources);
    }

    fn lock_of(&self, repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap()
            .entry(repo.to_path_buf())
            .or_default()
            .clone()
    }

    fn running_log(&self) -> Vec<(String, bool)> {
        self.running.lock().unwrap().clone()
    }
}

impl SyncContext for MockContext {
    type RepoGuard = tokio::sync::OwnedMutexGuard<()>;

    /// Purgatory waits for whatever of its oids the repository still lacks.
    async fn needed(&self, identifier: &str) -> Vec<SyncTarget> {
        let waiting = self
            .waiting
            .lock()
            .unwrap()
            .get(identifier)
            .cloned()
            .unwrap_or_default();
        let mut targets = Vec::new();
        if let Some((repo, _)) = self.stuck.lock().unwrap().get(identifier) {
            targets.push(SyncTarget { repo: repo.clone(), oids: Vec::new() });
        }
        for (repo, oids) in waiting {
            let missing = missing_objects(&repo, &oids).await.unwrap();
            if !missing.is_empty() {
                targets.push(SyncTarget {
                    repo,
                    oids: missing,
                });
            }
        }
        targets
    }

    async fn candidate_urls(&self, identifier: &str) -> Vec<CloneSource> {
        self.candidate_calls.fetch_add(1, Ordering::SeqCst);
        self.urls
            .lock()
            .unwrap()
            .get(identifier)
            .cloned()
            .unwrap_or_default()
    }

    async fn lock_repo(&self, repo: &Path) -> Option<Self::RepoGuard> {
        Some(self.lock_of(repo).lock_owned().await)
    }

    async fn process(&self, identifier: &str) -> usize {
        self.process_calls.fetch_add(1, Ordering::SeqCst);
        let mut stuck = self.stuck.lock().unwrap();
        match stuck.get_mut(identifier) {
            Some((_, 0)) => {
                stuck.remove(identifier);
                1
            }
            Some((_, failures)) => {
                *failures -= 1;
                0
            }
            None => 1,
        }
    }

    fn set_sync_running(&self, identifier: &str, running: bool) {
        self.running
            .lock()
            .unwrap()
            .push((identifier.to_string(), running));
    }
}

#[derive(Clone)]
struct ManualClock(Arc<Mutex<Instant>>);

impl ManualClock {
    fn new() -> Self {
        ManualClock(Arc::new(Mutex::new(Instant::now())))
    }

    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }

    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }

    fn clock(&self) -> Clock {
        let inner = self.0.clone();
        Arc::new(move || *inner.lock().unwrap())
    }
}

fn test_config() -> SyncConfig {
    SyncConfig {
        allow_private: true,
        tick: Duration::from_millis(10),
        fetch: FetchOptions {
            timeout: Duration::from_secs(60),
            ..FetchOptions::default()
        },
        ..SyncConfig::default()
    }
}

/// Start `syncer.run` in the background; dropping the returned sender stops it.
fn spawn_syncer(
    syncer: &Syncer<MockContext>,
) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(syncer.clone().run(stop_rx));
    (stop, handle)
}

async fn stop(stop: watch::Sender<bool>, handle: tokio::task::JoinHandle<()>) {
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), handle)
        .await
        .unwrap()
        .unwrap();
}

/// Poll `condition` until it holds; fail after 30 s. `tick` runs before each check.
async fn wait_until(what: &str, mut tick: impl FnMut(), mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        tick();
        if condition() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn fetch_by_oid_drops_what_the_remote_lacks_and_writes_no_refs() {
    let dir = tempfile::tempdir().unwrap();
    let (root, history, dst) = served(dir.path(), "src.git", |h| &h.b);
    let server = GitServer::start(&root).await;

    let absent = "0123456789abcdef0123456789abcdef01234567".to_string();
    let wanted = vec![
        history.a.clone(),
        absent.clone(),
        history.b.clone(),
        "not-an-oid".to_string(),
    ];
    let outcome = fetch_oids(
        &dst,
        &server.url("src.git"),
        &wanted,
        &FetchOptions::default(),
    )
    .await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.fetched, vec![history.a.clone(), history.b.clone()]);
    assert_eq!(
        outcome.missing_on_remote,
        vec!["not-an-oid".to_string(), absent]
    );
    assert!(
        missing_objects(&dst, &[history.a.clone(), history.b.clone()])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(refs(&dst), "", "sync never writes refs");
}

#[tokio::test]
async fn git_connects_to_the_pinned_address_not_a_new_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let (root, history, dst) = served(dir.path(), "src.git", |h| &h.a);
    let server = GitServer::start(&root).await;
    let port = server.addr.port();
    // `.invalid` never resolves: the fetch can only work through the pinned address.
    let url = format!("http://pinned.invalid:{port}/src.git");
    let safe = SafeUrl {
        url: CloneUrl::parse(&url).unwrap(),
        addresses: vec![server.addr],
    };
    let pinned = FetchOptions {
        curl_resolve: safe.curl_resolve(),
        ..FetchOptions::default()
    };
    let wanted = vec![history.a.clone()];
    let unpinned = fetch_oids(&dst, &url, &wanted, &FetchOptions::default()).await;
    assert!(unpinned.fetched.is_empty() && unpinned.error.is_some());
    let outcome = fetch_oids(&dst, &url, &wanted, &pinned).await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.fetched, wanted);
}

#[tokio::test]
async fn fetch_from_an_unreachable_url_reports_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("dst.git");
    init_bare(&dst);
    let closed = closed_port().await;
    let oid = "0123456789abcdef0123456789abcdef01234567".to_string();
    let outcome = fetch_oids(
        &dst,
        &format!("http://{closed}/x.git"),
        &[oid],
        &FetchOptions::default(),
    )
    .await;
    assert!(outcome.fetched.is_empty());
    assert!(
        outcome.missing_on_remote.is_empty(),
        "unreachable is not lacking"
    );
    assert!(outcome.error.is_some());
}

/// An address nothing listens on.
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

#[tokio::test]
async fn missing_oids_are_fetched_then_processed_skipping_unsafe_and_own_urls() {
    let dir = tempfile::tempdir().unwrap();
    let (root, history, dst) = served(dir.path(), "src.git", |h| &h.b);
    let server = GitServer::start(&root).await;
    let own = GitServer::start(&root).await;

    let clock = ManualClock::new();
    let config = SyncConfig {
        own_hosts: vec![own.addr.to_string()],
        ..test_config()
    };
    let syncer = Syncer::with_clock(MockContext::default(), config, clock.clock());
    let urls = vec![
        own.url("src.git"),
        "ssh://git@example.com/src.git".to_string(),
        "file:///etc".to_string(),
        server.url("src.git"),
    ];
    syncer
        .context()
        .wait_for("repo1", &dst, &[&history.a, &history.b], &urls);
    // No request to the remote happens while the syncer holds the repository lock: a slow
    // remote must not stall pushes (the objects land in a quarantine first).
    let lock = syncer.context().lock_of(&dst);
    *server.state.observer.lock().unwrap() = Some(Box::new(move || lock.try_lock().is_ok()));
    let (stopper, handle) = spawn_syncer(&syncer);

    syncer.enqueue("repo1", Origin::User);
    assert_eq!(syncer.stats().queue_length, 1);
    clock.advance(Duration::from_secs(180));
    wait_until(
        "the sync completes",
        || {},
        || syncer.entry("repo1").is_none(),
    )
    .await;

    let ctx = syncer.context();
    assert!(
        missing_objects(&dst, &[history.a.clone(), history.b.clone()])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(ctx.process_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        ctx.running_log(),
        vec![("repo1".to_string(), true), ("repo1".to_string(), false)]
    );
    assert_eq!(own.requests(), 0, "this server's own URL is never fetched");
    assert!(server.requests() > 0);
    assert_eq!(refs(&dst), "");
    let observations = server.state.observations.lock().unwrap().clone();
    assert!(
        !observations.is_empty() && observations.iter().all(|free| *free),
        "{observations:?}"
    );
    assert_eq!(quarantines(&dst), 0, "the quarantine is gone");
    assert_eq!(syncer.stats().queue_length, 0);
    stop(stopper, handle).await;
}

#[tokio::test]
async fn urls_are_tried_in_turn_and_the_sync_stops_when_complete() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("served");
    let history = history(dir.path());
    for (repo, tip) in [
        ("only-a.git", &history.a),
        ("both.git", &history.b),
        ("unused.git", &history.b),
    ] {
        init_bare(&root.join(repo));
        publish(&history, &root.join(repo), tip);
    }
    let dst = dir.path().join("dst.git");
    init_bare(&dst);
    let server = GitServer::start(&root).await;

    let clock = ManualClock::new();
    let syncer = Syncer::with_clock(MockContext::default(), test_config(), clock.clock());
    let urls = vec![
        server.url("only-a.git"),
        server.url("both.git"),
        server.url("unused.git"),
    ];
    syncer
        .context()
        .wait_for("repo1", &dst, &[&history.a, &history.b], &urls);
    let (stopper, handle) = spawn_syncer(&syncer);

    syncer.enqueue("repo1", Origin::Sync);
    clock.advance(Duration::from_millis(500));
    wait_until(
        "the sync completes",
        || {},
        || syncer.entry("repo1").is_none(),
    )
    .await;

    assert!(
        missing_objects(&dst, &[history.a.clone(), history.b.clone()])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(server.requests_for("only-a.git") > 0);
    assert!(server.requests_for("both.git") > 0);
    assert_eq!(
        server.requests_for("unused.git"),
        0,
        "stopped once nothing was missing"
    );
    // Released after each URL that brought something.
    assert_eq!(syncer.context().process_calls.load(Ordering::SeqCst), 2);
    stop(stopper, handle).await;
}

#[tokio::test]
async fn an_unreachable_url_backs_off_20_40_then_120_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("dst.git");
    init_bare(&dst);
    let closed = closed_port().await;

    let clock = ManualClock::new();
    let syncer = Syncer::with_clock(MockContext::default(), test_config(), clock.clock());
    let urls = vec![format!("http://{closed}/x.git")];
    syncer.context().wait_for(
        "repo1",
        &dst,
        &["0123456789abcdef0123456789abcdef01234567"],
        &urls,
    );
    let (stopper, handle) = spawn_syncer(&syncer);

    syncer.enqueue("repo1", Origin::Sync);
    clock.advance(Duration::from_millis(500));
    let mut delays = Vec::new();
    for attempt in 1..=4u32 {
        wait_until(
            &format!("attempt {attempt} finished"),
            || {},
            || {
                syncer
                    .entry("repo1")
                    .is_some_and(|e| e.attempt_count == attempt && !e.in_progress)
            },
        )
        .await;
        assert_eq!(
            syncer.context().candidate_calls.load(Ordering::SeqCst),
            attempt as usize
        );
        let next = syncer.entry("repo1").unwrap().next_attempt;
        let delay = next - clock.now();
        delays.push(delay.as_secs());
        clock.advance(delay);
    }
    assert_eq!(delays, vec![20, 40, 120, 120]);
    assert_eq!(syncer.context().process_calls.load(Ordering::SeqCst), 0);
    let running = syncer.context().running_log();
    assert!(running.len() >= 8 && running.chunks(2).all(|pair| pair[0].1 && !pair[1].1));
    let stats = syncer.stats();
    let domain = stats
        .domains
        .iter()
        .find(|d| d.domain == "127.0.0.1")
        .expect("domain stats");
    assert!(domain.last_error.is_some(), "{stats:?}");
    serde_json::to_string(&stats).unwrap();

    // A new event resets the backoff.
    syncer.enqueue("repo1", Origin::Sync);
    assert_eq!(syncer.entry("repo1").unwrap().attempt_count, 0);
    stop(stopper, handle).await;
}

#[tokio::test]
async fn the_throttle_caps_concurrent_fetches_per_domain() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("served");
    let history = history(dir.path());
    init_bare(&root.join("src.git"));
    publish(&history, &root.join("src.git"), &history.a);
    let server = GitServer::start(&root).await;
    server.gate.send(false).unwrap();

    let clock = ManualClock::new();
    let config = SyncConfig {
        throttle: ThrottleLimits {
            max_concurrent: 2,
            ..ThrottleLimits::default()
        },
        ..test_config()
    };
    let syncer = Syncer::with_clock(MockContext::default(), config, clock.clock());
    let identifiers: Vec<String> = (0..5).map(|i| format!("repo{i}")).collect();
    let mut repos = Vec::new();
    for identifier in &identifiers {
        let dst = dir.path().join(format!("{identifier}.git"));
        init_bare(&dst);
        syncer
            .context()
            .wait_for(identifier, &dst, &[&history.a], &[server.url("src.git")]);
        repos.push(dst);
    }
    let (stopper, handle) = spawn_syncer(&syncer);
    for identifier in &identifiers {
        syncer.enqueue(identifier, Origin::Sync);
    }
    clock.advance(Duration::from_millis(500));

    // Two fetches hang at the server; the other three were turned away and wait in line.
    wait_until(
        "two fetches in flight and three waiting",
        || {},
        || {
            let stats = syncer.stats();
            stats.in_progress.len() == 2
                && stats
                    .domains
                    .first()
                    .is_some_and(|d| d.in_flight == 2 && d.waiting == 3)
                && server.state.current.load(Ordering::SeqCst) == 2
        },
    )
    .await;
    assert_eq!(server.state.max.load(Ordering::SeqCst), 2);
    // The turned-away identifiers come back when the domain may free, without backoff.
    let retry_at = clock.now() + ThrottleLimits::default().concurrency_retry;
    let turned_away: Vec<SyncQueueEntry> = identifiers
        .iter()
        .filter_map(|id| syncer.entry(id))
        .filter(|entry| !entry.in_progress)
        .collect();
    assert_eq!(turned_away.len(), 3);
    assert!(turned_away
        .iter()
        .all(|entry| entry.attempt_count == 0 && entry.next_attempt == retry_at));

    server.gate.send(true).unwrap();
    wait_until(
        "every identifier synced",
        || clock.advance(Duration::from_millis(100)),
        || identifiers.iter().all(|id| syncer.entry(id).is_none()),
    )
    .await;
    for repo in &repos {
        assert!(missing_objects(repo, std::slice::from_ref(&history.a))
            .await
            .unwrap()
            .is_empty());
    }
    assert_eq!(
        server.state.max.load(Ordering::SeqCst),
        2,
        "never more than two at once"
    );
    stop(stopper, handle).await;
}

#[tokio::test]
async fn a_release_that_did_not_finish_is_retried_with_backoff_without_fetching() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("dst.git");
    init_bare(&repo);
    let clock = ManualClock::new();
    let syncer = Syncer::with_clock(MockContext::default(), test_config(), clock.clock());
    // Held although the data is here: the first release after this attempt fails once more.
    syncer.context().stuck.lock().unwrap().insert("repo1".into(), (repo.clone(), 1));
    let (stopper, handle) = spawn_syncer(&syncer);
    syncer.enqueue("repo1", Origin::Sync);
    clock.advance(Duration::from_secs(1));
    let ctx = syncer.context();
    wait_until("the release is retried", || {}, || ctx.process_calls.load(Ordering::SeqCst) == 1).await;
    wait_until("a backoff is scheduled", || {}, || syncer.entry("repo1").is_some_and(|e| !e.in_progress && e.attempt_count == 1)).await;
    clock.advance(Duration::from_secs(20));
    wait_until("the retry succeeds", || {}, || syncer.entry("repo1").is_none()).await;
    assert_eq!(ctx.process_calls.load(Ordering::SeqCst), 2);
    assert_eq!(ctx.candidate_calls.load(Ordering::SeqCst), 0, "nothing to fetch: no URL is asked");
    stop(stopper, handle).await;
}

/// Bytes that do not compress (xorshift), so a pack holding them is about as large.
fn incompressible(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn a_fetch_bringing_more_than_its_cap_is_cut_off_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("served");
    let history = history(dir.path());
    std::fs::write(history.work.join("big.bin"), incompressible(4 << 20)).unwrap();
    run_git(&history.work, &["add", "big.bin"]);
    run_git(&history.work, &["commit", "--quiet", "-m", "big"]);
    let big = run_git(&history.work, &["rev-parse", "HEAD"]);
    init_bare(&root.join("src.git"));
    publish(&history, &root.join("src.git"), &big);
    let dst = dir.path().join("dst.git");
    init_bare(&dst);
    let server = GitServer::start(&root).await;
    let quarantine = Quarantine::create(&dst).await.unwrap();

    let capped = FetchOptions { max_bytes: 1 << 20, ..FetchOptions::default() };
    let outcome = fetch_oids(quarantine.path(), &server.url("src.git"), std::slice::from_ref(&big), &capped).await;
    assert!(outcome.fetched.is_empty(), "{outcome:?}");
    let error = outcome.error.unwrap_or_default();
    assert!(error.contains("more than 1048576 bytes") && error.contains("--sync-max-fetch-bytes"), "{error}");
    drop(quarantine);
    assert_eq!(quarantines(&dst), 0, "the cut-off fetch's quarantine stays behind");
    assert_eq!(missing_objects(&dst, std::slice::from_ref(&big)).await.unwrap(), vec![big.clone()]);

    // Within the cap the same fetch works.
    let quarantine = Quarantine::create(&dst).await.unwrap();
    let roomy = FetchOptions { max_bytes: 8 << 20, ..FetchOptions::default() };
    let outcome = fetch_oids(quarantine.path(), &server.url("src.git"), std::slice::from_ref(&big), &roomy).await;
    assert_eq!((outcome.error, outcome.fetched), (None, vec![big]));
}

#[tokio::test]
async fn an_attempt_tries_the_trusted_urls_first_and_at_most_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (root, history, dst) = served(dir.path(), "owner.git", |h| &h.a);
    let server = GitServer::start(&root).await;

    let clock = ManualClock::new();
    let syncer = Syncer::with_clock(MockContext::default(), test_config(), clock.clock());
    // A stranger lists 30 URLs (none has the data), before the owner's one in the given order;
    // a pull request lists 30 more.
    let stranger: Vec<String> = (0..30).map(|i| server.url(&format!("s{i}.git"))).collect();
    let proposed: Vec<String> = (0..30).map(|i| server.url(&format!("p{i}.git"))).collect();
    syncer.context().wait_for_sources(
        "repo1",
        &dst,
        &[&history.a, &history.b],
        vec![
            CloneSource::new(SourceTrust::OtherOwner, stranger),
            CloneSource::new(SourceTrust::PullRequest, proposed),
            CloneSource::new(SourceTrust::Maintainers, vec![server.url("owner.git")]),
        ],
    );
    let (stopper, handle) = spawn_syncer(&syncer);
    syncer.enqueue("repo1", Origin::Sync);
    clock.advance(Duration::from_millis(500));
    wait_until(
        "the attempt ends",
        || {},
        || syncer.context().running_log().contains(&("repo1".to_string(), false)),
    )
    .await;
    // The owner's URL came first: what it has is here.
    assert!(missing_objects(&dst, std::slice::from_ref(&history.a)).await.unwrap().is_empty());
    let tried = |prefix: &str| (0..30).filter(|i| server.requests_for(&format!("{prefix}{i}.git")) > 0).count();
    assert_eq!(tried("s"), grasp_state::git::clone_sources::URLS_PER_SOURCE, "the stranger gives ten");
    assert_eq!(tried("p"), grasp_state::git::clone_sources::URLS_PER_ATTEMPT - 11, "the pull request fills the attempt");
    stop(stopper, handle).await;
}

#[tokio::test]
async fn an_attempt_ends_at_its_deadline_while_a_remote_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let (root, history, dst) = served(dir.path(), "slow.git", |h| &h.a);
    let server = GitServer::start(&root).await;
    server.gate.send(false).unwrap(); // `info/refs` hangs

    let clock = ManualClock::new();
    let config = SyncConfig {
        attempt_timeout: Duration::from_millis(500),
        ..test_config()
    };
    let syncer = Syncer::with_clock(MockContext::default(), config, clock.clock());
    syncer.context().wait_for("repo1", &dst, &[&history.a], &[server.url("slow.git")]);
    let (stopper, handle) = spawn_syncer(&syncer);
    syncer.enqueue("repo1", Origin::Sync);
    clock.advance(Duration::from_millis(500));
    let started = Instant::now();
    // The fetch timeout is 60 s: only the attempt's deadline ends it this soon.
    wait_until(
        "the attempt ends",
        || {},
        || syncer.context().running_log().contains(&("repo1".to_string(), false)),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let entry = syncer.entry("repo1").expect("still queued");
    assert_eq!((entry.in_progress, entry.attempt_count), (false, 1), "backs off as incomplete");
    assert_eq!(quarantines(&dst), 0, "the hanging fetch's quarantine is gone");
    server.gate.send(true).unwrap();
    stop(stopper, handle).await;
}
