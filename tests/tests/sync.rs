//! Background git-data sync end to end (docs/protocol.md#background-sync): real relays on loopback fetch what their
//! purgatory waits for from other servers. Server A is another relay, the pull request forks are
//! served by a plain git HTTP server, and a gated TCP proxy holds fetches where a test needs them
//! held. The operator view `GET /v1/sync` on the hook API shows the queue and the domains.
//!
//! The tests are plain `#[test]`s driving a runtime of their own, so the git HTTP server (which
//! owns a runtime) is created and dropped outside of it.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use grasp_state::names::identifier::npub_of;
use grasp_tests::git::{git, git_output, GitHttpServer};
use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;
use serde_json::Value;

/// Backoff flags of every test server: 500 ms, 1 s, then 1.5 s (the design's 20 s, 40 s,
/// 2 min, scaled down).
const BACKOFF_MS: [u64; 3] = [500, 1000, 1500];

/// A relay that syncs from loopback, `user_delay_ms` after a user's event.
fn relay(user_delay_ms: u64, extra: &[&str]) -> TestServer {
    let delay = user_delay_ms.to_string();
    let (base, cap) = (BACKOFF_MS[0].to_string(), BACKOFF_MS[2].to_string());
    let mut args = vec![
        "--sync-allow-private",
        "--sync-user-delay-ms",
        &delay,
        "--sync-backoff-ms",
        &base,
        "--sync-backoff-cap-ms",
        &cap,
    ];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

async fn sync_stats(server: &TestServer) -> Value {
    operator_get(server, "/v1/sync").await.unwrap()
}

/// The queue entry of `identifier` in the sync stats.
fn queued<'a>(stats: &'a Value, identifier: &str) -> Option<&'a Value> {
    stats["identifiers"]
        .as_array()?
        .iter()
        .find(|e| e["identifier"] == identifier)
}

fn domain<'a>(stats: &'a Value, name: &str) -> Option<&'a Value> {
    stats["domains"]
        .as_array()?
        .iter()
        .find(|d| d["domain"] == name)
}

/// A bare repository `<root>/<npub>/<name>.git` for a fork.
fn fork_repo(root: &Path, owner: &PublicKey, name: &str) -> std::path::PathBuf {
    let bare = root.join(npub_of(owner)).join(format!("{name}.git"));
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare"]);
    bare
}

/// A contributor's empty bare repository `fork` under `<dir>/forks`, served by a plain git HTTP
/// server (a pull request's clone URL).
fn served_fork(dir: &Path, contributor: &PublicKey) -> (std::path::PathBuf, GitHttpServer) {
    let fork = fork_repo(&dir.join("forks"), contributor, "fork");
    (fork, GitHttpServer::start(&dir.join("forks"), None))
}

/// What the pull request tests start from: relay B (`args`, a 200 ms sync delay), a
/// contributor, and the contributor's fork served over plain git HTTP at `fork_url`.
struct Forked {
    b: TestServer,
    tmp: tempfile::TempDir,
    contributor: Keys,
    fork: std::path::PathBuf,
    forks: GitHttpServer,
    fork_url: String,
}

fn forked(args: &[&str]) -> Forked {
    let b = relay(200, args);
    let tmp = tempfile::tempdir().unwrap();
    let contributor = Keys::generate();
    let (fork, forks) = served_fork(tmp.path(), &contributor.public_key());
    let fork_url = forks.repo_url(&contributor.public_key(), "fork");
    Forked { b, tmp, contributor, fork, forks, fork_url }
}

/// [`forked`], the fork behind a [`GatedProxy`] that holds its connections until opened
/// (`fork_url` goes through the proxy).
fn forked_behind_a_gate(args: &[&str]) -> (Forked, GatedProxy) {
    let mut forked = forked(args);
    let proxy = GatedProxy::start(forked.forks.addr);
    forked.fork_url = format!("http://{}/{}/fork.git", proxy.addr, npub_of(&forked.contributor.public_key()));
    (forked, proxy)
}

