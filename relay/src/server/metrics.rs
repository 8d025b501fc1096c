//! The metrics listener (`--metrics-bind`, off by default): `GET /metrics` (Prometheus text
//! format), `GET /healthz` and `GET /readyz` ([`super::health`]); `404` for everything else.
//!
//! It is a socket of its own, never the public port (the relay refuses to start when both would
//! be the same address). The operator chooses its address: loopback for a Prometheus on the same
//! host, a private interface otherwise; it has no authentication, so never expose it publicly.
//! Requests are small and bounded: headers within [`HEADER_READ_TIMEOUT`], no request body read.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::api::health::{probe, Health};
use crate::metrics::{Metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
use crate::grasp::Grasp;
use crate::net::connection_limits::ConnectionLimiter;
use crate::net::http::{full, text, Body};
use crate::shutdown::Shutdown;

/// Path of the Prometheus endpoint.
pub const PATH_METRICS: &str = "/metrics";

/// Scrapers must send their request head within this time.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);


/// What the metrics listener reads at scrape time.
pub struct MetricsState {
    pub metrics: Arc<Metrics>,
    pub grasp: Arc<Grasp>,
    pub connections: Arc<ConnectionLimiter>,
    pub health: Arc<Health>,
    pub views: Arc<crate::api::views::OperatorViews>,
}

/// Binds `--metrics-bind`, refusing the public listener's address.
pub async fn bind(addr: SocketAddr, public: SocketAddr) -> anyhow::Result<TcpListener> {
    let same_ip = addr.ip() == public.ip() || addr.ip().is_unspecified() || public.ip().is_unspecified();
    if addr.port() != 0 && addr.port() == public.port() && same_ip {
        bail!("--metrics-bind {addr} is the public listener's address ({public}): metrics are never served on the public port; choose another port");
    }
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding the metrics listener on {addr}"))?;
    if !listener.local_addr()?.ip().is_loopback() {
        tracing::warn!(%addr, "metrics listener is not on loopback: /metrics has no authentication, keep it off the internet");
    }
    Ok(listener)
}

/// Serves the metrics listener until shutdown.
pub async fn serve(listener: TcpListener, state: Arc<MetricsState>, mut shutdown: Shutdown) {
    loop {
        let (stream, _) = tokio::select! {
            s = crate::net::tcp::accept_with_backoff(&listener, "metrics") => s,
            _ = shutdown.recv() => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(req, &state).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle<B>(req: Request<B>, state: &MetricsState) -> Response<Body> {
    if let Some(resp) = probe(&req, &state.health).await {
        return resp;
    }
    if req.uri().path() != PATH_METRICS {
        return text(StatusCode::NOT_FOUND, "not found: this listener serves /metrics, /healthz and /readyz\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
    }
    let purgatory = state.grasp.purgatory.stats();
    state.metrics.refresh_purgatory(&purgatory);
    state.metrics.refresh_contributors(&state.grasp.contributor_view());
    state.metrics.refresh_deferred(state.grasp.deferred().len(), state.grasp.deferred().stats().limit_total);
    state.metrics.refresh_store(state.grasp.relay.store().acknowledged());
    state.metrics.refresh_background_git(state.grasp.copies_pending(), state.grasp.maintenance_pending());
    state.metrics.refresh_sync(state.views.git_sync.get().and_then(|sync| sync.stats()).map_or((0, 0, 0), |s| s.gauges()));
    state.metrics.set_connections_open(state.connections.open());
    let mut resp = Response::new(full(state.metrics.encode()));
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_the_public_address() {
        let public: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for addr in ["127.0.0.1:8080", "0.0.0.0:8080"] {
            let err = bind(addr.parse().unwrap(), public).await.unwrap_err();
            assert!(err.to_string().contains("never served on the public port"), "{err}");
        }
        let err = bind("127.0.0.1:8080".parse().unwrap(), "0.0.0.0:8080".parse().unwrap()).await.unwrap_err();
        assert!(err.to_string().contains("public port"), "{err}");
        assert!(bind("127.0.0.1:0".parse().unwrap(), public).await.is_ok());
    }
}
