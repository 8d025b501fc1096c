//! GRASP-06 contributor repositories end to end (docs/protocol.md#contributor-repositories):
//! `/prs/<npub>/<identifier>.git` with `--grasp06`, real relay, real `git`, a WebSocket client.
//! A contributor pushes the commit of their own pull request there; the pull request is released
//! in either order (event first, data first), copied into the announced repository its `a` tag
//! names and never the other way round; a pull request for a repository not announced here is
//! held when its `clone` tag names the contributor's URL here; probes create nothing, and a
//! contributor repository left without refs goes.

use std::path::{Path, PathBuf};

use grasp_relay::grasp::acceptance::PURGATORY_MESSAGE;
use grasp_state::names::identifier::{npub_of, percent_encode_segment};
use grasp_tests::git::git_output;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;

/// `http://HOST/prs/<npub>/<identifier>.git` on `server`.
fn prs_url(server: &TestServer, contributor: &PublicKey, identifier: &str) -> String {
    format!("http://{}/prs/{}/{}.git", host(server), npub_of(contributor), percent_encode_segment(identifier))
}

/// Where the contributor repository lives in the data directory.
fn prs_dir(server: &TestServer, contributor: &PublicKey, identifier: &str) -> PathBuf {
    server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(grasp_state::names::identifier::PRS_DIR).join(npub_of(contributor)).join(format!("{identifier}.git"))
}

/// A pull request (1618) by `keys` whose `a` tag names `owner`'s `identifier`, tip `commit`,
/// cloneable from `clone`.
fn pr(keys: &Keys, owner: &PublicKey, identifier: &str, commit: &str, clone: &[&str]) -> Event {
    pull_request(keys, owner, identifier, commit, clone)
}

/// The refs `git ls-remote` lists at `url` (Err: the command failed, e.g. a 404).
fn ls_remote(url: &str) -> Result<Vec<String>, String> {
    let out = git_output(Path::new("/"), &["ls-remote", url]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect())
}

/// An HTTP GET of `url`: its status.
async fn get_status(url: &str) -> u16 {
    reqwest::get(url).await.unwrap().status().as_u16()
}

/// A `--grasp06` server where `owner` published `proj`, and a contributor's work tree cloned from
/// it with one commit on top, pushing to the contributor's repository there; the pull request
/// event for that commit (`clone` naming that repository), unsent.
struct Contribution {
    server: TestServer,
    c: grasp_tests::NostrClient,
    owner: Keys,
    contributor: Keys,
    published: Published,
    repo: Repo,
    tip: String,
    ev: Event,
    _tmp: tempfile::TempDir,
}

