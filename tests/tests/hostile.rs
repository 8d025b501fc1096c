//! Hostile clients (docs/security.md): attacks that wait, count or stay behind, each reproduced as an
//! anonymous client would run it on loopback. Every test names the bound it proves in
//! docs/security.md.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::processes::{children_of, serves_a_request, Reaper};
use grasp_tests::{wait_until, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

/// Opens a `git-receive-pack` POST to `owner`'s `identifier` announcing a `Content-Length` of
/// 1 MiB and sends only the first bytes of a push (one ref update line), then stops sending.
fn start_receive_pack(server: &TestServer, owner: &PublicKey, identifier: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let pkt = stalled_push_body();
    let head = format!(
        "POST /{}/{identifier}.git/git-receive-pack HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        npub_of(owner),
        server.addr(),
        1 << 20
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(pkt.as_bytes()).unwrap();
    stream.flush().unwrap();
    stream
}

/// A relay started with `args` whose git children are reaped when the test ends, and `base`, a
/// repository its owner published: what most attacks here go at.
struct Attacked {
    server: TestServer,
    /// Reaps what the relay left running (only on failure paths); bind it after `server` so it
    /// goes first.
    _reaper: Reaper,
    client: NostrClient,
    owner: Keys,
    published: Published,
    _work: tempfile::TempDir,
}

async fn attacked(args: &[&str]) -> Attacked {
    let (server, work, mut client) = started(args).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut client, &work.path().join("w"), &owner, "base").await;
    Attacked { server, _reaper, client, owner, published, _work: work }
}

/// Waits until the relay has a git child for the request (so the test attacks a running push).
fn wait_for_children(server: &TestServer) {
    wait_until("the relay to start git for the request", TIMEOUT, || {
        children_of(server.data_dir()).iter().any(|(_, c)| serves_a_request(c)).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
}

fn assert_no_children_within(server: &TestServer, within: Duration, what: &str) {
    if let Err(e) = wait_until(what, within, || children_of(server.data_dir()).is_empty().then_some(())) {
        panic!("{e:#}: still running: {:?}\n{}", children_of(server.data_dir()), server.logs());
    }
}

/// The published repository accepts its owner's next push (so its push lock is free).
async fn push_next(server: &TestServer, client: &mut NostrClient, owner: &Keys, published: &Published, n: u32) {
    let tip = published.repo.commit("README", &format!("next {n}\n"));
    // Newer than the published state even within the same second.
    let st = state_at(owner, "base", &[("refs/heads/main", &tip)], Some("main"), now() + u64::from(n));
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "state refused: {msg}");
    let out = grasp_tests::git::git_output(&published.repo.work.dir, &["push", "--porcelain", &published.repo.url, "main"]);
    assert!(
        out.status.success(),
        "push after the attack failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
}

/// Item 1: a receive-pack POST whose client closes before its `Content-Length` ends the
/// request: no git process stays behind and the repository takes the next push.
#[tokio::test]
async fn abandoned_push_ends_with_its_client() {
    let Attacked { server, _reaper, mut client, owner, published, _work } = attacked(&["--git-idle-timeout", "60s"]).await;

    let streams: Vec<TcpStream> = (0..3).map(|_| start_receive_pack(&server, &owner.public_key(), "base")).collect();
    wait_for_children(&server);
    drop(streams); // the clients go away mid-body
    // Far below the idle timeout: the client's going away is what ends the requests.
    assert_no_children_within(&server, TIMEOUT, "abandoned pushes to end");
    push_next(&server, &mut client, &owner, &published, 1).await;
}

/// Item 1: a client that stays connected but sends nothing more is cut off after
/// `--git-idle-timeout`, its processes killed and the push lock released.
#[tokio::test]
async fn stalled_push_ends_after_the_idle_timeout() {
    // No minimum rate: the few bytes sent also fall below it right at the idle timeout (which
    // rule ends the request first then depends on when the first bytes arrived), and this test
    // is about the idle timeout (a_trickling_push_is_ended is about the rate).
    let Attacked { server, _reaper, mut client, owner, published, _work } = attacked(&["--git-idle-timeout", "2s", "--git-min-rate", "0"]).await;

    let mut stream = start_receive_pack(&server, &owner.public_key(), "base");
    wait_for_children(&server);
    assert_no_children_within(&server, TIMEOUT, "the stalled push to be cut off");
    // The relay closed the request (an answer or the connection closed, never a hang).
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    push_next(&server, &mut client, &owner, &published, 1).await;
    assert!(server.logs().contains("idle"), "no log line names the idle timeout\n{}", server.logs());
}

/// A fetch on the relay's own listener runs as `git http-backend` alone (grasp-cgi hands over by
/// exec once the path and repository are checked; docs/architecture.md), and the relay still bounds
/// it: a stalled `git-upload-pack` POST ends after `--git-idle-timeout` with its processes.
#[tokio::test]
async fn a_fetch_runs_as_the_backend_alone_and_a_stalled_one_still_ends() {
    // No minimum rate: the few bytes sent would also fall below it right at the idle timeout,
    // and this test is about the idle timeout.
    let Attacked { server, _reaper, client: _client, owner, published: _published, _work } = attacked(&["--git-idle-timeout", "2s", "--git-min-rate", "0"]).await;

    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let head = format!(
        "POST /{}/base.git/git-upload-pack HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
        npub_of(&owner.public_key()),
        server.addr(),
        1 << 20
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(format!("0032want {}\n", "1".repeat(40)).as_bytes()).unwrap();
    stream.flush().unwrap();
    wait_for_children(&server);
    let children = children_of(server.data_dir());
    assert!(
        children.iter().all(|(_, c)| !c.contains("grasp-cgi")),
        "a fetch kept grasp-cgi running beside the backend: {children:?}"
    );
    assert_no_children_within(&server, TIMEOUT, "the stalled fetch to be cut off");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}

/// Under the relay's own listener a push runs as the backend alone too: grasp-cgi hands the
/// repository's push lock to `git http-backend` by exec (its file left open), so the lock is
/// held while the push runs and let go once its processes end.
#[tokio::test]
async fn a_push_runs_as_the_backend_alone_and_holds_its_push_lock() {
    let Attacked { server, _reaper, client: _client, owner, published: _published, _work } = attacked(&["--git-idle-timeout", "10m"]).await;

    let stream = start_receive_pack(&server, &owner.public_key(), "base");
    wait_for_children(&server);
    let children = children_of(server.data_dir());
    assert!(
        children.iter().all(|(_, c)| !c.contains("grasp-cgi")),
        "a push kept grasp-cgi running beside the backend: {children:?}"
    );
    let mut lock = grasp_state::contract::push_lock::PushLock::open(&repo_dir(&server, &owner.public_key(), "base")).unwrap();
    assert!(!lock.try_take().unwrap(), "the push lock is free while the push runs");
    drop(stream);
    assert_no_children_within(&server, TIMEOUT, "the abandoned push to end");
    wait_until("the push lock to be let go", TIMEOUT, || lock.try_take().unwrap().then_some(())).unwrap();
}

/// Item 1: no child the relay started survives its shutdown, even one in the middle of a push
/// from a client that is still connected.
#[tokio::test]
async fn no_git_child_survives_shutdown() {
    let Attacked { mut server, _reaper, client, owner, published: _published, _work } = attacked(&["--git-idle-timeout", "10m"]).await;

    let _stream = start_receive_pack(&server, &owner.public_key(), "base");
    wait_for_children(&server);
    drop(client);
    let status = server.stop();
    assert!(status.success(), "relay exited with {status}\n{}", server.logs());
    assert_no_children_within(&server, Duration::from_secs(5), "git children to be gone after shutdown");
}

/// Runs grasp-cgi as fcgiwrap does (CGI environment, the body on its stdin) for a receive-pack
/// POST announcing 1 MiB and writes the first bytes of a push. Returns grasp-cgi and the git
/// root its children can be found by.
fn cgi_receive_pack(tmp: &Path, idle_secs: &str) -> (std::process::Child, std::path::PathBuf) {
    let owner = Keys::generate().public_key();
    let root = tmp.join("git");
    let repo = root.join(npub_of(&owner)).join("r.git");
    std::fs::create_dir_all(&repo).unwrap();
    let out = grasp_tests::git::git_output(&repo, &["init", "-q", "--bare"]);
    assert!(out.status.success());
    let mut child = std::process::Command::new(grasp_tests::binary_path("grasp-cgi"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "POST")
        .env("PATH_INFO", format!("/{}/r.git/git-receive-pack", npub_of(&owner)))
        .env("CONTENT_TYPE", "application/x-git-receive-pack-request")
        .env("CONTENT_LENGTH", (1 << 20).to_string())
        .env(grasp_state::contract::env_names::GIT_ROOT, &root)
        .env(grasp_state::contract::env_names::GIT_IDLE_TIMEOUT, idle_secs)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.receivepack")
        .env("GIT_CONFIG_VALUE_0", "true")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = format!("{} {} refs/heads/main\0 report-status\n", "1".repeat(40), "2".repeat(40));
    let pkt = format!("{:04x}{line}", line.len() + 4);
    child.stdin.as_mut().unwrap().write_all(pkt.as_bytes()).unwrap();
    (child, root)
}

fn wait_for_backend(root: &Path) {
    wait_until("grasp-cgi to start git http-backend", TIMEOUT, || {
        children_of(root).iter().any(|(_, c)| c.contains("http-backend")).then_some(())
    })
    .unwrap();
}

/// Item 1 behind nginx + fcgiwrap: grasp-cgi stops git http-backend's whole process group when
/// its body ends short of `CONTENT_LENGTH` (without it, git http-backend spins forever).
#[test]
fn grasp_cgi_ends_git_when_the_body_ends_short() {
    let tmp = tempfile::tempdir().unwrap();
    let _reaper = Reaper(tmp.path().to_path_buf());
    let (mut cgi, root) = cgi_receive_pack(tmp.path(), "600");
    wait_for_backend(&root);
    drop(cgi.stdin.take()); // fcgiwrap closes the body: the client went away
    let status = wait_until("grasp-cgi to exit", TIMEOUT, || cgi.try_wait().unwrap()).unwrap();
    let out = cgi.wait_with_output().unwrap();
    assert!(!status.success(), "grasp-cgi succeeded on a short body");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ended after"), "{}", String::from_utf8_lossy(&out.stderr));
    if let Err(e) = wait_until("git processes to end", TIMEOUT, || children_of(tmp.path()).is_empty().then_some(())) {
        panic!("{e:#}: {:?}", children_of(tmp.path()));
    }
}

/// Item 1 behind nginx + fcgiwrap: a body that stalls for `GRASP_GIT_IDLE_TIMEOUT` ends the
/// request and its git processes, though the pipe stays open.
#[test]
fn grasp_cgi_ends_git_when_the_body_stalls() {
    let tmp = tempfile::tempdir().unwrap();
    let _reaper = Reaper(tmp.path().to_path_buf());
    let (mut cgi, root) = cgi_receive_pack(tmp.path(), "1");
    wait_for_backend(&root);
    let _still_open = cgi.stdin.take();
    wait_until("grasp-cgi to exit", TIMEOUT, || cgi.try_wait().unwrap()).unwrap();
    let out = cgi.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("idle timeout"), "{}", String::from_utf8_lossy(&out.stderr));
    if let Err(e) = wait_until("git processes to end", TIMEOUT, || children_of(tmp.path()).is_empty().then_some(())) {
        panic!("{e:#}: {:?}", children_of(tmp.path()));
    }
}

/// The status code of a raw HTTP/1.1 request sent from the loopback address `source`
/// (127.0.0.0/8 is all loopback, so one test plays several clients).
async fn status_from(source: &str, server: &TestServer, request: &str) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(server.addr()).await.unwrap();
    http_status(&mut stream, request).await
}

/// Item 4: one address holding stalled receive-pack POSTs gets only its share of the git
/// request slots; everyone else's git requests are still served.
#[tokio::test]
async fn one_address_holds_only_its_share_of_git_slots() {
    let Attacked { server, _reaper, client: _client, owner, published: _published, _work } = attacked(&["--git-idle-timeout", "10m", "--git-max-requests", "6", "--git-max-requests-per-ip", "2"]).await;

    let path = format!("/{}/base.git", npub_of(&owner.public_key()));
    let post = format!(
        "POST {path}/git-receive-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-receive-pack-request\r\n\
         Content-Length: 1048576\r\n\r\n{}",
        stalled_push_body()
    );
    // The attacker's first two stalled pushes run (git waits for the rest of each); they hold
    // their slots.
    let mut attacker = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.3:0".parse().unwrap()).unwrap();
        let mut stream = socket.connect(server.addr()).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, post.as_bytes()).await.unwrap();
        attacker.push(stream);
    }
    wait_for_children(&server);
    // Its next requests, of any kind, are refused at once...
    for _ in 0..6 {
        assert_eq!(status_from("127.0.0.3", &server, &post).await, 503, "{}", server.logs());
    }
    // ...while another client's clone and fetch requests are served.
    let get = format!("GET {path}/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    for _ in 0..4 {
        assert_eq!(status_from("127.0.0.4", &server, &get).await, 200, "{}", server.logs());
    }
    drop(attacker);
}

/// Files and directories under `dir`, and their apparent size in bytes.
fn disk_use(dir: &Path) -> (usize, u64) {
    let (mut inodes, mut bytes) = (1, 0);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            let (i, b) = disk_use(&entry.path());
            inodes += i;
            bytes += b;
        } else {
            inodes += 1;
            bytes += meta.len();
        }
    }
    (inodes, bytes)
}