/// Announces `identifier` on `server` and makes it hold `main` at a first commit (stored
/// announcement and state). Returns the work tree and the commit.
async fn seeded(
    c: &mut NostrClient,
    server: &TestServer,
    owner: &Keys,
    identifier: &str,
    dir: &Path,
) -> (Repo, String) {
    held(c, &announcement(server, owner, identifier, &[])).await;
    let repo = Repo::new(dir, server, &owner.public_key(), identifier);
    let base = repo.commit("base.txt", "base");
    held(
        c,
        &state(
            owner,
            identifier,
            &[("refs/heads/main", &base)],
            Some("main"),
        ),
    )
    .await;
    repo.push(&["main"]).unwrap();
    (repo, base)
}

#[test]
fn a_state_accepted_on_b_is_synced_from_a_and_refs_aligned() {
    let (a, b) = (relay(200, &[]), relay(200, &[]));
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let (mut ca, mut cb) = (connect(&a).await, connect(&b).await);
        let owner = Keys::generate();
        let id = "synced";
        // One announcement listing both servers.
        let ann = announcement_on(&[&a, &b], &owner, id, &[]);
        held(&mut ca, &ann).await;
        let repo = Repo::new(&tmp.path().join("w"), &a, &owner.public_key(), id);
        let first = repo.commit("a.txt", "one");
        let tip = repo.commit("b.txt", "two");
        git(&repo.work.dir, &["branch", "dev", &first]);
        git(&repo.work.dir, &["tag", "v1", &first]);
        let st = state(
            &owner,
            id,
            &[
                ("refs/heads/main", &tip),
                ("refs/heads/dev", &first),
                ("refs/tags/v1", &first),
            ],
            Some("dev"),
        );
        held(&mut ca, &st).await;
        repo.push(&["main", "dev", "refs/tags/v1"]).unwrap();
        assert!(stored(&mut ca, st.id).await);
        let a_refs = bare_refs(&repo_dir(&a, &owner.public_key(), id));
        assert_eq!(a_refs.len(), 3, "{a_refs:?}");

        // B gets the events but no push: it must fetch the data from A's clone URL.
        held(&mut cb, &ann).await;
        held(&mut cb, &st).await;
        let b_dir = repo_dir(&b, &owner.public_key(), id);
        assert!(bare_refs(&b_dir).is_empty());
        eventually!(
            "B to release the state",
            stored(&mut cb, st.id).await.then_some(())
        );
        eventually!("B's refs and HEAD to equal A's", {
            let head = git(&b_dir, &["symbolic-ref", "HEAD"]);
            (bare_refs(&b_dir) == a_refs && head == "refs/heads/dev").then_some(())
        });
        // Promotion follows alignment in the same release pass: wait for it, not race it.
        eventually!(
            "the announcement to be promoted with the data",
            stored(&mut cb, ann.id).await.then_some(())
        );
        // The sync logs once its release pass is over, just after the promotion shows.
        eventually!(
            "released by the sync, not by a push (B to log \"synced git data\")",
            b.logs().contains("synced git data").then_some(())
        );
        eventually!(
            "B's sync queue to empty",
            (sync_stats(&b).await["queue_length"] == 0).then_some(())
        );

        // Anyone can clone the synced repository from B.
        clone(
            &repo_url(&b, &owner.public_key(), id),
            &tmp.path().join("clone"),
            &[],
        )
        .unwrap();
    });
}

#[test]
fn a_pull_request_commit_only_at_its_clone_url_is_released() {
    let Forked { b, tmp, contributor, fork, forks, fork_url } = forked(&[]);
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let id = "prs";
        let (repo, base) = seeded(&mut cb, &b, &owner, id, &tmp.path().join("w")).await;

        git(&repo.work.dir, &["checkout", "-q", "-b", "feature"]);
        let pr_tip = repo.commit("feature.txt", "a change");
        repo.work.push_to(&fork, &["feature"]);
        let pr = pull_request(&contributor, &owner.public_key(), id, &pr_tip, &[&fork_url]);
        held(&mut cb, &pr).await;

        let b_dir = repo_dir(&b, &owner.public_key(), id);
        eventually!(
            "B to release the pull request",
            stored(&mut cb, pr.id).await.then_some(())
        );
        let refs = bare_refs(&b_dir);
        assert_eq!(
            refs.get(&format!("refs/nostr/{}", pr.id.to_hex())),
            Some(&pr_tip)
        );
        assert_eq!(
            refs.get("refs/heads/main"),
            Some(&base),
            "served branches are untouched"
        );
        assert!(!refs.contains_key("refs/heads/feature"), "{refs:?}");
    });
    drop(forks);
}

