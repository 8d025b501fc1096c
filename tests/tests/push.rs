//! Push authorisation through the git hooks and release of held events (docs/protocol.md#push-authorisation),
//! end to end: real relay, real `git push` over HTTP (or straight to the bare repository on disk
//! where the relay must be down), a WebSocket Nostr client.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use grasp_tests::git::WorkTree;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;

fn refs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(n, o)| (n.to_string(), o.to_string())).collect()
}

/// `git push` output says the relay released `ev`.
fn says_released(out: &str, ev: &Event) -> bool {
    out.contains(&format!("grasp: released {}", ev.id.to_hex()))
}

fn short(oid: &str) -> &str {
    &oid[..7]
}

/// `owner`'s repository `identifier`, announced (held), with one commit in a work tree under
/// `dir` and a held state naming it on `main`: (announcement, work tree, its tip, state).
async fn ready_to_push(server: &TestServer, c: &mut grasp_tests::NostrClient, owner: &Keys, identifier: &str, dir: &std::path::Path) -> (Event, Repo, String, Event) {
    let ann = announcement(server, owner, identifier, &[]);
    held(c, &ann).await;
    let repo = Repo::new(&dir.join("w"), server, &owner.public_key(), identifier);
    let tip = repo.commit("a.txt", "one");
    let st = state(owner, identifier, &[("refs/heads/main", &tip)], Some("main"));
    held(c, &st).await;
    (ann, repo, tip, st)
}

#[tokio::test]
async fn push_without_any_state_is_rejected_and_changes_nothing() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "nostate", &[]);
    held(&mut c, &ann).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "nostate");
    repo.commit("a", "1");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("remote: grasp: push rejected"), "{err}");
    assert!(err.contains("no repository state event (kind 30618)") && err.contains("publish one"), "{err}");
    assert!(bare_refs(&repo_dir(&server, &owner.public_key(), "nostate")).is_empty());
    assert!(!stored(&mut c, ann.id).await, "a rejected push must not promote the announcement");
}

#[tokio::test]
async fn state_then_push_releases_state_and_announcement() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let (ann, repo, tip, st) = ready_to_push(&server, &mut c, &owner, "hello", tmp.path()).await;
    assert!(!stored(&mut c, ann.id).await, "announcement must not be served before git data");
    assert!(!stored(&mut c, st.id).await);

    let out = repo.push(&["main"]).unwrap();
    // Item 5: the hook prints what was released.
    assert!(out.contains(&format!("grasp: push matches repository state {}", &st.id.to_hex()[..12])), "{out}");
    assert!(says_released(&out, &st) && says_released(&out, &ann), "{out}");
    assert!(stored(&mut c, st.id).await);
    assert!(stored(&mut c, ann.id).await);
    let dir = repo_dir(&server, &owner.public_key(), "hello");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &tip)]));
    assert_eq!(bare_head(&dir), "refs/heads/main");

    // Anyone can clone it now.
    clone(&repo.url, &tmp.path().join("clone"), &[]).unwrap();
}

/// Under the relay's own listener a push runs `pre-receive` alone: the relay does what
/// `post-receive` would itself, before git's answer ends, and puts the same lines in it
/// (docs/architecture.md, "A push under the relay's listener").
#[tokio::test]
async fn a_push_to_the_listener_is_released_without_a_post_receive_process() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    // The installed post-receive hook, replaced by one that leaves a mark if git starts it (the
    // installed one is a hard link to the binary: removed first, never written through).
    let mark = tmp.path().join("post-receive-ran");
    let hook = server.data_dir().join("hooks").join("post-receive");
    std::fs::remove_file(&hook).unwrap();
    std::fs::write(&hook, format!("#!/bin/sh\ntouch '{}'\n", mark.display())).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut c = connect(&server).await;
    let owner = Keys::generate();
    let (ann, repo, tip, st) = ready_to_push(&server, &mut c, &owner, "listener", tmp.path()).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &st) && says_released(&out, &ann), "{out}");
    assert!(out.contains(&format!("remote: grasp: released {}", st.id.to_hex())), "shown as git shows a hook's lines: {out}");
    // Released before `git push` returned, as with the hook.
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
    assert!(!mark.exists(), "no post-receive process ran");
    // An update after it: released the same way; a push git refuses releases nothing.
    let next = repo.commit("b.txt", "two");
    let st2 = state_at(&owner, "listener", &[("refs/heads/main", &next)], Some("main"), now() + 1);
    held(&mut c, &st2).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &st2), "{out}");
    let stray = repo.commit("c.txt", "three");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("grasp: push rejected") && !err.contains("grasp: released"), "{err}");
    assert_eq!(bare_refs(&repo_dir(&server, &owner.public_key(), "listener")), refs(&[("refs/heads/main", &next)]));
    assert_ne!(stray, tip);
    assert!(!mark.exists(), "no post-receive process ran");
    // Pushed straight into the repository (git's own hooks, no listener), the mark shows: a
    // git-first placeholder, which the relay accepts from anyone.
    let placeholder = format!("HEAD:refs/nostr/{}", "ab".repeat(32));
    push_on_disk(&repo.work, &repo_dir(&server, &owner.public_key(), "listener"), None, &[&placeholder]).unwrap();
    assert!(mark.exists(), "the marking hook works: the test can fail");
}

