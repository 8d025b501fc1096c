//! The GRASP acceptance policy end to end (docs/protocol.md#acceptance): which events the real relay stores, holds in
//! the purgatory or refuses, what it creates on disk, and the HTTP side a client sees first
//! (NIP-11, CORS, cloning). Real binary, real `git`, a WebSocket Nostr client.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use grasp_relay::grasp::acceptance::PURGATORY_MESSAGE;
use grasp_state::names::identifier::npub_of;
use grasp_tests::git::git_output;
use grasp_tests::grasp::*;
use grasp_tests::TestServer;
use nostr::prelude::*;
use serde_json::Value;

/// `30617:<owner hex>:<d>`
fn coord(owner: &PublicKey, d: &str) -> String {
    format!("30617:{}:{d}", owner.to_hex())
}


/// An issue (1621) about `owner`'s repository `d`; `text` keeps ids apart within a second.
fn issue_about(keys: &Keys, owner: &PublicKey, d: &str, text: &str) -> Event {
    signed_event(keys, 1621, now(), text, &[&["a", &coord(owner, d)], &["subject", text]])
}

/// Accepted and stored (served): `OK true ""`.
fn assert_stored_ok((ok, msg): (bool, String)) {
    assert!(ok && msg.is_empty(), "expected a plain OK true, got {ok} {msg:?}");
}

/// Accepted into the purgatory.
fn assert_held((ok, msg): (bool, String)) {
    assert!(ok && msg == PURGATORY_MESSAGE, "expected OK true {PURGATORY_MESSAGE:?}, got {ok} {msg:?}");
}

/// Accepted into the purgatory as an invitee's state: it moves nothing until they accept.
fn assert_invited((ok, msg): (bool, String)) {
    assert!(ok && msg.starts_with(PURGATORY_MESSAGE) && msg.contains("ngit repo accept"), "expected an invitee's hold, got {ok} {msg:?}");
}

/// Refused with the NIP-01 `prefix` and a message containing every one of `hints`.
fn assert_refused((ok, msg): (bool, String), prefix: &str, hints: &[&str]) {
    assert!(!ok, "expected a refusal, got OK true {msg:?}");
    assert!(msg.starts_with(prefix), "expected {prefix:?}, got {msg:?}");
    for h in hints {
        assert!(msg.contains(h), "refusal {msg:?} should mention {h:?}");
    }
}

/// Every path under `dir` (relative), recursively, symlinks not followed.
fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let path = e.path();
            out.insert(path.strip_prefix(root).unwrap().to_path_buf());
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Files the relay rewrites on its own schedule (purgatory checkpoints), not created by events.
fn volatile(p: &Path) -> bool {
    p.to_string_lossy().contains("purgatory-state")
}

