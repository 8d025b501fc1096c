//! Shared HTTP plumbing for the public listener: the response body type and CORS.
//!
//! Every response leaving the public port goes through [`with_cors`], errors and 404s included
//! (GRASP requires CORS on all responses).

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use grasp_state::contract::cors;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

/// Error type carried by streamed response bodies.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every response of the public listener (streamed or whole).
pub type Body = BoxBody<Bytes, BodyError>;

/// A body holding `data` whole.
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Adds the GRASP CORS headers ([`grasp_state::contract::cors`]) to `resp`, replacing any already there.
pub fn with_cors(mut resp: Response<Body>) -> Response<Body> {
    let h = resp.headers_mut();
    for (name, value) in cors::HEADERS {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("CORS header names are valid");
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// The answer to a preflight `OPTIONS` request: no content, the CORS headers and how long the
/// browser may keep the answer ([`cors::PREFLIGHT_HEADERS`]).
pub fn preflight() -> Response<Body> {
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::from_u16(cors::PREFLIGHT_STATUS).expect("valid status");
    let mut resp = with_cors(resp);
    for (name, value) in cors::PREFLIGHT_HEADERS {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("CORS header names are valid");
        resp.headers_mut().insert(name, HeaderValue::from_static(value));
    }
    resp
}

/// A plain-text response with the given status.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// An HTML response with the given status.
pub fn html(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    r
}

/// `body`, keeping `guard` alive until the body is dropped (e.g. a request slot held for as long
/// as the answer streams).
pub fn holding<G: Send + Sync + Unpin + 'static>(body: Body, guard: G) -> Body {
    Holding { body, _guard: guard }.boxed()
}

struct Holding<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for Holding<G> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
