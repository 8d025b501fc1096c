//! The ref cache end to end (docs/architecture.md, "The ref cache"): the upload-pack ref
//! advertisement (protocol v0, v1, v2), the receive-pack advertisement (v0, v1) and protocol v2
//! `ls-refs` answered without git are
//! byte for byte what `git http-backend` answers, never stale after anything that changes refs
//! (a push, a release of a held state, a realignment, maintenance, a change behind the relay's
//! back, a fetch racing a push), and the access rules of private services and GRASP-06
//! contributor repositories hold. Real git, real servers on loopback; the cache's hits are read
//! from its counters (`grasp_git_ref_cache_answers`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use grasp_relay::git::http::GitHttpConfig;
use grasp_relay::git::ref_cache::{RefCache, DEFAULT_BUDGET};
use grasp_relay::git::repos::create_bare_repo;
use grasp_state::contract::git_backend::BackendSetup;
use grasp_state::names::identifier::npub_of;
use grasp_tests::git::{bin, git, git_output, git_root_with_hooks, test_owner, GitHttpServer, WorkTree};
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;

/// A git HTTP server on `root` running the backend directly, with `cache` (or none).
fn git_server(root: &Path, cache: Option<Arc<RefCache>>) -> GitHttpServer {
    GitHttpServer::start_with(GitHttpConfig {
        cgi_path: bin("grasp-cgi"),
        backend: BackendSetup { git_root: root.to_path_buf(), git: "git".into(), ..BackendSetup::default() },
        data_dir: root.parent().unwrap().to_path_buf(),
        env: vec![],
        direct: true,
        idle_timeout: grasp_relay::git::http::DEFAULT_IDLE_TIMEOUT,
        min_rate: grasp_state::contract::transfer::DEFAULT_MIN_RATE,
        prs: false,
        ref_cache: cache,
        supervised_pushes: None,
    })
}

fn pkt(line: &str) -> String {
    format!("{:04x}{line}", line.len() + 4)
}

/// A v2 `ls-refs` request body from a client of version `agent` with `args`.
fn ls_refs(agent: &str, args: &[&str]) -> Vec<u8> {
    let mut body = pkt("command=ls-refs\n") + &pkt(&format!("agent={agent}\n")) + &pkt("object-format=sha1\n") + "0001";
    for a in args {
        body += &pkt(&format!("{a}\n"));
    }
    (body + "0000").into_bytes()
}

/// What a client sees of an answer: status, the headers that matter, body.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    headers: Vec<(String, Option<String>)>,
    body: Vec<u8>,
}

/// One request of kind `read` (`v0`, `v1`, `v2` advertisements, or an `ls-refs` body) to `url`.
fn request(client: &reqwest::blocking::Client, url: &str, read: &Read) -> Seen {
    let resp = match read {
        Read::Advertisement(protocol) => {
            let mut req = client.get(format!("{url}/info/refs?service=git-upload-pack"));
            if let Some(p) = protocol {
                req = req.header("Git-Protocol", *p);
            }
            req.send().unwrap()
        }
        Read::ReceiveAdvertisement(protocol) => {
            let mut req = client.get(format!("{url}/info/refs?service=git-receive-pack"));
            if let Some(p) = protocol {
                req = req.header("Git-Protocol", *p);
            }
            req.send().unwrap()
        }
        Read::LsRefs(body) | Read::Fetch(body) => client
            .post(format!("{url}/git-upload-pack"))
            .header("Git-Protocol", "version=2")
            .header("Content-Type", "application/x-git-upload-pack-request")
            .body(body.clone())
            .send()
            .unwrap(),
    };
    let headers = ["content-type", "cache-control", "expires", "pragma", "access-control-allow-origin"]
        .iter()
        .map(|h| (h.to_string(), resp.headers().get(*h).map(|v| v.to_str().unwrap().to_string())))
        .collect();
    Seen { status: resp.status().as_u16(), headers, body: resp.bytes().unwrap().to_vec() }
}

