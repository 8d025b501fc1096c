//! Liveness and readiness probes, answered on the metrics listener and on the hook API.
//!
//! - `GET /healthz`: the process is up and answering: always `200 ok`.
//! - `GET /readyz`: `200` when every check passes, else `503`; the body has one line per check,
//!   `ok <check>` or `fail <check>: <reason>`. Checks: the event store answers a query
//!   (`store`), the data directory takes a new file (`data_dir`), the CGI wrapper and the hook
//!   binaries are executable files (`binaries`), the hook API answers its `/healthz`
//!   (`hook_api`), and, in a replica set, the replica has caught up with the others: relay sync
//!   went through its history with every other replica it can reach, then git sync tried the
//!   repositories whose git data it was waiting for (`replicas`). Each check is bounded by [`CHECK_TIMEOUT`].
//!
//! On the hook API the probes need no token: they reveal nothing but these lines, the API is on
//! loopback only, and a probe (systemd, a container runtime) should not need the token file.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, Request, Response, StatusCode};
use nostr::prelude::Filter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::grasp::Grasp;
use crate::net::http::{text, Body};

/// Path of the liveness probe.
pub const PATH_HEALTHZ: &str = "/healthz";
/// Path of the readiness probe.
pub const PATH_READYZ: &str = "/readyz";

/// Longest one readiness check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the readiness checks look at.
pub struct Health {
    pub grasp: Arc<Grasp>,
    pub data_dir: PathBuf,
    /// The CGI wrapper and the hook binaries beside it.
    pub binaries: Vec<PathBuf>,
    /// The hook API's address.
    pub api_addr: SocketAddr,
    /// Relay sync's view: whether the replicas have been caught up with.
    pub views: Arc<crate::api::views::OperatorViews>,
    /// Set once the replicas have been caught up with (it stays: [`Health::caught_up`]).
    pub caught_up: std::sync::atomic::AtomicBool,
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub result: Result<(), String>,
}

impl Health {
    /// Runs every readiness check (concurrently, each bounded in time).
    pub async fn readiness(&self) -> Vec<Check> {
        let (store, data_dir, binaries, hook_api) =
            tokio::join!(bounded(self.store()), bounded(self.data_dir()), bounded(self.binaries()), bounded(self.hook_api()));
        let mut checks = vec![
            Check { name: "store", result: store },
            Check { name: "data_dir", result: data_dir },
            Check { name: "binaries", result: binaries },
            Check { name: "hook_api", result: hook_api },
        ];
        if !self.grasp.replicas().is_empty() {
            checks.push(Check { name: "replicas", result: self.replicas() });
        }
        checks
    }

    /// Has this replica caught up with the others since it started (the `replicas` check passed
    /// once)? Always, outside a replica set. Cheap once true: the public listener asks it for
    /// every request the front forwards while it is false (`crate::server`, docs/scaling.md).
    pub fn caught_up(&self) -> bool {
        self.replicas().is_ok()
    }

