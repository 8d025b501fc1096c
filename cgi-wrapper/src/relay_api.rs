//! The calls grasp-cgi makes to the relay's loopback hook API (address and token from
//! `--data-dir`, like the hooks): the repository page's data (`GET /v1/repo/<npub>/<identifier>`)
//! and, on a private service, whether a git request may be served (`POST /v1/git-auth`).
//! grasp-cgi never opens the event store itself.
//!
//! Bounded: connect within [`CONNECT_TIMEOUT`], the answer within [`READ_TIMEOUT`] and
//! [`MAX_ANSWER_BYTES`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use grasp_state::hook_api::{check_version, RepoInfo, ADDR_FILE, PATH_REPO_PREFIX, TOKEN_FILE, TOKEN_HEADER};
use grasp_state::identifier::percent_encode_segment;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;

fn read_trimmed(path: &Path) -> Result<String> {
    let s = std::fs::read_to_string(path).with_context(|| format!("cannot read {} (is grasp-relay running?)", path.display()))?;
    Ok(s.trim().to_string())
}

/// The page data of `npub`'s `identifier`; `Ok(None)` when the relay has no such repository.
pub fn repo_info(data_dir: &Path, npub: &str, identifier: &str) -> Result<Option<RepoInfo>> {
    let addr = read_trimmed(&data_dir.join(ADDR_FILE))?;
    let token = read_trimmed(&data_dir.join(TOKEN_FILE))?;
    let sock: SocketAddr = addr.parse().with_context(|| format!("bad address {addr:?} in {ADDR_FILE}"))?;
    let mut stream = TcpStream::connect_timeout(&sock, CONNECT_TIMEOUT)
        .with_context(|| format!("cannot reach the relay's hook API at {sock}"))?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let path = format!("{PATH_REPO_PREFIX}{npub}/{}", percent_encode_segment(identifier));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {sock}\r\n{TOKEN_HEADER}: {token}\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.take(MAX_ANSWER_BYTES).read_to_end(&mut raw).context("reading the relay's answer")?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("malformed answer from the relay")?;
    let status = head.lines().next().unwrap_or_default();
    if status.contains(" 404 ") {
        return Ok(None);
    }
    if !status.contains(" 200 ") {
        bail!("the relay answered {status}");
    }
    let info: RepoInfo = serde_json::from_str(body).context("the relay's answer is not understood")?;
    check_version(info.version)?;
    Ok(Some(info))
}

/// A private service's verdict on a git request for `npub`'s `identifier` carrying the HTTP
/// `Authorization` header `authorization` (`POST /v1/git-auth`).
pub fn git_auth(data_dir: &Path, npub: &str, identifier: &str, authorization: Option<String>) -> Result<bool> {
    use grasp_state::hook_api::{GitAuthRequest, GitAuthResponse, HOOK_API_VERSION, PATH_GIT_AUTH};
    let addr = read_trimmed(&data_dir.join(ADDR_FILE))?;
    let token = read_trimmed(&data_dir.join(TOKEN_FILE))?;
    let sock: SocketAddr = addr.parse().with_context(|| format!("bad address {addr:?} in {ADDR_FILE}"))?;
    let mut stream = TcpStream::connect_timeout(&sock, CONNECT_TIMEOUT)
        .with_context(|| format!("cannot reach the relay's hook API at {sock}"))?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let body = serde_json::to_string(&GitAuthRequest {
        version: HOOK_API_VERSION,
        owner: npub.to_string(),
        identifier: identifier.to_string(),
        authorization,
    })?;
    write!(
        stream,
        "POST {PATH_GIT_AUTH} HTTP/1.1\r\nHost: {sock}\r\n{TOKEN_HEADER}: {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.take(MAX_ANSWER_BYTES).read_to_end(&mut raw).context("reading the relay's answer")?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("malformed answer from the relay")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        bail!("the relay answered {status}");
    }
    let answer: GitAuthResponse = serde_json::from_str(body).context("the relay's answer is not understood")?;
    check_version(answer.version)?;
    Ok(answer.allowed)
}