async fn contribution() -> Contribution {
    let (server, tmp, mut c) = started(&["--grasp06"]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let published = publish_repo(&server, &mut c, &tmp.path().join("owner"), &owner, "proj").await;
    let work = tmp.path().join("contrib");
    clone(&published.repo.url, &work, &[]).unwrap();
    let repo = Repo { work: grasp_tests::git::WorkTree::new(work), url: prs_url(&server, &contributor.public_key(), "proj") };
    let tip = repo.commit("fix.txt", "a fix\n");
    let ev = pr(&contributor, &owner.public_key(), "proj", &tip, &[&repo.url]);
    Contribution { server, c, owner, contributor, published, repo, tip, ev, _tmp: tmp }
}

#[tokio::test]
async fn without_grasp06_the_prs_namespace_is_404_and_not_advertised() {
    let server = TestServer::start();
    let someone = Keys::generate().public_key();
    let url = format!("{}/info/refs?service=git-upload-pack", prs_url(&server, &someone, "x"));
    assert_eq!(get_status(&url).await, 404);
    let doc = nip11(&server).await;
    assert!(!doc["supported_grasps"].as_array().unwrap().iter().any(|g| g == "GRASP-06"), "{doc}");
    // A pull request naming a contributor URL here is refused like any other for a repository
    // not announced here.
    let mut c = connect(&server).await;
    let contributor = Keys::generate();
    let url = prs_url(&server, &contributor.public_key(), "x");
    let (ok, msg) = c.send_event(&pr(&contributor, &someone, "x", &"a".repeat(40), &[&url])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && !msg.contains("/prs/"), "{ok} {msg}");
}

#[tokio::test]
async fn a_fetch_of_a_path_with_no_repository_is_an_empty_repository_and_creates_nothing() {
    let server = TestServer::start_with(&["--grasp06"]);
    let doc = nip11(&server).await;
    assert!(doc["supported_grasps"].as_array().unwrap().iter().any(|g| g == "GRASP-06"), "{doc}");
    let someone = Keys::generate().public_key();
    let url = prs_url(&server, &someone, "any thing");
    let tmp = tempfile::tempdir().unwrap();
    clone(&url, &tmp.path().join("c"), &[]).unwrap();
    assert_eq!(git_output(&tmp.path().join("c"), &["for-each-ref"]).stdout, b"");
    assert_eq!(ls_remote(&url).unwrap(), Vec::<String>::new());
    assert!(!server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(grasp_state::names::identifier::PRS_DIR).exists(), "a probe creates nothing on disk");
    // Neither a malformed path nor a page exists there.
    assert_eq!(get_status(&format!("http://{}/prs/npub1nothing/x.git/info/refs?service=git-upload-pack", host(&server))).await, 404);
    assert_eq!(get_status(&url).await, 404);
}

#[tokio::test]
async fn event_first_a_contributor_push_releases_the_pull_request_and_the_owner_sees_it() {
    let Contribution { server, mut c, owner, contributor, published, repo, tip, ev, _tmp: tmp } = contribution().await;
    held(&mut c, &ev).await;

    let out = repo.push(&[&format!("HEAD:refs/nostr/{}", ev.id.to_hex())]).unwrap();
    assert!(out.contains("released"), "{out}");
    assert!(stored(&mut c, ev.id).await, "the pull request is served once its commit is pushed");
    let name = format!("refs/nostr/{}", ev.id.to_hex());
    assert_eq!(bare_refs(&prs_dir(&server, &contributor.public_key(), "proj")).get(&name), Some(&tip));
    // Copied into the owner's repository: a clone of it fetches the pull request.
    let owner_repo = repo_dir(&server, &owner.public_key(), "proj");
    assert_eq!(bare_refs(&owner_repo).get(&name), Some(&tip));
    let check = tmp.path().join("check");
    clone(&published.repo.url, &check, &[]).unwrap();
    let fetch = git_output(&check, &["fetch", "-q", "origin", &format!("{name}:{name}")]);
    assert!(fetch.status.success(), "{}", String::from_utf8_lossy(&fetch.stderr));

    // Never the other way round: a pull request pushed to the owner's repository does not appear
    // under /prs/.
    let tip2 = repo.commit("fix2.txt", "another\n");
    let ev2 = pr(&contributor, &owner.public_key(), "proj", &tip2, &[&published.repo.url]);
    held(&mut c, &ev2).await;
    repo.push_to(&published.repo.url, &[&format!("HEAD:refs/nostr/{}", ev2.id.to_hex())]).unwrap();
    assert!(stored(&mut c, ev2.id).await);
    let listed = ls_remote(&repo.url).unwrap();
    assert!(!listed.iter().any(|l| l.contains(&ev2.id.to_hex())), "{listed:?}");
}

#[tokio::test]
async fn data_first_the_event_is_served_on_arrival_and_copied_to_the_owner() {
    let Contribution { server, mut c, owner, repo, tip, ev, _tmp, .. } = contribution().await;

    let out = repo.push(&[&format!("HEAD:refs/nostr/{}", ev.id.to_hex())]).unwrap();
    assert!(out.contains("waits for its pull request event"), "{out}");
    let (ok, msg) = c.send_event(&ev).await.unwrap();
    assert!(ok && msg != PURGATORY_MESSAGE, "served at once: {ok} {msg}");
    assert!(stored(&mut c, ev.id).await);
    let name = format!("refs/nostr/{}", ev.id.to_hex());
    assert_eq!(bare_refs(&repo_dir(&server, &owner.public_key(), "proj")).get(&name), Some(&tip));
    let listing = purgatory_ids(&server).await;
    assert!(!listing.contains(&ev.id.to_hex()), "the placeholder is gone: {listing:?}");
}

#[tokio::test]
async fn a_pull_request_for_a_repository_not_announced_here_is_held_only_when_it_names_its_contributor_url() {
    let (server, tmp, mut c) = started(&["--grasp06"]).await;
    let (elsewhere, contributor, stranger) = (Keys::generate().public_key(), Keys::generate(), Keys::generate());
    let url = prs_url(&server, &contributor.public_key(), "far away");
    let repo = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("w")), url: url.clone() };
    let tip = repo.commit("a.txt", "a\n");

    // Another host, another signer's URL, another identifier: refused, and told where it would go.
    for clone_url in [
        format!("http://other.example/prs/{}/far%20away.git", npub_of(&contributor.public_key())),
        prs_url(&server, &stranger.public_key(), "far away"),
        prs_url(&server, &contributor.public_key(), "elsewhere"),
    ] {
        let (ok, msg) = c.send_event(&pr(&contributor, &elsewhere, "far away", &tip, &[&clone_url])).await.unwrap();
        assert!(!ok && msg.starts_with("blocked:") && msg.contains(&url), "{clone_url}: {ok} {msg}");
    }
    let ev = pr(&contributor, &elsewhere, "far away", &tip, &["https://github.com/x/y.git", &url]);
    held(&mut c, &ev).await;
    assert!(!stored(&mut c, ev.id).await, "held, not served");
    repo.push(&[&format!("HEAD:refs/nostr/{}", ev.id.to_hex())]).unwrap();
    assert!(stored(&mut c, ev.id).await);
    // Anyone may push it there (the signed event is the gate), at its commit only.
    let other = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("o")), url: url.clone() };
    other.commit("b.txt", "b\n");
    let refused = other.push(&[&format!("+HEAD:refs/nostr/{}", ev.id.to_hex())]).unwrap_err();
    assert!(refused.contains("the pull request event names commit"), "{refused}");
}

