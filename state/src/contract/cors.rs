//! The CORS headers GRASP requires on every response of the git and relay endpoints, and the
//! answer to a preflight `OPTIONS` request. One definition for the relay's listener and
//! `grasp-cgi` (which nginx + fcgiwrap runs without the relay in front); docs/nginx/grasp.conf
//! spells the same values for nginx.

/// `Access-Control-Allow-Origin`: any origin (browser git clients run on other sites).
pub const ALLOW_ORIGIN: &str = "*";
/// `Access-Control-Allow-Methods`.
pub const ALLOW_METHODS: &str = "GET, POST, OPTIONS, HEAD";
/// `Access-Control-Allow-Headers`: what browser git clients send.
pub const ALLOW_HEADERS: &str =
    "Content-Type, Git-Protocol, Authorization, Accept, Content-Encoding, X-Requested-With";

/// Every CORS header as (name, value), in the order they are written.
pub const HEADERS: [(&str, &str); 3] = [
    ("Access-Control-Allow-Origin", ALLOW_ORIGIN),
    ("Access-Control-Allow-Methods", ALLOW_METHODS),
    ("Access-Control-Allow-Headers", ALLOW_HEADERS),
];

/// `Access-Control-Max-Age` of a preflight answer, in seconds: how long a browser may keep it
/// before asking again (without it, 5 s: a browser git client would send a preflight before
/// nearly every request of a clone or push). Two hours, the most Chromium keeps (Firefox keeps up
/// to a day, older Chromium ten minutes). The answer is the same for every path and changes only
/// with an upgrade of this server; a kept answer whose methods or headers do not cover a request
/// makes the browser ask again, so keeping it long never breaks a request (docs/protocol.md,
/// "Git smart HTTP").
pub const MAX_AGE: &str = "7200";

/// The headers only a preflight answer carries, after [`HEADERS`].
pub const PREFLIGHT_HEADERS: [(&str, &str); 1] = [("Access-Control-Max-Age", MAX_AGE)];

/// Status of the answer to `OPTIONS` (a preflight): no content, the CORS headers
/// ([`HEADERS`], then [`PREFLIGHT_HEADERS`]) only.
pub const PREFLIGHT_STATUS: u16 = 204;

/// Whether a request with `method` is a preflight, answered with [`PREFLIGHT_STATUS`] and the
/// CORS headers without looking any further.
pub fn is_preflight(method: &str) -> bool {
    method.eq_ignore_ascii_case("OPTIONS")
}

/// Whether a header named `name` is a CORS header (a backend's own are replaced by ours).
pub fn is_cors_header(name: &str) -> bool {
    name.as_bytes()
        .get(..15)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"access-control-"))
}

/// The CORS headers as HTTP/CGI header lines, each ending in CRLF.
pub fn header_lines() -> String {
    lines(&HEADERS)
}

/// The headers of a preflight answer ([`HEADERS`], then [`PREFLIGHT_HEADERS`]) as HTTP/CGI
/// header lines, each ending in CRLF.
pub fn preflight_header_lines() -> String {
    header_lines() + &lines(&PREFLIGHT_HEADERS)
}

fn lines(headers: &[(&str, &str)]) -> String {
    headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_are_crlf_terminated() {
        assert_eq!(
            header_lines(),
            "Access-Control-Allow-Origin: *\r\n\
             Access-Control-Allow-Methods: GET, POST, OPTIONS, HEAD\r\n\
             Access-Control-Allow-Headers: Content-Type, Git-Protocol, Authorization, Accept, Content-Encoding, X-Requested-With\r\n"
        );
    }

    #[test]
    fn a_preflight_answer_is_kept_for_at_least_ten_minutes() {
        let lines = preflight_header_lines();
        assert!(lines.starts_with(&header_lines()), "{lines}");
        assert!(lines.ends_with("Access-Control-Max-Age: 7200\r\n"), "{lines}");
        assert!(!header_lines().contains("Max-Age"), "only preflights carry it");
        let seconds: u32 = MAX_AGE.parse().unwrap();
        assert!((600..=86_400).contains(&seconds), "at least 10 minutes, at most what any browser keeps");
        assert!(PREFLIGHT_HEADERS.iter().all(|(name, _)| is_cors_header(name)), "a backend's own are replaced");
    }

    #[test]
    fn recognises_preflight_and_cors_headers() {
        assert!(is_preflight("OPTIONS") && is_preflight("options"));
        assert!(!is_preflight("GET"));
        assert!(is_cors_header("Access-Control-Allow-Origin"));
        assert!(is_cors_header("access-control-max-age"));
        assert!(!is_cors_header("Content-Type") && !is_cors_header("access"));
        assert!(!is_cors_header("accéss-control-x") && !is_cors_header("accéss-contro"));
    }
}