/// Item 7: a held announcement's repository holds only what git needs (no sample hooks,
/// description or info/exclude), and expiry leaves no empty owner directory behind.
#[tokio::test]
async fn held_repositories_are_small_and_expiry_leaves_no_owner_dirs() {
    let (server, mut client) = connected(&["--purgatory-ttl", "2", "--soft-expiry-ttl", "1h"]).await;
    let owners: Vec<Keys> = (0..5).map(|_| Keys::generate()).collect();
    for (i, keys) in owners.iter().enumerate() {
        let (ok, msg) = client.send_event(&announcement(&server, keys, &format!("r{i}"), &[])).await.unwrap();
        assert!(ok, "{msg}");
    }
    let repo = repo_dir(&server, &owners[0].public_key(), "r0");
    assert!(repo.is_dir());
    let (inodes, bytes) = disk_use(&repo);
    assert!(!repo.join("hooks").exists() && !repo.join("description").exists() && !repo.join("info").exists(), "template files copied");
    assert!(inodes <= 10 && bytes <= 4096, "a held repository takes {inodes} inodes, {bytes} bytes");

    let git_root = server.data_dir().join(grasp_state::contract::layout::GIT_DIR);
    wait_until("the held announcements to soft-expire", TIMEOUT, || {
        owners.iter().all(|k| !git_root.join(npub_of(&k.public_key())).exists()).then_some(())
    })
    .unwrap_or_else(|e| {
        let left: Vec<_> = std::fs::read_dir(&git_root).unwrap().flatten().map(|e| e.file_name()).collect();
        panic!("{e:#}: left in {}: {left:?}\n{}", git_root.display(), server.logs())
    });
}


