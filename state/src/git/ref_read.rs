//! Which small git reads the relay may answer from its ref cache, and what keys the answer
//! (docs/architecture.md, "The ref cache"): pure decisions on the request, no I/O.
//!
//! Three reads qualify, all answered by `git http-backend` from the repository's refs and config
//! alone:
//! - the ref advertisement, `GET <repo>/info/refs?service=git-upload-pack` (protocol v0/v1: the
//!   refs; v2: the capability advertisement), keyed by its `Git-Protocol` header;
//! - the receive-pack ref advertisement, `GET <repo>/info/refs?service=git-receive-pack` (a
//!   push's first request), keyed the same way; its answer also depends on the repository's
//!   alternates, which the relay checks ([`ReadKey::is_receive_pack`]);
//! - protocol v2 `ls-refs`, `POST <repo>/git-upload-pack` with `Git-Protocol: version=2` and a
//!   small, well-formed `command=ls-refs` body, keyed by that body.
//!
//! A v2 `POST git-upload-pack` that is not `ls-refs` (a `fetch`) is not cached, but when its
//! small body has been read whole the relay may start `git upload-pack` for it without `git
//! http-backend` ([`Candidate::UploadPackV2`]).
//!
//! Anything else, or anything unusual about these (another query, a `Git-Protocol` value git
//! might read differently, a compressed or oversized body, bytes after the request's flush), is
//! not a [`ReadKey`] and goes to git as before. The key holds everything of the request git's
//! answer depends on, except the client's `agent=` capability (git records it and answers the
//! same whatever it says), so one cached answer serves every client version.

use crate::git::pkt_line::{next_packet, Packet};

/// Largest `ls-refs` request body the cache keys (a `git ls-remote` or fetch sends ~100 bytes;
/// many `ref-prefix` lines stay far below): a bigger one goes to git, so hostile bodies cannot
/// make large keys.
pub const MAX_LS_REFS_BODY: usize = 2048;

/// The `Git-Protocol` header values whose answers are cached (absent: protocol v0).
const PROTOCOLS: &[&[u8]] = &[b"version=0", b"version=1", b"version=2"];

/// A cacheable read's key within its repository: which read, its `Git-Protocol`, and for
/// `ls-refs` the normalised request body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReadKey(Vec<u8>);

impl ReadKey {
    /// The key's bytes (for sizing).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether the read is an `ls-refs` (a `POST git-upload-pack`), not an advertisement.
    pub fn is_ls_refs(&self) -> bool {
        self.0.starts_with(b"ls-refs\0")
    }

    /// Whether the read is the receive-pack ref advertisement (a push's first request), whose
    /// answer also depends on the repository's alternates (`.have` lines).
    pub fn is_receive_pack(&self) -> bool {
        self.0.starts_with(b"receive-pack\0")
    }
}

/// A request that may be a cacheable read, from its method, what follows `.git`
/// ([`crate::names::identifier::RepoUrlPath::rest`]), its query and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// The upload-pack ref advertisement: cacheable as it is.
    Advertisement(ReadKey),
    /// A v2 `POST git-upload-pack`: cacheable if its body is an `ls-refs` request
    /// ([`ls_refs_key`]).
    UploadPackV2,
}

/// The request headers a candidate depends on (raw values; `None`: absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadHeaders<'a> {
    pub git_protocol: Option<&'a [u8]>,
    pub content_type: Option<&'a [u8]>,
    pub content_encoding: Option<&'a [u8]>,
}

/// Whether the request may be a cacheable read. `method` upper case.
pub fn candidate(method: &str, rest: &str, query: &str, headers: ReadHeaders<'_>) -> Option<Candidate> {
    let protocol = headers.git_protocol;
    if protocol.is_some_and(|p| !PROTOCOLS.contains(&p)) {
        return None;
    }
    match (method, rest) {
        ("GET", "/info/refs") if query == "service=git-upload-pack" || query == "service=git-receive-pack" => {
            let mut key = match query {
                "service=git-upload-pack" => b"info/refs\0".to_vec(),
                _ => b"receive-pack\0".to_vec(),
            };
            key.extend_from_slice(protocol.unwrap_or(b""));
            Some(Candidate::Advertisement(ReadKey(key)))
        }
        ("POST", "/git-upload-pack")
            if query.is_empty()
                && protocol == Some(b"version=2")
                && headers.content_type == Some(b"application/x-git-upload-pack-request")
                && headers.content_encoding.is_none() =>
        {
            Some(Candidate::UploadPackV2)
        }
        _ => None,
    }
}