#[tokio::test]
async fn announcement_is_held_unserved_and_its_empty_repository_cloneable() {
    let (server, tmp, mut sub) = started(&[]).await;
    let owner = Keys::generate();
    let (sid, _) = sub.subscribe(vec![Filter::new().author(owner.public_key())]).await.unwrap();
    let mut c = connect(&server).await;

    let ann = announcement(&server, &owner, "held", &[]);
    assert_held(c.send_event(&ann).await.unwrap());
    // Not served: no REQ returns it, by id, kind or author.
    assert!(!stored(&mut c, ann.id).await);
    assert!(c.req(vec![Filter::new().kind(Kind::from(30617))]).await.unwrap().is_empty());
    // Not broadcast: the subscriber's next event is the owner's issue published after it.
    let iss = issue(&owner, &owner.public_key(), "held");
    assert_stored_ok(c.send_event(&iss).await.unwrap());
    assert_eq!(sub.next_event(&sid).await.unwrap().id, iss.id);

    // The bare repository exists at once, with the GRASP config, and serves an empty repository.
    let dir = repo_dir(&server, &owner.public_key(), "held");
    assert!(dir.join("HEAD").is_file(), "{} missing", dir.display());
    let url = repo_url(&server, &owner.public_key(), "held");
    let resp = reqwest::get(format!("{url}/info/refs?service=git-upload-pack")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-git-upload-pack-advertisement");
    let ls = git_output(tmp.path(), &["ls-remote", &url]);
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    assert!(ls.stdout.is_empty(), "an unpushed repository has no refs");
    clone(&url, &tmp.path().join("empty"), &[]).unwrap();
    assert!(tmp.path().join("empty/.git").is_dir());

    // Sending it again is still accepted into the purgatory (idempotent).
    assert_held(c.send_event(&ann).await.unwrap());
}

#[tokio::test]
async fn announcement_not_listing_this_service_is_blocked_with_the_urls_to_add() {
    // A public host name lets the test use the look-alikes of the issue literally.
    let (server, mut c) = connected(&["--public-host", "example.com"]).await;
    let owner = Keys::generate();
    let good_clone = "https://example.com/x.git";
    let good_relay = "wss://example.com";
    let cases: &[(&str, &str)] = &[
        ("https://example.com.evil/x.git", good_relay),
        ("https://example.com.evil.net/x.git", good_relay),
        (good_clone, "wss://example.com.evil"),
        ("https://sub.example.com/x.git", good_relay),
        ("https://notexample.com/x.git", good_relay),
        ("https://evil.net/example.com/x.git", good_relay),
        ("https://evil.net/?u=https://example.com/x.git", good_relay),
        // userinfo tricks: the host is what follows the last `@`
        ("https://example.com@evil.net/x.git", good_relay),
        ("https://example.com:443@evil.net/x.git", good_relay),
        (good_clone, "wss://example.com@evil.net"),
        ("https://evil.net#@example.com/x.git", good_relay),
        ("https://evil.net\\@example.com/x.git", good_relay),
        // wrong port or scheme
        ("https://example.com:8443/x.git", good_relay),
        (good_clone, "wss://example.com:7777"),
        ("ftp://example.com/x.git", good_relay),
        ("wss://example.com/x.git", "https://example.com"),
        ("ssh://git@example.com/x.git", good_relay),
        // only one half
        (good_clone, "wss://relay.other.net"),
        ("https://github.com/x/x.git", good_relay),
        ("example.com/x.git", "example.com"),
    ];
    let before = files_under(server.data_dir());
    for (i, (clone_url, relay_url)) in cases.iter().enumerate() {
        let d = format!("r{i}");
        let ev = announcement_with_urls(&owner, &d, clone_url, relay_url);
        let reply = c.send_event(&ev).await.unwrap();
        assert_refused(reply.clone(), "blocked:", &["example.com"]);
        let msg = reply.1;
        assert!(
            msg.contains(&format!("http(s)://example.com/{}/{d}.git", npub_of(&owner.public_key())))
                || msg.contains("ws(s)://example.com"),
            "case {clone_url} {relay_url}: the refusal must name the URL to add: {msg}"
        );
        assert!(!stored(&mut c, ev.id).await);
    }
    // No clone tag at all, and no relays tag at all.
    let no_tags = signed_event(&owner, 30617, now(), "", &[&["d", "bare"]]);
    assert_refused(c.send_event(&no_tags).await.unwrap(), "blocked:", &["clone", "relays"]);
    let only_clone = signed_event(&owner, 30617, now(), "", &[&["d", "half"], &["clone", good_clone]]);
    assert_refused(c.send_event(&only_clone).await.unwrap(), "blocked:", &["`relays`", "ws(s)://example.com"]);
    let after: BTreeSet<_> = files_under(server.data_dir()).into_iter().filter(|p| !volatile(p)).collect();
    let before: BTreeSet<_> = before.into_iter().filter(|p| !volatile(p)).collect();
    assert_eq!(after.difference(&before).collect::<Vec<_>>(), Vec::<&PathBuf>::new(), "refused announcements created files");

    // The same rules accept exact matches: any case, trailing slash, explicit default port,
    // several URLs in one tag, userinfo before the right host.
    let ok_cases: &[(&str, &str)] = &[
        ("https://EXAMPLE.com/x.git", "wss://example.com/"),
        ("https://example.com:443/x.git", "wss://Example.Com:443"),
        ("http://example.com/x.git", "ws://example.com"),
        ("https://git@example.com/x.git", "wss://example.com"),
    ];
    for (i, (clone_url, relay_url)) in ok_cases.iter().enumerate() {
        let d = format!("ok{i}");
        let ev = announcement_with_urls(&owner, &d, clone_url, relay_url);
        assert_held(c.send_event(&ev).await.unwrap());
        assert!(server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(npub_of(&owner.public_key())).join(format!("{d}.git")).is_dir());
    }
    let several = signed_event(
        &owner,
        30617,
        now(),
        "",
        &[&["d", "several"], &["clone", "https://github.com/a/b.git", good_clone], &["relays", "wss://nos.lol", good_relay]],
    );
    assert_held(c.send_event(&several).await.unwrap());
    let split = signed_event(
        &owner,
        30617,
        now(),
        "",
        &[&["d", "split"], &["clone", "https://github.com/a/b.git"], &["clone", good_clone], &["relays", good_relay]],
    );
    assert_held(c.send_event(&split).await.unwrap());
}

#[tokio::test]
async fn unsafe_identifiers_are_refused_and_nothing_is_created() {
    let (server, mut c) = connected(&[]).await;
    let owner = Keys::generate();
    // A valid repository first, so the owner's directory exists and `../x` would land in it.
    assert_held(c.send_event(&announcement(&server, &owner, "fine", &[])).await.unwrap());
    let before = files_under(server.data_dir().parent().unwrap());

    let long_ascii = "x".repeat(101);
    let long_utf8 = "é".repeat(51); // 102 bytes
    let bad: Vec<&str> = vec![
        "../x", "../../x", "../../../../tmp/x", "a/b", "/abs", "..", ".", "", "a\\b", "..\\x", "a\0b", "\0", "line\nbreak",
        "tab\there", "bell\u{7}", "del\u{7f}", "nel\u{85}", "esc\u{1b}[31m", &long_ascii, &long_utf8,
    ];
    for d in &bad {
        let ann = announcement(&server, &owner, d, &[]);
        assert_refused(c.send_event(&ann).await.unwrap(), "invalid:", &["identifier"]);
        let st = state(&owner, d, &[("refs/heads/main", &"a".repeat(40))], Some("main"));
        assert_refused(c.send_event(&st).await.unwrap(), "invalid:", &["identifier"]);
    }
    let after: BTreeSet<_> = files_under(server.data_dir().parent().unwrap()).into_iter().filter(|p| !volatile(p)).collect();
    let before: BTreeSet<_> = before.into_iter().filter(|p| !volatile(p)).collect();
    // Only the relay's log may grow; no new path anywhere in the temp dir.
    assert_eq!(after.difference(&before).collect::<Vec<_>>(), Vec::<&PathBuf>::new());
    let owner_dir = server.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(npub_of(&owner.public_key()));
    let repos: Vec<_> = std::fs::read_dir(&owner_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(repos, vec![std::ffi::OsString::from("fine.git")]);

    // Unicode, spaces, a leading dot and a `.git` suffix are fine, and stay in the owner's dir.
    for d in ["mon dépôt", ".hidden", "x.git", "日本語", &"y".repeat(100)] {
        assert_held(c.send_event(&announcement(&server, &owner, d, &[])).await.unwrap());
        assert!(owner_dir.join(format!("{d}.git")).join("HEAD").is_file(), "{d}");
    }
}

#[tokio::test]
async fn state_needs_an_announcement_and_an_authorised_author() {
    let (server, mut c) = connected(&[]).await;
    let (owner, maint, sub_maint, stranger) = (Keys::generate(), Keys::generate(), Keys::generate(), Keys::generate());
    let oid = "a".repeat(40);
    let refs = [("refs/heads/main", oid.as_str())];

    // No announcement at all.
    let st = state(&owner, "proj", &refs, Some("main"));
    assert_refused(c.send_event(&st).await.unwrap(), "blocked:", &["not announced", "announcement"]);

    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[maint.public_key()])).await.unwrap());
    // The stranger is told how to get in.
    let st = state(&stranger, "proj", &refs, Some("main"));
    assert_refused(c.send_event(&st).await.unwrap(), "blocked:", &["not a maintainer", "ngit repo edit --add-maintainer", "ngit repo accept"]);
    assert!(!stored(&mut c, st.id).await);
    // Another repository's announcement does not help.
    assert_held(c.send_event(&announcement(&server, &stranger, "other", &[])).await.unwrap());
    assert_refused(c.send_event(&state(&stranger, "proj", &refs, None)).await.unwrap(), "blocked:", &[]);

    // The owner's state is held. A listed key without an announcement of its own is invited: its
    // state is held too, and moves nothing until it accepts (docs/protocol.md#maintainer-authority).
    assert_held(c.send_event(&state(&owner, "proj", &refs, Some("main"))).await.unwrap());
    assert_invited(c.send_event(&state(&maint, "proj", &refs, Some("main"))).await.unwrap());
    let sub_refused = state(&sub_maint, "proj", &refs, None);
    assert_refused(c.send_event(&sub_refused).await.unwrap(), "blocked:", &[]);
    let maint_ann = announcement_with_urls(&maint, "proj", "https://elsewhere.net/p.git", "wss://elsewhere.net");
    let maint_ann = {
        // The maintainer's own announcement (elsewhere) accepts (lists the owner back) and lists a
        // further maintainer, who is then invited by a confirmed maintainer.
        let mut tags: Vec<Vec<String>> = maint_ann.tags.iter().map(|t| t.as_slice().to_vec()).collect();
        tags.push(vec!["maintainers".into(), owner.public_key().to_hex(), sub_maint.public_key().to_hex()]);
        let tags: Vec<Tag> = tags.into_iter().map(|t| Tag::parse(t).unwrap()).collect();
        EventBuilder::new(Kind::from(30617), "").tags(tags).finalize(&maint).unwrap()
    };
    assert_stored_ok(c.send_event(&maint_ann).await.unwrap());
    assert_held(c.send_event(&state(&maint, "proj", &refs, None)).await.unwrap());
    assert_invited(c.send_event(&state(&sub_maint, "proj", &refs, None)).await.unwrap());

    // A malformed state is invalid, with the fix.
    let bad = signed_event(&owner, 30618, now(), "", &[&["d", "proj"], &["refs/heads/main", ""]]);
    assert_refused(c.send_event(&bad).await.unwrap(), "invalid:", &["40"]);
    // One naming something that is not a full object id is held, but can never be satisfied
    // (docs/protocol.md#event-kinds; tests/tests/seed_rules.rs).
    let unsatisfiable = signed_event(&owner, 30618, now(), "", &[&["d", "proj"], &["refs/heads/main", "not-an-oid"]]);
    assert_held(c.send_event(&unsatisfiable).await.unwrap());
}

