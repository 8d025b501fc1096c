//! GRASP fixtures for end-to-end tests: signed NIP-34 events pointing at a [`TestServer`], and a
//! [`Repo`] handle that names the server's repository URL and pushes to it with real `git`.

use std::path::{Path, PathBuf};

use grasp_state::names::identifier::{npub_of, percent_encode_segment};
use nostr::prelude::*;

use crate::git::{git_output, WorkTree};
use crate::TestServer;

/// Seconds since the epoch, now.
pub fn now() -> u64 {
    Timestamp::now().as_secs()
}

/// An event of `kind` by `keys` with `content` and `tags`, created at `at`.
pub fn signed(keys: &Keys, kind: u16, at: u64, content: &str, tags: Vec<Tag>) -> Event {
    EventBuilder::new(Kind::from(kind), content)
        .tags(tags)
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .expect("signing")
}

/// [`signed`], its tags given as strings (`&[&["e", id], &["k", "1621"]]`).
pub fn signed_event(keys: &Keys, kind: u16, at: u64, content: &str, tags: &[&[&str]]) -> Event {
    sign_content(keys, kind, at, content, tags.iter().map(|t| s(t)).collect())
}

fn sign(keys: &Keys, kind: u16, at: u64, tags: Vec<Vec<String>>) -> Event {
    sign_content(keys, kind, at, "", tags)
}

fn sign_content(keys: &Keys, kind: u16, at: u64, content: &str, tags: Vec<Vec<String>>) -> Event {
    signed(keys, kind, at, content, tags.into_iter().map(|t| Tag::parse(t).expect("valid tag")).collect())
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// `host:port` of the server (what announcements must list).
pub fn host(server: &TestServer) -> String {
    server.addr().to_string()
}

/// The git URL of `owner`'s repository `identifier` on `server`.
pub fn repo_url(server: &TestServer, owner: &PublicKey, identifier: &str) -> String {
    format!("http://{}/{}/{}.git", host(server), npub_of(owner), percent_encode_segment(identifier))
}

/// A repository announcement (30617) by `keys` listing `server` (clone + relays), with optional
/// maintainers, created at `at`.
pub fn announcement_at(server: &TestServer, keys: &Keys, identifier: &str, maintainers: &[PublicKey], at: u64) -> Event {
    let mut tags = vec![
        s(&["d", identifier]),
        s(&["name", identifier]),
        s(&["clone", &repo_url(server, &keys.public_key(), identifier)]),
        s(&["relays", &format!("ws://{}", host(server))]),
    ];
    if !maintainers.is_empty() {
        let mut m = vec!["maintainers".to_string()];
        m.extend(maintainers.iter().map(|pk| pk.to_hex()));
        tags.push(m);
    }
    sign(keys, 30617, at, tags)
}

/// [`announcement_at`] now.
pub fn announcement(server: &TestServer, keys: &Keys, identifier: &str, maintainers: &[PublicKey]) -> Event {
    announcement_at(server, keys, identifier, maintainers, now())
}

/// An announcement with arbitrary clone/relays URLs (for "does it list this service" tests).
pub fn announcement_with_urls(keys: &Keys, identifier: &str, clone: &str, relays: &str) -> Event {
    sign(keys, 30617, now(), vec![s(&["d", identifier]), s(&["clone", clone]), s(&["relays", relays])])
}

/// A repository state (30618) by `keys`: `refs` are (`refs/heads/x` or `refs/tags/x`, oid);
/// HEAD points at `head` (a branch name like `main`) when given.
pub fn state_at(keys: &Keys, identifier: &str, refs: &[(&str, &str)], head: Option<&str>, at: u64) -> Event {
    let mut tags = vec![s(&["d", identifier])];
    for (name, oid) in refs {
        tags.push(s(&[name, oid]));
    }
    if let Some(h) = head {
        tags.push(s(&["HEAD", &format!("ref: refs/heads/{h}")]));
    }
    sign(keys, 30618, at, tags)
}

/// [`state_at`] now.
pub fn state(keys: &Keys, identifier: &str, refs: &[(&str, &str)], head: Option<&str>) -> Event {
    state_at(keys, identifier, refs, head, now())
}

/// A pull request (1618) by `keys` for `owner`'s repository, tip `commit`.
pub fn pull_request(keys: &Keys, owner: &PublicKey, identifier: &str, commit: &str, clone: &[&str]) -> Event {
    let mut tags = vec![s(&["a", &format!("30617:{}:{identifier}", owner.to_hex())]), s(&["c", commit]), s(&["subject", "a change"])];
    if !clone.is_empty() {
        let mut c = vec!["clone".to_string()];
        c.extend(clone.iter().map(|u| u.to_string()));
        tags.push(c);
    }
    sign(keys, 1618, now(), tags)
}

/// An issue (1621) tagging `owner`'s repository.
pub fn issue(keys: &Keys, owner: &PublicKey, identifier: &str) -> Event {
    sign(keys, 1621, now(), vec![s(&["a", &format!("30617:{}:{identifier}", owner.to_hex())]), s(&["subject", "a bug"])])
}

/// Any event of `kind` with the given tags, created now.
pub fn event(keys: &Keys, kind: u16, tags: &[&[&str]]) -> Event {
    signed_event(keys, kind, now(), "", tags)
}

/// A private service's git proof (GRASP-08): `Authorization: Nostr <base64 kind 27235>` by
/// `keys` for the repository root `url`, naming `method`, created at `at`.
pub fn git_proof_at(keys: &Keys, url: &str, method: &str, at: u64) -> String {
    use base64::Engine as _;
    let ev = EventBuilder::new(Kind::Custom(27235), "")
        .tags([Tag::parse(["u", url]).unwrap(), Tag::parse(["method", method]).unwrap()])
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .unwrap();
    format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(ev.as_json()))
}

