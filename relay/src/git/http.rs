//! Git smart HTTP on the relay's public listener, by running `grasp-cgi` as a CGI/1.1 child.
//!
//! The relay does not speak git itself: for every request it hands to [`serve`] (in practice every
//! path other than `/` and the relay's own pages, so unknown paths get grasp-cgi's 404 page) it
//! spawns the same `grasp-cgi` program nginx + fcgiwrap would run, with the CGI environment built
//! from the request. The request body is streamed into the child's stdin by a task, the child's
//! CGI header block (`Status:` and headers) becomes the response head, and the rest of its stdout
//! is streamed as the body.
//!
//! The child is told it is supervised (`grasp_state::cgi::ENV_SUPERVISED`): grasp-cgi checks the
//! path, the repository, a private service's gate and, for a push, takes the repository's push
//! lock, then becomes `git http-backend` by exec (the lock's file stays open across it), since
//! this listener already adds the CORS headers and bounds the body.
//!
//! An abandoned request ends with its git processes ([`super::cgi_child`]): the child runs in its
//! own process group, and it is ended when the request body ends short (client gone), when the
//! client sends nothing for `--git-idle-timeout`, when its body arrives slower than
//! `--git-min-rate` (`grasp_state::transfer`), when the response body is dropped before its end
//! (a client that stops reading it is dropped by the listener's write deadline,
//! `crate::server::write_deadline`), or when the relay shuts down.
//!
//! `PATH_INFO` is the percent-decoded path, as RFC 3875 and `git http-backend` expect; a path that
//! cannot be decoded (bad `%` escape, `%00`) gets a 404 here without spawning anything.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use grasp_state::{cgi, transfer};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, ReadBuf};
use std::time::Duration;

use tokio::process::{ChildStdout, Command};

use super::cgi_child::{self, Abandoned, CgiControl};
use crate::server::http::{empty, preflight, text, with_cors, Body, BodyError};
use crate::shutdown::Shutdown;

/// `--git-idle-timeout`'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How to run the CGI wrapper.
#[derive(Debug, Clone)]
pub struct GitHttpConfig {
    /// The `grasp-cgi` executable.
    pub cgi_path: PathBuf,
    /// Root of `<npub>/<identifier>.git` (passed as `GRASP_GIT_ROOT`).
    pub git_root: PathBuf,
    /// Hooks directory (passed as `GRASP_HOOKS_DIR`, becomes `core.hooksPath`).
    pub hooks_dir: Option<PathBuf>,
    /// Extra environment for the child (e.g. what the hooks need to reach the relay).
    pub env: Vec<(String, String)>,
    /// A request whose client sends nothing for this long is ended (`--git-idle-timeout`).
    pub idle_timeout: Duration,
    /// Past the idle timeout, the body must average this many bytes per second
    /// (`--git-min-rate`, `grasp_state::transfer`; 0: no minimum).
    pub min_rate: u64,
}

/// Serves one request through `grasp-cgi`. Never fails: errors become a 502 with a message.
/// Every response carries the GRASP CORS headers.
pub async fn serve(
    req: Request<Incoming>,
    remote_addr: SocketAddr,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
) -> Response<Body> {
    if grasp_state::cors::is_preflight(req.method().as_str()) {
        return preflight();
    }
    let Some(path_info) = decode_path(req.uri().path()) else {
        return with_cors(text(
            StatusCode::NOT_FOUND,
            format!("Not found: {} is not a valid path.\n", req.uri().path()),
        ));
    };
    match run_cgi(req, path_info, remote_addr, cfg, shutdown).await {
        Ok(resp) => with_cors(resp),
        Err(e) => {
            tracing::warn!(error = %e, "git http: CGI wrapper failed");
            with_cors(text(
                StatusCode::BAD_GATEWAY,
                format!("git service unavailable: {e}. Try again later or tell the operator.\n"),
            ))
        }
    }
}

/// Percent-decodes a URL path into `PATH_INFO` bytes; `None` for a bad escape or a NUL.
fn decode_path(path: &str) -> Option<OsString> {
    grasp_state::identifier::percent_decode_bytes(path)
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

async fn run_cgi(
    req: Request<Incoming>,
    path_info: OsString,
    remote_addr: SocketAddr,
    cfg: &GitHttpConfig,
    shutdown: Shutdown,
) -> Result<Response<Body>, String> {
    let what = format!("{} {} from {}", req.method(), req.uri().path(), remote_addr.ip());
    let mut cmd = Command::new(&cfg.cgi_path);
    for var in [
        "CONTENT_TYPE",
        "CONTENT_LENGTH",
        "GIT_DIR",
        "GIT_CONFIG_PARAMETERS",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(cgi_env(&req, path_info, remote_addr))
        .env("GRASP_GIT_ROOT", &cfg.git_root)
        .envs(cfg.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("GRASP_GIT_IDLE_TIMEOUT", cfg.idle_timeout.as_secs().max(1).to_string())
        .env(transfer::ENV_MIN_RATE, cfg.min_rate.to_string())
        // This listener adds CORS, bounds the body and ends the group itself: a fetch's grasp-cgi
        // hands over to git http-backend by exec.
        .env(cgi::ENV_SUPERVISED, "1")
        .process_group(0)
        .kill_on_drop(true);
    match &cfg.hooks_dir {
        Some(dir) => cmd.env("GRASP_HOOKS_DIR", dir),
        None => cmd.env_remove("GRASP_HOOKS_DIR"),
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cfg.cgi_path.display()))?;

    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let control = cgi_child::supervise(child, what, shutdown);
    // Until the response head is out, any failure ends the child.
    let mut armed = AbortOnDrop(Some(control.clone()), Abandoned::BadAnswer);

    // Request body -> child stdin, concurrently with reading the response. A body that ends
    // short or stalls ends the request.
    let mut body = req.into_body();
    let (feeder, idle, min_rate) = (control.clone(), cfg.idle_timeout, cfg.min_rate);
    tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let (mut bytes, mut last_frame) = (0u64, started);
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
    let head = loop {
        let n = stdout
            .read_until(b'\n', &mut raw)
            .await
            .map_err(|e| format!("reading CGI headers: {e}"))?;
        if let Some(head) = cgi::parse_head(&raw).map_err(|e| format!("the CGI wrapper sent a bad header block: {e}"))? {
            break head;
        }
        if n == 0 {
            return Err("the CGI wrapper ended before sending its headers".into());
        }
    };
    let status = head.status().map_err(|e| e.to_string())?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::from_u16(status).map_err(|e| format!("bad CGI Status {status}: {e}"))?;
    for (name, value) in head.fields() {
        match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) {
            (Ok(n), Ok(v)) => {
                resp.headers_mut().append(n, v);
            }
            _ => tracing::warn!(header = name, "git http: dropping invalid CGI header"),
        }
    }
    armed.0 = None;
    *resp.body_mut() = BodyExt::boxed(CgiBody {
        stdout,
        control: Some(control),
        buf: vec![0; 32 * 1024].into_boxed_slice(),
    });
    Ok(resp)
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
    /// `None` once the body has ended.
    control: Option<CgiControl>,
    buf: Box<[u8]>,
}

impl Drop for CgiBody {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            control.abort(Abandoned::AnswerUndelivered);
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
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(rb.filled())))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