/// Item 8: a push beyond `--max-push-bytes`, and an anonymous push to `refs/nostr/<id>` beyond
/// `--max-pr-push-bytes`, are refused and their objects never land; both limits are in NIP-11.
#[tokio::test]
async fn oversized_pushes_are_refused_before_they_land() {
    let (server, tmp, mut client) = started(&["--max-push-bytes", "1000000", "--max-pr-push-bytes", "200000"]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "base").await;
    let bare = repo_dir(&server, &owner.public_key(), "base");

    // The owner's own push, with a matching state, of 1.5 MB.
    let big = commit_random(&published.repo.work, "big", 1, 1465);
    let st = state_at(&owner, "base", &[("refs/heads/main", &big)], Some("main"), now() + 1);
    assert!(client.send_event(&st).await.unwrap().0);
    let err = published.repo.push(&["main"]).expect_err("an oversized push was accepted");
    assert!(err.contains("max-push-bytes") || err.contains("maximum allowed size"), "{err}");
    assert!(!grasp_tests::git::git_output(&bare, &["cat-file", "-e", &big]).status.success(), "the refused pack landed");

    // Anyone's pull request push of 300 kB to refs/nostr/<id>.
    let pr_dir = tmp.path().join("pr");
    let pr = Repo::new(&pr_dir, &server, &owner.public_key(), "base");
    pr.commit("README", "pr\n");
    let pr_tip = commit_random(&pr.work, "pr-big", 1, 293);
    let refspec = format!("HEAD:refs/nostr/{}", random_event_id());
    let err = pr.push(&[&refspec]).expect_err("an oversized pull request push was accepted");
    assert!(err.contains("max-pr-push-bytes"), "{err}");
    assert!(!grasp_tests::git::git_output(&bare, &["cat-file", "-e", &pr_tip]).status.success(), "the refused pack landed");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&published.tip));

    let nip11: serde_json::Value = nip11(&server).await;
    assert_eq!(nip11["limitation"]["max_push_bytes"], 1_000_000);
    assert_eq!(nip11["limitation"]["max_pr_push_bytes"], 200_000);
}