#[derive(Debug)]
enum Read {
    Advertisement(Option<&'static str>),
    /// The receive-pack advertisement (a push's first request).
    ReceiveAdvertisement(Option<&'static str>),
    LsRefs(Vec<u8>),
    /// A v2 `fetch` request body.
    Fetch(Vec<u8>),
}

/// A v2 fetch answer's pkt-lines, with the side-band packets after `packfile` joined per band:
/// (the other packets, band 1 (the pack), band 2 (progress), band 3 (error)).
fn demux(body: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut other, mut bands, mut rest, mut in_pack) = (Vec::new(), [Vec::new(), Vec::new(), Vec::new()], body, false);
    while rest.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
        let (packet, after) = if len < 4 { (&rest[..4], &rest[4..]) } else { (&rest[..len], &rest[len..]) };
        match packet.get(4) {
            Some(band @ 1..=3) if in_pack => bands[usize::from(*band) - 1].extend_from_slice(&packet[5..]),
            _ => {
                in_pack |= &packet[4..] == b"packfile\n";
                other.push(packet.to_vec());
            }
        }
        rest = after;
    }
    assert!(rest.is_empty(), "a whole number of packets");
    let [pack, progress, error] = bands;
    (other, pack, progress, error)
}

/// A v2 `fetch` of `wants` (a clone's negotiation: no haves, `done`).
fn fetch_body(wants: &[&str], progress: bool) -> Vec<u8> {
    let mut body = pkt("command=fetch\n") + &pkt("agent=git/2.47.3\n") + &pkt("object-format=sha1\n") + "0001";
    body += &pkt("thin-pack\n");
    if !progress {
        body += &pkt("no-progress\n");
    }
    body += &pkt("ofs-delta\n");
    for want in wants {
        body += &pkt(&format!("want {want}\n"));
    }
    body += &pkt("include-tag\n");
    (body + &pkt("done\n") + "0000").into_bytes()
}

/// Every read the cache answers, with the arguments clients send.
fn reads() -> Vec<Read> {
    let mut reads = vec![
        Read::Advertisement(None),
        Read::Advertisement(Some("version=1")),
        Read::Advertisement(Some("version=2")),
        Read::ReceiveAdvertisement(None),
        Read::ReceiveAdvertisement(Some("version=1")),
    ];
    let args: &[&[&str]] = &[
        &[],
        &["peel"],
        &["symrefs"],
        &["peel", "symrefs"],
        &["ref-prefix HEAD"],
        &["peel", "symrefs", "unborn", "ref-prefix HEAD", "ref-prefix refs/heads/", "ref-prefix refs/tags/"],
        &["symrefs", "ref-prefix refs/nostr/"],
        &["peel", "ref-prefix refs/tags/v"],
        &["unborn", "symrefs"],
    ];
    reads.extend(args.iter().map(|a| Read::LsRefs(ls_refs("git/2.47.3", a))));
    reads
}