/// The conformance suite's fixtures (and people) clone the new, empty repository, commit and run
/// `git branch main` themselves: the clone must not come with a `main` branch of its own, so the
/// repository's `HEAD` is left where `git init --bare` puts it (docs/protocol.md#release-and-alignment).
#[tokio::test]
async fn an_empty_repository_cloned_leaves_the_first_branch_to_the_client() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "fresh", &[]);
    held(&mut c, &ann).await;
    let url = repo_url(&server, &owner.public_key(), "fresh");
    let work = tmp.path().join("clone");
    clone(&url, &work, &[]).unwrap();
    let empty_clone_head = grasp_tests::git::git(&work, &["symbolic-ref", "HEAD"]);
    let plain = tmp.path().join("plain");
    grasp_tests::git::git(tmp.path(), &["init", "-q", plain.to_str().unwrap()]);
    assert_eq!(empty_clone_head, grasp_tests::git::git(&plain, &["symbolic-ref", "HEAD"]), "the clone's first branch is git's default, not one the server chose");

    let tree = WorkTree { dir: work.clone() };
    let tip = tree.commit("a.txt", "one");
    if empty_clone_head != "refs/heads/main" {
        grasp_tests::git::git(&work, &["branch", "main"]);
    }
    let st = state(&owner, "fresh", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    let out = grasp_tests::git::git_output(&work, &["push", "origin", "main"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
    assert_eq!(bare_head(&repo_dir(&server, &owner.public_key(), "fresh")), "refs/heads/main");
}

#[tokio::test]
async fn wrong_commit_is_rejected_with_a_readable_reason() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "r").await;
    let first = repo.commit("a", "1");
    let second = repo.commit("b", "2");
    let st = state(&owner, "r", &[("refs/heads/main", &first)], Some("main"));
    held(&mut c, &st).await;
    let err = repo.push(&["main"]).unwrap_err();
    let line = format!("remote: grasp: refs/heads/main: pushing {}, state expects {}", short(&second), short(&first));
    assert!(err.contains(&line), "{err}");
    assert!(err.contains(&st.id.to_hex()[..7]), "the reason names the state event: {err}");
    assert!(bare_refs(&repo_dir(&server, &owner.public_key(), "r")).is_empty());
    assert!(!stored(&mut c, st.id).await);
}

#[tokio::test]
async fn a_listed_maintainers_state_authorises_once_they_accept() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, maint) = (Keys::generate(), Keys::generate());
    let ann = announcement(&server, &owner, "m", &[maint.public_key()]);
    held(&mut c, &ann).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "m");
    let tip = repo.commit("a", "1");
    // Without an announcement of its own the listed key is invited: its state waits and moves
    // nothing (docs/protocol.md#maintainer-authority).
    let st = state(&maint, "m", &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok && msg.contains("ngit repo accept"), "{msg}");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("is invited as a maintainer") && err.contains("ngit repo accept"), "{err}");
    // It accepts: its own announcement lists the owner back.
    held(&mut c, &announcement(&server, &maint, "m", &[owner.public_key()])).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &st) && says_released(&out, &ann), "{out}");
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
    assert_eq!(bare_refs(&repo_dir(&server, &owner.public_key(), "m")), refs(&[("refs/heads/main", &tip)]));
}

#[tokio::test]
async fn recursive_maintainer_state_authorises() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, a, b) = (Keys::generate(), Keys::generate(), Keys::generate());
    // owner lists A, A lists the owner back and B, B lists A back: B, confirmed through A,
    // authorises a push to the owner's repository.
    let ann = announcement(&server, &owner, "rec", &[a.public_key()]);
    let ann_a = announcement(&server, &a, "rec", &[owner.public_key(), b.public_key()]);
    held(&mut c, &ann).await;
    held(&mut c, &ann_a).await;
    held(&mut c, &announcement(&server, &b, "rec", &[a.public_key()])).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "rec");
    let tip = repo.commit("a", "1");
    let st = state(&b, "rec", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &st) && says_released(&out, &ann), "{out}");
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
    let want = refs(&[("refs/heads/main", &tip)]);
    assert_eq!(bare_refs(&repo_dir(&server, &owner.public_key(), "rec")), want);
    // B's state is authoritative for A's repository too: it gets the data and A's announcement
    // is promoted, after the push's answer (the push waits only for its own repository), through
    // the family's object pool (docs/architecture.md, "Object pools").
    assert!(!says_released(&out, &ann_a), "the push waited for a co-maintainer's repository: {out}");
    let dir_a = repo_dir(&server, &a.public_key(), "rec");
    grasp_tests::eventually!("A's repository to match B's state", (bare_refs(&dir_a) == want).then_some(()));
    grasp_tests::eventually!("A's announcement to be promoted", stored(&mut c, ann_a.id).await.then_some(()));
    let alternates = std::fs::read_to_string(dir_a.join("objects/info/alternates")).unwrap();
    assert_eq!(alternates.trim(), "../../../.pools/rec.git/objects", "A's repository borrows from the pool");
}