/// Item 6: soft-expired throwaway announcements stop counting against the purgatory caps once
/// they soft-expire, so a newcomer is not refused for the soft-expiry window.
#[tokio::test]
async fn soft_expired_announcements_free_the_purgatory_cap() {
    let (server, mut client) = connected(&["--purgatory-total", "3", "--purgatory-ttl", "2", "--soft-expiry-ttl", "1h"]).await;
    let throwaway: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
    for keys in &throwaway {
        let (ok, msg) = client.send_event(&announcement(&server, keys, "spam", &[])).await.unwrap();
        assert!(ok, "{msg}");
    }
    let newcomer = Keys::generate();
    let (ok, msg) = client.send_event(&announcement(&server, &newcomer, "mine", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "the cap is full: {ok} {msg}");
    // After the purgatory TTL the throwaway announcements soft-expire (their repositories go).
    wait_until("the throwaway announcements to soft-expire", TIMEOUT, || {
        throwaway.iter().all(|k| !repo_dir(&server, &k.public_key(), "spam").exists()).then_some(())
    })
    .unwrap();
    let (ok, msg) = client.send_event(&announcement(&server, &newcomer, "mine", &[])).await.unwrap();
    assert!(ok, "a newcomer is still refused after the throwaway announcements soft-expired: {msg}");
}

/// Waits until `n` git http-backend processes run for the relay (each holds its push lock).
fn wait_for_backends(server: &TestServer, n: usize) {
    wait_until("the relay to start git for the requests", TIMEOUT, || {
        (children_of(server.data_dir()).iter().filter(|(_, c)| serves_a_request(c)).count() >= n).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
}

/// Item 2: throwaway keys announce the victim's identifier and leave a receive-pack POST to
/// their own repositories stalled (client connected, push lock held). One of them is a
/// co-maintainer the victim accepted (each lists the other), so the victim's state governs it
/// too; the other merely announced the identifier. The victim's next state event
/// (its data present) is answered within the event lock bound, the busy repository is deferred
/// (listed in `GET /v1/purgatory`), the stranger's repository is never waited for, and the
/// victim's own push succeeds.
#[tokio::test]
async fn a_third_partys_stalled_push_never_blocks_your_repository() {
    let (server, tmp, mut client) = started(&["--git-idle-timeout", "10m"]).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let victim = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &victim, "base").await;
    let (stranger, admirer) = (Keys::generate(), Keys::generate());
    for (keys, maintainers) in [(&stranger, vec![]), (&admirer, vec![victim.public_key()])] {
        let (ok, msg) = client.send_event(&announcement(&server, keys, "base", &maintainers)).await.unwrap();
        assert!(ok, "throwaway announcement refused: {msg}");
    }
    let (ok, msg) = client.send_event(&announcement_at(&server, &victim, "base", &[admirer.public_key()], now() + 1)).await.unwrap();
    assert!(ok, "the victim's listing of its co-maintainer was refused: {msg}");
    let _stalled = [
        start_receive_pack(&server, &stranger.public_key(), "base"),
        start_receive_pack(&server, &admirer.public_key(), "base"),
    ];
    wait_for_backends(&server, 2);

    let started = std::time::Instant::now();
    let st = state_at(&victim, "base", &[("refs/heads/main", &published.tip)], Some("main"), now() + 1);
    let (ok, msg) = client.send_event(&st).await.unwrap();
    let took = started.elapsed();
    assert!(ok, "the victim's state event was refused: {msg}");
    assert!(took < Duration::from_secs(8), "the victim's state event took {took:?}\n{}", server.logs());

    let listing = purgatory_listing(&server).await;
    let deferred = listing["deferred"].as_array().cloned().unwrap_or_default();
    let shown = |d: &serde_json::Value| d["repos"].as_array().into_iter().flatten().filter_map(|r| r.as_str().map(str::to_owned)).collect::<Vec<_>>();
    let entry = deferred
        .iter()
        .find(|d| d["identifier"] == "base" && d["author"] == victim.public_key().to_hex())
        .unwrap_or_else(|| panic!("no deferred work for the victim's event: {listing:#}"));
    assert!(shown(entry).iter().any(|r| r.contains(&npub_of(&admirer.public_key()))), "{listing:#}");
    assert!(
        deferred.iter().flat_map(shown).all(|r| !r.contains(&npub_of(&stranger.public_key()))),
        "a repository the event does not govern was waited for: {listing:#}"
    );
    let table = grasp_relay::api::render_purgatory_table(&listing.to_string()).unwrap();
    assert!(table.contains("Deferred work") && table.contains(&npub_of(&admirer.public_key())), "{table}");

    let started = std::time::Instant::now();
    push_next(&server, &mut client, &victim, &published, 2).await;
    assert!(started.elapsed() < Duration::from_secs(15), "the victim's push took {:?}", started.elapsed());

    // The stalled clients go away (their pushes end, item 1): the deferred work is retried and
    // done (backoff at most 60 s).
    drop(_stalled);
    grasp_tests::eventually!(
        "the deferred work to be done",
        Duration::from_secs(90),
        purgatory_listing(&server).await["deferred"].as_array().is_some_and(Vec::is_empty).then_some(())
    );
}

/// Publishes each `(owner, identifier)` repository, stalls a receive-pack to each, then sends each
/// owner's state again (newer, data present): the repositories are busy, so the work is deferred
/// or dropped. Returns the purgatory listing and the stalled connections (dropping them ends the
/// stalls).
async fn defer_while_stalled(server: &TestServer, repos: &[(&Keys, &str)]) -> (serde_json::Value, Vec<TcpStream>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut client = NostrClient::connect(&server.ws_url()).await.unwrap();
    let mut published = Vec::new();
    for &(keys, id) in repos {
        published.push((keys, id, publish_repo(server, &mut client, &tmp.path().join(id), keys, id).await));
    }
    let stalled: Vec<TcpStream> = published.iter().map(|(keys, id, _)| start_receive_pack(server, &keys.public_key(), id)).collect();
    wait_for_backends(server, repos.len());
    for (keys, id, p) in &published {
        let st = state_at(keys, id, &[("refs/heads/main", &p.tip)], Some("main"), now() + 1);
        let (ok, msg) = client.send_event(&st).await.unwrap();
        assert!(ok, "{id}: state refused: {msg}");
    }
    (purgatory_listing(server).await, stalled)
}

/// Deferred work is shared: a key whose events govern stalled repositories holds at most
/// `--deferred-per-author` entries (here 1), so its next deferred work is dropped (logged,
/// counted in `deferred_stats`) while another author's is still recorded; once the stalls end,
/// the retries (of different identifiers, side by side) finish the recorded work.
#[tokio::test]
async fn one_author_cannot_fill_the_deferred_work() {
    let server = TestServer::start_with(&["--git-idle-timeout", "10m", "--deferred-per-author", "1", "--event-lock-wait", "500ms"]);
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let (attacker, victim) = (Keys::generate(), Keys::generate());
    // The attacker's second repository's work is dropped.
    let (listing, stalled) = defer_while_stalled(&server, &[(&attacker, "a1"), (&attacker, "a2"), (&victim, "v1")]).await;
    let entries: Vec<(String, String)> = listing["deferred"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| (d["identifier"].as_str().unwrap_or("").to_owned(), d["author"].as_str().unwrap_or("").to_owned()))
        .collect();
    let entry = |id: &str, keys: &Keys| (id.to_owned(), keys.public_key().to_hex());
    assert!(entries.contains(&entry("a1", &attacker)) && entries.contains(&entry("v1", &victim)), "{listing:#}");
    assert!(!entries.contains(&entry("a2", &attacker)), "the attacker holds more than its share: {listing:#}");
    let stats = &listing["deferred_stats"];
    assert_eq!((stats["dropped_author_share"].as_u64(), stats["limit_per_author"].as_u64(), stats["entries"].as_u64()), (Some(1), Some(1), Some(2)), "{listing:#}");
    assert!(server.logs().contains("deferred work not recorded"), "{}", server.logs());
    let table = grasp_relay::api::render_purgatory_table(&listing.to_string()).unwrap();
    assert!(table.contains("lost since start: 1 over an author's share"), "{table}");

    drop(stalled);
    grasp_tests::eventually!(
        "the deferred work to be done",
        Duration::from_secs(90),
        purgatory_listing(&server).await["deferred"].as_array().is_some_and(Vec::is_empty).then_some(())
    );
}

/// Deferred work is shared per owner too: the entries naming one owner's repositories are at
/// most `--deferred-per-owner` (here 1), whatever the author shares allow (here 10), so the
/// second stalled repository of one owner is dropped (counted as `owner_share`) while another
/// owner's work is still recorded.
#[tokio::test]
async fn one_owner_cannot_fill_the_deferred_work() {
    let server = TestServer::start_with(&["--git-idle-timeout", "10m", "--deferred-per-author", "10", "--deferred-per-owner", "1", "--event-lock-wait", "500ms"]);
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let (crowded, other) = (Keys::generate(), Keys::generate());
    let (listing, stalled) = defer_while_stalled(&server, &[(&crowded, "c1"), (&crowded, "c2"), (&other, "o1")]).await;
    let ids: Vec<String> = listing["deferred"].as_array().into_iter().flatten().map(|d| d["identifier"].as_str().unwrap_or("").to_owned()).collect();
    assert!(ids.contains(&"c1".to_owned()) && ids.contains(&"o1".to_owned()), "{listing:#}");
    assert!(!ids.contains(&"c2".to_owned()), "one owner's repositories hold more than its share: {listing:#}");
    let stats = &listing["deferred_stats"];
    assert_eq!((stats["dropped_owner_share"].as_u64(), stats["limit_per_owner"].as_u64(), stats["largest_owner_entries"].as_u64()), (Some(1), Some(1), Some(1)), "{listing:#}");
    assert!(server.logs().contains("--deferred-per-owner"), "{}", server.logs());

    drop(stalled);
    grasp_tests::eventually!(
        "the deferred work to be done",
        Duration::from_secs(90),
        purgatory_listing(&server).await["deferred"].as_array().is_some_and(Vec::is_empty).then_some(())
    );
}

/// Item 3: one repository's push lock held by a stalled push, then hundreds of connections each
/// send a state event for it (data present, so each wants the repository). They are answered
/// within a deadline (a few wait the event bound and are deferred, the rest are refused
/// `rate-limited:` at once, no thread blocked), while unrelated events, a new announcement and
/// another repository's whole publication (hook API included) go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_stuck_repository_never_starves_the_relay() {
    const FLOOD: u64 = 520;
    let server = TestServer::start_with(&[
        "--git-idle-timeout",
        "10m",
        "--max-connections-per-ip",
        "0",
        "--max-connections",
        "2000",
    ]);
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let tmp = tempfile::tempdir().unwrap();
    let mut client = NostrClient::connect(&server.ws_url()).await.unwrap();
    let attacker = Keys::generate();
    let stuck = publish_repo(&server, &mut client, &tmp.path().join("stuck"), &attacker, "stuck").await;
    let _stalled = start_receive_pack(&server, &attacker.public_key(), "stuck");
    wait_for_backends(&server, 1);

    let started = std::time::Instant::now();
    let mut flood = Vec::new();
    for i in 0..FLOOD {
        let (url, attacker, tip) = (server.ws_url(), attacker.clone(), stuck.tip.clone());
        flood.push(tokio::spawn(async move {
            let mut c = NostrClient::connect(&url).await?;
            let st = state_at(&attacker, "stuck", &[("refs/heads/main", &tip)], Some("main"), now() + 10 + i);
            c.send_event(&st).await
        }));
    }
    // Meanwhile: a new announcement, an unrelated event and another repository's publication.
    let other = Keys::generate();
    let (ok, msg) = client.send_event(&announcement(&server, &Keys::generate(), "newcomer", &[])).await.unwrap();
    assert!(ok, "new announcement refused: {msg}");
    let published = publish_repo(&server, &mut client, &tmp.path().join("other"), &other, "other").await;
    let (ok, msg) = client.send_event(&issue(&Keys::generate(), &other.public_key(), "other")).await.unwrap();
    assert!(ok, "unrelated event refused: {msg}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "the rest of the relay took {took:?} during the flood\n{}", server.logs());
    assert_eq!(bare_refs(&repo_dir(&server, &other.public_key(), "other")).get("refs/heads/main"), Some(&published.tip));

    let mut rate_limited = 0;
    for handle in flood {
        let (ok, msg) = tokio::time::timeout(TIMEOUT, handle).await.expect("a flood event was never answered").unwrap().unwrap();
        // Replaceable: one that arrives after a newer one was stored is refused as older.
        assert!(ok || msg.starts_with("rate-limited:") || msg.contains("a newer version"), "{msg}");
        if msg.starts_with("rate-limited:") {
            assert!(msg.contains("again in a few seconds"), "{msg}");
            rate_limited += 1;
        }
    }
    assert!(rate_limited > 0, "no event was refused past the repository's queue");
    assert!(started.elapsed() < Duration::from_secs(40), "the flood took {:?}", started.elapsed());
}

/// Runs `git push` in `dir` and gives up (killing it) after `within`: `None` when it was still
/// waiting then, else its success and its output.
fn push_within(dir: &Path, url: &str, within: Duration) -> Option<(bool, String)> {
    let mut child = std::process::Command::new("git")
        .current_dir(dir)
        .args(["push", "--porcelain", url, "main"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_until("git push to end", within, || child.try_wait().unwrap());
    if status.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), text))
}

/// docs/security.md (your own push waiting forever): anyone's stalled receive-pack to the victim's repository holds
/// its push lock; the owner's own push is answered within `--push-lock-wait` that another push
/// is in progress (retry later), never left waiting inside the lock; once the stalled client
/// goes, the owner's push goes through.
#[tokio::test]
async fn a_stalled_push_by_anyone_never_makes_your_push_wait_for_ever() {
    let (server, tmp, mut client) = started(&["--git-idle-timeout", "10m", "--push-lock-wait", "1s"]).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let victim = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &victim, "base").await;
    let stalled = start_receive_pack(&server, &victim.public_key(), "base");
    wait_for_backends(&server, 1);

    let tip = published.repo.commit("README", "next\n");
    let st = state_at(&victim, "base", &[("refs/heads/main", &tip)], Some("main"), now() + 1);
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "state refused: {msg}");
    let answer = push_within(&published.repo.work.dir, &published.repo.url, Duration::from_secs(30));
    let Some((pushed, text)) = answer else {
        panic!("the owner's push still waited for the stalled push's lock after 30 s\n{}", server.logs());
    };
    assert!(!pushed, "a push went through while another held the lock: {text}");
    assert!(text.contains("another push to this repository is in progress") && text.contains("retry later"), "{text}");

    // The stalled client goes away (its push ends, item 1): the owner's push goes through.
    drop(stalled);
    grasp_tests::eventually!(
        "the owner's push to go through",
        TIMEOUT,
        push_within(&published.repo.work.dir, &published.repo.url, TIMEOUT).and_then(|(ok, _)| ok.then_some(()))
    );
    assert_eq!(bare_refs(&repo_dir(&server, &victim.public_key(), "base"))["refs/heads/main"], tip);
}