#[tokio::test]
async fn maintainer_exception_and_service_change() {
    let (server, mut c) = connected(&[]).await;
    let (owner, maint, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let elsewhere = |k: &Keys, d: &str| announcement_with_urls(k, d, "https://elsewhere.net/r.git", "wss://elsewhere.net");

    // Before any accepted announcement for "proj", nobody's elsewhere-announcement is taken.
    assert_refused(c.send_event(&elsewhere(&maint, "proj")).await.unwrap(), "blocked:", &["clone"]);

    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[maint.public_key()])).await.unwrap());
    // The listed maintainer's announcement that does not list this service is stored (and
    // served), but gets no repository here (docs/protocol.md#decisions, decision 3).
    let m = elsewhere(&maint, "proj");
    assert_stored_ok(c.send_event(&m).await.unwrap());
    assert!(stored(&mut c, m.id).await);
    assert!(!repo_dir(&server, &maint.public_key(), "proj").exists());
    // A stranger's is not, nor the maintainer's for another identifier.
    assert_refused(c.send_event(&elsewhere(&stranger, "proj")).await.unwrap(), "blocked:", &["clone"]);
    assert_refused(c.send_event(&elsewhere(&maint, "other")).await.unwrap(), "blocked:", &[]);

    // The owner moving the repository elsewhere (newer announcement without this service)
    // removes its held announcement and bare repository.
    let dir = repo_dir(&server, &owner.public_key(), "proj");
    assert!(dir.is_dir());
    let moved = announcement_with_urls(&owner, "proj", "https://elsewhere.net/r.git", "wss://elsewhere.net");
    let moved = EventBuilder::new(Kind::from(30617), "")
        .tags(moved.tags.clone())
        .custom_created_at(Timestamp::from(now() + 1))
        .finalize(&owner)
        .unwrap();
    assert!(c.send_event(&moved).await.unwrap().0);
    assert!(!dir.exists(), "the owner's repository must be removed when the service is dropped");
    // An older announcement than the one known is refused, saying how to fix it.
    let older = announcement_at(&server, &owner, "proj", &[], now() - 100);
    assert_refused(c.send_event(&older).await.unwrap(), "invalid:", &["later created_at"]);
}