/// [`git_proof_at`] as a client sends it: `GET`, now.
pub fn git_proof(keys: &Keys, url: &str) -> String {
    git_proof_at(keys, url, "GET", now())
}

/// `git <args>` in `dir` sending `Authorization: <authorization>` with every request.
pub fn git_with(dir: &Path, authorization: &str, args: &[&str]) -> std::process::Output {
    let header = format!("http.extraHeader=Authorization: {authorization}");
    let mut all = vec!["-c", header.as_str()];
    all.extend_from_slice(args);
    git_output(dir, &all)
}

/// A local work tree with commits that pushes to a server's repository over HTTP.
pub struct Repo {
    pub work: WorkTree,
    pub url: String,
}

impl Repo {
    /// A new work tree in `dir` for `owner`'s `identifier` on `server`.
    pub fn new(dir: &Path, server: &TestServer, owner: &PublicKey, identifier: &str) -> Repo {
        Repo { work: WorkTree::new(dir.to_path_buf()), url: repo_url(server, owner, identifier) }
    }

    /// Commits a file; returns the commit id.
    pub fn commit(&self, file: &str, content: &str) -> String {
        self.work.commit(file, content)
    }

    /// `git push <url> <refspecs>`: Ok(stderr) when accepted, Err(stderr) when refused.
    pub fn push(&self, refspecs: &[&str]) -> Result<String, String> {
        self.push_to(&self.url, refspecs)
    }

    /// Pushes to another URL.
    pub fn push_to(&self, url: &str, refspecs: &[&str]) -> Result<String, String> {
        let mut args = vec!["push", "--porcelain", url];
        args.extend_from_slice(refspecs);
        let out = git_output(&self.work.dir, &args);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() { Ok(text) } else { Err(text) }
    }

    /// `git rev-parse` in the work tree.
    pub fn rev(&self, what: &str) -> String {
        crate::git::git(&self.work.dir, &["rev-parse", what])
    }
}

/// The refs (`refs/...` -> oid) of a bare repository on disk.
pub fn bare_refs(repo: &Path) -> std::collections::BTreeMap<String, String> {
    let out = git_output(repo, &["for-each-ref", "--format=%(objectname) %(refname)"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(o, n)| (n.to_string(), o.to_string()))
        .collect()
}

/// Where `owner`'s repository `identifier` lives in the server's data directory.
pub fn repo_dir(server: &TestServer, owner: &PublicKey, identifier: &str) -> PathBuf {
    server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(npub_of(owner)).join(format!("{identifier}.git"))
}

/// `git clone` of `url` into `dir`; Ok(()) or Err(stderr).
pub fn clone(url: &str, dir: &Path, extra: &[&str]) -> Result<(), String> {
    let parent = dir.parent().unwrap();
    let mut args = vec!["clone", "-q"];
    args.extend_from_slice(extra);
    args.push(url);
    args.push(dir.to_str().unwrap());
    let out = git_output(parent, &args);
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).to_string()) }
}