#[tokio::test]
async fn strangers_state_cannot_authorise() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, stranger) = (Keys::generate(), Keys::generate());
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "s").await;
    let tip = repo.commit("a", "1");
    // Without an announcement of their own the stranger's state is refused outright...
    let st = state(&stranger, "s", &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    // ... and with one, it is held for the stranger's own repository only.
    held(&mut c, &announcement(&server, &stranger, "s", &[])).await;
    let st = state(&stranger, "s", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("no repository state event (kind 30618) from a maintainer"), "{err}");
    assert!(bare_refs(&repo_dir(&server, &owner.public_key(), "s")).is_empty());
    assert!(!stored(&mut c, st.id).await);
}

#[tokio::test]
async fn state_first_then_push_and_pushes_against_the_latest_stored_state() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "two").await;
    let dir = repo_dir(&server, &owner.public_key(), "two");
    let c1 = repo.commit("a", "1");
    let s1 = state_at(&owner, "two", &[("refs/heads/main", &c1)], Some("main"), now() - 10);
    held(&mut c, &s1).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &s1), "{out}");

    // A new commit without a new state: checked against the latest stored state.
    let c2 = repo.commit("b", "2");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains(&s1.id.to_hex()[..7]), "names the stored state: {err}");
    assert!(err.contains(&format!("pushing {}, state expects {}", short(&c2), short(&c1))), "{err}");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c1)]));

    // The repository lost its branch (changed behind the relay's back, hooks bypassed); a push
    // that restores exactly the stored state is authorised by it: no purgatory state exists.
    grasp_tests::git::git(&dir, &["update-ref", "-d", "refs/heads/main"]);
    let out = repo.push(&[&format!("{c1}:refs/heads/main")]).unwrap();
    assert!(out.contains(&format!("grasp: push matches repository state {}", &s1.id.to_hex()[..12])), "{out}");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c1)]));

    // State first, then push: the new state is released by the push.
    let s2 = state(&owner, "two", &[("refs/heads/main", &c2)], Some("main"));
    held(&mut c, &s2).await;
    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &s2), "{out}");
    assert!(stored(&mut c, s2.id).await);
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c2)]));

    // Sent again once stored (its data present): NIP-01's duplicate answer, `true`.
    let (ok, message) = c.send_event(&s2).await.unwrap();
    assert!(ok && message.starts_with("duplicate:"), "{ok} {message}");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c2)]));
}

#[tokio::test]
async fn branch_deletion_is_allowed_only_when_the_result_matches() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "del").await;
    let dir = repo_dir(&server, &owner.public_key(), "del");
    let c1 = repo.commit("a", "1");
    let s1 = state_at(&owner, "del", &[("refs/heads/main", &c1), ("refs/heads/dev", &c1)], Some("main"), now() - 10);
    held(&mut c, &s1).await;
    repo.push(&["main", "main:dev"]).unwrap();
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c1), ("refs/heads/dev", &c1)]));

    // The stored state still declares dev: deleting it alone is refused.
    let err = repo.push(&[":dev"]).unwrap_err();
    assert!(err.contains(&format!("refs/heads/dev: state expects {}", short(&c1))), "{err}");
    assert_eq!(bare_refs(&dir).len(), 2);

    // A new state without dev: pushing main alone leaves dev behind and is refused...
    let c2 = repo.commit("b", "2");
    let s2 = state(&owner, "del", &[("refs/heads/main", &c2)], Some("main"));
    held(&mut c, &s2).await;
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("refs/heads/dev: repository has") && err.contains("delete it in the same push"), "{err}");
    // ... pushing main and deleting dev matches it.
    let out = repo.push(&["main", ":dev"]).unwrap();
    assert!(says_released(&out, &s2), "{out}");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c2)]));
}