    /// A replica set's member is ready once it has caught up with the others, in two steps
    /// (docs/scaling.md, "Convergence and catch-up"): relay sync has gone through its history with every
    /// other replica it can reach (one it cannot reach does not hold it back), then background
    /// git sync has tried once, at once, every repository it was waiting for git data of then
    /// (the states and pushes made while it was away, held states restored from its journal).
    /// A repository no replica can serve holds nothing back. Once passed, it stays passed.
    fn replicas(&self) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        if self.grasp.replicas().is_empty() || self.caught_up.load(Ordering::Relaxed) {
            return Ok(());
        }
        let relays = self.views.relay_sync.get().map(|v| v.relays()).unwrap_or_default();
        let behind: Vec<String> = self
            .grasp
            .replicas()
            .iter()
            .filter(|r| {
                let Ok(url) = crate::sync::relay_url::RelayUrl::parse(&r.relay) else { return false };
                !relays.iter().any(|s| s.url == url && (s.history_runs > 0 || s.failures > 0))
            })
            .map(|r| r.base.clone())
            .collect();
        if !behind.is_empty() {
            return Err(format!("catching up with {}", behind.join(", ")));
        }
        match self.views.git_sync.get().and_then(|sync| sync.catch_up()) {
            Some(fetching) if fetching > 0 => Err(format!("fetching the git data of {fetching} repositories from the others")),
            _ => {
                if !self.caught_up.swap(true, Ordering::Relaxed) {
                    tracing::info!("caught up with the other replicas: requests the front forwards are served again");
                }
                Ok(())
            }
        }
    }

    async fn store(&self) -> Result<(), String> {
        self.grasp.relay.store().query(vec![Filter::new().limit(1)], 1).await.map(drop).map_err(|e| format!("event store query failed: {e}"))
    }

    async fn data_dir(&self) -> Result<(), String> {
        let probe = self.data_dir.join(format!(".readyz-{}", std::process::id()));
        let res = tokio::fs::write(&probe, b"ok").await;
        let _ = tokio::fs::remove_file(&probe).await;
        res.map_err(|e| format!("cannot write in {}: {e}", self.data_dir.display()))
    }

    async fn binaries(&self) -> Result<(), String> {
        let mut missing = Vec::new();
        for bin in &self.binaries {
            let executable = tokio::fs::metadata(bin).await.is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !executable {
                missing.push(bin.display().to_string());
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("not found or not executable: {}", missing.join(", ")))
        }
    }

    async fn hook_api(&self) -> Result<(), String> {
        let mut stream = tokio::net::TcpStream::connect(self.api_addr).await.map_err(|e| format!("cannot connect to {}: {e}", self.api_addr))?;
        let request = format!("GET {PATH_HEALTHZ} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.api_addr);
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("{}: {e}", self.api_addr))?;
        let mut answer = Vec::new();
        stream.take(4096).read_to_end(&mut answer).await.map_err(|e| format!("{}: {e}", self.api_addr))?;
        let status = String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string();
        if status.split(' ').nth(1) == Some("200") {
            Ok(())
        } else {
            Err(format!("{} answered {status:?}", self.api_addr))
        }
    }
}

async fn bounded(check: impl std::future::Future<Output = Result<(), String>>) -> Result<(), String> {
    tokio::time::timeout(CHECK_TIMEOUT, check).await.unwrap_or_else(|_| Err(format!("no answer within {CHECK_TIMEOUT:?}")))
}

/// The `/readyz` answer for these checks: `200` if all passed, else `503`; one line each.
pub fn readiness_response(checks: &[Check]) -> Response<Body> {
    let mut body = String::new();
    for c in checks {
        match &c.result {
            Ok(()) => body.push_str(&format!("ok {}\n", c.name)),
            Err(reason) => body.push_str(&format!("fail {}: {reason}\n", c.name)),
        }
    }
    let status = if checks.iter().all(|c| c.result.is_ok()) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    text(status, body)
}

/// Answers `GET`/`HEAD` `/healthz` and `/readyz`; `None` for any other request.
pub async fn probe<B>(req: &Request<B>, health: &Health) -> Option<Response<Body>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    match req.uri().path() {
        PATH_HEALTHZ => Some(text(StatusCode::OK, "ok\n")),
        PATH_READYZ => {
            let checks = health.readiness().await;
            for failed in checks.iter().filter(|c| c.result.is_err()) {
                tracing::warn!(check = failed.name, reason = ?failed.result, "readiness check failed");
            }
            Some(readiness_response(&checks))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn readiness_lists_every_check_and_fails_on_one() {
        let ok = |name| Check { name, result: Ok(()) };
        let resp = readiness_response(&[ok("store"), ok("data_dir")]);
        assert_eq!(resp.status(), StatusCode::OK);
        let resp = readiness_response(&[ok("store"), Check { name: "binaries", result: Err("not found: /x".into()) }]);
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(String::from_utf8_lossy(&body), "ok store\nfail binaries: not found: /x\n");
    }
}
