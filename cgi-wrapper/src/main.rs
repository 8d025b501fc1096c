//! grasp-cgi: the CGI/1.1 program serving GRASP repositories over git smart HTTP.
//!
//! Used the same way under nginx + fcgiwrap and by grasp-relay's own listener. For a request
//! to `/<npub>/<identifier>.git<rest>` (CGI `PATH_INFO`, decoded as RFC 3875 says) it:
//! - answers `OPTIONS` with 204 and CORS headers;
//! - validates the path with [`grasp_state::names::identifier::parse_repo_path`] and answers 404 (HTML
//!   for browsers, text otherwise) for malformed paths and repositories that do not exist;
//! - with `--grasp06`, serves GRASP-06 contributor repositories at `/prs/<npub>/<identifier>.git`
//!   too: a path with no repository answers a ref advertisement as an empty repository (nothing
//!   is created) and has the relay create it for a push's `POST` (`POST /v1/prs-repo`); without
//!   it every `/prs/` path is a 404;
//! - serves the repository page for `GET /<npub>/<id>.git` (and `.git/`), with the data the
//!   relay's hook API gives (`--data-dir` / `GRASP_DATA_DIR`; [`pages`], [`relay_api`]);
//! - otherwise runs stock `git http-backend` with `GIT_PROJECT_ROOT`, `GIT_HTTP_EXPORT_ALL`, and
//!   the GRASP git config passed per request (`GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`), so repos
//!   created by older versions behave too. Request bodies go to the backend untouched (it
//!   inflates `Content-Encoding: gzip` itself from `HTTP_CONTENT_ENCODING`); its output is
//!   streamed, with the CORS headers inserted into its CGI header block. `HEAD` runs as `GET`
//!   with the body dropped.
//!
//! Every response carries the CORS headers GRASP requires ([`grasp_state::contract::cors`], the same
//! definition the relay uses). `git http-backend` runs under the relay's git environment policy
//! ([`grasp_state::contract::git_env`]: no inherited `GIT_*`, no system or global git configuration).
//!
//! Pushes to one repository are serialised across processes: `POST .../git-receive-pack` holds
//! the repository's push lock ([`PushLock`], `<repo>/grasp.lock`) while the backend (and so the
//! hooks) run. It waits for it at most `--push-lock-wait`: while another push to the repository
//! (anyone's, however slow) holds it past that, the push is answered `503 Service Unavailable`
//! with `Retry-After` and a message saying so, never left waiting. The ref advertisement of a
//! push (`GET .../info/refs?service=git-receive-pack`) waits the same bound and lets go at once,
//! so `git push` prints that message (`remote: ...`) before it sends anything. Anything else that
//! must not interleave with a push takes the same lock, but never from code the hooks wait on
//! (that would deadlock).
//!
//! Under grasp-relay's own listener, the relay starts `git http-backend` itself for a plain git
//! request to a public service's existing repository whose push lock is free, with the same
//! command ([`grasp_state::contract::git_backend`]), and leaves the rest to grasp-cgi. There
//! ([`env_names::CGI_SUPERVISED`]) a git request, once its path,
//! repository, private gate (and for a push, its push lock) are checked, becomes `git
//! http-backend` by exec: the relay adds the CORS headers, bounds the body and ends the process
//! group itself. A push's lock stays open across the exec, so the backend and everything it
//! starts (receive-pack, the hooks) hold it until the last of them ends.
//!
//! An abandoned request ends: `git http-backend` runs in its own process group, grasp-cgi feeds
//! it the request body itself and kills the group when the body ends short of
//! `CONTENT_LENGTH`, stalls for `--idle-timeout`, or grasp-cgi is told to stop ([`child`]).
//!
//! Private services (GRASP-08): while `<data>/private-service` or `<git root>/private-service`
//! exists (or cannot be ruled out: an unreadable location counts as marked), every repository request
//! is first put to the relay (`POST /v1/git-auth` on its loopback API, with the request's
//! `Authorization` header) before anything else happens; refused, unknown-repository and
//! unreachable-relay requests alike get `401` with `WWW-Authenticate: Nostr` and an empty body
//! ([`private_gate`]). docs/protocol.md#trust.
//!
//! Configuration: `--git-root` / `GRASP_GIT_ROOT` (required), `--hooks-dir` / `GRASP_HOOKS_DIR`
//! (optional, becomes `core.hooksPath`), `--data-dir` / `GRASP_DATA_DIR` (the relay's data
//! directory, for the repository page and a private service's checks; default: the parent of the
//! git root), `--git` / `GRASP_GIT` (default `git`), `--http-backend` / `GRASP_GIT_HTTP_BACKEND`
//! (git's `git-http-backend` program, run directly: one process start less per request than
//! `<git> http-backend`; the relay sets it from `git --exec-path`),
//! `--idle-timeout` / `GRASP_GIT_IDLE_TIMEOUT` (seconds, default 60), `--min-rate` /
//! `GRASP_GIT_MIN_RATE` (bytes per second a request body must average past the idle timeout,
//! default 1024, 0: none), `--push-lock-wait` / `GRASP_PUSH_LOCK_WAIT` (seconds, default 10),
//! `--max-push-bytes` / `GRASP_MAX_PUSH_BYTES` (git's `receive.maxInputSize`; default none),
//! `--max-pr-push-bytes` / `GRASP_MAX_PR_PUSH_BYTES` (the same for contributor repositories),
//! `--grasp06` / `GRASP_GRASP06` (serve `/prs/`, default off).