#[tokio::test]
async fn issues_need_an_announced_repository() {
    let (server, mut c) = connected(&[]).await;
    let (owner, alice, other) = (Keys::generate(), Keys::generate(), Keys::generate());

    // Orphans: unknown repository, no tags, right identifier but wrong owner.
    let orphan = issue_about(&alice, &owner.public_key(), "proj", "orphan");
    assert_refused(c.send_event(&orphan).await.unwrap(), "blocked:", &["not announced", &coord(&owner.public_key(), "proj")]);
    let untagged = signed_event(&alice, 1621, now(), "a bug", &[]);
    assert_refused(c.send_event(&untagged).await.unwrap(), "blocked:", &["[\"a\", \"30617:"]);
    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[])).await.unwrap());
    let wrong_owner = issue(&alice, &other.public_key(), "proj");
    assert_refused(c.send_event(&wrong_owner).await.unwrap(), "blocked:", &[]);
    let pr = pull_request(&alice, &other.public_key(), "proj", &"b".repeat(40), &[]);
    assert_refused(c.send_event(&pr).await.unwrap(), "blocked:", &["not announced"]);
    assert!(!stored(&mut c, orphan.id).await && !stored(&mut c, wrong_owner.id).await);

    // The issue about the announced (held) repository is stored, served and broadcast.
    let mut sub = connect(&server).await;
    let (sid, _) = sub.subscribe(vec![Filter::new().kind(Kind::from(1621))]).await.unwrap();
    let iss = issue(&alice, &owner.public_key(), "proj");
    assert_stored_ok(c.send_event(&iss).await.unwrap());
    assert!(stored(&mut c, iss.id).await);
    assert_eq!(sub.next_event(&sid).await.unwrap().id, iss.id);
    // The orphan sent earlier is still refused; it was not remembered.
    assert!(!stored(&mut c, orphan.id).await);

    // Events relating to the stored issue by id: a NIP-22 comment (`E`), a status (`e`), a quote.
    let hex = iss.id.to_hex();
    let comment = signed_event(&other, 1111, now(), "me too", &[&["E", &hex], &["K", "1621"], &["P", &alice.public_key().to_hex()]]);
    assert_stored_ok(c.send_event(&comment).await.unwrap());
    let status = signed_event(&owner, 1632, now(), "", &[&["e", &hex, "", "root"]]);
    assert_stored_ok(c.send_event(&status).await.unwrap());
    let quote = signed_event(&other, 1, now(), "see this", &[&["q", &hex]]);
    assert_stored_ok(c.send_event(&quote).await.unwrap());
    // ... and by reply chain: a reply to the comment.
    let reply = signed_event(&alice, 1111, now(), "thanks", &[&["e", &comment.id.to_hex()]]);
    assert_stored_ok(c.send_event(&reply).await.unwrap());
}