/// A push stalled within its command list (no flush yet) starts no git and takes no lock: the
/// relay's listener reads the command list first (docs/architecture.md, "A push under the
/// relay's listener"), so the owner's push meanwhile goes straight through.
#[tokio::test]
async fn a_push_stalled_within_its_commands_holds_no_lock() {
    let (server, tmp, mut client) = started(&["--git-idle-timeout", "10m", "--push-lock-wait", "1s"]).await;
    let _reaper = Reaper(server.data_dir().to_path_buf());
    let victim = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &victim, "base").await;
    let mut stalled = TcpStream::connect(server.addr()).unwrap();
    let body = stalled_push_body();
    let head = format!(
        "POST /{}/base.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: 1048576\r\n\r\n",
        npub_of(&victim.public_key())
    );
    // The command line without the flush that ends the list.
    stalled.write_all(format!("{head}{}", &body[..body.len() - 4]).as_bytes()).unwrap();
    stalled.flush().unwrap();

    let tip = published.repo.commit("README", "next\n");
    let st = state_at(&victim, "base", &[("refs/heads/main", &tip)], Some("main"), now() + 1);
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "state refused: {msg}");
    let answer = push_within(&published.repo.work.dir, &published.repo.url, Duration::from_secs(30));
    let Some((pushed, text)) = answer else { panic!("the owner's push waited 30 s\n{}", server.logs()) };
    assert!(pushed, "the owner's push was refused while a push stalled within its commands: {text}");
    assert_eq!(bare_refs(&repo_dir(&server, &victim.public_key(), "base"))["refs/heads/main"], tip);
    drop(stalled);
}