#[tokio::test]
async fn refs_outside_the_served_namespaces_and_invalid_nostr_ids_are_rejected() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "ns").await;
    repo.commit("a", "1");
    let err = repo.push(&["main:refs/nostr/abc"]).unwrap_err();
    assert!(err.contains("refs/nostr/abc: refs/nostr/ refs must be named by a 64 character lowercase hex event id"), "{err}");
    let upper = random_event_id().to_uppercase();
    let err = repo.push(&[&format!("main:refs/nostr/{upper}")]).unwrap_err();
    assert!(err.contains("64 character lowercase hex event id"), "{err}");
    // A stored event that is no pull request cannot name a refs/nostr/ ref.
    let bug = issue(&owner, &owner.public_key(), "ns");
    served(&mut c, &bug).await;
    let err = repo.push(&[&format!("main:refs/nostr/{}", bug.id.to_hex())]).unwrap_err();
    assert!(err.contains(&format!("event {} is a kind 1621 event, not a pull request", &bug.id.to_hex()[..12])), "{err}");
    let err = repo.push(&["main:refs/notes/x"]).unwrap_err();
    assert!(err.contains("refs/notes/x: this server only accepts pushes to refs/heads/*, refs/tags/* and refs/nostr/<event-id>"), "{err}");
    assert!(bare_refs(&repo_dir(&server, &owner.public_key(), "ns")).is_empty());
}

#[tokio::test]
async fn unknown_nostr_id_is_a_placeholder_until_its_event_comes() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "pr").await;
    let dir = repo_dir(&server, &owner.public_key(), "pr");
    let c1 = repo.commit("a", "1");

    // Git first, unknown id: accepted, recorded as a placeholder the operator can see.
    let id = random_event_id();
    let out = repo.push(&[&format!("main:refs/nostr/{id}")]).unwrap();
    assert!(out.contains(&format!("refs/nostr/{} accepted; it waits for its pull request event", &id[..12])), "{out}");
    assert_eq!(bare_refs(&dir).get(&format!("refs/nostr/{id}")), Some(&c1));
    let listing = purgatory_listing(&server).await.to_string();
    assert!(listing.contains(&id), "placeholder listed in GET /v1/purgatory: {listing}");

    // Git first, then the event with the same commit: served at once.
    let pr = pull_request_at(&contributor, &owner.public_key(), "pr", &c1, now());
    let out = repo.push(&[&format!("main:refs/nostr/{}", pr.id.to_hex())]).unwrap();
    assert!(out.contains("waits for its pull request event"), "{out}");
    served(&mut c, &pr).await;
    let listing = purgatory_listing(&server).await.to_string();
    assert!(!listing.contains(&pr.id.to_hex()), "placeholder consumed: {listing}");
}

#[tokio::test]
async fn placeholders_are_capped_and_keep_their_commit() {
    let (server, tmp, mut c) = started(&["--placeholders-per-repo", "1"]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "cap").await;
    let dir = repo_dir(&server, &owner.public_key(), "cap");
    let c1 = repo.commit("a", "1");
    let c2 = repo.commit("b", "2");
    let (first, second) = (random_event_id(), random_event_id());
    repo.push(&[&format!("{c1}:refs/nostr/{first}")]).unwrap();
    // Another commit for a waiting id is refused; the first push's commit stays.
    let err = repo.push(&[&format!("+{c2}:refs/nostr/{first}")]).unwrap_err();
    assert!(err.contains(&format!("refs/nostr/{first}: invalid: refs/nostr/<event-id> is already waiting with commit {c1}")), "{err}");
    // The repository's placeholder budget is spent: refused before any data lands.
    let err = repo.push(&[&format!("{c2}:refs/nostr/{second}")]).unwrap_err();
    assert!(err.contains(&format!("refs/nostr/{second}: rate-limited: ")) && err.contains("already has 1 refs/nostr/* pushes waiting for their events"), "{err}");
    assert_eq!(bare_refs(&dir), refs(&[(&format!("refs/nostr/{first}"), &c1)]));
    let listing = purgatory_listing(&server).await.to_string();
    assert!(listing.contains(&first) && !listing.contains(&second), "{listing}");
}

#[tokio::test]
async fn git_first_then_event_with_another_commit_deletes_the_ref_and_the_event_waits() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "prw").await;
    let dir = repo_dir(&server, &owner.public_key(), "prw");
    let c1 = repo.commit("a", "1");
    let c2 = repo.commit("b", "2");
    let pr = pull_request_at(&contributor, &owner.public_key(), "prw", &c2, now());
    let name = format!("refs/nostr/{}", pr.id.to_hex());
    repo.push(&[&format!("{c1}:{name}")]).unwrap();
    assert_eq!(bare_refs(&dir).get(&name), Some(&c1));

    // The event names c2: the wrong ref goes, the event waits in the purgatory (not served).
    held(&mut c, &pr).await;
    assert_eq!(bare_refs(&dir).get(&name), None, "the wrong commit's ref is deleted");
    assert!(!stored(&mut c, pr.id).await);
    let listing = purgatory_listing(&server).await.to_string();
    assert!(listing.contains(&pr.id.to_hex()), "{listing}");

    // Pushing the wrong commit again is now refused; the right one releases the event.
    let err = repo.push(&[&format!("{c1}:{name}")]).unwrap_err();
    assert!(err.contains(&format!("pushing {}, but the pull request event names commit {}", short(&c1), short(&c2))), "{err}");
    let out = repo.push(&[&format!("{c2}:{name}")]).unwrap();
    assert!(says_released(&out, &pr), "{out}");
    assert!(stored(&mut c, pr.id).await);
    assert_eq!(bare_refs(&dir).get(&name), Some(&c2));
}