/// Whether `body` is the receive-pack advertisement of a repository without refs, as `git
/// http-backend` answers it: the service line and its flush, an optional `version 1` line,
/// then only the zero id's `capabilities^{}` line with the capabilities, and the flush. Such an
/// answer is the same for every repository of one setup and config, so the relay may answer
/// it for another empty repository (docs/architecture.md, "The ref cache").
pub fn is_empty_receive_advertisement(body: &[u8]) -> bool {
    let Some((Packet::Data(b"# service=git-receive-pack\n"), rest)) = next_packet(body) else { return false };
    let Some((Packet::Flush, mut rest)) = next_packet(rest) else { return false };
    if let Some((Packet::Data(b"version 1\n"), after)) = next_packet(rest) {
        rest = after;
    }
    let Some((Packet::Data(line), rest)) = next_packet(rest) else { return false };
    let Some(nul) = line.iter().position(|&b| b == 0) else { return false };
    let Some(id) = line[..nul].strip_suffix(b" capabilities^{}") else { return false };
    let zero = (id.len() == 40 || id.len() == 64) && id.iter().all(|&b| b == b'0');
    zero && !line[nul + 1..].contains(&0) && matches!(next_packet(rest), Some((Packet::Flush, b"")))
}

/// The key of a v2 request body when it is one whole `ls-refs` request: `command=ls-refs`, then
/// capabilities, a delimiter, arguments and the final flush, nothing after it, at most
/// [`MAX_LS_REFS_BODY`] bytes. The key is the body without its `agent=` capability line (when
/// that line is well formed: one printable token). `None`: git answers it.
pub fn ls_refs_key(body: &[u8]) -> Option<ReadKey> {
    if body.len() > MAX_LS_REFS_BODY {
        return None;
    }
    let mut key = b"ls-refs\0".to_vec();
    let mut rest = body;
    let mut first = true;
    loop {
        let (packet, after) = next_packet(rest)?;
        let raw = &rest[..rest.len() - after.len()];
        rest = after;
        match packet {
            Packet::Flush => break,
            Packet::Delim => key.extend_from_slice(raw),
            // A response-end packet is not part of a request.
            Packet::ResponseEnd => return None,
            Packet::Data(line) => {
                if first {
                    if line != b"command=ls-refs\n" && line != b"command=ls-refs" {
                        return None;
                    }
                } else if is_agent(line) {
                    continue;
                }
                key.extend_from_slice(raw);
            }
        }
        first = false;
    }
    (rest.is_empty() && !first).then_some(ReadKey(key))
}