#[tokio::test]
async fn forward_references_are_accepted() {
    let (server, mut c) = connected(&[]).await;
    let (owner, alice) = (Keys::generate(), Keys::generate());
    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[])).await.unwrap());
    let repo_a = coord(&owner.public_key(), "proj");

    // `later` relates to nothing by itself: refused while nothing tags it.
    let later = signed_event(&alice, 1, now(), "the target, published late", &[]);
    assert_refused(c.send_event(&later).await.unwrap(), "blocked:", &[]);
    // A status about the repository that tags `later` by id arrives first...
    let status = signed_event(&owner, 1630, now(), "", &[&["a", &repo_a], &["e", &later.id.to_hex()]]);
    assert_stored_ok(c.send_event(&status).await.unwrap());
    // ... and now `later` is accepted and served.
    assert_stored_ok(c.send_event(&later).await.unwrap());
    assert!(stored(&mut c, later.id).await);

    // The same by coordinate, for an addressable event not yet published.
    let addr_later = signed_event(&alice, 30078, now(), "late addressable", &[&["d", "notes"]]);
    assert_refused(c.send_event(&addr_later).await.unwrap(), "blocked:", &[]);
    let addr_coord = format!("30078:{}:notes", alice.public_key().to_hex());
    let comment = signed_event(&owner, 1111, now(), "", &[&["A", &repo_a], &["a", &addr_coord]]);
    assert_stored_ok(c.send_event(&comment).await.unwrap());
    assert_stored_ok(c.send_event(&addr_later).await.unwrap());
}