#[tokio::test]
async fn event_first_pull_request_released_by_the_right_commit_only() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "pre").await;
    let dir = repo_dir(&server, &owner.public_key(), "pre");
    let c1 = repo.commit("a", "1");
    let c2 = repo.commit("b", "2");
    let pr = pull_request_at(&contributor, &owner.public_key(), "pre", &c1, now());
    held(&mut c, &pr).await;
    let name = format!("refs/nostr/{}", pr.id.to_hex());

    let err = repo.push(&[&format!("{c2}:{name}")]).unwrap_err();
    assert!(err.contains(&format!("{name}: pushing {}, but the pull request event names commit {}", short(&c2), short(&c1))), "{err}");
    assert!(bare_refs(&dir).is_empty());
    assert!(!stored(&mut c, pr.id).await);

    let out = repo.push(&[&format!("{c1}:{name}")]).unwrap();
    assert!(says_released(&out, &pr), "{out}");
    assert!(stored(&mut c, pr.id).await);
    assert_eq!(bare_refs(&dir), refs(&[(&name, &c1)]));
}

#[tokio::test]
async fn head_follows_the_state() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let repo = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "head").await;
    let dir = repo_dir(&server, &owner.public_key(), "head");
    let c1 = repo.commit("a", "1");
    let c2 = repo.commit("b", "2");
    let st = state(&owner, "head", &[("refs/heads/main", &c1), ("refs/heads/dev", &c2)], Some("dev"));
    held(&mut c, &st).await;
    repo.push(&[&format!("{c1}:refs/heads/main"), &format!("{c2}:refs/heads/dev")]).unwrap();
    assert_eq!(bare_head(&dir), "refs/heads/dev");
    let cl = tmp.path().join("clone");
    clone(&repo.url, &cl, &[]).unwrap();
    assert_eq!(grasp_tests::git::git(&cl, &["rev-parse", "HEAD"]), c2, "a clone checks out the state's HEAD");

    // A newer state that only moves HEAD: its objects are here, so it is served and HEAD moves.
    let st2 = state_at(&owner, "head", &[("refs/heads/main", &c1), ("refs/heads/dev", &c2)], Some("main"), now() + 1);
    served(&mut c, &st2).await;
    assert_eq!(bare_head(&dir), "refs/heads/main");
    // A state without HEAD and without main: HEAD goes to a branch that exists.
    let st3 = state_at(&owner, "head", &[("refs/heads/dev", &c2)], None, now() + 2);
    served(&mut c, &st3).await;
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/dev", &c2)]));
    assert_eq!(bare_head(&dir), "refs/heads/dev");
}

#[tokio::test]
async fn second_owners_repository_receives_the_objects() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner1, owner2) = (Keys::generate(), Keys::generate());
    // Each lists the other: owner1 is a confirmed maintainer of owner2's repository.
    let ann1 = announcement(&server, &owner1, "shared", &[owner2.public_key()]);
    let ann2 = announcement(&server, &owner2, "shared", &[owner1.public_key()]);
    held(&mut c, &ann1).await;
    held(&mut c, &ann2).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner1.public_key(), "shared");
    let c1 = repo.commit("a", "1");
    // An annotated tag: the state names the tag object, which must be copied too.
    grasp_tests::git::git(&repo.work.dir, &["tag", "-a", "v1", "-m", "version 1"]);
    let tag = repo.rev("refs/tags/v1");
    assert_ne!(tag, c1);
    let st = state(&owner1, "shared", &[("refs/heads/main", &c1), ("refs/tags/v1", &tag)], Some("main"));
    held(&mut c, &st).await;
    let out = repo.push(&["main", "refs/tags/v1"]).unwrap();
    assert!(says_released(&out, &st) && says_released(&out, &ann1), "{out}");
    // The copy into owner2's repository (and the promotion it brings) follows in the background:
    // the push does not wait for it (docs/security.md).
    let want = refs(&[("refs/heads/main", &c1), ("refs/tags/v1", &tag)]);
    let dir2 = repo_dir(&server, &owner2.public_key(), "shared");
    grasp_tests::eventually!("owner2's repository to receive the objects", (bare_refs(&dir2) == want).then_some(()));
    grasp_tests::eventually!("owner2's announcement to be released", stored(&mut c, ann2.id).await.then_some(()));
    assert_eq!(bare_refs(&dir2), want);
    assert_eq!(bare_head(&dir2), "refs/heads/main");
    assert!(stored(&mut c, ann2.id).await, "owner2's announcement is promoted");
    let url2 = repo_url(&server, &owner2.public_key(), "shared");
    let cl = tmp.path().join("clone2");
    clone(&url2, &cl, &[]).unwrap();
    assert_eq!(grasp_tests::git::git(&cl, &["rev-parse", "HEAD"]), c1);
}

