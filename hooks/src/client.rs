//! The one client of the relay's loopback hook API, shared by the hooks and by `grasp-relay`'s
//! one-shot commands (`grasp-relay purgatory`).
//!
//! A small blocking HTTP/1.1 client (`ureq`: no async runtime, no TLS, no proxy: the API is on
//! loopback only) with `TCP_NODELAY` on its socket, bounded in time and in the size of the answer.
//! The address and the token come from the files the relay writes into its data directory at
//! every start.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use grasp_state::contract::hook_api::TOKEN_HEADER;
use grasp_state::contract::layout::{API_ADDR_FILE, API_TOKEN_FILE};
use serde::{de::DeserializeOwned, Serialize};
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// Longest wait for the TCP connection to the relay (capped by the call's own timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest answer read from the relay (a purgatory listing can be long; more is a broken relay).
const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

/// The address and token of the relay's hook API, as read from its data directory.
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: String,
    token: String,
    agent: ureq::Agent,
}

impl ApiClient {
    /// Reads `<data_dir>/api-addr` and `<data_dir>/api-token`; every call waits at most `timeout`
    /// in total (connect, send, answer).
    pub fn from_data_dir(data_dir: &Path, timeout: Duration) -> Result<Self> {
        let addr = read_trimmed(data_dir, API_ADDR_FILE)?;
        let token = read_trimmed(data_dir, API_TOKEN_FILE)?;
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
            .proxy(None)
            .no_delay(true)
            .max_redirects(0)
            .http_status_as_error(false)
            .build();
        // The relay writes an IP address and port; anything else is a broken data directory.
        let Ok(socket) = addr.parse::<SocketAddr>() else {
            bail!("{} holds {addr:?}, not an IP address and port (restart grasp-relay to rewrite it)", data_dir.join(API_ADDR_FILE).display());
        };
        let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), ApiAddress(socket));
        Ok(ApiClient { addr, token, agent })
    }

    /// `POST`s `request` as JSON to `path` and decodes the JSON answer.
    pub fn post<Req: Serialize, Resp: DeserializeOwned>(&self, path: &str, request: &Req) -> Result<Resp> {
        let body = serde_json::to_vec(request).context("cannot encode the request")?;
        let resp = self
            .agent
            .post(self.url(path))
            .header(TOKEN_HEADER, &self.token)
            .content_type("application/json")
            .send(&body[..]);
        let body = self.answer(resp)?;
        serde_json::from_slice(&body).context("the relay answered something this hook does not understand")
    }

    /// `GET`s `path` and returns the answer's body as text.
    pub fn get(&self, path: &str) -> Result<String> {
        let resp = self.agent.get(self.url(path)).header(TOKEN_HEADER, &self.token).call();
        let body = self.answer(resp)?;
        String::from_utf8(body).context("the relay's answer is not UTF-8")
    }

    /// `GET`s `path` and decodes the JSON answer; `Ok(None)` when the relay answers 404 (no such
    /// thing), an error for any other failure.
    pub fn get_json<Resp: DeserializeOwned>(&self, path: &str) -> Result<Option<Resp>> {
        let resp = self.agent.get(self.url(path)).header(TOKEN_HEADER, &self.token).call();
        if resp.as_ref().is_ok_and(|r| r.status() == ureq::http::StatusCode::NOT_FOUND) {
            return Ok(None);
        }
        let body = self.answer(resp)?;
        serde_json::from_slice(&body).map(Some).context("the relay's answer is not understood")
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The body of a successful answer; any failure or non-2xx status as an error saying what.
    fn answer(&self, resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Vec<u8>> {
        let mut resp = resp.map_err(|e| match e {
            ureq::Error::Timeout(_) => anyhow::anyhow!("the relay's hook API at {} did not answer in time", self.addr),
            e => anyhow::anyhow!("cannot reach the relay's hook API at {} ({e}): is grasp-relay running?", self.addr),
        })?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .context("the relay's answer was cut short")?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            bail!("the relay answered {status}: {}", text.chars().take(300).collect::<String>());
        }
        Ok(body)
    }
}

/// The hook API's address, read once, as the agent's resolver (its only host is the API): ureq's
/// default resolver starts a thread per call whenever a timeout is set, a cost every push paid
/// twice.
#[derive(Debug)]
struct ApiAddress(SocketAddr);

impl Resolver for ApiAddress {
    fn resolve(&self, _: &Uri, _: &Config, _: NextTimeout) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(self.0);
        Ok(addrs)
    }
}

fn read_trimmed(data_dir: &Path, name: &str) -> Result<String> {
    let path = data_dir.join(name);
    let s = std::fs::read_to_string(&path).with_context(|| {
        format!("cannot read {} (is grasp-relay running with --data-dir {}?)", path.display(), data_dir.display())
    })?;
    let s = s.trim().to_string();
    if s.is_empty() {
        bail!("{} is empty (is grasp-relay running?)", path.display());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A one-shot loopback server answering `answer` to the first request; returns the data
    /// directory pointing at it and the thread that yields the request it received.
    fn fake_relay(answer: &'static [u8]) -> (tempfile::TempDir, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(API_ADDR_FILE), listener.local_addr().unwrap().to_string()).unwrap();
        std::fs::write(dir.path().join(API_TOKEN_FILE), "secret\n").unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "client closed before sending its request head");
                request.extend_from_slice(&buf[..n]);
            }
            conn.write_all(answer).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (dir, server)
    }

    #[test]
    fn reads_a_chunked_answer_and_sends_the_token() {
        let (dir, server) = fake_relay(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n",
        );
        let body = ApiClient::from_data_dir(dir.path(), Duration::from_secs(10)).unwrap().get("/v1/purgatory").unwrap();
        assert_eq!(body, "{\"a\": 1}");
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /v1/purgatory HTTP/1.1\r\n"), "{request}");
        assert!(request.to_ascii_lowercase().contains(&format!("{TOKEN_HEADER}: secret\r\n")), "{request}");
    }

    #[test]
    fn a_refusal_is_an_error_that_quotes_the_relay() {
        let (dir, server) = fake_relay(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 14\r\nConnection: close\r\n\r\nwrong token!!!",
        );
        let err = ApiClient::from_data_dir(dir.path(), Duration::from_secs(10)).unwrap().get("/v1/purgatory").unwrap_err();
        server.join().unwrap();
        let err = format!("{err:#}");
        assert!(err.contains("the relay answered 401") && err.contains("wrong token!!!"), "{err}");
    }

    #[test]
    fn an_address_that_is_not_an_ip_and_port_is_refused_before_any_call() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(API_ADDR_FILE), "localhost:1\n").unwrap();
        std::fs::write(dir.path().join(API_TOKEN_FILE), "secret\n").unwrap();
        let err = ApiClient::from_data_dir(dir.path(), Duration::from_secs(1)).unwrap_err();
        assert!(format!("{err:#}").contains("not an IP address and port"), "{err:#}");
    }

    #[test]
    fn no_relay_files_say_whether_the_relay_runs() {
        let dir = tempfile::tempdir().unwrap();
        let err = ApiClient::from_data_dir(dir.path(), Duration::from_secs(1)).unwrap_err();
        assert!(format!("{err:#}").contains("is grasp-relay running"), "{err:#}");
    }
}