#[tokio::test]
async fn grasp_lists_and_deletions_are_accepted_but_anchor_nothing() {
    let (_server, mut c) = connected(&[]).await;
    let (alice, spammer) = (Keys::generate(), Keys::generate());
    // 10317 and kind 5 are accepted from anyone, no repository needed.
    let list = signed_event(&alice, 10317, now(), "", &[&["g", "https://example.com"]]);
    assert_stored_ok(c.send_event(&list).await.unwrap());
    assert!(stored(&mut c, list.id).await);
    let del = signed_event(&alice, 5, now(), "", &[&["e", &"c".repeat(64)], &["k", "1"]]);
    assert_stored_ok(c.send_event(&del).await.unwrap());

    // But they do not make other events acceptable, in either direction.
    let tags_list = signed_event(&spammer, 1, now(), "spam", &[&["e", &list.id.to_hex()]]);
    assert_refused(c.send_event(&tags_list).await.unwrap(), "blocked:", &[]);
    let tags_list_coord = signed_event(&spammer, 1, now(), "spam", &[&["a", &format!("10317:{}:", alice.public_key().to_hex())]]);
    assert_refused(c.send_event(&tags_list_coord).await.unwrap(), "blocked:", &[]);
    let tags_del = signed_event(&spammer, 1, now(), "spam", &[&["e", &del.id.to_hex()]]);
    assert_refused(c.send_event(&tags_del).await.unwrap(), "blocked:", &[]);
    let payload = signed_event(&spammer, 1, now(), "payload", &[]);
    let carrier = signed_event(&spammer, 10317, now(), "", &[&["e", &payload.id.to_hex()]]);
    assert_stored_ok(c.send_event(&carrier).await.unwrap());
    let carrier5 = signed_event(&alice, 5, now(), "", &[&["e", &payload.id.to_hex()]]);
    assert_stored_ok(c.send_event(&carrier5).await.unwrap());
    assert_refused(c.send_event(&payload).await.unwrap(), "blocked:", &[]);
}

#[tokio::test]
async fn deletions_remove_stored_and_held_events_for_good() {
    let (server, mut c) = connected(&[]).await;
    let (owner, alice, mallory) = (Keys::generate(), Keys::generate(), Keys::generate());
    let t = now();
    let ann = announcement_at(&server, &owner, "proj", &[], t);
    assert_held(c.send_event(&ann).await.unwrap());
    let dir = repo_dir(&server, &owner.public_key(), "proj");

    // A stored issue: deleted by id, then refused when republished.
    let iss = issue(&alice, &owner.public_key(), "proj");
    assert_stored_ok(c.send_event(&iss).await.unwrap());
    let del = signed_event(&alice, 5, t, "", &[&["e", &iss.id.to_hex()], &["k", "1621"]]);
    assert_stored_ok(c.send_event(&del).await.unwrap());
    assert!(!stored(&mut c, iss.id).await);
    assert_refused(c.send_event(&iss).await.unwrap(), "blocked:", &["deleted", "publish a new event"]);

    // Someone else's deletion of the held announcement or of a held state changes nothing.
    let st = state(&owner, "proj", &[("refs/heads/main", &"d".repeat(40))], Some("main"));
    assert_held(c.send_event(&st).await.unwrap());
    let foreign = signed_event(&mallory, 5, t, "", &[&["e", &ann.id.to_hex()], &["e", &st.id.to_hex()]]);
    assert_stored_ok(c.send_event(&foreign).await.unwrap());
    let foreign_coord = signed_event(&mallory, 5, t, "", &[&["a", &coord(&owner.public_key(), "proj")]]);
    assert_refused(c.send_event(&foreign_coord).await.unwrap(), "invalid:", &["own"]);
    assert!(dir.is_dir(), "a stranger's deletion removed the repository");
    assert_held(c.send_event(&ann).await.unwrap());
    assert_held(c.send_event(&st).await.unwrap());

    // The owner's deletion of the held state by id: republishing is refused.
    let del_st = signed_event(&owner, 5, t, "", &[&["e", &st.id.to_hex()]]);
    assert_stored_ok(c.send_event(&del_st).await.unwrap());
    assert_refused(c.send_event(&st).await.unwrap(), "blocked:", &["deleted"]);

    // The owner's deletion of the held announcement by coordinate removes it and its bare
    // repository; the same announcement is refused afterwards, a newer one is a new announcement.
    let del_ann = signed_event(&owner, 5, t, "", &[&["a", &coord(&owner.public_key(), "proj")], &["k", "30617"]]);
    assert_stored_ok(c.send_event(&del_ann).await.unwrap());
    assert!(!dir.exists(), "deleting a held announcement must delete its bare repository");
    assert_refused(c.send_event(&ann).await.unwrap(), "blocked:", &["deleted"]);
    // Issues about it are refused now: nothing accepted is left at that coordinate.
    let late_issue = issue_about(&alice, &owner.public_key(), "proj", "too late");
    assert_refused(c.send_event(&late_issue).await.unwrap(), "blocked:", &["not announced"]);
    let again = announcement_at(&server, &owner, "proj", &[], t + 1);
    assert_held(c.send_event(&again).await.unwrap());
    assert!(dir.is_dir());

    // A held pull request deleted by its author cannot come back either.
    let pr = pull_request(&alice, &owner.public_key(), "proj", &"e".repeat(40), &[]);
    assert_held(c.send_event(&pr).await.unwrap());
    let del_pr = signed_event(&alice, 5, now(), "", &[&["e", &pr.id.to_hex()]]);
    assert_stored_ok(c.send_event(&del_pr).await.unwrap());
    assert_refused(c.send_event(&pr).await.unwrap(), "blocked:", &["deleted"]);
    assert!(!purgatory_ids(&server).await.contains(&pr.id.to_hex()));
    // A deletion that also names someone else's stored event is refused whole: the author's
    // own held pull request it names stays in the purgatory.
    let stored_issue = issue_about(&alice, &owner.public_key(), "proj", "second issue");
    assert_stored_ok(c.send_event(&stored_issue).await.unwrap());
    let mallory_pr = pull_request(&mallory, &owner.public_key(), "proj", &"7".repeat(40), &[]);
    assert_held(c.send_event(&mallory_pr).await.unwrap());
    let mixed = signed_event(&mallory, 5, now(), "", &[&["e", &mallory_pr.id.to_hex()], &["e", &stored_issue.id.to_hex()]]);
    assert_refused(c.send_event(&mixed).await.unwrap(), "invalid:", &["own"]);
    assert!(stored(&mut c, stored_issue.id).await);
    assert!(purgatory_ids(&server).await.contains(&mallory_pr.id.to_hex()), "a refused deletion emptied the purgatory");
}