#[tokio::test]
async fn relay_stopped_push_is_rejected_and_the_repository_unchanged() {
    let (mut server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    held(&mut c, &announcement(&server, &owner, "down", &[])).await;
    let work = WorkTree::new(tmp.path().join("w"));
    let c1 = work.commit("a", "1");
    held(&mut c, &state(&owner, "down", &[("refs/heads/main", &c1)], Some("main"))).await;
    drop(c);
    let status = server.stop();
    assert!(status.success(), "{status}");

    // git http is served by the relay itself, so push straight into the bare repository: its
    // core.hooksPath still runs the GRASP hooks, and pre-receive must fail closed.
    let dir = repo_dir(&server, &owner.public_key(), "down");
    let started = Instant::now();
    let err = push_on_disk(&work, &dir, None, &["main"]).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15), "rejected within a bounded time");
    assert!(err.contains("could not get a verdict from the GRASP relay"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(bare_refs(&dir).is_empty());
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success();
    assert!(ok, "kill -{sig} {pid}");
}

#[tokio::test]
async fn pre_receive_fails_closed_on_a_hung_relay_or_a_garbage_answer() {
    let (mut server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    held(&mut c, &announcement(&server, &owner, "hung", &[])).await;
    let work = WorkTree::new(tmp.path().join("w"));
    let c1 = work.commit("a", "1");
    held(&mut c, &state(&owner, "hung", &[("refs/heads/main", &c1)], Some("main"))).await;
    drop(c);
    let dir = repo_dir(&server, &owner.public_key(), "hung");

    // A relay that accepts connections but never answers: rejected after the hook's deadline.
    let pid = server.pid().unwrap();
    signal(pid, "STOP");
    let started = Instant::now();
    let res = push_on_disk(&work, &dir, None, &["main"]);
    let took = started.elapsed();
    signal(pid, "CONT");
    let err = res.unwrap_err();
    assert!(took < Duration::from_secs(20), "bounded time: {took:?}");
    assert!(err.contains("could not get a verdict from the GRASP relay"), "{err}");
    assert!(bare_refs(&dir).is_empty());

    // Something that answers garbage where the relay should be: rejected too.
    server.stop();
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(server.data_dir().join(grasp_state::contract::layout::API_ADDR_FILE), fake.local_addr().unwrap().to_string()).unwrap();
    let answer = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut conn, _) = fake.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot json!");
    });
    let err = push_on_disk(&work, &dir, None, &["main"]).unwrap_err();
    answer.join().unwrap();
    assert!(err.contains("the relay answered something this hook does not understand"), "{err}");
    assert!(bare_refs(&dir).is_empty());
}

#[tokio::test]
async fn unclaimed_placeholder_ref_is_removed_when_it_expires() {
    let (server, tmp, mut c) = started(&["--purgatory-ttl", "3"]).await;
    let owner = Keys::generate();
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "ph");
    let dir = repo_dir(&server, &owner.public_key(), "ph");
    let c1 = repo.commit("a", "1");
    // Promote the announcement at once (before its short TTL), so only the placeholder expires.
    held(&mut c, &announcement(&server, &owner, "ph", &[])).await;
    held(&mut c, &state(&owner, "ph", &[("refs/heads/main", &c1)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    let id = random_event_id();
    let name = format!("refs/nostr/{id}");
    repo.push(&[&format!("main:{name}")]).unwrap();
    assert!(bare_refs(&dir).contains_key(&name));
    eventually!("the unclaimed placeholder's ref to go", (!bare_refs(&dir).contains_key(&name)).then_some(()));
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c1)]), "the served refs stay");
    assert!(!purgatory_listing(&server).await.to_string().contains(&id));
}