mod child;
mod pages;
mod relay_api;

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::time::Duration;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;
use clap::Parser;
use grasp_state::names::identifier::{parse_repo_path, RepoLayout, RepoSpace, RepoUrlPath};
use grasp_state::git::prs::{empty_advertisement, GitService};
use grasp_state::contract::push_lock::{self, PushLock, PushLockError};
use grasp_state::contract::git_backend::{self, BackendSetup, Service};
use grasp_state::contract::{cgi, cors, env_names};

/// CGI program serving GRASP repositories (/<npub>/<identifier>.git) through git http-backend.
/// The request comes from the CGI environment (PATH_INFO, REQUEST_METHOD, QUERY_STRING, ...).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Root directory holding <npub>/<identifier>.git bare repositories.
    #[arg(long, env = env_names::GIT_ROOT)]
    git_root: PathBuf,
    /// Directory with the GRASP git hooks, set as core.hooksPath for every request.
    #[arg(long, env = env_names::HOOKS_DIR)]
    hooks_dir: Option<PathBuf>,
    /// The relay's data directory: grasp-cgi reads the hook API's address and token there to
    /// fetch the repository page's data (without it the page shows no details), and a private
    /// service's marker (the parent of the git root and the git root itself are checked for
    /// it too).
    #[arg(long, env = env_names::DATA_DIR)]
    data_dir: Option<PathBuf>,
    /// The git executable.
    #[arg(long, env = env_names::GIT, default_value = "git")]
    git: PathBuf,
    /// git's `git-http-backend` program (in `git --exec-path`), run directly instead of
    /// `<git> http-backend`: one process start less per request. The relay sets it.
    #[arg(long, env = env_names::GIT_HTTP_BACKEND)]
    http_backend: Option<PathBuf>,
    /// Seconds a request body may send nothing before the request is ended and its git
    /// processes killed (a body ending short of CONTENT_LENGTH ends it at once).
    #[arg(long, env = env_names::GIT_IDLE_TIMEOUT, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout: u64,
    /// Seconds a push waits for another push to the same repository to end before it is
    /// answered 503 (retry later); 0 tries once.
    #[arg(long, env = env_names::PUSH_LOCK_WAIT, default_value_t = 10)]
    push_lock_wait: u64,

    /// Past the idle timeout, the request body must average at least this many bytes per
    /// second since the request began, or the request is ended and its git processes killed
    /// (0: no minimum).
    #[arg(long, env = env_names::GIT_MIN_RATE, default_value_t = grasp_state::contract::transfer::DEFAULT_MIN_RATE)]
    min_rate: u64,

    /// Bytes of a push's pack git reads at most (its `receive.maxInputSize`); the relay passes
    /// its --max-push-bytes, behind nginx set it to the same value. Default: no git limit (the
    /// pre-receive hook still checks the relay's).
    #[arg(long, env = env_names::MAX_PUSH_BYTES, value_name = "BYTES")]
    max_push_bytes: Option<u64>,

    /// The same for a push to a GRASP-06 contributor repository (`/prs/...`): the relay passes
    /// its --max-pr-push-bytes, behind nginx set it to the same value.
    #[arg(long, env = env_names::MAX_PR_PUSH_BYTES, value_name = "BYTES")]
    max_pr_push_bytes: Option<u64>,

    /// Serve GRASP-06 contributor repositories (`/prs/<npub>/<identifier>.git`): set when the
    /// relay runs with --grasp06 (the relay passes it; behind nginx set it to the same value).
    /// Off, every `/prs/` path is answered 404.
    #[arg(long, env = env_names::GRASP06, value_parser = clap::builder::BoolishValueParser::new())]
    grasp06: bool,

    /// Set by grasp-relay's own listener, which adds the CORS headers, bounds and feeds the
    /// request body and ends the process group itself: a `GET` or `POST` then becomes `git
    /// http-backend` (exec, a push's lock kept open across it) instead of being relayed through
    /// grasp-cgi. Not for nginx + fcgiwrap.
    #[arg(long, env = env_names::CGI_SUPERVISED, value_parser = clap::builder::BoolishValueParser::new())]
    supervised: bool,
}