#[tokio::test]
async fn comments_on_a_held_pull_request_are_accepted() {
    let (server, mut c) = connected(&[]).await;
    let (owner, alice, bob) = (Keys::generate(), Keys::generate(), Keys::generate());
    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[])).await.unwrap());
    let pr = pull_request(&alice, &owner.public_key(), "proj", &"f".repeat(40), &[]);
    assert_held(c.send_event(&pr).await.unwrap());
    assert!(!stored(&mut c, pr.id).await, "a pull request without its commit is not served");
    // A NIP-22 comment names only the PR (no repository tag): accepted and served, since the
    // PR was accepted (held); the PR itself stays unserved.
    let comment = signed_event(&bob, 1111, now(), "nice", &[&["E", &pr.id.to_hex()], &["K", "1618"], &["P", &alice.public_key().to_hex()]]);
    assert_stored_ok(c.send_event(&comment).await.unwrap());
    assert!(stored(&mut c, comment.id).await);
    assert!(!stored(&mut c, pr.id).await);
    // A pull request that was never sent anchors nothing.
    let unknown = signed_event(&bob, 1111, now(), "", &[&["E", &"9".repeat(64)], &["K", "1618"]]);
    assert_refused(c.send_event(&unknown).await.unwrap(), "blocked:", &[]);
}