#[tokio::test]
async fn only_pull_request_refs_of_the_urls_own_contributor_go_in_and_refused_pushes_leave_nothing() {
    let (server, tmp, mut c) = started(&["--grasp06"]).await;
    let (owner, contributor, other) = (Keys::generate(), Keys::generate(), Keys::generate());
    publish_repo(&server, &mut c, &tmp.path().join("owner"), &owner, "proj").await;
    let url = prs_url(&server, &contributor.public_key(), "proj");
    let repo = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("w")), url: url.clone() };
    let tip = repo.commit("a.txt", "a\n");

    let refused = repo.push(&["HEAD:refs/heads/main"]).unwrap_err();
    assert!(refused.contains("only refs/nostr/<pull request event id>"), "{refused}");
    let refused = repo.push(&["HEAD:refs/nostr/not-an-event-id"]).unwrap_err();
    assert!(refused.contains("64 character"), "{refused}");
    // Someone else's pull request goes to their own URL.
    let theirs = pr(&other, &owner.public_key(), "proj", &tip, &[]);
    held(&mut c, &theirs).await;
    let refused = repo.push(&[&format!("HEAD:refs/nostr/{}", theirs.id.to_hex())]).unwrap_err();
    assert!(refused.contains("/prs/<npub of its signer>/proj.git"), "{refused}");
    // A pull request for another identifier goes to that identifier's URL.
    let elsewhere = pr(&contributor, &owner.public_key(), "other", &tip, &[&prs_url(&server, &contributor.public_key(), "other")]);
    held(&mut c, &elsewhere).await;
    let refused = repo.push(&[&format!("HEAD:refs/nostr/{}", elsewhere.id.to_hex())]).unwrap_err();
    assert!(refused.contains("names no repository `proj`"), "{refused}");
    // Every one of those pushes was refused: the repository made for them is gone.
    let dir = prs_dir(&server, &contributor.public_key(), "proj");
    eventually!("the empty contributor repository to be removed", (!dir.exists()).then_some(()));
    assert!(ls_remote(&url).unwrap().is_empty());
}

