//! Shared HTTP plumbing for the public listener: the response body type and CORS.
//!
//! Every response leaving the public port goes through [`with_cors`], errors and 404s included
//! (GRASP requires CORS on all responses).

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use hyper::header::{HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN};
use hyper::{Response, StatusCode};

/// Error type carried by streamed response bodies.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every response of the public listener (streamed or whole).
pub type Body = BoxBody<Bytes, BodyError>;

pub const CORS_ALLOW_METHODS: &str = "GET, POST, OPTIONS, HEAD";
pub const CORS_ALLOW_HEADERS: &str =
    "Content-Type, Git-Protocol, Authorization, Accept, Content-Encoding, X-Requested-With";

/// A body holding `data` whole.
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Adds the GRASP CORS headers to `resp`.
pub fn with_cors(mut resp: Response<Body>) -> Response<Body> {
    let h = resp.headers_mut();
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(CORS_ALLOW_METHODS));
    h.insert(ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(CORS_ALLOW_HEADERS));
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