#[tokio::test]
async fn relay_killed_between_the_hooks_releases_after_restart() {
    let (mut server, tmp, mut c) = started(&["--checkpoint-interval", "1"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "crash", &[]);
    held(&mut c, &ann).await;
    let work = WorkTree::new(tmp.path().join("w"));
    let c1 = work.commit("a", "1");
    let st = state(&owner, "crash", &[("refs/heads/main", &c1)], Some("main"));
    held(&mut c, &st).await;
    drop(c);
    // The held state must be in a checkpoint for a SIGKILLed relay to remember it.
    let checkpoint = server.data_dir().join(grasp_state::contract::layout::CHECKPOINT_FILE);
    let id = st.id.to_hex();
    eventually!("the held state in a purgatory checkpoint", std::fs::read_to_string(&checkpoint).ok().filter(|t| t.contains(&id)));

    // Simulated crash between the hooks: run receive-pack with a hooks directory that holds
    // only the relay's real pre-receive hook (the relay is up and authorises the push), so the
    // refs land but post-receive never tells the relay; then SIGKILL the relay.
    let dir = repo_dir(&server, &owner.public_key(), "crash");
    let only_pre = tmp.path().join("only-pre-receive");
    std::fs::create_dir(&only_pre).unwrap();
    // The hook and its configuration beside it (the data directory, the push limits).
    for file in ["pre-receive", grasp_state::contract::layout::HOOK_CONFIG_FILE] {
        std::fs::copy(server.data_dir().join("hooks").join(file), only_pre.join(file)).unwrap();
    }
    let rp = format!("git -c core.hooksPath='{}' receive-pack", only_pre.display());
    let out = push_on_disk(&work, &dir, Some(&rp), &["main"]).unwrap();
    assert!(out.contains("grasp: push matches repository state"), "{out}");
    assert!(!out.contains("released"), "{out}");
    assert_eq!(bare_refs(&dir), refs(&[("refs/heads/main", &c1)]));
    server.kill();

    // At startup the relay reconciles the purgatory with the repositories.
    server.restart();
    let mut c = connect(&server).await;
    assert!(stored(&mut c, st.id).await, "state released at startup\n{}", server.logs());
    assert!(stored(&mut c, ann.id).await, "announcement promoted at startup");
    assert_eq!(bare_head(&dir), "refs/heads/main");
}

#[tokio::test]
async fn websocket_subscriber_sees_released_events_live() {
    let (server, tmp, mut c) = started(&[]).await;
    let mut sub = connect(&server).await;
    let owner = Keys::generate();
    let (ann, repo, _, st) = ready_to_push(&server, &mut c, &owner, "live", tmp.path()).await;
    let filter = Filter::new().author(owner.public_key()).kinds([Kind::Custom(30617), Kind::Custom(30618)]);
    let (sid, initial) = sub.subscribe(vec![filter]).await.unwrap();
    assert!(initial.is_empty(), "held events are not served: {initial:?}");
    repo.push(&["main"]).unwrap();
    let mut seen = vec![sub.next_event(&sid).await.unwrap().id, sub.next_event(&sid).await.unwrap().id];
    seen.sort();
    let mut want = vec![ann.id, st.id];
    want.sort();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn concurrent_pushes_to_one_repository_end_consistent() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, maint) = (Keys::generate(), Keys::generate());
    for round in 0..3 {
        let id = format!("race{round}");
        held(&mut c, &announcement(&server, &owner, &id, &[maint.public_key()])).await;
        // Two histories, two states from two maintainers, racing to the same repository.
        let r1 = Repo::new(&tmp.path().join(format!("{id}-1")), &server, &owner.public_key(), &id);
        let r2 = Repo::new(&tmp.path().join(format!("{id}-2")), &server, &owner.public_key(), &id);
        let a = r1.commit("a", "one");
        let b = r2.commit("b", "two");
        let s1 = refs(&[("refs/heads/main", &a), ("refs/heads/feature", &a)]);
        let s2 = refs(&[("refs/heads/main", &b), ("refs/heads/other", &b)]);
        held(&mut c, &state(&owner, &id, &[("refs/heads/main", &a), ("refs/heads/feature", &a)], Some("main"))).await;
        held(&mut c, &state(&maint, &id, &[("refs/heads/main", &b), ("refs/heads/other", &b)], Some("main"))).await;
        let t1 = std::thread::spawn(move || r1.push(&["+main", "main:feature"]).is_ok());
        let t2 = std::thread::spawn(move || r2.push(&["+main", "main:other"]).is_ok());
        let (ok1, ok2) = (t1.join().unwrap(), t2.join().unwrap());
        let got = bare_refs(&repo_dir(&server, &owner.public_key(), &id));
        assert!(ok1 != ok2, "exactly one push wins (round {round}): {ok1} {ok2}");
        assert_eq!(got, if ok1 { s1 } else { s2 }, "round {round}: never a mix");
    }
}

#[tokio::test]
async fn hook_api_is_private() {
    let server = TestServer::start();
    let (addr, token) = hook_api(&server);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(server.data_dir().join(grasp_state::contract::layout::API_TOKEN_FILE)).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(addr.starts_with("127.") || addr.starts_with("[::1]"), "{addr}");
    let http = reqwest::Client::new();
    let no_token = http.get(format!("http://{addr}/v1/purgatory")).send().await.unwrap();
    assert_eq!(no_token.status(), reqwest::StatusCode::UNAUTHORIZED);
    let wrong = http.get(format!("http://{addr}/v1/purgatory")).header("x-grasp-token", "0".repeat(token.len())).send().await.unwrap();
    assert_eq!(wrong.status(), reqwest::StatusCode::UNAUTHORIZED);
    // The public port does not route to it, even with the token.
    let public = http.get(format!("{}/v1/purgatory", server.http_url())).header("x-grasp-token", &token).send().await.unwrap();
    assert_eq!(public.status(), reqwest::StatusCode::NOT_FOUND);
}