fn main() -> ExitCode {
    let mut out = io::stdout().lock();
    let args = match Args::try_parse() {
        Ok(args) => args,
        // Misconfigured under a web server: still answer with a CGI response (CORS included).
        Err(e) if e.use_stderr() && std::env::var_os("GATEWAY_INTERFACE").is_some() => {
            eprintln!("grasp-cgi: {e}");
            let _ = respond(
                &mut out,
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("grasp-cgi is misconfigured: set {} (see grasp-cgi --help).\n", env_names::GIT_ROOT).as_bytes(),
                false,
            );
            return ExitCode::FAILURE;
        }
        Err(e) => e.exit(),
    };
    match run(&args, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Headers may already be out; this is the best we can do in both cases.
            eprintln!("grasp-cgi: {e:#}");
            let _ = respond(
                &mut out,
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("grasp-cgi failed: {e:#}\n").as_bytes(),
                false,
            );
            ExitCode::FAILURE
        }
    }
}

/// The request as far as the wrapper cares, read from the CGI environment.
struct Request {
    method: String,
    path_info: String,
    query: String,
    accept: String,
    /// `CONTENT_LENGTH`, when given and valid.
    content_length: Option<u64>,
}

impl Request {
    fn from_env() -> Request {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        Request {
            method: var("REQUEST_METHOD").to_ascii_uppercase(),
            path_info: var("PATH_INFO"),
            query: var("QUERY_STRING"),
            accept: var("HTTP_ACCEPT"),
            content_length: var("CONTENT_LENGTH").trim().parse().ok(),
        }
    }

    fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// A push: its ref advertisement or its receive-pack POST.
    fn is_push(&self, rest: &str) -> bool {
        git_backend::is_push(&self.method, rest, &self.query)
    }

    /// A body to feed the backend: any `POST`, or a request announcing a length.
    fn has_body(&self) -> bool {
        self.method == "POST" || self.content_length.is_some_and(|n| n > 0)
    }
}