#[test]
fn cached_answers_are_gits_byte_for_byte() {
    let (tmp, root, hooks) = git_root_with_hooks();
    let cache = Arc::new(RefCache::new(DEFAULT_BUDGET, Default::default()));
    let cached = git_server(&root, Some(cache.clone()));
    let plain = git_server(&root, None);
    let owner = test_owner(0);

    // Branches, an annotated and a plain tag, a pull request ref, HEAD on main.
    let full = create_bare_repo(&cached.layout, &owner, "full", &hooks).unwrap();
    let work = WorkTree::new(tmp.path().join("work"));
    let one = work.commit("a", "1\n");
    let two = work.commit("b", "2\n");
    git(&work.dir, &["tag", "-a", "-m", "release", "v1", &one]);
    git(&work.dir, &["tag", "v0", &one]);
    let nostr = format!("refs/nostr/{}", "e".repeat(64));
    work.push_to(&full, &["main:refs/heads/main", &format!("{one}:refs/heads/dev"), "refs/tags/v1", "refs/tags/v0", &format!("{two}:{nostr}")]);
    git(&full, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    // The same refs with pull request refs hidden, and some of them packed.
    let hidden = create_bare_repo(&cached.layout, &owner, "hidden", &hooks).unwrap();
    work.push_to(&hidden, &["main:refs/heads/main", "refs/tags/v1", &format!("{two}:{nostr}")]);
    git(&hidden, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    git(&hidden, &["config", "uploadpack.hideRefs", "refs/nostr/"]);
    git(&hidden, &["pack-refs", "--all"]);
    // No refs at all, HEAD unborn.
    create_bare_repo(&cached.layout, &owner, "empty", &hooks).unwrap();

    let client = reqwest::blocking::Client::new();
    let metrics = cache.metrics();
    for repo in ["full", "hidden", "empty"] {
        let (url_cached, url_plain) = (cached.repo_url(&owner, repo), plain.repo_url(&owner, repo));
        for read in reads() {
            let git_answer = request(&client, &url_plain, &read);
            assert_eq!(git_answer.status, 200, "{repo} {read:?}: {git_answer:?}");
            let hits = metrics.answers("hit");
            let first = request(&client, &url_cached, &read);
            assert_eq!(first, git_answer, "{repo} {read:?}: the answer made by git while caching it");
            // Kept once the backend ended well: the next is a hit.
            let second = eventually_hit(&client, &url_cached, &read, metrics, hits);
            assert_eq!(second, git_answer, "{repo} {read:?}: the cached answer");
            assert_eq!(request(&client, &url_plain, &read), git_answer, "git itself answers the same again");
        }
    }
    // A v2 fetch: upload-pack started without the backend (its header block learned from the
    // ls-refs answers above) answers what the backend answers, errors included.
    let fetches = metrics.direct_fetches();
    let mut fetched = 0;
    for (repo, wants) in [("full", vec![two.as_str()]), ("full", vec![one.as_str(), two.as_str()]), ("hidden", vec![two.as_str()]), ("full", vec!["1234567890123456789012345678901234567890"]), ("empty", vec![two.as_str()])] {
        for progress in [true, false] {
            let read = Read::Fetch(fetch_body(&wants, progress));
            let git_answer = request(&client, &plain.repo_url(&owner, repo), &read);
            assert_eq!(git_answer.status, 200, "{repo} {wants:?}: {git_answer:?}");
            let answer = request(&client, &cached.repo_url(&owner, repo), &read);
            // The pack and the progress go out in side-band packets as git's pipes and timer
            // deliver them: cut differently (and, on a slow moment, with more progress updates)
            // from one run of git to the next, the backend's as much as upload-pack's. The rest
            // is the same byte for byte, the pack and the errors too, and so is the progress's
            // last line.
            assert_eq!((answer.status, &answer.headers), (git_answer.status, &git_answer.headers));
            let ((other, pack, shown, error), (git_other, git_pack, git_shown, git_error)) = (demux(&answer.body), demux(&git_answer.body));
            assert_eq!((other, pack, error), (git_other, git_pack, git_error), "{repo} {wants:?} progress {progress}");
            let last = |p: &[u8]| String::from_utf8_lossy(p).split(['\r', '\n']).rfind(|l| !l.is_empty()).map(str::to_owned);
            assert_eq!(last(&shown), last(&git_shown), "{repo} {wants:?} progress {progress}");
            fetched += 1;
        }
    }
    assert_eq!(metrics.direct_fetches(), fetches + fetched, "every fetch went without the backend");

    // Another repository without refs gets the receive-pack advertisement learned from the
    // first one at once (the same setup and config), as git answers it; one that borrows
    // objects (`.have` lines) is always answered by git.
    create_bare_repo(&cached.layout, &owner, "empty2", &hooks).unwrap();
    for protocol in [None, Some("version=1")] {
        let read = Read::ReceiveAdvertisement(protocol);
        let hits = metrics.answers("hit");
        let answer = request(&client, &cached.repo_url(&owner, "empty2"), &read);
        assert_eq!(metrics.answers("hit"), hits + 1, "{protocol:?}: learned from the first empty repository");
        assert_eq!(answer, request(&client, &plain.repo_url(&owner, "empty2"), &read), "{protocol:?}");
    }
    let borrower = create_bare_repo(&cached.layout, &owner, "borrower", &hooks).unwrap();
    std::fs::write(borrower.join("objects/info/alternates"), format!("{}\n", full.join("objects").display())).unwrap();
    let read = Read::ReceiveAdvertisement(None);
    let misses = metrics.answers("miss");
    let hits = metrics.answers("hit");
    for _ in 0..2 {
        let answer = request(&client, &cached.repo_url(&owner, "borrower"), &read);
        assert!(String::from_utf8_lossy(&answer.body).contains(".have"), "{answer:?}");
        assert_eq!(answer, request(&client, &plain.repo_url(&owner, "borrower"), &read));
    }
    assert_eq!((metrics.answers("hit"), metrics.answers("miss")), (hits, misses), "never cached");

    // Hidden refs stay hidden from the cache's answers as from git's.
    let url = cached.repo_url(&owner, "hidden");
    let all = request(&client, &url, &Read::LsRefs(ls_refs("git/2.47.3", &[])));
    assert!(!String::from_utf8_lossy(&all.body).contains("refs/nostr/"), "{all:?}");
    // Another client version's ls-refs is the same read.
    let hits = metrics.answers("hit");
    let other_agent = request(&client, &url, &Read::LsRefs(ls_refs("git/2.30.0", &[])));
    assert_eq!(other_agent.body, all.body);
    assert_eq!(metrics.answers("hit"), hits + 1);

    // Real clients over the cache.
    for protocol in ["0", "1", "2"] {
        let url = cached.repo_url(&owner, "full");
        let listed = git_output(tmp.path(), &["-c", &format!("protocol.version={protocol}"), "ls-remote", &url]);
        assert!(listed.status.success(), "{listed:?}");
        let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
        assert!(listed.contains(&format!("{two}\tHEAD")) && listed.contains(&format!("{one}\trefs/tags/v1^{{}}")), "{listed}");
        let dir = tmp.path().join(format!("clone-v{protocol}"));
        let out = git_output(tmp.path(), &["-c", &format!("protocol.version={protocol}"), "clone", "-q", &url, dir.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(git(&dir, &["rev-parse", "HEAD"]), two);
    }
}

/// Asks `read` of `url` until the cache answers it (its hit counter passes `hits`: the miss's
/// answer is kept once its backend has exited), then returns that answer.
fn eventually_hit(client: &reqwest::blocking::Client, url: &str, read: &Read, metrics: &grasp_relay::metrics::RefCacheMetrics, hits: u64) -> Seen {
    grasp_tests::wait_until("the answer to be kept in the ref cache", grasp_tests::TIMEOUT, || {
        let seen = request(client, url, read);
        (metrics.answers("hit") > hits).then_some(seen)
    })
    .unwrap()
}

#[test]
fn never_stale_after_a_change_behind_the_relays_back() {
    let (tmp, root, hooks) = git_root_with_hooks();
    let cache = Arc::new(RefCache::new(DEFAULT_BUDGET, Default::default()));
    let server = git_server(&root, Some(cache.clone()));
    let owner = test_owner(0);
    let bare = create_bare_repo(&server.layout, &owner, "r", &hooks).unwrap();
    let work = WorkTree::new(tmp.path().join("work"));
    let url = server.repo_url(&owner, "r");
    let client = reqwest::blocking::Client::new();
    let v2 = Read::LsRefs(ls_refs("git/2.47.3", &["symrefs", "peel"]));
    let mut tips = Vec::new();
    for i in 0..8 {
        let tip = work.commit("f", &format!("{i}\n"));
        // The objects first (a ref of their own), then each change right after the last answer
        // was cached, by git's own commands on disk.
        work.push_to(&bare, &["main:refs/heads/objects"]);
        match i % 4 {
            0 => work.push_to(&bare, &["main:refs/heads/main"]),
            1 => {
                git(&bare, &["update-ref", "refs/heads/main", &tip]);
            }
            2 => {
                git(&bare, &["update-ref", "refs/heads/main", &tip]);
                git(&bare, &["pack-refs", "--all"]);
            }
            _ => {
                git(&bare, &["update-ref", "refs/heads/main", &tip]);
                git(&bare, &["update-ref", "-d", "refs/heads/main"]);
                git(&bare, &["update-ref", "refs/heads/main", &tip]);
            }
        }
        git(&bare, &["symbolic-ref", "HEAD", "refs/heads/main"]);
        tips.push(tip.clone());
        let hits = cache.metrics().answers("hit");
        for read in [&v2, &Read::Advertisement(None), &Read::ReceiveAdvertisement(None)] {
            let seen = request(&client, &url, read);
            assert!(String::from_utf8_lossy(&seen.body).contains(&format!("{tip} refs/heads/main")), "change {i}: {seen:?}");
            let again = eventually_hit(&client, &url, read, cache.metrics(), hits);
            assert_eq!(again, seen);
        }
    }
}

// ---- The relay: pushes, releases, realignments, maintenance, racing fetches ----

/// The refs `git ls-remote` lists at `url` with protocol `version`, as `oid name` lines.
fn ls_remote(url: &str, version: &str) -> String {
    let out = git_output(Path::new("/"), &["-c", &format!("protocol.version={version}"), "ls-remote", "--symref", url]);
    assert!(out.status.success(), "ls-remote {url}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `grasp_git_ref_cache_answers{outcome}` on the relay's metrics listener.
async fn cache_answers(server: &TestServer, outcome: &str) -> u64 {
    counter(server, &format!("grasp_git_ref_cache_answers_total{{outcome=\"{outcome}\"}}")).await
}

/// The value of the counter `series` on the relay's metrics listener (0 before it counts).
async fn counter(server: &TestServer, series: &str) -> u64 {
    let addr = std::fs::read_to_string(server.data_dir().join(grasp_state::contract::layout::METRICS_ADDR_FILE)).unwrap();
    let body = reqwest::get(format!("http://{}/metrics", addr.trim())).await.unwrap().text().await.unwrap();
    let prefix = format!("{series} ");
    body.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

/// Lists `url` with every protocol until a list comes from the cache, checking each list with
/// `check`: what a client sees right after a change, then from the cache.
async fn listed_and_cached(server: &TestServer, url: &str, check: impl Fn(&str) -> bool) {
    for version in ["0", "2"] {
        let listed = ls_remote(url, version);
        assert!(check(&listed), "v{version} right after the change: {listed}");
        let hits = cache_answers(server, "hit").await;
        eventually!("a list answered from the ref cache", {
            let listed = ls_remote(url, version);
            assert!(check(&listed), "v{version} from the cache: {listed}");
            (cache_answers(server, "hit").await > hits).then_some(())
        });
    }
}

/// After a push the relay's listener ran, the reads that usually come next (the next push's
/// receive-pack advertisement, a fetch's v2 capability advertisement) are made ready in the
/// background: answered from the cache at once, with the new refs, as git answers them.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_push_and_fetch_after_a_push_are_answered_from_the_cache() {
    let (server, tmp, mut c) = started(&["--metrics-bind", "127.0.0.1:0"]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "warm").await;
    let tip = repo.commit("a", "1");
    held(&mut c, &state(&owner, "warm", &[("refs/heads/main", &tip)], Some("main"))).await;
    let prewarmed = cache_answers(&server, "prewarmed").await;
    repo.push(&["main"]).unwrap();
    eventually!("both reads prewarmed", (cache_answers(&server, "prewarmed").await >= prewarmed + 2).then_some(()));
    let (hits, misses) = (cache_answers(&server, "hit").await, cache_answers(&server, "miss").await);
    let client = reqwest::Client::new();
    let push_adv = client.get(format!("{}/info/refs?service=git-receive-pack", repo.url)).send().await.unwrap().bytes().await.unwrap();
    assert!(String::from_utf8_lossy(&push_adv).contains(&format!("{tip} refs/heads/main")), "{push_adv:?}");
    let v2 = client.get(format!("{}/info/refs?service=git-upload-pack", repo.url)).header("Git-Protocol", "version=2").send().await.unwrap();
    assert_eq!(v2.status(), 200);
    assert_eq!(cache_answers(&server, "hit").await, hits + 2, "both from the cache");
    assert_eq!(cache_answers(&server, "miss").await, misses, "no git run for them");
    // What git itself answers (the cache off for this read: a header value it does not key).
    let git_adv = client
        .get(format!("{}/info/refs?service=git-receive-pack", repo.url))
        .header("Git-Protocol", "version=0:x")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(push_adv, git_adv, "the prewarmed answer is git's");
    // The next push goes through as usual.
    let next = repo.commit("b", "2");
    held(&mut c, &state_at(&owner, "warm", &[("refs/heads/main", &next)], Some("main"), now() + 1)).await;
    repo.push(&["main"]).unwrap();
    assert!(ls_remote(&repo.url, "2").contains(&format!("{next}\trefs/heads/main")));
}

/// The refs the receive-pack advertisement at `url` lists (a push's first request), as
/// `oid\tname` lines like `git ls-remote`'s.
async fn push_advertised(url: &str) -> String {
    let body = reqwest::get(format!("{url}/info/refs?service=git-receive-pack")).await.unwrap().bytes().await.unwrap();
    let mut rest = &body[..];
    let mut out = String::new();
    while rest.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
        let (line, after) = if len < 4 { (&rest[..0], &rest[4..]) } else { (&rest[4..len], &rest[len..]) };
        let line = String::from_utf8_lossy(line.split(|&b| b == 0).next().unwrap_or_default()).trim_end().to_string();
        if let Some((oid, name)) = line.split_once(' ') {
            if oid.len() == 40 && !name.starts_with("service=") {
                out.push_str(&format!("{oid}\t{name}\n"));
            }
        }
        rest = after;
    }
    out
}

/// [`listed_and_cached`] for the receive-pack advertisement.
async fn advertised_and_cached(server: &TestServer, url: &str, check: impl Fn(&str) -> bool) {
    let listed = push_advertised(url).await;
    assert!(check(&listed), "push advertisement right after the change: {listed}");
    let hits = cache_answers(server, "hit").await;
    eventually!("a push advertisement answered from the ref cache", {
        let listed = push_advertised(url).await;
        assert!(check(&listed), "push advertisement from the cache: {listed}");
        (cache_answers(server, "hit").await > hits).then_some(())
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn never_stale_after_pushes_releases_realignments_and_maintenance() {
    let (server, tmp, mut c) = started(&["--metrics-bind", "127.0.0.1:0"]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "live").await;
    let dir = repo_dir(&server, &owner.public_key(), "live");
    let has = |tip: &str, name: &str| {
        let line = format!("{tip}\t{name}\n");
        move |listed: &str| listed.contains(&line)
    };

    // Release of a held state by a push.
    let c1 = repo.commit("a", "1");
    held(&mut c, &state_at(&owner, "live", &[("refs/heads/main", &c1)], Some("main"), now() - 20)).await;
    repo.push(&["main"]).unwrap();
    listed_and_cached(&server, &repo.url, has(&c1, "refs/heads/main")).await;

    // A push updating the branch: the next list has it.
    let c2 = repo.commit("b", "2");
    held(&mut c, &state_at(&owner, "live", &[("refs/heads/main", &c2)], Some("main"), now() - 18)).await;
    repo.push(&["main"]).unwrap();
    listed_and_cached(&server, &repo.url, has(&c2, "refs/heads/main")).await;
    advertised_and_cached(&server, &repo.url, has(&c2, "refs/heads/main")).await;

    // A second branch pushed, then a state whose data is here: realigned without a push (HEAD
    // moves, a branch goes).
    let c3 = repo.commit("c", "3");
    held(&mut c, &state_at(&owner, "live", &[("refs/heads/main", &c2), ("refs/heads/dev", &c3)], Some("main"), now() - 16)).await;
    repo.push(&[&format!("{c3}:refs/heads/dev")]).unwrap();
    listed_and_cached(&server, &repo.url, has(&c3, "refs/heads/dev")).await;
    served(&mut c, &state_at(&owner, "live", &[("refs/heads/dev", &c3)], Some("dev"), now() - 14)).await;
    listed_and_cached(&server, &repo.url, |l: &str| l.contains("ref: refs/heads/dev\tHEAD") && !l.contains("refs/heads/main")).await;
    advertised_and_cached(&server, &repo.url, |l: &str| l.contains(&format!("{c3}\trefs/heads/dev")) && !l.contains("refs/heads/main")).await;
    assert_eq!(bare_head(&dir), "refs/heads/dev");

    // Maintenance (the relay runs it after pushes): refs packed, the same list.
    background_settled(&server).await;
    grasp_tests::git::git(&dir, &["pack-refs", "--all"]);
    listed_and_cached(&server, &repo.url, has(&c3, "refs/heads/dev")).await;
    advertised_and_cached(&server, &repo.url, has(&c3, "refs/heads/dev")).await;

    // A state first held, then released by the push of its data: HEAD and the new branch at once.
    let c4 = repo.commit("d", "4");
    held(&mut c, &state_at(&owner, "live", &[("refs/heads/dev", &c3), ("refs/heads/next", &c4)], Some("next"), now() - 12)).await;
    repo.push(&[&format!("{c4}:refs/heads/next")]).unwrap();
    listed_and_cached(&server, &repo.url, |l: &str| l.contains("ref: refs/heads/next\tHEAD") && l.contains(&format!("{c4}\trefs/heads/next"))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fetch_racing_a_push_never_sees_a_stale_list_once_the_push_is_answered() {
    let (server, tmp, mut c) = started(&["--metrics-bind", "127.0.0.1:0"]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut c, &tmp.path().join("o"), &owner, "race").await;
    let url = published.repo.url.clone();
    // Readers list the repository without a pause while the pushes go on, so answers are made
    // and cached at every moment of a push.
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let (stop, url) = (stop.clone(), url.clone());
            std::thread::spawn(move || {
                let mut lists = 0;
                while !stop.load(Ordering::SeqCst) {
                    ls_remote(&url, if i == 0 { "2" } else { "0" });
                    lists += 1;
                }
                lists
            })
        })
        .collect();
    for i in 0..8 {
        let tip = published.repo.commit("race", &format!("{i}\n"));
        held(&mut c, &state_at(&owner, "race", &[("refs/heads/main", &tip)], Some("main"), now() + 1 + i)).await;
        published.repo.push(&["main"]).unwrap();
        // The push was answered: every list from now on has its tip.
        for version in ["2", "0", "1"] {
            let listed = ls_remote(&url, version);
            assert!(listed.contains(&format!("{tip}\trefs/heads/main")), "push {i}, v{version}: {listed}");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let lists: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(lists > 0);
    assert!(cache_answers(&server, "hit").await > 0, "the cache answered some of the lists");
    // A clone now: its fetch is answered by upload-pack alone (the backend's header block is
    // known from the ls-refs answers), and it has the last tip.
    let fetches = counter(&server, "grasp_git_fetches_without_backend_total").await;
    let dir = tmp.path().join("clone");
    clone(&url, &dir, &[]).unwrap();
    assert_eq!(grasp_tests::git::git(&dir, &["rev-parse", "HEAD"]), grasp_tests::git::git(&published.repo.work.dir, &["rev-parse", "HEAD"]));
    assert_eq!(counter(&server, "grasp_git_fetches_without_backend_total").await, fetches + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn contributor_repositories_are_cached_and_their_rules_hold() {
    let (server, tmp, mut c) = started(&["--grasp06", "--metrics-bind", "127.0.0.1:0"]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let published = publish_repo(&server, &mut c, &tmp.path().join("owner"), &owner, "proj").await;
    let work = tmp.path().join("contrib");
    clone(&published.repo.url, &work, &[]).unwrap();
    let prs = format!("http://{}/prs/{}/proj.git", host(&server), npub_of(&contributor.public_key()));
    let repo = Repo { work: WorkTree::new(work), url: prs.clone() };
    // No repository yet: grasp-cgi's empty answer, not the cache's.
    assert_eq!(ls_remote(&prs, "2"), "");
    assert_eq!(ls_remote(&prs, "2"), "");
    let tip = repo.commit("fix.txt", "a fix\n");
    let ev = pull_request(&contributor, &owner.public_key(), "proj", &tip, &[&prs]);
    held(&mut c, &ev).await;
    repo.push(&[&format!("HEAD:refs/nostr/{}", ev.id.to_hex())]).unwrap();
    let name = format!("refs/nostr/{}", ev.id.to_hex());
    listed_and_cached(&server, &prs, |l: &str| l.contains(&format!("{tip}\t{name}"))).await;
    // Only pull request refs go in, cache or not.
    let refused = repo.push(&["HEAD:refs/heads/main"]).unwrap_err();
    assert!(refused.contains("only refs/nostr/<pull request event id>"), "{refused}");
    listed_and_cached(&server, &prs, |l: &str| l.contains(&name) && !l.contains("refs/heads/main")).await;
    // A pull request ref pushed before its event (a placeholder) is listed at once.
    let tip2 = repo.commit("fix2.txt", "another\n");
    let early = format!("refs/nostr/{}", random_event_id());
    repo.push(&[&format!("{tip2}:{early}")]).unwrap();
    listed_and_cached(&server, &prs, |l: &str| l.contains(&format!("{tip2}\t{early}")) && l.contains(&name)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_service_never_answers_from_the_cache() {
    let member = Keys::generate();
    let hex = member.public_key().to_hex();
    let server = TestServer::start_with(&["--private", "--member", hex.as_str(), "--metrics-bind", "127.0.0.1:0"]);
    let url = repo_url(&server, &member.public_key(), "secret");
    let mut c = connect(&server).await;
    assert!(c.auth(&member).await.unwrap().0);
    let ann = event(
        &member,
        30617,
        &[&["d", "secret"], &["clone", &url], &["relays", &format!("ws://{}", host(&server))], &["private", "true"]],
    );
    assert!(c.send_event(&ann).await.unwrap().0);
    // Asked again and again without a proof: 401 every time, never a cached answer.
    for _ in 0..3 {
        let resp = reqwest::get(format!("{url}/info/refs?service=git-upload-pack")).await.unwrap();
        assert_eq!(resp.status(), 401);
        let resp = reqwest::Client::new()
            .post(format!("{url}/git-upload-pack"))
            .header("Git-Protocol", "version=2")
            .header("Content-Type", "application/x-git-upload-pack-request")
            .body(ls_refs("git/2.47.3", &["symrefs"]))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
    assert_eq!(cache_answers(&server, "hit").await + cache_answers(&server, "miss").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn never_stale_after_a_git_sync() {
    let args = ["--sync-allow-private", "--sync-user-delay-ms", "500", "--sync-backoff-ms", "500", "--sync-backoff-cap-ms", "1500", "--metrics-bind", "127.0.0.1:0"];
    let (a, b) = (TestServer::start_with(&args), TestServer::start_with(&args));
    let tmp = tempfile::tempdir().unwrap();
    let (mut ca, mut cb) = (connect(&a).await, connect(&b).await);
    let owner = Keys::generate();
    let ann = announcement_on(&[&a, &b], &owner, "synced", &[]);
    held(&mut ca, &ann).await;
    let repo = Repo::new(&tmp.path().join("w"), &a, &owner.public_key(), "synced");
    let first = repo.commit("a.txt", "one");
    let tip = repo.commit("b.txt", "two");
    grasp_tests::git::git(&repo.work.dir, &["tag", "-a", "-m", "v1", "v1", &first]);
    let tag = grasp_tests::git::git(&repo.work.dir, &["rev-parse", "v1"]);
    let st = state(&owner, "synced", &[("refs/heads/main", &tip), ("refs/tags/v1", &tag)], Some("main"));
    held(&mut ca, &st).await;
    repo.push(&["main", "refs/tags/v1"]).unwrap();

    // B has the repository, empty, and answers its (empty) list from the cache.
    held(&mut cb, &ann).await;
    let b_url = repo_url(&b, &owner.public_key(), "synced");
    let b_dir = repo_dir(&b, &owner.public_key(), "synced");
    listed_and_cached(&b, &b_url, |l: &str| !l.contains("refs/heads/main")).await;
    // The state comes: B fetches the data from A and aligns its refs; once they are on disk,
    // every list has them.
    held(&mut cb, &st).await;
    eventually!("B's refs and HEAD to be synced", {
        (bare_refs(&b_dir).get("refs/heads/main") == Some(&tip) && bare_head(&b_dir) == "refs/heads/main").then_some(())
    });
    listed_and_cached(&b, &b_url, |l: &str| {
        l.contains(&format!("{tip}\trefs/heads/main")) && l.contains(&format!("{first}\trefs/tags/v1^{{}}")) && l.contains("ref: refs/heads/main\tHEAD")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ls_refs_body_that_never_arrives_is_ended_within_the_idle_timeout() {
    use std::io::{Read as _, Write as _};
    let (server, tmp, mut c) = started(&["--git-idle-timeout", "1s"]).await;
    let owner = Keys::generate();
    publish_repo(&server, &mut c, &tmp.path().join("o"), &owner, "slow").await;
    let path = format!("/{}/slow.git/git-upload-pack", npub_of(&owner.public_key()));
    // Headers and a few bytes of a 100-byte body, then nothing, the connection kept open.
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: x\r\nGit-Protocol: version=2\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: 100\r\n\r\n0014command=ls-").unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}