/// git starts the hooks without a shell: `<data>/hooks/pre-receive` and `post-receive` are the
/// hook binaries themselves, configured by `grasp-hooks.conf` beside them. Hook scripts left by
/// an older version (here ones that would refuse every push) are replaced at startup.
#[tokio::test]
async fn hooks_are_binaries_and_old_script_hooks_are_replaced_at_startup() {
    use std::os::unix::fs::PermissionsExt;
    let mut server = TestServer::start();
    let hooks = server.data_dir().join("hooks");
    server.stop();
    for hook in ["pre-receive", "post-receive"] {
        let path = hooks.join(hook);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "#!/bin/sh\necho 'grasp: an old hook script ran' >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::remove_file(hooks.join(grasp_state::contract::layout::HOOK_CONFIG_FILE)).unwrap();
    server.restart();
    for hook in ["pre-receive", "post-receive"] {
        let bytes = std::fs::read(hooks.join(hook)).unwrap();
        assert!(bytes.starts_with(b"\x7fELF"), "{hook} is not an executable binary: {:?}", String::from_utf8_lossy(&bytes[..bytes.len().min(80)]));
    }
    let config = std::fs::read(hooks.join(grasp_state::contract::layout::HOOK_CONFIG_FILE)).unwrap();
    let config = grasp_state::contract::hook_config::HookConfig::parse(&config).unwrap();
    assert_eq!(std::fs::canonicalize(&config.data_dir).unwrap(), std::fs::canonicalize(server.data_dir()).unwrap());

    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "direct", &[]);
    held(&mut c, &ann).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "direct");
    let tip = repo.commit("a", "1");
    let st = state(&owner, "direct", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    let out = repo.push(&["main"]).unwrap_or_else(|e| panic!("push refused: {e}"));
    assert!(!out.contains("old hook script"), "{out}");
    assert!(out.contains("grasp: push matches repository state"), "pre-receive answered: {out}");
    assert!(says_released(&out, &st), "post-receive answered: {out}");
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
}

/// A plain git request runs `git http-backend` with no grasp-cgi before it (one process start
/// less per request, docs/architecture.md#git-over-http). grasp-cgi is here a script that
/// records every request it is given, then runs the real one: a push and a clone give it
/// nothing, the repository's page goes to it, and so does a push whose repository's lock is
/// taken (grasp-cgi waits for the lock within `--push-lock-wait`, the relay never waits).
#[tokio::test]
async fn git_requests_run_the_backend_without_grasp_cgi() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("cgi.log");
    // The relay takes its hooks from beside grasp-cgi.
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for hook in ["grasp-pre-receive", "grasp-post-receive"] {
        std::os::unix::fs::symlink(grasp_tests::binary_path(hook), bin.join(hook)).unwrap();
    }
    let script = bin.join("recording-grasp-cgi");
    let body = format!(
        "#!/bin/sh\necho \"$REQUEST_METHOD $PATH_INFO?$QUERY_STRING\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        grasp_tests::binary_path("grasp-cgi").display()
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let recorded = || std::fs::read_to_string(&log).unwrap_or_default();
    let (server, mut c) = connected(&["--cgi-path", script.to_str().unwrap()]).await;
    let owner = Keys::generate();
    let (ann, repo, _, _) = ready_to_push(&server, &mut c, &owner, "direct", tmp.path()).await;

    let out = repo.push(&["main"]).unwrap();
    assert!(says_released(&out, &ann), "{out}");
    clone(&repo.url, &tmp.path().join("clone"), &[]).unwrap();
    assert_eq!(recorded(), "", "git requests went through grasp-cgi");

    let page = reqwest::get(&repo.url).await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    let path = format!("/{}/direct.git", grasp_state::names::identifier::npub_of(&owner.public_key()));
    assert!(recorded().contains(&format!("GET {path}?")), "the page did not go to grasp-cgi: {}", recorded());

    // Another push's lock: the relay leaves the advertisement to grasp-cgi, which waits for it.
    let lock = grasp_state::contract::push_lock::PushLock::take_within(&repo_dir(&server, &owner.public_key(), "direct"), Duration::ZERO).unwrap();
    let pushing = std::thread::spawn(move || repo.push(&["main"]));
    let advertisement = format!("GET {path}/info/refs?service=git-receive-pack");
    eventually!("the push's advertisement to reach grasp-cgi", recorded().contains(&advertisement).then_some(()));
    drop(lock);
    let out = pushing.join().unwrap().unwrap();
    assert!(out.contains("[up to date]"), "{out}");
}