fn run(args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    child::install_signal_handlers();
    let req = Request::from_env();
    if cors::is_preflight(&req.method) {
        return preflight(out);
    }
    let layout = RepoLayout::new(&args.git_root);
    let Some(repo) = parse_repo_path(&req.path_info) else {
        return not_found(out, &req);
    };
    if repo.space == RepoSpace::Prs && !args.grasp06 {
        return not_found(out, &req);
    }
    if !private_gate(args, &repo) {
        return unauthorized(out);
    }
    let repo_dir = layout.repo_path_in(repo.space, &repo.owner, &repo.identifier)?;
    if let Some(answered) = unless_present(args, &req, &repo, &repo_dir, out) {
        return answered;
    }
    if git_backend::is_page(&repo.rest) {
        if repo.space == RepoSpace::Prs {
            return not_found(out, &req);
        }
        if req.method != "GET" && !req.is_head() {
            return not_found(out, &req);
        }
        let (status, page) = pages::repo_page(args.data_dir.as_deref(), &repo);
        return respond(
            out,
            status,
            "text/html; charset=utf-8",
            page.as_bytes(),
            req.is_head(),
        );
    }
    let mut push_lock = None;
    if req.is_push(&repo.rest) {
        let wait = Duration::from_secs(args.push_lock_wait);
        let taken = match PushLock::take_within(&repo_dir, wait) {
            // Removed while this request waited (maintenance removes an empty contributor
            // repository after a refused push, under its push lock): look it up again, once.
            Err(PushLockError::Gone { .. }) => match unless_present(args, &req, &repo, &repo_dir, out) {
                Some(answered) => return answered,
                None => PushLock::take_within(&repo_dir, wait),
            },
            taken => taken,
        };
        match taken {
            Ok(lock) => push_lock = Some(lock),
            Err(PushLockError::Busy { waited, .. }) => return push_in_progress(out, waited),
            Err(e) => return Err(e.into()),
        }
    }
    if req.method != "POST" && repo.space != RepoSpace::Prs {
        // The advertisement only waited for the running push to end. A contributor
        // repository's keeps the lock while it runs: maintenance removes an empty one under
        // that lock, never while its refs are being advertised.
        push_lock = None;
    }
    if args.supervised && (req.method == "GET" || req.method == "POST") {
        // Nothing left for grasp-cgi to do that its host does not: one process and one pipe hop
        // less per request. A push's lock goes along: its open file stays open across the exec,
        // so the backend, its receive-pack and the hooks hold it, and it goes with the last of
        // them. Only returns if the exec failed.
        if let Some(lock) = &push_lock {
            push_lock::keep_open_across_exec(lock.as_fd().as_raw_fd()).context("handing the push lock to git http-backend")?;
        }
        out.flush()?;
        let setup = backend_setup(args);
        let e = backend_command(&setup, &req, &repo, &repo_dir).stdin(Stdio::inherit()).stdout(Stdio::inherit()).exec();
        return Err(anyhow::Error::new(e).context(setup.running()));
    }
    let result = run_backend(args, &req, &repo, &repo_dir, out);
    drop(push_lock);
    result
}

/// What a request to a repository that is not on disk gets: a 404 for a hosted one, for a
/// contributor path [`missing_contributor_repo`]'s answer (`None`: the repository was made for a
/// push, or is there: go on).
fn unless_present(args: &Args, req: &Request, repo: &RepoUrlPath, repo_dir: &Path, out: &mut impl Write) -> Option<anyhow::Result<()>> {
    if repo_dir.is_dir() {
        return None;
    }
    match repo.space {
        RepoSpace::Hosted => Some(not_found(out, req)),
        RepoSpace::Prs => missing_contributor_repo(args, req, repo, out),
    }
}

/// A private service's check, before the repository is even looked up: true when the service
/// is not private, or the relay allows the request's `Authorization` proof. Fails closed: a
/// marker that cannot be ruled out makes the service private, and a relay that cannot be asked
/// allows nothing.
fn private_gate(args: &Args, repo: &RepoUrlPath) -> bool {
    let data_dir = match service(args) {
        Service::Public => return true,
        Service::Private { data_dir: Some(dir) } => dir,
        Service::Private { data_dir: None } => {
            eprintln!("grasp-cgi: private service: no data directory to find the relay in (set {}); refusing", env_names::DATA_DIR);
            return false;
        }
    };
    let authorization = std::env::var("HTTP_AUTHORIZATION").ok();
    match relay_api::git_auth(&data_dir, &repo.npub, &repo.identifier, authorization) {
        Ok(allowed) => allowed,
        Err(e) => {
            eprintln!("grasp-cgi: private service: cannot ask the relay ({e:#}); refusing");
            false
        }
    }
}