/// Bytes that do not compress (xorshift), so a pack holding them is about as large.
fn incompressible(len: usize) -> Vec<u8> {
    grasp_tests::git::xorshift().take(len).map(|x| x as u8).collect()
}

/// docs/security.md (endless or huge packs from a sync peer): a hostile peer serving a pack
/// larger than `--sync-max-fetch-bytes` (here a plain git HTTP server with a 6 MiB commit behind
/// a pull request's clone URL, against a 1 MiB cap)
/// gets its fetch cut off: nothing it sent lands, no quarantine stays behind, the domain shows
/// why, and the pull request stays held.
#[test]
fn a_fetch_bringing_more_than_the_cap_is_cut_off_and_nothing_lands() {
    let Forked { b, tmp, contributor, fork, forks, fork_url } = forked(&["--sync-max-fetch-bytes", "1048576"]);
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let id = "capped";
        let (repo, _) = seeded(&mut cb, &b, &owner, id, &tmp.path().join("w")).await;

        git(&repo.work.dir, &["checkout", "-q", "-b", "huge"]);
        std::fs::write(repo.work.dir.join("huge.bin"), incompressible(6 << 20)).unwrap();
        git(&repo.work.dir, &["add", "huge.bin"]);
        git(&repo.work.dir, &["commit", "-q", "-m", "huge"]);
        let pr_tip = repo.rev("HEAD");
        repo.work.push_to(&fork, &["huge"]);
        let pr = pull_request(&contributor, &owner.public_key(), id, &pr_tip, &[&fork_url]);
        held(&mut cb, &pr).await;

        let error = eventually!("B's fetch from the fork to be cut off", {
            let stats = sync_stats(&b).await;
            domain(&stats, "127.0.0.1")
                .and_then(|d| d["last_error"].as_str().map(str::to_owned))
                .filter(|e| e.contains("--sync-max-fetch-bytes"))
        });
        assert!(error.contains("more than 1048576 bytes"), "{error}");
        let logs = b.logs();
        assert!(logs.contains("sync fetch failed") && logs.contains(&fork_url), "{logs}");

        let b_dir = repo_dir(&b, &owner.public_key(), id);
        let leftovers = || {
            std::fs::read_dir(b_dir.join("objects"))
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("tmp_objdir-incoming-grasp-sync-"))
                .count()
        };
        eventually!("the cut-off fetch's quarantine to be removed", (leftovers() == 0).then_some(()));
        let missing = git_output(&b_dir, &["cat-file", "-e", &pr_tip]);
        assert!(!missing.status.success(), "the capped commit landed in B's repository");
        assert!(!stored(&mut cb, pr.id).await, "the pull request was released without its data");
        assert!(
            !bare_refs(&b_dir).contains_key(&format!("refs/nostr/{}", pr.id.to_hex())),
            "{:?}",
            bare_refs(&b_dir)
        );
    });
    drop(forks);
}