#[tokio::test]
async fn an_expired_placeholder_takes_its_ref_and_then_its_repository_with_it() {
    let server = TestServer::start_with(&["--grasp06", "--purgatory-ttl", "2s", "--git-idle-timeout", "1s"]);
    let tmp = tempfile::tempdir().unwrap();
    let contributor = Keys::generate();
    let url = prs_url(&server, &contributor.public_key(), "proj");
    let repo = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("w")), url: url.clone() };
    repo.commit("a.txt", "a\n");
    let id = random_event_id();
    repo.push(&[&format!("HEAD:refs/nostr/{id}")]).unwrap();
    let dir = prs_dir(&server, &contributor.public_key(), "proj");
    assert!(bare_refs(&dir).contains_key(&format!("refs/nostr/{id}")));
    assert!(purgatory_ids(&server).await.contains(&id));
    eventually!("the expired placeholder's repository to be removed", (!dir.exists()).then_some(()));
    assert!(!purgatory_ids(&server).await.contains(&id));
    assert!(ls_remote(&url).unwrap().is_empty(), "an empty repository again");
}

#[tokio::test]
async fn the_anonymous_push_bounds_hold_for_contributor_repositories() {
    let (server, tmp, mut c) = started(&["--grasp06", "--placeholders-per-repo", "1", "--max-pr-push-bytes", "200000", "--max-repos", "2"]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    // Contributor repositories count under --max-repos with announced ones.
    let (ok, msg) = c.send_event(&announcement(&server, &owner, "proj", &[])).await.unwrap();
    assert!(ok, "{msg}");
    let url = prs_url(&server, &contributor.public_key(), "proj");
    let repo = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("w")), url: url.clone() };
    repo.commit("a.txt", "a\n");
    repo.push(&[&format!("HEAD:refs/nostr/{}", random_event_id())]).unwrap();
    let refused = repo.push_to(&prs_url(&server, &contributor.public_key(), "third"), &[&format!("HEAD:refs/nostr/{}", random_event_id())]).unwrap_err();
    assert!(refused.contains("503"), "{refused}");
    assert!(!prs_dir(&server, &contributor.public_key(), "third").exists());
    // One placeholder per repository (--placeholders-per-repo).
    let refused = repo.push(&[&format!("HEAD:refs/nostr/{}", random_event_id())]).unwrap_err();
    assert!(refused.contains("rate-limited"), "{refused}");
    // A pack larger than --max-pr-push-bytes, whatever the ref; it never lands.
    let big = commit_random(&repo.work, "big", 1, 293);
    let dir = prs_dir(&server, &contributor.public_key(), "proj");
    let refused = repo.push(&["HEAD:refs/heads/main"]).unwrap_err();
    assert!(refused.contains("max-pr-push-bytes") || refused.contains("maximum allowed size"), "{refused}");
    assert!(!git_output(&dir, &["cat-file", "-e", &big]).status.success(), "the refused pack landed");
}

#[tokio::test]
async fn an_empty_contributor_repository_left_by_a_crash_goes_at_startup() {
    let mut server = TestServer::start_with(&["--grasp06"]);
    let tmp = tempfile::tempdir().unwrap();
    let (kept, empty) = (Keys::generate(), Keys::generate());
    let repo = Repo { work: grasp_tests::git::WorkTree::new(tmp.path().join("w")), url: prs_url(&server, &kept.public_key(), "proj") };
    repo.commit("a.txt", "a\n");
    repo.push(&[&format!("HEAD:refs/nostr/{}", random_event_id())]).unwrap();
    server.kill();
    // A repository made for a push that never came: the relay died before looking at it again.
    let left = prs_dir(&server, &empty.public_key(), "proj");
    std::fs::create_dir_all(left.parent().unwrap()).unwrap();
    grasp_tests::git::git(left.parent().unwrap(), &["init", "-q", "--bare", "proj.git"]);
    server.restart();
    assert!(!left.exists(), "the empty contributor repository is removed at startup");
    assert!(prs_dir(&server, &kept.public_key(), "proj").exists(), "one with a ref stays");
}