/// A request to a GRASP-06 contributor path with no repository on disk
/// (docs/protocol.md#contributor-repositories): a ref advertisement is answered as an empty
/// repository's, without creating anything; a push's `POST` has the relay make the repository
/// (`None`: go on and serve it); anything else is a 404.
fn missing_contributor_repo(args: &Args, req: &Request, repo: &RepoUrlPath, out: &mut impl Write) -> Option<anyhow::Result<()>> {
    let is_get = req.method == "GET" || req.is_head();
    match (is_get, repo.rest.as_str()) {
        (true, "/info/refs") => {
            let Some(service) = GitService::from_query(&req.query) else { return Some(not_found(out, req)) };
            let (content_type, body) = empty_advertisement(service);
            Some(respond_uncached(out, &content_type, &body, req.is_head()))
        }
        (false, "/git-receive-pack") if req.method == "POST" => {
            let Some(data_dir) = args.data_dir.clone().or_else(|| args.git_root.parent().map(Path::to_path_buf)) else {
                return Some(relay_unavailable(out, &format!("no data directory to find the relay in (set {})", env_names::DATA_DIR)));
            };
            match relay_api::create_prs_repo(&data_dir, &repo.npub, &repo.identifier) {
                Ok(_) => None,
                Err(e) => {
                    eprintln!("grasp-cgi: contributor repository {} not created: {e:#}", repo.repo_root());
                    Some(relay_unavailable(out, &format!("this server cannot take this push now ({e:#})")))
                }
            }
        }
        _ => Some(not_found(out, req)),
    }
}

/// `503` with `Retry-After` and `message` (CORS included).
fn relay_unavailable(out: &mut impl Write, message: &str) -> anyhow::Result<()> {
    service_unavailable(out, 30, &format!("{message}; try again later\n"))
}