#[test]
fn an_unreachable_clone_url_backs_off_and_a_new_event_resets_the_count() {
    // A port that refuses connections.
    let dead: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let b = relay(1500, &[]);
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let id = "unreachable";
        let unreachable = format!("http://{dead}/{}/{id}.git", npub_of(&owner.public_key()));
        held(
            &mut cb,
            &announcement_on(&[&b], &owner, id, &[&unreachable]),
        )
        .await;
        let repo = Repo::new(&tmp.path().join("w"), &b, &owner.public_key(), id);
        let first = repo.commit("a.txt", "never pushed");
        held(
            &mut cb,
            &state(&owner, id, &[("refs/heads/main", &first)], None),
        )
        .await;

        // Each failed attempt is rescheduled after base, twice the base, then the cap.
        let expected = |attempt: u64| BACKOFF_MS[(attempt.clamp(1, 3) - 1) as usize];
        let mut seen = std::collections::BTreeMap::new();
        eventually!("four failed attempts", {
            let stats = sync_stats(&b).await;
            let entry = queued(&stats, id)
                .expect("queued while the data is missing")
                .clone();
            let attempt = entry["attempt_count"].as_u64().unwrap();
            if entry["in_progress"] == false && attempt > 0 {
                seen.insert(attempt, entry["last_delay_ms"].as_u64().unwrap());
                assert!(
                    entry["next_attempt_in_ms"].as_u64().unwrap() <= expected(attempt),
                    "{entry}"
                );
            }
            (attempt >= 4).then_some(())
        });
        assert!(
            seen.len() >= 2,
            "attempts are observable between retries: {seen:?}"
        );
        for (attempt, delay) in &seen {
            assert_eq!(
                *delay,
                expected(*attempt),
                "delay after attempt {attempt}: {seen:?}"
            );
        }
        let stats = sync_stats(&b).await;
        let error = domain(&stats, "127.0.0.1")
            .and_then(|d| d["last_error"].as_str())
            .map(str::to_string);
        assert!(
            error.is_some_and(|e| !e.is_empty()),
            "the domain's last error is shown: {stats}"
        );
        assert!(b.logs().contains("sync fetch failed"));

        // A new event for the identifier resets the count and waits the user delay again.
        let second = repo.commit("b.txt", "also never pushed");
        held(
            &mut cb,
            &state_at(&owner, id, &[("refs/heads/main", &second)], None, now() + 1),
        )
        .await;
        eventually!("the attempt count to reset", {
            let stats = sync_stats(&b).await;
            queued(&stats, id)
                .filter(|e| e["attempt_count"] == 0 && e["last_delay_ms"] == 1500)
                .map(|_| ())
        });
    });
}

/// A TCP proxy that accepts connections at once but forwards them only once opened, and counts
/// them: it holds fetches in flight for as long as a test needs.
struct GatedProxy {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl GatedProxy {
    fn start(target: SocketAddr) -> GatedProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (count, shared_gate) = (accepted.clone(), gate.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let gate = shared_gate.clone();
                std::thread::spawn(move || {
                    let (lock, opened) = &*gate;
                    let mut open = lock.lock().unwrap();
                    while !*open {
                        open = opened.wait(open).unwrap();
                    }
                    drop(open);
                    if let Ok(upstream) = TcpStream::connect(target) {
                        pipe(client, upstream);
                    }
                });
            }
        });
        GatedProxy {
            addr,
            accepted,
            gate,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn open(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }
}

/// Copies both ways until both sides are done.
fn pipe(client: TcpStream, upstream: TcpStream) {
    let (mut client_read, mut upstream_write) =
        (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut upstream_write);
        let _ = upstream_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut upstream_read, mut client_write) = (upstream, client);
    let _ = io::copy(&mut upstream_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

#[test]
fn throttling_holds_a_domain_to_its_concurrency_limit() {
    let (Forked { b, tmp, contributor, fork, forks, fork_url }, proxy) = forked_behind_a_gate(&["--sync-domain-concurrency", "1"]);
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let mut prs = Vec::new();
        for i in 0..3 {
            let id = format!("t{i}");
            let (repo, _) = seeded(&mut cb, &b, &owner, &id, &tmp.path().join(&id)).await;
            let tip = repo.commit("change.txt", &format!("change {i}"));
            repo.work
                .push_to(&fork, &[&format!("main:refs/heads/p{i}")]);
            prs.push((id, tip));
        }
        let mut events = Vec::new();
        for (id, tip) in &prs {
            let pr = pull_request(&contributor, &owner.public_key(), id, tip, &[&fork_url]);
            held(&mut cb, &pr).await;
            events.push(pr);
        }

        // Three identifiers want the same domain: one fetch goes out, the others queue.
        let stats = eventually!("one fetch in flight and two identifiers turned away", {
            let stats = sync_stats(&b).await;
            let busy = domain(&stats, "127.0.0.1")
                .is_some_and(|d| d["in_flight"] == 1 && d["waiting"] == 2);
            // "In flight" is counted before the fetch connects: wait for the connection too.
            (busy && proxy.accepted() >= 1).then_some(stats)
        });
        assert_eq!(
            proxy.accepted(),
            1,
            "only one fetch reached the domain: {stats}"
        );
        assert!(b.logs().contains("domain throttled"));

        proxy.open();
        for (pr, (id, tip)) in events.iter().zip(&prs) {
            eventually!(
                format!("the pull request for {id} to be released"),
                stored(&mut cb, pr.id).await.then_some(())
            );
            let refs = bare_refs(&repo_dir(&b, &owner.public_key(), id));
            assert_eq!(
                refs.get(&format!("refs/nostr/{}", pr.id.to_hex())),
                Some(tip)
            );
        }
        assert!(proxy.accepted() >= 3, "every identifier fetched in turn");
    });
    drop(forks);
}