/// The event ids (hex) of every entry in the server's purgatory, from the operator listing of
/// the loopback hook API (`GET /v1/purgatory` with the token in `<data>/api-token`).
pub async fn purgatory_ids(server: &TestServer) -> std::collections::BTreeSet<String> {
    purgatory_listing(server)
        .await["entries"]
        .as_array()
        .expect("listing has entries")
        .iter()
        .filter_map(|e| e["event_id"].as_str().map(str::to_owned))
        .collect()
}

/// A pull request (1618) like [`pull_request`], created at `at` (sign it before pushing its
/// commit to `refs/nostr/<id>` to test git-first arrival).
pub fn pull_request_at(keys: &Keys, owner: &PublicKey, identifier: &str, commit: &str, at: u64) -> Event {
    let tags = vec![s(&["a", &format!("30617:{}:{identifier}", owner.to_hex())]), s(&["c", commit]), s(&["subject", "a change"])];
    sign(keys, 1618, at, tags)
}

/// What HEAD of a bare repository points at (`refs/heads/...`).
pub fn bare_head(repo: &Path) -> String {
    crate::git::git(repo, &["symbolic-ref", "HEAD"])
}

/// `git push` straight into a bare repository on disk (no HTTP, so it works while the relay is
/// down). `receive_pack` replaces the `git receive-pack` command, e.g. to run it with another
/// `core.hooksPath`. Ok(output) when accepted, Err(output) when refused.
///
/// The push holds the repository's push lock for its whole receive-pack, as `grasp-cgi` and the
/// relay's listener do: without it the relay's maintenance after an earlier push would take the
/// push's quarantine for a crashed push's and remove it.
pub fn push_on_disk(work: &WorkTree, bare: &Path, receive_pack: Option<&str>, refspecs: &[&str]) -> Result<String, String> {
    let _push_lock = bare.is_dir().then(|| {
        grasp_state::contract::push_lock::PushLock::take_within(bare, std::time::Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("push lock of {}: {e}", bare.display()))
    });
    let mut args = vec!["push", "--porcelain"];
    let rp;
    if let Some(cmd) = receive_pack {
        rp = format!("--receive-pack={cmd}");
        args.push(&rp);
    }
    args.push(bare.to_str().unwrap());
    args.extend_from_slice(refspecs);
    let out = git_output(&work.dir, &args);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(text) }
}

/// A repository published end to end: announcement and state accepted, `main` pushed over HTTP
/// and released. Returns the work tree, the pushed tip and the ids of the (now served)
/// announcement and state.
pub struct Published {
    pub repo: Repo,
    pub tip: String,
    pub announcement: EventId,
    pub state: EventId,
}

/// Announces `identifier` for `owner` on `server`, publishes a state for one commit and pushes
/// it; panics (with the relay's answer) if any step is refused.
pub async fn publish_repo(
    server: &TestServer,
    client: &mut crate::NostrClient,
    work_dir: &Path,
    owner: &Keys,
    identifier: &str,
) -> Published {
    let ann = announcement(server, owner, identifier, &[]);
    let (ok, msg) = client.send_event(&ann).await.unwrap();
    assert!(ok, "announcement refused: {msg}");
    let repo = Repo::new(work_dir, server, &owner.public_key(), identifier);
    let tip = repo.commit("README", &format!("{identifier}\n"));
    let st = state(owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "state refused: {msg}");
    repo.push(&["main"]).unwrap_or_else(|e| panic!("push of {identifier} refused: {e}"));
    Published { repo, tip, announcement: ann.id, state: st.id }
}

/// Announces `identifier` for `owner` on `server` (held: nothing is pushed yet) and returns a
/// work tree in `work_dir` for it; panics if the announcement is not held.
pub async fn held_repo(
    server: &TestServer,
    client: &mut crate::NostrClient,
    work_dir: &Path,
    owner: &Keys,
    identifier: &str,
) -> Repo {
    held(client, &announcement(server, owner, identifier, &[])).await;
    Repo::new(work_dir, server, &owner.public_key(), identifier)
}

/// The first bytes of a push's `git-receive-pack` request body: one ref update and the flush
/// that ends the command list, as git sends them, and none of the pack, so git waits for the
/// rest, as a stalled or abandoned push leaves it. (The relay's listener reads the command list
/// before it starts git: a body stalled within it starts nothing.)
pub fn stalled_push_body() -> String {
    let line = format!("{} {} refs/heads/main\0 report-status side-band-64k\n", "1".repeat(40), "2".repeat(40));
    format!("{:04x}{line}0000", line.len() + 4)
}