/// The same behind nginx + fcgiwrap: grasp-cgi waits for a repository's push lock at
/// most `GRASP_PUSH_LOCK_WAIT` seconds, then answers `503` with `Retry-After` and says why.
#[test]
fn grasp_cgi_answers_503_when_another_push_holds_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let _reaper = Reaper(tmp.path().to_path_buf());
    let (_stalled, root) = cgi_receive_pack(tmp.path(), "600");
    wait_for_backend(&root);
    let owner_dir = std::fs::read_dir(&root).unwrap().next().unwrap().unwrap().path();
    let npub = owner_dir.file_name().unwrap().to_string_lossy().into_owned();
    let second = std::process::Command::new(grasp_tests::binary_path("grasp-cgi"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "POST")
        .env("PATH_INFO", format!("/{npub}/r.git/git-receive-pack"))
        .env("CONTENT_TYPE", "application/x-git-receive-pack-request")
        .env("CONTENT_LENGTH", "4")
        .env(grasp_state::contract::env_names::GIT_ROOT, &root)
        .env(grasp_state::contract::env_names::PUSH_LOCK_WAIT, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = second.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut second = second;
        let _ = second.stdin.take().unwrap().write_all(b"0000");
        let _ = tx.send(second.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(TIMEOUT) else {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        panic!("grasp-cgi still waited for the push lock after {TIMEOUT:?}");
    };
    let out = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
    assert!(out.starts_with("Status: 503 Service Unavailable\r\n") && out.contains("Retry-After: "), "{out}");
    assert!(out.contains("Access-Control-Allow-Origin: *") && out.contains("another push to this repository is in progress"), "{out}");
}

/// Whether the bare repository `dir` has object `oid`.
fn has_object(dir: &Path, oid: &str) -> bool {
    grasp_tests::git::git_output(dir, &["cat-file", "-e", &format!("{oid}^{{commit}}")]).status.success()
}

/// docs/security.md (copies forced on your push): fifty keys announce the victim's identifier listing the victim as
/// maintainer, and the victim lists them back (co-maintainers, confirmed: a stranger's listing
/// alone gains nothing, docs/protocol.md#maintainer-authority), so the victim's state is
/// authoritative for their repositories too. The victim's
/// push does not copy its objects into them inside its post-receive: it returns while one of
/// them is locked by a push (its push lock held), the copies follow in the background into the
/// others, and into the locked one once its push is over, never during it.
#[tokio::test]
async fn a_push_never_waits_for_copies_into_strangers_repositories() {
    const THROWAWAYS: usize = 50;
    let (server, tmp, mut client) = started(&[]).await;
    let victim = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &victim, "base").await;
    let throwaways: Vec<Keys> = (0..THROWAWAYS).map(|_| Keys::generate()).collect();
    for keys in &throwaways {
        let (ok, msg) = client.send_event(&announcement(&server, keys, "base", &[victim.public_key()])).await.unwrap();
        assert!(ok, "throwaway announcement refused: {msg}");
    }
    let listed: Vec<PublicKey> = throwaways.iter().map(|k| k.public_key()).collect();
    let (ok, msg) = client.send_event(&announcement_at(&server, &victim, "base", &listed, now() + 1)).await.unwrap();
    assert!(ok, "the victim's listing of its co-maintainers was refused: {msg}");
    let dirs: Vec<_> = throwaways.iter().map(|k| repo_dir(&server, &k.public_key(), "base")).collect();
    grasp_tests::eventually!("the throwaway repositories to exist", dirs.iter().all(|d| d.is_dir()).then_some(()));
    // A push to the first throwaway repository runs (its push lock is held).
    let pushing = grasp_state::contract::push_lock::PushLock::take_within(&dirs[0], Duration::ZERO).unwrap();

    let tip = published.repo.commit("README", "next\n");
    let st = state_at(&victim, "base", &[("refs/heads/main", &tip)], Some("main"), now() + 2);
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "state refused: {msg}");
    published.repo.push(&["main"]).unwrap_or_else(|e| panic!("the victim's push failed: {e}\n{}", server.logs()));
    assert!(has_object(&repo_dir(&server, &victim.public_key(), "base"), &tip));
    assert!(stored(&mut client, st.id).await, "the victim's state is released by its push");
    grasp_tests::eventually!(
        "the copies into the other throwaway repositories",
        Duration::from_secs(60),
        dirs[1..].iter().all(|d| has_object(d, &tip)).then_some(())
    );
    assert!(!has_object(&dirs[0], &tip), "objects were copied into a repository while a push to it ran");
    drop(pushing);
    // Copied and aligned to the victim's state.
    grasp_tests::eventually!(
        "the copy into the repository whose push ended",
        Duration::from_secs(90),
        (has_object(&dirs[0], &tip) && bare_refs(&dirs[0]).get("refs/heads/main") == Some(&tip)).then_some(())
    );
}