/// A well-formed `agent=<token>` capability line.
fn is_agent(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_prefix(b"agent=")
        .is_some_and(|agent| !agent.is_empty() && agent.iter().all(|b| (0x21..0x7f).contains(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(line: &str) -> String {
        format!("{:04x}{line}", line.len() + 4)
    }

    fn body(agent: &str, args: &[&str]) -> Vec<u8> {
        let mut b = pkt("command=ls-refs\n") + &pkt(&format!("agent={agent}\n")) + &pkt("object-format=sha1\n") + "0001";
        for a in args {
            b += &pkt(&format!("{a}\n"));
        }
        (b + "0000").into_bytes()
    }

    fn headers(protocol: Option<&'static str>) -> ReadHeaders<'static> {
        ReadHeaders {
            git_protocol: protocol.map(str::as_bytes),
            content_type: Some(b"application/x-git-upload-pack-request"),
            content_encoding: None,
        }
    }

    #[test]
    fn the_advertisement_is_keyed_by_its_protocol() {
        let key = |p| match candidate("GET", "/info/refs", "service=git-upload-pack", headers(p)) {
            Some(Candidate::Advertisement(k)) if !k.is_ls_refs() => k,
            other => panic!("{other:?}"),
        };
        let keys = [key(None), key(Some("version=1")), key(Some("version=2")), key(Some("version=0"))];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Anything git might read otherwise is not cached.
        for p in ["version=2:object-format=sha256", "version=3", "", "version=1\0"] {
            assert_eq!(candidate("GET", "/info/refs", "service=git-upload-pack", headers(Some(p))), None, "{p:?}");
        }
        for q in ["", "service=git-upload-pack&x=1", "service=git-receive-pack&x=1"] {
            assert_eq!(candidate("GET", "/info/refs", q, headers(None)), None, "{q:?}");
        }
        // The receive-pack advertisement: its own keys, one per protocol.
        let push = |p| match candidate("GET", "/info/refs", "service=git-receive-pack", headers(p)) {
            Some(Candidate::Advertisement(k)) if k.is_receive_pack() && !k.is_ls_refs() => k,
            other => panic!("{other:?}"),
        };
        assert_ne!(push(None), push(Some("version=1")));
        assert!(keys.iter().all(|k| *k != push(None) && !k.is_receive_pack()));
        assert_eq!(candidate("GET", "/HEAD", "", headers(None)), None);
    }

    #[test]
    fn the_empty_receive_advertisement_is_recognised_and_nothing_else() {
        let caps = "report-status report-status-v2 delete-refs side-band-64k quiet atomic ofs-delta object-format=sha1 agent=git/2.47.3";
        let empty = format!("{}0000{}0000", pkt("# service=git-receive-pack\n"), pkt(&format!("{} capabilities^{{}}\0{caps}\n", "0".repeat(40))));
        assert!(is_empty_receive_advertisement(empty.as_bytes()));
        let v1 = format!("{}0000{}{}0000", pkt("# service=git-receive-pack\n"), pkt("version 1\n"), pkt(&format!("{} capabilities^{{}}\0{caps}\n", "0".repeat(40))));
        assert!(is_empty_receive_advertisement(v1.as_bytes()));
        let with_ref = format!("{}0000{}0000", pkt("# service=git-receive-pack\n"), pkt(&format!("{} refs/heads/main\0{caps}\n", "1".repeat(40))));
        let with_have = format!("{}0000{}{}0000", pkt("# service=git-receive-pack\n"), pkt(&format!("{} capabilities^{{}}\0{caps}\n", "0".repeat(40))), pkt(&format!("{} .have\n", "1".repeat(40))));
        let upload = empty.replace("receive-pack", "upload-pack");
        for bad in [with_ref, with_have, upload, empty[..empty.len() - 4].to_string(), format!("{empty}0000")] {
            assert!(!is_empty_receive_advertisement(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn only_a_plain_v2_upload_pack_post_may_be_ls_refs() {
        let h = headers(Some("version=2"));
        assert_eq!(candidate("POST", "/git-upload-pack", "", h), Some(Candidate::UploadPackV2));
        assert_eq!(candidate("POST", "/git-upload-pack", "", headers(None)), None, "v0: a fetch");
        assert_eq!(candidate("POST", "/git-receive-pack", "", h), None);
        assert_eq!(candidate("POST", "/git-upload-pack", "", ReadHeaders { content_encoding: Some(b"gzip"), ..h }), None);
        assert_eq!(candidate("POST", "/git-upload-pack", "", ReadHeaders { content_type: Some(b"text/plain"), ..h }), None);
    }

    #[test]
    fn ls_refs_bodies_are_keyed_without_the_agent() {
        let args = ["peel", "symrefs", "ref-prefix HEAD", "ref-prefix refs/heads/"];
        let a = ls_refs_key(&body("git/2.47.3", &args)).unwrap();
        assert!(a.is_ls_refs());
        assert_eq!(a, ls_refs_key(&body("git/2.30.0-custom", &args)).unwrap());
        assert_ne!(a, ls_refs_key(&body("git/2.47.3", &args[..3])).unwrap());
        assert_ne!(a, ls_refs_key(&body("git/2.47.3", &[])).unwrap());
        // An odd agent line stays in the key: git judges it.
        assert_ne!(ls_refs_key(&body("a b", &args)), ls_refs_key(&body("ab", &args)));
        // Without arguments or delimiter, and without newlines.
        assert!(ls_refs_key(format!("{}0000", pkt("command=ls-refs")).as_bytes()).is_some());
    }

    #[test]
    fn anything_but_one_whole_ls_refs_request_is_left_to_git() {
        let good = body("git/2.47.3", &["peel"]);
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"0000");
        let fetch = (pkt("command=fetch\n") + "0001" + &pkt("done\n") + "0000").into_bytes();
        let many: Vec<String> = (0..200).map(|i| format!("ref-prefix refs/heads/{i:08}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for bad in [
            trailing,
            fetch,
            good[..good.len() - 4].to_vec(),
            good[..good.len() - 1].to_vec(),
            b"0000".to_vec(),
            b"".to_vec(),
            b"0003x0000".to_vec(),
            format!("{}0002", pkt("command=ls-refs")).into_bytes(),
            format!("{}0000", pkt("command=ls-refs-x")).into_bytes(),
            // Upper-case hex is git's too, but rare enough to leave to it.
            b"001Acommand=ls-refs\n0000".to_vec(),
            body("git/2.47.3", &many),
        ] {
            assert_eq!(ls_refs_key(&bad), None, "{:?}", String::from_utf8_lossy(&bad));
        }
    }
}