#[tokio::test]
async fn invalid_signatures_and_ids_are_refused() {
    let (server, mut c) = connected(&[]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "proj", &[]);
    // Signature of another event on the announcement: refused before anything is created.
    let other = announcement(&server, &owner, "other", &[]);
    let mut json: Value = serde_json::from_str(&ann.as_json()).unwrap();
    json["sig"] = other.sig.to_string().into();
    c.raw_send(format!(r#"["EVENT",{json}]"#)).await.unwrap();
    assert_refused(c.wait_ok(ann.id).await.unwrap(), "invalid:", &["signature"]);
    assert!(!repo_dir(&server, &owner.public_key(), "proj").exists());
    // Tampered content: the id does not match.
    let mut json: Value = serde_json::from_str(&ann.as_json()).unwrap();
    json["tags"][0][1] = "../evil".into();
    c.raw_send(format!(r#"["EVENT",{json}]"#)).await.unwrap();
    assert_refused(c.wait_ok(ann.id).await.unwrap(), "invalid:", &["id"]);
    // The genuine one is fine.
    assert_held(c.send_event(&ann).await.unwrap());
}

#[tokio::test]
async fn nip11_document_and_cors_everywhere() {
    let server = TestServer::start();
    let http = reqwest::Client::new();
    let cors = |resp: &reqwest::Response| {
        let h = resp.headers();
        assert_eq!(h["access-control-allow-origin"], "*", "{}", resp.url());
        let methods = h["access-control-allow-methods"].to_str().unwrap();
        assert!(methods.contains("GET") && methods.contains("POST"), "{methods}");
        let headers = h["access-control-allow-headers"].to_str().unwrap();
        for want in ["Content-Type", "Git-Protocol", "Authorization", "Accept", "Content-Encoding", "X-Requested-With"] {
            assert!(headers.contains(want), "{headers} lacks {want}");
        }
    };

    let resp = http.get(server.http_url()).header("Accept", "application/nostr+json").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    cors(&resp);
    let doc: Value = resp.json().await.unwrap();
    assert!(doc["supported_grasps"].as_array().unwrap().contains(&"GRASP-01".into()), "{doc}");
    let criteria = doc["repo_acceptance_criteria"].as_str().unwrap();
    assert!(criteria.contains("30617") && criteria.contains(&server.addr().to_string()), "{criteria}");
    assert!(doc.get("curation").is_none(), "{doc}");
    // NIP-11 software: clients and the conformance suite expect it; by default this software's project.
    for field in ["name", "description", "version", "software"] {
        assert!(doc[field].is_string(), "{field}: {doc}");
    }
    assert_eq!(doc["software"], grasp_relay::config::DEFAULT_SOFTWARE_URL, "{doc}");
    assert!(doc["supported_nips"].as_array().unwrap().contains(&34.into()));

    // 200 on a repository (held announcement), 404 on unknown and malformed paths.
    let owner = Keys::generate();
    let mut c = connect(&server).await;
    assert_held(c.send_event(&announcement(&server, &owner, "proj", &[])).await.unwrap());
    let url = repo_url(&server, &owner.public_key(), "proj");
    let resp = http.get(format!("{url}/info/refs?service=git-upload-pack")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    cors(&resp);
    let unknown = repo_url(&server, &Keys::generate().public_key(), "nope");
    for path in [
        format!("{unknown}/info/refs?service=git-upload-pack"),
        format!("{}/npub1notakey/x.git/info/refs", server.http_url()),
        format!("{}/{}/..%2F..%2Fetc.git/info/refs", server.http_url(), npub_of(&owner.public_key())),
        format!("{}/nothing-here", server.http_url()),
    ] {
        let resp = http.get(&path).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        cors(&resp);
    }
    let resp = http.post(format!("{unknown}/git-upload-pack")).body("0000").send().await.unwrap();
    assert_eq!(resp.status(), 404);
    cors(&resp);
    // Browsers get the HTML 404 page, on repository paths and elsewhere alike.
    for path in [unknown.clone(), format!("{}/nothing-here", server.http_url())] {
        let resp = http.get(&path).header("Accept", "text/html,application/xhtml+xml").send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        cors(&resp);
        let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/html"), "{path}: {kind}");
    }
    for path in ["/", "/anything", &format!("/{}/proj.git/git-upload-pack", npub_of(&owner.public_key()))] {
        let resp = http
            .request(reqwest::Method::OPTIONS, format!("{}{path}", server.http_url()))
            .header("Origin", "https://app.example")
            .header("Access-Control-Request-Method", "POST")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204, "{path}");
        cors(&resp);
    }
}

#[tokio::test]
async fn filtered_clone_of_a_pushed_repository() {
    let (server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    assert_held(c.send_event(&announcement(&server, &owner, "big", &[])).await.unwrap());
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "big");
    repo.commit("old.txt", "first version");
    repo.commit("old.txt", "second version");
    let tip = repo.commit("new.txt", "latest");
    let st = state(&owner, "big", &[("refs/heads/main", &tip)], Some("main"));
    assert_held(c.send_event(&st).await.unwrap());
    repo.push(&["main"]).unwrap();
    assert!(stored(&mut c, st.id).await);

    let dest = tmp.path().join("partial");
    clone(&repo.url, &dest, &["--filter=blob:none"]).unwrap();
    let promisor = git_output(&dest, &["config", "remote.origin.promisor"]);
    assert_eq!(String::from_utf8_lossy(&promisor.stdout).trim(), "true", "not a partial clone");
    assert_eq!(std::fs::read_to_string(dest.join("new.txt")).unwrap(), "latest");
    assert_eq!(std::fs::read_to_string(dest.join("old.txt")).unwrap(), "second version");
    // An old blob, not checked out, is fetched on demand from the server.
    let old = git_output(&dest, &["show", "HEAD~2:old.txt"]);
    assert!(old.status.success(), "{}", String::from_utf8_lossy(&old.stderr));
    assert_eq!(String::from_utf8_lossy(&old.stdout), "first version");
}