#[test]
fn the_expiry_sweep_waits_for_a_running_sync() {
    let (Forked { b, tmp, contributor, fork, forks, fork_url }, proxy) = forked_behind_a_gate(&["--purgatory-ttl", "3"]);
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let id = "slow";
        let (repo, _) = seeded(&mut cb, &b, &owner, id, &tmp.path().join("w")).await;
        let tip = repo.commit("change.txt", "a change");
        repo.work.push_to(&fork, &["main:refs/heads/pr"]);
        let pr = pull_request(&contributor, &owner.public_key(), id, &tip, &[&fork_url]);
        held(&mut cb, &pr).await;
        eventually!(
            "the fetch to be held at the proxy",
            (proxy.accepted() == 1).then_some(())
        );
        assert_eq!(sync_stats(&b).await["in_progress"], serde_json::json!([id]));

        // A witness with a later deadline: once the sweep expires it, the pull request's
        // deadline has passed too.
        let witness = Keys::generate();
        held(&mut cb, &announcement(&b, &witness, "witness", &[])).await;
        eventually!(
            "the witness to soft-expire",
            b.logs()
                .lines()
                .any(|l| l.contains("soft-expired") && l.contains("witness"))
                .then_some(())
        );
        let listing = operator_get(&b, "/v1/purgatory").await.unwrap();
        let waiting = listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event_id"] == pr.id.to_hex());
        assert!(
            waiting,
            "the pull request must not expire while its sync runs: {listing}"
        );
        assert!(!b.logs().contains("pull request expired"));

        proxy.open();
        eventually!(
            "the pull request to be released",
            stored(&mut cb, pr.id).await.then_some(())
        );
    });
    drop(forks);
}

#[test]
fn an_expired_state_is_not_held_again() {
    let b = relay(200, &["--purgatory-ttl", "1"]);
    let tmp = tempfile::tempdir().unwrap();
    block_on(async {
        let mut cb = connect(&b).await;
        let owner = Keys::generate();
        let id = "expires";
        held(&mut cb, &announcement(&b, &owner, id, &[])).await;
        let repo = Repo::new(&tmp.path().join("w"), &b, &owner.public_key(), id);
        let commit = repo.commit("a.txt", "never pushed");
        let st = state(&owner, id, &[("refs/heads/main", &commit)], None);
        held(&mut cb, &st).await;
        let line = format!("event={}", st.id.to_hex());
        eventually!(
            "the state to expire",
            b.logs()
                .lines()
                .any(|l| l.contains("state event expired") && l.contains(&line))
                .then_some(())
        );

        let (ok, msg) = cb.send_event(&st).await.unwrap();
        assert!(
            !ok && msg.starts_with("blocked:") && msg.contains("expired"),
            "{msg}"
        );
        eventually!(
            "the sync to forget the identifier",
            queued(&sync_stats(&b).await, id).is_none().then_some(())
        );
    });
}
