//! One object store per identifier family (docs/architecture.md, "Object pools";
//! docs/protocol.md#object-pools), end to end: real relay, real `git push` over HTTP, real
//! `git fsck` on every member and on the pool. Every wait is on an observable condition with a
//! deadline: the relay's background git work gauge (`grasp_background_git_work`, the server runs
//! with `--metrics-bind`), refs, objects.
//!
//! - sharing: ten owners of one history hold it about once on disk, every repository serves it;
//! - staging: objects nobody signed for stay in the repository that received them, a signed
//!   event promotes them, a stranger's announcement gets nothing into the pool;
//! - expiry: staged objects are reclaimed from the receiving repository, the pool untouched;
//! - concurrency: two owners pushing to one family at once leave every member consistent;
//! - crashes: kill -9 at any moment of the background copies leaves every member and the pool
//!   consistent, and the copies are carried out after the restart;
//! - gc: a pool's shrink keeps what any member's refs (staged ones too) reach, reclaims the rest;
//! - migration: repositories holding full copies from before pools join at startup;
//! - a private service uses the same model, and no pool is ever served.

use std::path::{Path, PathBuf};
use std::time::Duration;

use grasp_tests::git::{git, git_output, WorkTree};
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;

const WAIT: Duration = Duration::from_secs(90);

fn start(extra: &[&str]) -> TestServer {
    let mut args = vec!["--metrics-bind", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

/// Bytes of the files under `path`.
fn bytes_under(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path).map(|rd| rd.flatten().map(|e| bytes_under(&e.path())).sum()).unwrap_or(0)
}

fn alternates(repo: &Path) -> String {
    std::fs::read_to_string(repo.join("objects/info/alternates")).unwrap_or_default().trim().to_string()
}

fn is_member(repo: &Path, identifier: &str) -> bool {
    alternates(repo) == format!("../../../.pools/{identifier}.git/objects")
}

/// Announcements of `owners` for `identifier`, each listing all the others as maintainers.
async fn announce_family(server: &TestServer, c: &mut grasp_tests::NostrClient, owners: &[Keys], identifier: &str) -> Vec<Event> {
    let mut out = Vec::new();
    for keys in owners {
        let others: Vec<PublicKey> = owners.iter().map(Keys::public_key).filter(|pk| *pk != keys.public_key()).collect();
        let ann = announcement(server, keys, identifier, &others);
        held(c, &ann).await;
        out.push(ann);
    }
    out
}

/// A crash of the machine as far as the relay goes: the relay is frozen (SIGSTOP: it starts
/// nothing more), then it and every git process it started are killed (SIGKILL) at once.
fn crash(server: &mut TestServer) {
    let pid = server.pid().expect("running");
    let signal = |sig: &str, pid: u32| {
        let _ = std::process::Command::new("kill").args(["-s", sig, &pid.to_string()]).stderr(std::process::Stdio::null()).status();
    };
    signal("STOP", pid);
    let children = grasp_tests::processes::descendants(pid);
    for child in &children {
        signal("STOP", *child);
    }
    for child in grasp_tests::processes::descendants(pid).into_iter().chain(children) {
        signal("KILL", child);
    }
    server.kill();
}

fn packs(repo: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo.join("objects/pack"))
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "pack")).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// The case: an owner and nine co-maintainers announce one identifier (each listing the
/// others), the owner pushes a history with a matching state. Every repository serves it, the
/// history is on disk about once (the pool; each repository keeps refs only), and every member
/// and the pool pass `git fsck`.
#[tokio::test(flavor = "multi_thread")]
async fn ten_owners_of_one_history_hold_it_once() {
    let server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owners: Vec<Keys> = (0..10).map(|_| Keys::generate()).collect();
    let anns = announce_family(&server, &mut c, &owners, "shared").await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owners[0].public_key(), "shared");
    repo.commit("README", "shared\n");
    let tip = commit_random(&repo.work, "data", 8, 256);
    let st = state(&owners[0], "shared", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    repo.push(&["main"]).unwrap_or_else(|e| panic!("push refused: {e}\n{}", server.logs()));
    let dirs: Vec<PathBuf> = owners.iter().map(|k| repo_dir(&server, &k.public_key(), "shared")).collect();
    eventually!("every owner's repository to serve the state", WAIT, dirs.iter().all(|d| bare_refs(d).get("refs/heads/main") == Some(&tip)).then_some(()));
    background_settled(&server).await;
    for ann in &anns {
        assert!(stored(&mut c, ann.id).await, "every announcement is promoted");
    }
    let pool = pool_dir(&server, "shared");
    for d in &dirs {
        assert!(is_member(d, "shared"), "{} borrows from the pool", d.display());
        assert_eq!(local_objects(d), 0, "{} keeps no copy of its own", d.display());
        assert_consistent(d);
    }
    assert_consistent(&pool);
    let pool_refs = bare_refs(&pool);
    for k in &owners {
        assert_eq!(pool_refs.get(&format!("refs/members/{}/heads/main", grasp_state::names::identifier::npub_of(&k.public_key()))), Some(&tip), "the pool records every member's refs");
    }
    // About one copy: a plain bare clone of the history against all ten repositories and the pool.
    let plain = tmp.path().join("plain.git");
    git(tmp.path(), &["clone", "-q", "--bare", "--no-local", repo.work.dir.to_str().unwrap(), plain.to_str().unwrap()]);
    let one = bytes_under(&plain.join("objects"));
    let family: u64 = dirs.iter().map(|d| bytes_under(&d.join("objects"))).sum::<u64>() + bytes_under(&pool.join("objects"));
    assert!(family * 10 <= one * 15, "the family holds {family} bytes of objects for a {one}-byte history: more than 1.5 copies");
    // A clone of a co-maintainer's repository is the history.
    let cl = tmp.path().join("clone");
    clone(&repo_url(&server, &owners[7].public_key(), "shared"), &cl, &[]).unwrap();
    assert_eq!(git(&cl, &["rev-parse", "HEAD"]), tip);
    // The pool itself is never served.
    let resp = reqwest::get(format!("http://{}/.pools/shared.git/info/refs?service=git-upload-pack", host(&server))).await.unwrap();
    assert_eq!(resp.status(), 404);
    let out = git_output(tmp.path(), &["ls-remote", &format!("http://{}/.pools/shared.git", host(&server))]);
    assert!(!out.status.success(), "the pool is not a repository anyone can reach");
}