/// The relay's hook API address and token (from its data directory).
pub fn hook_api(server: &TestServer) -> (String, String) {
    let read = |f: &str| std::fs::read_to_string(server.data_dir().join(f)).unwrap().trim().to_string();
    (read(grasp_state::contract::layout::API_ADDR_FILE), read(grasp_state::contract::layout::API_TOKEN_FILE))
}

/// The operator's purgatory listing (`GET /v1/purgatory` on the hook API) as JSON.
pub async fn purgatory_listing(server: &TestServer) -> serde_json::Value {
    operator_get(server, "/v1/purgatory").await.expect("purgatory listing")
}

/// A random, syntactically valid event id (hex) nobody has published.
pub fn random_event_id() -> String {
    sign(&Keys::generate(), 1, now(), vec![]).id.to_hex()
}

/// An announcement (30617) by `keys` listing every server in `servers` (clone + relays) and the
/// extra clone URLs `other_clones` (e.g. a plain git server, or an unreachable one).
pub fn announcement_on(servers: &[&TestServer], keys: &Keys, identifier: &str, other_clones: &[&str]) -> Event {
    let mut clone = vec!["clone".to_string()];
    clone.extend(servers.iter().map(|server| repo_url(server, &keys.public_key(), identifier)));
    clone.extend(other_clones.iter().map(|u| u.to_string()));
    let mut relays = vec!["relays".to_string()];
    relays.extend(servers.iter().map(|server| format!("ws://{}", host(server))));
    sign(keys, 30617, now(), vec![s(&["d", identifier]), clone, relays])
}

/// `GET <path>` on the server's operator (hook) API with its token, e.g. `/v1/sync` or
/// `/v1/purgatory`; the JSON answer.
pub async fn operator_get(server: &TestServer, path: &str) -> anyhow::Result<serde_json::Value> {
    let (addr, token) = hook_api(server);
    let response = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .header(grasp_state::contract::hook_api::TOKEN_HEADER, token)
        .send()
        .await?;
    let status = response.status();
    let body: serde_json::Value = response.json().await?;
    anyhow::ensure!(status.is_success(), "GET {path}: {status}: {body}");
    Ok(body)
}

/// A kind-5 deletion by `keys` of event ids and `a` coordinates, created at `at`.
pub fn deletion_at(keys: &Keys, ids: &[EventId], coordinates: &[String], at: u64) -> Event {
    let mut tags: Vec<Vec<String>> = ids.iter().map(|id| s(&["e", &id.to_hex()])).collect();
    tags.extend(coordinates.iter().map(|c| s(&["a", c])));
    sign(keys, 5, at, tags)
}

/// The `a` coordinate `kind:<pubkey hex>:<identifier>`.
pub fn coordinate(kind: u16, pubkey: &PublicKey, identifier: &str) -> String {
    format!("{kind}:{}:{identifier}", pubkey.to_hex())
}

/// A Nostr client connected to `server` (panics if the relay refuses the connection).
pub async fn connect(server: &TestServer) -> crate::NostrClient {
    crate::NostrClient::connect(&server.ws_url()).await.unwrap()
}

/// A server started with `extra_args` (as [`TestServer::start_with`]) and a client connected to
/// it.
pub async fn connected(extra_args: &[&str]) -> (TestServer, crate::NostrClient) {
    let server = TestServer::start_with(extra_args);
    let client = connect(&server).await;
    (server, client)
}

/// The opening most suites share: [`connected`], and a temporary directory for work trees.
pub async fn started(extra_args: &[&str]) -> (TestServer, tempfile::TempDir, crate::NostrClient) {
    let (server, client) = connected(extra_args).await;
    (server, tempfile::tempdir().unwrap(), client)
}

/// Sends the raw HTTP `request` on `stream` and returns the status code of the answer (read up
/// to the end of its status line, each read bounded by [`crate::TIMEOUT`]).
pub async fn http_status(stream: &mut tokio::net::TcpStream, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        let n = tokio::time::timeout(crate::TIMEOUT, stream.read(&mut byte)).await.expect("no answer").unwrap();
        assert!(n > 0, "connection closed without an answer");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).split(' ').nth(1).unwrap().parse().unwrap()
}

/// Whether the relay serves the event `id` (a `REQ` by id finds it).
pub async fn stored(c: &mut crate::NostrClient, id: EventId) -> bool {
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

/// Sends `ev` and asserts the relay held it in purgatory (`OK true "purgatory: ..."`).
pub async fn held(c: &mut crate::NostrClient, ev: &Event) {
    let (ok, msg) = c.send_event(ev).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "event {} (kind {}) not held: {ok} {msg}", ev.id, ev.kind);
}