/// docs/security.md (background work locks only governed repositories): a stranger's repository
/// of the victim's identifier, which no held event governs, is busy (a push to it runs) while the
/// relay restarts with the victim's state held. Startup reconciliation locks only the
/// repositories something held waits for, so it never waits for the stranger's (it used to wait
/// 60 s for it before serving).
#[tokio::test]
async fn background_release_never_waits_for_a_strangers_repository() {
    let (mut server, tmp, mut client) = started(&[]).await;
    let (victim, stranger) = (Keys::generate(), Keys::generate());
    publish_repo(&server, &mut client, &tmp.path().join("s"), &stranger, "base").await;
    held(&mut client, &announcement(&server, &victim, "base", &[])).await;
    let st = state(&victim, "base", &[("refs/heads/main", &"a".repeat(40))], Some("main"));
    held(&mut client, &st).await;
    drop(client);
    let _pushing = grasp_state::contract::push_lock::PushLock::take_within(&repo_dir(&server, &stranger.public_key(), "base"), Duration::ZERO).unwrap();
    let started = std::time::Instant::now();
    server.restart();
    let mut client = NostrClient::connect(&server.ws_url()).await.unwrap();
    client.ping_relay().await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "the restart waited {took:?} for a stranger's repository\n{}", server.logs());
    assert!(purgatory_ids(&server).await.contains(&st.id.to_hex()), "the victim's state is still held");
}