/// A private service (GRASP-08) uses the same model: two members' repositories of one
/// identifier share the pool, each is served to members with a proof for it, and the pool is
/// reachable by nobody.
#[tokio::test(flavor = "multi_thread")]
async fn a_private_service_shares_one_object_store_too() {
    let (a, b) = (Keys::generate(), Keys::generate());
    let members = format!("{},{}", a.public_key().to_hex(), b.public_key().to_hex());
    let server = start(&["--private", "--member", &members]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    assert!(c.auth(&a).await.unwrap().0 && c.auth(&b).await.unwrap().0);
    let private = |keys: &Keys, maintainers: &[PublicKey]| {
        let mut tags = vec![
            vec!["d".to_string(), "team".into()],
            vec!["clone".to_string(), repo_url(&server, &keys.public_key(), "team")],
            vec!["relays".to_string(), format!("ws://{}", host(&server))],
            vec!["private".to_string(), "true".into()],
        ];
        if !maintainers.is_empty() {
            tags.push(std::iter::once("maintainers".to_string()).chain(maintainers.iter().map(|m| m.to_hex())).collect());
        }
        EventBuilder::new(Kind::Custom(30617), "").tags(tags.into_iter().map(|t| Tag::parse(t).unwrap())).finalize(keys).unwrap()
    };
    held(&mut c, &private(&a, &[b.public_key()])).await;
    held(&mut c, &private(&b, &[a.public_key()])).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &a.public_key(), "team");
    let tip = commit_random(&repo.work, "data", 2, 128);
    held(&mut c, &state(&a, "team", &[("refs/heads/main", &tip)], Some("main"))).await;
    let out = git_with(&repo.work.dir, &git_proof(&a, &repo.url), &["push", &repo.url, "main"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir_b = repo_dir(&server, &b.public_key(), "team");
    eventually!("b's repository on a's state", WAIT, (bare_refs(&dir_b).get("refs/heads/main") == Some(&tip)).then_some(()));
    background_settled(&server).await;
    assert!(is_member(&dir_b, "team") && local_objects(&dir_b) == 0);
    let url_b = repo_url(&server, &b.public_key(), "team");
    let out = git_with(tmp.path(), &git_proof(&b, &url_b), &["clone", "-q", &url_b, "clone-b"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(git(&tmp.path().join("clone-b"), &["rev-parse", "HEAD"]), tip);
    let pool_url = format!("http://{}/.pools/team.git", host(&server));
    let out = git_with(tmp.path(), &git_proof(&a, &pool_url), &["ls-remote", &pool_url]);
    assert!(!out.status.success(), "not even a member reaches the pool");
    for d in [&repo_dir(&server, &a.public_key(), "team"), &dir_b, &pool_dir(&server, "team")] {
        assert_consistent(d);
    }
}

/// Staging (docs/protocol.md#object-pools): a git-first `refs/nostr/<id>` push stays in the
/// repository that received it, so does a stranger's upload to their own repository of the
/// identifier; the pull request event, once stored, promotes its commit into the pool.
#[tokio::test(flavor = "multi_thread")]
async fn staged_objects_stay_in_the_receiving_repository_until_a_signed_event_releases_them() {
    let server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let (owner, co, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    announce_family(&server, &mut c, &[owner.clone(), co.clone()], "staged").await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "staged");
    let tip = repo.commit("README", "one\n");
    held(&mut c, &state(&owner, "staged", &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    background_settled(&server).await;
    let (dir, pool) = (repo_dir(&server, &owner.public_key(), "staged"), pool_dir(&server, "staged"));
    assert!(has_object(&pool, &tip), "the released history is in the pool");

    // A contributor's git-first push, before the pull request event.
    let contributor = Keys::generate();
    let work = WorkTree::new(tmp.path().join("pr"));
    git(&work.dir, &["pull", "-q", &repo.url, "main"]);
    let pr_tip = commit_random(&work, "change", 2, 64);
    let pr = pull_request_at(&contributor, &owner.public_key(), "staged", &pr_tip, now());
    let name = format!("refs/nostr/{}", pr.id.to_hex());
    let out = git_output(&work.dir, &["push", "-q", &repo.url, &format!("HEAD:{name}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A stranger announces the identifier and uploads to their own repository, no state behind it.
    held(&mut c, &announcement(&server, &stranger, "staged", &[])).await;
    let theirs = repo_dir(&server, &stranger.public_key(), "staged");
    let junk = WorkTree::new(tmp.path().join("junk"));
    let junk_tip = commit_random(&junk, "junk", 1, 64);
    let out = git_output(&junk.dir, &["push", "-q", &repo_url(&server, &stranger.public_key(), "staged"), &format!("HEAD:refs/nostr/{}", random_event_id())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    background_settled(&server).await;
    assert!(has_object(&dir, &pr_tip) && !has_object(&pool, &pr_tip), "the unsigned push stays in the repository that received it");
    assert!(has_object(&theirs, &junk_tip) && !has_object(&pool, &junk_tip), "a stranger's upload never enters the pool");
    assert!(local_objects(&dir) > 0);

    // The pull request event arrives: its commit is released and promoted.
    served(&mut c, &pr).await;
    background_settled(&server).await;
    assert!(has_object(&pool, &pr_tip), "the signed event promoted its commit into the pool");
    let member_ref = format!("refs/members/{}/nostr/{}", grasp_state::names::identifier::npub_of(&owner.public_key()), pr.id.to_hex());
    assert_eq!(bare_refs(&pool).get(&member_ref), Some(&pr_tip));
    assert_eq!(local_objects(&dir), 0, "the receiving repository's copies went once the pool had them");
    assert!(!has_object(&pool, &junk_tip), "still nothing of the stranger's");
    for d in [&dir, &theirs, &repo_dir(&server, &co.public_key(), "staged"), &pool] {
        assert_consistent(d);
    }
}

/// Expiry of staged objects (docs/protocol.md#placeholders): an expired git-first push's objects
/// are reclaimed from the repository that received them; the pool is not touched.
#[tokio::test(flavor = "multi_thread")]
async fn expired_staged_objects_are_reclaimed_without_touching_the_pool() {
    let server = start(&["--purgatory-ttl", "2s", "--soft-expiry-ttl", "1h", "--git-idle-timeout", "1s"]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let (owner, co) = (Keys::generate(), Keys::generate());
    announce_family(&server, &mut c, &[owner.clone(), co.clone()], "reclaim").await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "reclaim");
    let tip = commit_random(&repo.work, "data", 2, 256);
    held(&mut c, &state(&owner, "reclaim", &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    let dir = repo_dir(&server, &owner.public_key(), "reclaim");
    let pool = pool_dir(&server, "reclaim");
    eventually!("the owner's repository to keep no copy of its own", WAIT, (local_objects(&dir) == 0).then_some(()));
    background_settled(&server).await;
    let (pool_packs, pool_refs) = (packs(&pool), bare_refs(&pool));

    let work = WorkTree::new(tmp.path().join("pr"));
    git(&work.dir, &["pull", "-q", &repo.url, "main"]);
    let staged = commit_random(&work, "change", 1, 1024);
    let name = format!("refs/nostr/{}", random_event_id());
    let out = git_output(&work.dir, &["push", "-q", &repo.url, &format!("HEAD:{name}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(has_object(&dir, &staged) && bytes_under(&dir.join("objects")) > 1_000_000);

    eventually!("the expired placeholder's ref to go", WAIT, (!bare_refs(&dir).contains_key(&name)).then_some(()));
    eventually!("the staged megabyte to leave the receiving repository", WAIT, (!has_object(&dir, &staged)).then_some(()));
    background_settled(&server).await;
    assert!(bytes_under(&dir.join("objects")) < 200_000);
    assert_eq!(packs(&pool), pool_packs, "the pool's packs are untouched");
    assert_eq!(bare_refs(&pool), pool_refs, "the pool's refs are untouched");
    assert!(!has_object(&pool, &staged));
    for d in [&dir, &repo_dir(&server, &co.public_key(), "reclaim"), &pool] {
        assert_consistent(d);
    }
    let cl = tmp.path().join("clone");
    clone(&repo.url, &cl, &[]).unwrap();
    assert_eq!(git(&cl, &["rev-parse", "HEAD"]), tip);
}

/// Two owners push to their own repositories of one identifier at the same time, several rounds;
/// a third owner and the second list each other (confirmed both ways), so the third follows the
/// second. Every member and the pool stay consistent, and each repository ends
/// on its latest signed state.
#[tokio::test(flavor = "multi_thread")]
async fn two_owners_pushing_to_one_family_at_once_leave_it_consistent() {
    let server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let (a, b, third) = (Keys::generate(), Keys::generate(), Keys::generate());
    // a alone; b and the third owner list each other (b is a confirmed maintainer there).
    held(&mut c, &announcement(&server, &a, "busy", &[])).await;
    held(&mut c, &announcement(&server, &b, "busy", &[third.public_key()])).await;
    held(&mut c, &announcement(&server, &third, "busy", &[b.public_key()])).await;
    let repos: Vec<Repo> = [&a, &b].iter().enumerate().map(|(i, k)| Repo::new(&tmp.path().join(format!("w{i}")), &server, &k.public_key(), "busy")).collect();
    let base = now();
    let mut last = Vec::new();
    for round in 0..3u64 {
        let mut tips = Vec::new();
        for (i, (repo, keys)) in repos.iter().zip([&a, &b]).enumerate() {
            let tip = commit_random(&repo.work, &format!("r{round}-{i}"), 2, 128);
            held(&mut c, &state_at(keys, "busy", &[("refs/heads/main", &tip)], Some("main"), base + round * 2 + i as u64)).await;
            tips.push(tip);
        }
        std::thread::scope(|s| {
            let pushes: Vec<_> = repos.iter().map(|r| s.spawn(move || r.push(&["main"]))).collect();
            for p in pushes {
                p.join().unwrap().unwrap_or_else(|e| panic!("a concurrent push was refused: {e}"));
            }
        });
        last = tips;
    }
    let (da, db, dt) = (repo_dir(&server, &a.public_key(), "busy"), repo_dir(&server, &b.public_key(), "busy"), repo_dir(&server, &third.public_key(), "busy"));
    // The third owner's repository follows the newest state of its confirmed maintainers: b's last.
    eventually!("the third repository on the newest state", WAIT, (bare_refs(&dt).get("refs/heads/main") == Some(&last[1])).then_some(()));
    background_settled(&server).await;
    assert_eq!(bare_refs(&da).get("refs/heads/main"), Some(&last[0]));
    assert_eq!(bare_refs(&db).get("refs/heads/main"), Some(&last[1]));
    let pool = pool_dir(&server, "busy");
    for d in [&da, &db, &dt, &pool] {
        assert_consistent(d);
    }
    for d in [&da, &db, &dt] {
        assert!(is_member(d, "busy"));
        assert_eq!(local_objects(d), 0, "{} deduped", d.display());
    }
}

/// kill -9 of the relay and every git process it runs, at moments spread over a push's
/// background work (promotion, joins, ref updates, dedupes, pool repacks): at once, and again
/// after each restart, every member and the pool pass `git fsck` and serve their refs; the
/// copies the crash cut short are carried out after the restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_relay_killed_at_any_moment_of_the_copies_leaves_the_family_consistent() {
    let mut server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owners: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
    announce_family(&server, &mut c, &owners, "crash").await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owners[0].public_key(), "crash");
    let dirs: Vec<PathBuf> = owners.iter().map(|k| repo_dir(&server, &k.public_key(), "crash")).collect();
    let pool = pool_dir(&server, "crash");
    let base = now();
    for (round, delay_ms) in [0u64, 30, 80, 150, 300].into_iter().enumerate() {
        let tip = commit_random(&repo.work, &format!("r{round}"), 4, 256);
        held(&mut c, &state_at(&owners[0], "crash", &[("refs/heads/main", &tip)], Some("main"), base + round as u64)).await;
        repo.push(&["main"]).unwrap_or_else(|e| panic!("push refused: {e}\n{}", server.logs()));
        // The crash point moves through the background work that follows the push's answer.
        std::thread::sleep(Duration::from_millis(delay_ms));
        crash(&mut server);
        for d in dirs.iter().chain([&pool]).filter(|d| d.is_dir()) {
            assert_consistent(d);
        }
        server.restart();
        c = connect(&server).await;
        eventually!("every repository on the state after the restart", WAIT, dirs.iter().all(|d| bare_refs(d).get("refs/heads/main") == Some(&tip)).then_some(()));
        background_settled(&server).await;
        for d in dirs.iter().chain([&pool]) {
            assert_consistent(d);
        }
    }
    for d in &dirs {
        assert!(is_member(d, "crash"));
    }
}

/// The pool's gc (docs/architecture.md, "Object pools"): after a force-push abandons released
/// history, the shrink drops what nothing needs and keeps what a stranger's staged push on top
/// of that history still reaches (its commit lives in the stranger's repository, its ancestors
/// only in the pool).
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_gc_keeps_what_any_member_needs_and_reclaims_the_rest() {
    let server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let (owner, co, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    announce_family(&server, &mut c, &[owner.clone(), co.clone()], "gc").await;
    // A history `main` and a tag on an unrelated root that will be dropped.
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "gc");
    let kept = commit_random(&repo.work, "kept", 1, 256);
    let other = WorkTree::new(tmp.path().join("other"));
    let dropped = commit_random(&other, "dropped", 1, 256);
    git(&repo.work.dir, &["fetch", "-q", other.dir.to_str().unwrap(), &format!("{dropped}:refs/tags/old")]);
    held(&mut c, &state_at(&owner, "gc", &[("refs/heads/main", &kept), ("refs/tags/old", &dropped)], Some("main"), now() - 10)).await;
    repo.push(&["main", "refs/tags/old"]).unwrap();
    let pool = pool_dir(&server, "gc");
    let co_dir = repo_dir(&server, &co.public_key(), "gc");
    eventually!("the co-maintainer's repository on the state", WAIT, (bare_refs(&co_dir).get("refs/tags/old") == Some(&dropped)).then_some(()));
    background_settled(&server).await;
    assert!(has_object(&pool, &kept) && has_object(&pool, &dropped));

    // A stranger's repository joins the pool at creation and takes a git-first push on top of
    // `main`: the client sends only the new commit (the pool's history is advertised).
    held(&mut c, &announcement(&server, &stranger, "gc", &[])).await;
    let theirs = repo_dir(&server, &stranger.public_key(), "gc");
    assert!(is_member(&theirs, "gc"), "a repository created beside a pool borrows from it");
    let work = WorkTree::new(tmp.path().join("pr"));
    git(&work.dir, &["pull", "-q", &repo.url, "main"]);
    let staged = work.commit("change", "on top of main\n");
    let name = format!("refs/nostr/{}", random_event_id());
    let out = git_output(&work.dir, &["push", "-q", &repo_url(&server, &stranger.public_key(), "gc"), &format!("HEAD:{name}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(local_objects(&theirs), 3, "only the new commit, its tree and blob were sent");

    // The owner force-pushes an unrelated history and drops the tag.
    let fresh = WorkTree::new(tmp.path().join("fresh"));
    let next = commit_random(&fresh, "next", 1, 256);
    held(&mut c, &state(&owner, "gc", &[("refs/heads/main", &next)], Some("main"))).await;
    let out = git_output(&fresh.dir, &["push", "-q", "--force", &repo.url, "HEAD:refs/heads/main", ":refs/tags/old"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eventually!("the co-maintainer's repository on the new state", WAIT, (bare_refs(&co_dir).get("refs/heads/main") == Some(&next)).then_some(()));
    // Several refs left the pool: a second shrink may be needed, at most a minute after the first.
    eventually!("the dropped history to leave the pool", Duration::from_secs(180), (!has_object(&pool, &dropped)).then_some(()));
    background_settled(&server).await;
    assert!(server.logs().contains("object pool shrunk"), "{}", server.logs());
    assert!(has_object(&pool, &kept), "history a member's staged ref reaches stays in the pool");
    assert!(has_object(&theirs, &staged));
    for d in [&repo_dir(&server, &owner.public_key(), "gc"), &co_dir, &theirs, &pool] {
        assert_consistent(d);
    }
    assert!(!bare_refs(&pool).values().any(|o| o == &kept || o == &dropped), "the pool names only what its members release");
}

/// Repositories from before pools (full copies of one history, no alternates, no pool) join
/// their family's pool at startup while served: afterwards the history is on disk once.
#[tokio::test(flavor = "multi_thread")]
async fn repositories_from_before_pools_join_at_startup() {
    let mut server = start(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owners: Vec<Keys> = (0..3).map(|_| Keys::generate()).collect();
    announce_family(&server, &mut c, &owners, "old").await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owners[0].public_key(), "old");
    let tip = commit_random(&repo.work, "data", 4, 256);
    held(&mut c, &state(&owners[0], "old", &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    let dirs: Vec<PathBuf> = owners.iter().map(|k| repo_dir(&server, &k.public_key(), "old")).collect();
    eventually!("every repository on the state", WAIT, dirs.iter().all(|d| bare_refs(d).get("refs/heads/main") == Some(&tip)).then_some(()));
    background_settled(&server).await;
    drop(c);
    server.stop();
    // What an older version left: every repository with a full copy of its own, no pool.
    let pool = pool_dir(&server, "old");
    for d in &dirs {
        git(d, &["-c", "repack.writeBitmaps=false", "repack", "-a", "-d", "-q"]);
        std::fs::remove_file(d.join("objects/info/alternates")).unwrap();
        assert_consistent(d);
        assert!(local_objects(d) > 0);
    }
    std::fs::remove_dir_all(&pool).unwrap();
    server.restart();
    eventually!("every repository to borrow from a pool again", WAIT, dirs.iter().all(|d| is_member(d, "old")).then_some(()));
    background_settled(&server).await;
    for d in &dirs {
        assert_eq!(local_objects(d), 0, "{} deduped", d.display());
        assert_eq!(bare_refs(d).get("refs/heads/main"), Some(&tip));
        assert_consistent(d);
    }
    assert_consistent(&pool);
    let cl = tmp.path().join("clone");
    clone(&repo_url(&server, &owners[2].public_key(), "old"), &cl, &[]).unwrap();
    assert_eq!(git(&cl, &["rev-parse", "HEAD"]), tip);
}