/// `503` with `Retry-After: retry` seconds and the text `body` (CORS included).
fn service_unavailable(out: &mut impl Write, retry: u64, body: &str) -> anyhow::Result<()> {
    let head = format!(
        "Status: 503 Service Unavailable\r\nRetry-After: {retry}\r\n{}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
        cors::header_lines(),
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// A whole `200` answer that no cache may keep (a ref advertisement), CORS included.
fn respond_uncached(out: &mut impl Write, content_type: &str, body: &[u8], head_only: bool) -> anyhow::Result<()> {
    let head = format!(
        "Status: 200 OK\r\n{}Cache-Control: no-cache, max-age=0, must-revalidate\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        cors::header_lines(),
        body.len()
    );
    out.write_all(head.as_bytes())?;
    if !head_only {
        out.write_all(body)?;
    }
    out.flush()?;
    Ok(())
}

/// Whether the repositories grasp-cgi serves belong to a private service
/// ([`git_backend::service`]); an unreadable marker location is logged.
fn service(args: &Args) -> Service {
    git_backend::service(args.data_dir.as_deref(), &args.git_root, |marker, e| {
        eprintln!("grasp-cgi: cannot tell whether {} exists ({e}); treating the service as private", marker.display())
    })
}

/// The answer to a preflight: `204`, the CORS headers and how long the browser may keep it
/// ([`cors::preflight_header_lines`]).
fn preflight(out: &mut impl Write) -> anyhow::Result<()> {
    write!(out, "Status: {} No Content\r\n{}\r\n", cors::PREFLIGHT_STATUS, cors::preflight_header_lines())?;
    out.flush()?;
    Ok(())
}

/// `401` with `WWW-Authenticate: Nostr` and an empty body (CORS included).
fn unauthorized(out: &mut impl Write) -> anyhow::Result<()> {
    let head = format!("Status: 401 Unauthorized\r\nWWW-Authenticate: Nostr\r\n{}Content-Length: 0\r\n\r\n", cors::header_lines());
    out.write_all(head.as_bytes())?;
    out.flush()?;
    Ok(())
}


fn not_found(out: &mut impl Write, req: &Request) -> anyhow::Result<()> {
    if req.accept.contains("text/html") {
        let body = pages::not_found_html(&req.path_info);
        respond(
            out,
            "404 Not Found",
            "text/html; charset=utf-8",
            body.as_bytes(),
            req.is_head(),
        )
    } else {
        let body = pages::not_found_text(&req.path_info);
        respond(
            out,
            "404 Not Found",
            "text/plain; charset=utf-8",
            body.as_bytes(),
            req.is_head(),
        )
    }
}

/// Writes a whole CGI response (CORS included). `head_only` drops the body.
fn respond(
    out: &mut impl Write,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> anyhow::Result<()> {
    let mut head = format!("Status: {status}\r\n{}", cors::header_lines());
    if !content_type.is_empty() {
        head.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if !head_only {
        out.write_all(body)?;
    }
    out.flush()?;
    Ok(())
}

/// `503` with `Retry-After`: another push to the repository held its push lock for `waited`.
/// `git push` shows the text of a refused advertisement (`remote: ...`); a refused receive-pack
/// POST shows as `HTTP 503`.
fn push_in_progress(out: &mut impl Write, waited: Duration) -> anyhow::Result<()> {
    eprintln!("grasp-cgi: push refused: another push to the repository held its lock for {waited:?}");
    let retry = waited.as_secs().clamp(1, 60);
    let body = format!(
        "another push to this repository is in progress (waited {}s for it to end); retry later: run `git push` again in a few seconds\n",
        waited.as_secs()
    );
    service_unavailable(out, retry, &body)
}

/// The backend's setup from grasp-cgi's configuration.
fn backend_setup(args: &Args) -> BackendSetup {
    BackendSetup {
        git_root: args.git_root.clone(),
        hooks_dir: args.hooks_dir.clone(),
        git: args.git.clone(),
        http_backend: args.http_backend.clone(),
        max_push_bytes: args.max_push_bytes,
        max_pr_push_bytes: args.max_pr_push_bytes,
    }
}

/// `git http-backend` for `repo` ([`BackendSetup::command`]; the CGI variables are grasp-cgi's
/// own environment), stdin piped when the request has a body. `HEAD` runs as `GET`.
fn backend_command(setup: &BackendSetup, req: &Request, repo: &RepoUrlPath, repo_dir: &Path) -> Command {
    let mut cmd = setup.command(repo, repo_dir, std::iter::empty::<(OsString, OsString)>());
    cmd.stdin(if req.has_body() { Stdio::piped() } else { Stdio::null() });
    if req.is_head() {
        cmd.env("REQUEST_METHOD", "GET");
    }
    cmd
}

/// Runs `git http-backend` for `repo` and streams its response to `out`, CORS inserted.
fn run_backend(
    args: &Args,
    req: &Request,
    repo: &RepoUrlPath,
    repo_dir: &Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let setup = backend_setup(args);
    let mut cmd = backend_command(&setup, req, repo, repo_dir);
    let held = child::StopSignalsHeld::hold();
    let mut child = cmd
        .spawn()
        .with_context(|| setup.running())?;
    let group = child::BackendGroup::register(child.id());
    drop(held);
    // A fault is reported before the group is killed, so it is known once the output ends.
    let (faults, fault) = std::sync::mpsc::sync_channel(1);
    if let Some(stdin) = child.stdin.take() {
        let (content_length, idle, min_rate) = (req.content_length, Duration::from_secs(args.idle_timeout), args.min_rate);
        let (group, path) = (child.id() as i32, req.path_info.clone());
        let from = io::stdin().as_fd().try_clone_to_owned().context("duplicating stdin")?;
        std::thread::spawn(move || {
            if let Err(e) = child::feed_body(&mut File::from(from), stdin, content_length, idle, min_rate) {
                eprintln!("grasp-cgi: {e}: ending {path} and its git processes");
                let _ = faults.send(e);
                child::kill_group(group);
            }
        });
    }
    let stdout = child.stdout.take().expect("piped stdout");
    let result = relay_backend_output(BufReader::new(stdout), out, req.is_head());
    if result.is_err() {
        // The answer cannot be delivered (client gone) or the backend died: end the whole tree.
        group.kill();
    }
    let status = child.wait().context("waiting for git http-backend")?;
    group.finished();
    if let Ok(e) = fault.try_recv() {
        anyhow::bail!("request abandoned: {e}");
    }
    result?;
    if !status.success() {
        // The response is already out; the backend printed its reason on stderr (server log).
        eprintln!(
            "grasp-cgi: git http-backend exited with {status} for {}",
            req.path_info
        );
    }
    Ok(())
}

/// Copies the backend's CGI header block with CORS added (dropping any CORS headers of its
/// own), then the body raw. `head_only` discards the body.
fn relay_backend_output(
    mut from: impl BufRead,
    out: &mut impl Write,
    head_only: bool,
) -> anyhow::Result<()> {
    let mut raw = Vec::new();
    let parsed = loop {
        let n = from
            .read_until(b'\n', &mut raw)
            .context("reading git http-backend headers")?;
        if let Some(head) = cgi::parse_head(&raw).context("git http-backend")? {
            break head;
        }
        anyhow::ensure!(
            n > 0,
            "git http-backend ended before its header block was complete"
        );
    };
    let mut head = Vec::new();
    for (name, value) in parsed.headers.iter().filter(|(n, _)| !cors::is_cors_header(n)) {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(cors::header_lines().as_bytes());
    head.extend_from_slice(b"\r\n");
    out.write_all(&head)?;
    out.flush()?;
    if head_only {
        io::copy(&mut from, &mut io::sink())?;
    } else {
        copy_streaming(&mut from, out)?;
    }
    out.flush()?;
    Ok(())
}

/// Copies with a flush after every read, so git's progress (side-band) reaches the client as
/// it is produced rather than when a buffer fills.
fn copy_streaming(from: &mut impl Read, out: &mut impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        out.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_headers_get_cors_and_body_is_copied_raw() {
        let backend = b"Status: 200 OK\nContent-Type: application/x-git-upload-pack-advertisement\nAccess-Control-Allow-Origin: evil\n\n\x00\x01binary\n\nrest";
        let mut out = Vec::new();
        relay_backend_output(&backend[..], &mut out, false).unwrap();
        let out = String::from_utf8_lossy(&out);
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with(
            "Status: 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\n"
        ));
        assert!(head.contains("Access-Control-Allow-Origin: *"));
        assert!(!head.contains("evil"));
        assert_eq!(body, "\x00\x01binary\n\nrest");
    }

    #[test]
    fn head_drops_body_and_truncated_headers_fail() {
        let mut out = Vec::new();
        relay_backend_output(&b"Content-Type: text/plain\r\n\r\nbody"[..], &mut out, true).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("X-Requested-With\r\n\r\n"));
        assert!(
            relay_backend_output(&b"Content-Type: text/plain\n"[..], &mut Vec::new(), false)
                .is_err()
        );
    }

    #[test]
    fn help_names_the_push_limit_variable() {
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("--max-push-bytes") && help.contains(env_names::MAX_PUSH_BYTES), "{help}");
        let args = Args::try_parse_from(["grasp-cgi", "--git-root", "/g", "--max-push-bytes", "1000"]).unwrap();
        let cfg = backend_setup(&args).per_request_config();
        assert!(cfg.iter().any(|(k, v)| k == "receive.maxInputSize" && v == "1000"));
        let unlimited = Args::try_parse_from(["grasp-cgi", "--git-root", "/g"]).unwrap();
        assert!(!backend_setup(&unlimited).per_request_config().iter().any(|(k, _)| k == "receive.maxInputSize"));
    }

    #[test]
    fn whole_responses_carry_cors() {
        let mut out = Vec::new();
        respond(&mut out, "204 No Content", "", b"", false).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("Status: 204 No Content\r\n")
                && s.contains("Access-Control-Allow-Methods: GET, POST, OPTIONS, HEAD")
        );
        assert!(s.ends_with("\r\n\r\n"));
        assert!(!s.contains("Max-Age"), "only a preflight says how long to keep it");
        let mut out = Vec::new();
        preflight(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("Status: 204 No Content\r\n{}\r\n", cors::preflight_header_lines())
        );
    }
}