/// Sends `ev` and asserts the relay accepted and serves it at once (not held).
pub async fn served(c: &mut crate::NostrClient, ev: &Event) {
    let (ok, msg) = c.send_event(ev).await.unwrap();
    assert!(ok && !msg.starts_with("purgatory:"), "expected kind {} served at once: {ok} {msg}", ev.kind);
    assert!(stored(c, ev.id).await);
}

/// The server's NIP-11 document.
pub async fn nip11(server: &TestServer) -> serde_json::Value {
    reqwest::Client::new()
        .get(server.http_url())
        .header("Accept", "application/nostr+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Background git work (copies into the family and its object pool, maintenance passes) waiting
/// or running, from the `grasp_background_git_work` gauges on the metrics listener (the server
/// must run with `--metrics-bind 127.0.0.1:0`). Copies are read before maintenance: a copy that
/// ends queues its maintenance first, so both at 0 in one scrape means the relay is idle.
pub async fn background_git_work(server: &TestServer) -> Option<(u64, u64)> {
    let addr = std::fs::read_to_string(server.data_dir().join(grasp_state::contract::layout::METRICS_ADDR_FILE)).ok()?;
    let body = reqwest::get(format!("http://{}/metrics", addr.trim())).await.ok()?.text().await.ok()?;
    let gauge = |kind: &str| -> Option<u64> {
        let prefix = format!("grasp_background_git_work{{kind=\"{kind}\"}} ");
        body.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse::<f64>().ok()).map(|v| v as u64)
    };
    Some((gauge("copies")?, gauge("maintenance")?))
}

/// Waits (with a deadline) until the relay has no background git work left
/// ([`background_git_work`]).
pub async fn background_settled(server: &TestServer) {
    crate::eventually!("the relay's background git work to settle", std::time::Duration::from_secs(120), {
        (background_git_work(server).await == Some((0, 0))).then_some(())
    });
}

/// Objects stored in the repository's own object directory (loose and packed), not those it
/// borrows from an object pool.
pub fn local_objects(repo: &Path) -> u64 {
    let out = crate::git::git(repo, &["count-objects", "-v"]);
    out.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| *k == "count" || *k == "in-pack")
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// The identifier family's object pool in the server's data directory.
pub fn pool_dir(server: &TestServer, identifier: &str) -> PathBuf {
    server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(grasp_state::names::identifier::POOLS_DIR).join(format!("{identifier}.git"))
}

/// Whether the repository can read `oid` (its own objects or its pool's).
pub fn has_object(repo: &Path, oid: &str) -> bool {
    git_output(repo, &["cat-file", "-e", oid]).status.success()
}

/// `git fsck` of a bare repository is clean (dangling objects allowed) and every ref's history
/// is readable; panics with git's words otherwise.
pub fn assert_consistent(repo: &Path) {
    let out = git_output(repo, &["fsck", "--no-progress", "--no-dangling"]);
    assert!(out.status.success(), "git fsck failed in {}: {}{}", repo.display(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let out = git_output(repo, &["rev-list", "--objects", "--all", "--quiet"]);
    assert!(out.status.success(), "a ref's history is unreadable in {}: {}", repo.display(), String::from_utf8_lossy(&out.stderr));
}

/// Commits `files` files of `kib` KiB of random bytes each (incompressible) in `work`; returns
/// the commit.
pub fn commit_random(work: &WorkTree, tag: &str, files: usize, kib: usize) -> String {
    use std::io::Read;
    let mut urandom = std::fs::File::open("/dev/urandom").unwrap();
    let dir = work.dir.join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let mut buf = vec![0u8; kib * 1024];
    for i in 0..files {
        urandom.read_exact(&mut buf).unwrap();
        std::fs::write(dir.join(format!("blob{i}")), &buf).unwrap();
    }
    crate::git::git(&work.dir, &["add", tag]);
    crate::git::git(&work.dir, &["commit", "-q", "-m", tag]);
    crate::git::git(&work.dir, &["rev-parse", "HEAD"])
}

/// `grasp-relay <command> --data-dir <server's> <args>` (an operator command against the running
/// relay): its stdout; panics with both streams when it fails.
pub fn operator_command(server: &TestServer, command: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::binary_path("grasp-relay"))
        .arg(command)
        .arg("--data-dir")
        .arg(server.data_dir())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{command} {args:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}
