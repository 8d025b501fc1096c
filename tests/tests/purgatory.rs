//! The purgatory's lifecycle end to end (docs/protocol.md#purgatory): expiry, soft expiry and revival, replacement
//! and service change, kind-5 deletions, caps, checkpoints across SIGTERM and kill -9, and the
//! operator listing (`GET /v1/purgatory`). Durations are configured short (seconds); every wait
//! is on an observable condition with a deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// The listed entry for `id`, if held.
fn entry(listing: &Value, id: &EventId) -> Option<Value> {
    let hex = id.to_hex();
    listing["entries"].as_array().unwrap().iter().find(|e| e["event_id"] == hex.as_str()).cloned()
}

fn is_expired(listing: &Value, id: &EventId) -> bool {
    let hex = id.to_hex();
    listing["expired_events"].as_array().unwrap().iter().any(|e| e["event_id"] == hex.as_str())
}

fn secs(v: &Value, field: &str) -> i64 {
    v[field].as_i64().unwrap_or_else(|| panic!("{field} missing in {v}"))
}

/// A random 32-byte event id (for git-first `refs/nostr/<id>` pushes).
fn random_id() -> EventId {
    event(&Keys::generate(), 1, &[]).id
}

fn checkpoint_path(server: &TestServer) -> std::path::PathBuf {
    server.data_dir().join(grasp_state::contract::layout::CHECKPOINT_FILE)
}

fn corrupt_files(data: &Path) -> Vec<String> {
    std::fs::read_dir(data)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".corrupt-"))
        .collect()
}

/// Moves `saved_at` of the (stopped) relay's checkpoint back by `secs`: simulated downtime.
fn age_checkpoint(server: &TestServer, secs: u64) {
    let path = checkpoint_path(server);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let saved = v["saved_at"].as_u64().unwrap();
    v["saved_at"] = (saved - secs).into();
    std::fs::write(&path, v.to_string()).unwrap();
}

/// Identity of the file's current version: inode (a rename makes a new one) and mtime.
fn version(p: &Path) -> Option<(u64, std::time::SystemTime)> {
    let m = std::fs::metadata(p).ok()?;
    Some((std::os::unix::fs::MetadataExt::ino(&m), m.modified().ok()?))
}

fn git_url_status(url: &str) -> u16 {
    let out = std::process::Command::new("git")
        .args(["ls-remote", url])
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    if out.status.success() {
        return 200;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("404") || err.contains("not found") {
        404
    } else {
        0
    }
}

async fn http_status(url: &str) -> u16 {
    reqwest::get(url).await.unwrap().status().as_u16()
}

#[tokio::test]
async fn restart_preserves_every_entry_type_with_remaining_time() {
    // Phase 1: a short TTL, to get a state event recorded as expired and an announcement
    // soft-expired (which must not be restored).
    let mut server = TestServer::start_with(&["--purgatory-ttl", "1", "--soft-expiry-ttl", "1h"]);
    let tmp = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let contributor = Keys::generate();
    let mut c = connect(&server).await;
    let gone = announcement(&server, &owner, "gone", &[]);
    held(&mut c, &gone).await;
    let s0 = state(&owner, "gone", &[("refs/heads/main", &"a".repeat(40))], Some("main"));
    held(&mut c, &s0).await;
    eventually!("the state event to expire", WAIT, {
        let l = purgatory_listing(&server).await;
        (is_expired(&l, &s0.id) && entry(&l, &gone.id).is_some_and(|e| e["soft_expired"] == true)).then_some(())
    });
    drop(c);

    // Phase 2: a long TTL; one entry of every kind.
    server.restart_with(&["--purgatory-ttl", "120", "--soft-expiry-ttl", "1h", "--checkpoint-interval", "1h"]);
    let mut c = connect(&server).await;
    let l = purgatory_listing(&server).await;
    assert!(is_expired(&l, &s0.id), "expired events survive a restart: {l}");
    assert!(entry(&l, &gone.id).is_none(), "soft-expired announcements are not restored: {l}");

    let ann = announcement(&server, &owner, "keep", &[]);
    held(&mut c, &ann).await;
    let work = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "keep");
    let tip = work.commit("a.txt", "one");
    let st = state(&owner, "keep", &[("refs/heads/main", &"b".repeat(40))], Some("main"));
    held(&mut c, &st).await;
    let pr = pull_request(&contributor, &owner.public_key(), "keep", &"c".repeat(40), &[]);
    held(&mut c, &pr).await;
    let ph = random_id();
    let out = work.push(&[&format!("HEAD:refs/nostr/{}", ph.to_hex())]).expect("git-first refs/nostr push");
    assert!(out.contains("waits for its pull request"), "{out}");
    let bare = repo_dir(&server, &owner.public_key(), "keep");
    assert_eq!(bare_refs(&bare).get(&format!("refs/nostr/{}", ph.to_hex())), Some(&tip));

    let before = purgatory_listing(&server).await;
    let t1 = Instant::now();
    let kinds = [(ann.id, "announcement"), (st.id, "state"), (pr.id, "pr"), (ph, "placeholder")];
    for (id, kind) in kinds {
        let e = entry(&before, &id).unwrap_or_else(|| panic!("{kind} not listed: {before}"));
        assert_eq!(e["kind"], kind);
        assert!(secs(&e, "time_left_secs") >= 115, "{e}");
    }
    let e = entry(&before, &st.id).unwrap();
    assert_eq!(e["pubkey"], owner.public_key().to_hex().as_str());
    assert_eq!(e["identifier"], "keep");
    assert_eq!(e["oids"], serde_json::json!(["b".repeat(40)]));
    assert_eq!(entry(&before, &ph).unwrap()["oids"], serde_json::json!([tip]));
    assert_eq!(entry(&before, &pr.id).unwrap()["oids"], serde_json::json!(["c".repeat(40)]));
    drop(c);

    // A plain restart (SIGTERM writes the final checkpoint): remaining time goes on counting.
    server.restart();
    let after = purgatory_listing(&server).await;
    let elapsed = t1.elapsed().as_secs() as i64;
    for (id, kind) in kinds {
        let (b, a) = (entry(&before, &id).unwrap(), entry(&after, &id).unwrap_or_else(|| panic!("{kind} lost: {after}")));
        assert_eq!(a["kind"], kind);
        let expect = secs(&b, "time_left_secs") - elapsed;
        let got = secs(&a, "time_left_secs");
        assert!((got - expect).abs() <= 2, "{kind}: time left {got}, expected about {expect}");
        assert!(secs(&a, "age_secs") >= secs(&b, "age_secs"), "{kind}: age went backwards");
    }
    let ta = Instant::now();
    assert!(is_expired(&after, &s0.id));
    assert!(checkpoint_path(&server).exists(), "restore never deletes the checkpoint");

    // 30 s of downtime: every deadline is 30 s nearer.
    server.stop();
    age_checkpoint(&server, 30);
    server.restart();
    let later = purgatory_listing(&server).await;
    let elapsed = ta.elapsed().as_secs() as i64;
    for (id, kind) in kinds {
        let (a, b) = (entry(&after, &id).unwrap(), entry(&later, &id).unwrap_or_else(|| panic!("{kind} lost: {later}")));
        let expect = secs(&a, "time_left_secs") - 30 - elapsed;
        let got = secs(&b, "time_left_secs");
        assert!((got - expect).abs() <= 2, "{kind}: time left {got}, expected about {expect} (30 s downtime)");
    }

    // Downtime longer than every deadline: all of it is due at once, and is expired at start.
    server.stop();
    age_checkpoint(&server, 1000);
    server.restart();
    eventually!("entries that expired during downtime to be swept", WAIT, {
        let l = purgatory_listing(&server).await;
        let done = is_expired(&l, &st.id)
            && is_expired(&l, &pr.id)
            && entry(&l, &ph).is_none()
            && entry(&l, &ann.id).is_some_and(|e| e["soft_expired"] == true);
        done.then_some(())
    });
    assert!(!bare.exists(), "the soft-expired announcement's repository is deleted");
    let logs = server.logs();
    assert!(logs.contains("purgatory restored from checkpoint"), "restore not logged");
    assert!(corrupt_files(server.data_dir()).is_empty());
}

#[tokio::test]
async fn kill_9_during_repeated_checkpoints_always_leaves_a_loadable_checkpoint() {
    let (mut server, mut c) = connected(&["--checkpoint-interval", "5ms", "--purgatory-per-author", "1000"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "crashy", &[]);
    held(&mut c, &ann).await;
    let base = now() - 1000;
    let mut ids = vec![ann.id];
    for i in 0..80u64 {
        let oid = format!("{:040x}", i + 1);
        let st = state_at(&owner, "crashy", &[("refs/heads/main", &oid)], Some("main"), base + i);
        held(&mut c, &st).await;
        ids.push(st.id);
    }
    drop(c);
    let path = checkpoint_path(&server);
    eventually!("a checkpoint holding every entry", WAIT, {
        grasp_state::contract::checkpoint_file::read_checkpoint(&path)
            .ok()
            .flatten()
            .filter(|s| s.state_events.values().map(Vec::len).sum::<usize>() == 80)
    });
    let mut kills_mid_write = 0;
    for i in 0..25u64 {
        // Wait for a checkpoint written by this run.
        let first = version(&path);
        eventually!("a checkpoint", WAIT, version(&path).filter(|v| Some(*v) != first));
        // Kill at a varying point of the next checkpoint cycles (fault injection, not sync).
        tokio::time::sleep(Duration::from_micros(i * 397 % 6000)).await;
        if server.data_dir().join(format!("{}.tmp", grasp_state::contract::layout::CHECKPOINT_FILE)).exists() {
            kills_mid_write += 1;
        }
        server.kill();
        let state = grasp_state::contract::checkpoint_file::read_checkpoint(&path)
            .unwrap_or_else(|e| panic!("iteration {i}: checkpoint unreadable after kill -9: {e}"))
            .unwrap_or_else(|| panic!("iteration {i}: no checkpoint after kill -9"));
        let saved: usize = state.state_events.values().map(Vec::len).sum();
        assert_eq!((state.announcement_purgatory.len(), saved), (1, 80), "iteration {i}");
        server.restart();
        let l = purgatory_listing(&server).await;
        for id in &ids {
            assert!(entry(&l, id).is_some(), "iteration {i}: {id} not restored");
        }
        assert!(corrupt_files(server.data_dir()).is_empty(), "iteration {i}: checkpoint set aside");
    }
    eprintln!("{kills_mid_write} of 25 kills landed while a temp checkpoint existed");
}

#[tokio::test]
async fn corrupt_or_unknown_checkpoint_is_set_aside_and_the_server_starts() {
    let (mut server, mut c) = connected(&["--checkpoint-interval", "1h"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "kept", &[]);
    held(&mut c, &ann).await;
    drop(c);
    server.stop();
    let path = checkpoint_path(&server);
    std::fs::write(&path, b"{\"version\": 1, \"saved_at\": \"not a number\"").unwrap();
    server.restart();
    let aside = corrupt_files(server.data_dir());
    assert_eq!(aside.len(), 1, "{aside:?}");
    let kept = std::fs::read(server.data_dir().join(&aside[0])).unwrap();
    assert!(kept.starts_with(b"{\"version\": 1, \"saved_at\": \"not"), "the corrupt file is kept as is");
    let l = purgatory_listing(&server).await;
    assert!(l["entries"].as_array().unwrap().is_empty(), "starts empty: {l}");
    assert!(server.logs().contains("set aside"), "the operator is told");
    // The relay works: a new checkpoint replaces the file on shutdown.
    server.stop();
    assert!(grasp_state::contract::checkpoint_file::read_checkpoint(&path).unwrap().is_some());

    // A file from a future version is set aside too (a second name).
    std::fs::write(&path, b"{\"version\": 99}").unwrap();
    eventually!("a new second for the set-aside name", WAIT, {
        let secs_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        (!aside[0].ends_with(&secs_now.to_string())).then_some(())
    });
    server.restart();
    assert_eq!(corrupt_files(server.data_dir()).len(), 2);
    assert!(server.logs().contains("version 99"), "the unknown version is reported");
}

#[tokio::test]
async fn soft_expiry_deletes_the_repository_and_a_state_event_revives_it() {
    let (server, tmp, mut c) = started(&["--purgatory-ttl", "6", "--soft-expiry-ttl", "1h"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "phoenix", &[]);
    held(&mut c, &ann).await;
    let bare = repo_dir(&server, &owner.public_key(), "phoenix");
    let url = repo_url(&server, &owner.public_key(), "phoenix");
    assert!(bare.exists());
    assert_eq!(http_status(&format!("{url}/info/refs?service=git-upload-pack")).await, 200);

    let soft = eventually!("soft expiry", WAIT, {
        let l = purgatory_listing(&server).await;
        entry(&l, &ann.id).filter(|e| e["soft_expired"] == true)
    });
    assert!(secs(&soft, "time_left_secs") > 3000, "kept for the soft-expiry TTL: {soft}");
    assert!(!bare.exists(), "bare repository deleted");
    assert_eq!(http_status(&format!("{url}/info/refs?service=git-upload-pack")).await, 404);
    assert_eq!(git_url_status(&url), 404);
    assert!(!stored(&mut c, ann.id).await, "never served");

    // Revival: a state event recreates the repository and resets the timer.
    let work = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "phoenix");
    let tip = work.commit("a.txt", "risen");
    let st = state(&owner, "phoenix", &[("refs/heads/main", &tip)], Some("main"));
    held(&mut c, &st).await;
    assert!(bare.exists(), "repository recreated");
    let l = purgatory_listing(&server).await;
    let revived = entry(&l, &ann.id).expect("still held");
    assert_eq!(revived["soft_expired"], false);
    assert!(secs(&revived, "time_left_secs") <= 6, "timer reset to the TTL: {revived}");
    // ... and the push releases both.
    let out = work.push(&["main"]).expect("push to the revived repository");
    assert!(out.contains("released"), "{out}");
    assert!(stored(&mut c, ann.id).await && stored(&mut c, st.id).await);
    let l = purgatory_listing(&server).await;
    assert!(entry(&l, &ann.id).is_none() && entry(&l, &st.id).is_none());

    let logs = server.logs();
    let ann_hex = ann.id.to_hex();
    // Trigger 2: the push authorised against the held state extended it and the announcement.
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("state event expiry extended") && l.contains(&st.id.to_hex())));
    let extended = logs.lines().filter(|l| l.contains("announcement expiry extended") && l.contains(&ann_hex)).count();
    assert!(extended >= 2, "revival and push both extend the announcement ({extended})");
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("soft-expired") && l.contains(&ann_hex)), "soft expiry logged with the id");
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("expiry extended") && l.contains(&ann_hex) && l.contains("revived=true")), "revival logged");
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("held in purgatory") && l.contains(&ann_hex)), "enter logged");
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("promoted") && l.contains(&ann_hex)), "release logged");
}

#[tokio::test]
async fn full_expiry_after_the_soft_expiry_ttl_records_the_event_as_expired() {
    let (server, mut c) = connected(&["--purgatory-ttl", "2", "--soft-expiry-ttl", "1"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "brief", &[]);
    held(&mut c, &ann).await;
    let st = state(&owner, "brief", &[("refs/heads/main", &"d".repeat(40))], Some("main"));
    held(&mut c, &st).await;
    eventually!("full expiry", WAIT, {
        let l = purgatory_listing(&server).await;
        (entry(&l, &ann.id).is_none() && is_expired(&l, &ann.id) && is_expired(&l, &st.id)).then_some(())
    });
    assert!(!repo_dir(&server, &owner.public_key(), "brief").exists());
    assert!(!stored(&mut c, ann.id).await);
    // Nothing announces the repository any more.
    let late = state(&owner, "brief", &[("refs/heads/main", &"e".repeat(40))], Some("main"));
    let (ok, msg) = c.send_event(&late).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    let logs = server.logs();
    for (id, what) in [(ann.id, "announcement expired"), (st.id, "state event expired")] {
        let hex = id.to_hex();
        assert!(logs.lines().any(|l| l.contains("INFO") && l.contains(what) && l.contains(&hex)), "{what} logged with the id");
    }
}

#[tokio::test]
async fn expired_placeholder_ref_is_removed_from_the_bare_repository() {
    let (server, tmp, mut c) = started(&["--purgatory-ttl", "6"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "target", &[]);
    held(&mut c, &ann).await;
    // Give the repository data so it outlives the announcement's purgatory.
    let work = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "target");
    let tip = work.commit("a.txt", "one");
    held(&mut c, &state(&owner, "target", &[("refs/heads/main", &tip)], Some("main"))).await;
    work.push(&["main"]).expect("push main");
    assert!(stored(&mut c, ann.id).await);

    let ph = random_id();
    let pr_tip = work.commit("b.txt", "change");
    let name = format!("refs/nostr/{}", ph.to_hex());
    work.push(&[&format!("HEAD:{name}")]).expect("git-first refs/nostr push");
    let bare = repo_dir(&server, &owner.public_key(), "target");
    assert_eq!(bare_refs(&bare).get(&name), Some(&pr_tip));
    let l = purgatory_listing(&server).await;
    let e = entry(&l, &ph).expect("placeholder listed");
    assert_eq!(e["kind"], "placeholder");
    assert_eq!(e["identifier"], "target");

    eventually!("the placeholder ref to be removed", WAIT, (!bare_refs(&bare).contains_key(&name)).then_some(()));
    let l = purgatory_listing(&server).await;
    assert!(entry(&l, &ph).is_none(), "placeholder forgotten: {l}");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&tip), "other refs untouched");
    let hex = ph.to_hex();
    let logs = server.logs();
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("placeholder recorded") && l.contains(&hex)));
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("placeholder expired") && l.contains(&hex)));
}

#[tokio::test]
async fn caps_refuse_new_entries_and_never_evict_the_maintainers() {
    let (server, tmp, mut c) = started(&["--purgatory-per-author", "2", "--purgatory-total", "5"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "shared", &[]);
    held(&mut c, &ann).await;
    let work = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "shared");
    let tip = work.commit("a.txt", "one");
    let st = state_at(&owner, "shared", &[("refs/heads/main", &tip)], Some("main"), now() - 10);
    held(&mut c, &st).await;
    // Per author: a third held event is refused.
    let third = state(&owner, "shared", &[("refs/heads/main", &"f".repeat(40))], Some("main"));
    let (ok, msg) = c.send_event(&third).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited:"), "{msg}");

    // A flood of throwaway keys announcing the same identifier and sending states for it.
    let mut refused = Vec::new();
    for n in 0..4 {
        let k = Keys::generate();
        for ev in [
            announcement(&server, &k, "shared", &[]),
            state(&k, "shared", &[("refs/heads/main", &format!("{n:040x}"))], None),
        ] {
            let (ok, msg) = c.send_event(&ev).await.unwrap();
            if !ok {
                assert!(msg.starts_with("blocked:"), "{msg}");
                refused.push((k.public_key(), ev.kind.as_u16()));
            }
        }
    }
    assert!(refused.len() >= 5, "the total cap refuses the rest: {refused:?}");
    for (pk, kind) in &refused {
        if *kind == 30617 {
            assert!(!repo_dir(&server, pk, "shared").exists(), "a refused announcement leaves no repository");
        }
    }
    let l = purgatory_listing(&server).await;
    assert_eq!(l["entries"].as_array().unwrap().len(), 5, "{l}");
    assert!(entry(&l, &ann.id).is_some() && entry(&l, &st.id).is_some(), "the maintainer's entries stay: {l}");

    // And they still work.
    let out = work.push(&["main"]).expect("maintainer push");
    assert!(out.contains("released"), "{out}");
    assert!(stored(&mut c, st.id).await && stored(&mut c, ann.id).await);
}

#[tokio::test]
async fn replacement_extends_an_older_replay_is_refused_and_dropping_the_service_ends_the_entry() {
    let (server, mut c) = connected(&["--purgatory-ttl", "10"]).await;
    let owner = Keys::generate();
    let v1 = announcement_at(&server, &owner, "moving", &[], now() - 100);
    held(&mut c, &v1).await;
    let bare = repo_dir(&server, &owner.public_key(), "moving");
    let first = eventually!("time to pass", WAIT, {
        let l = purgatory_listing(&server).await;
        entry(&l, &v1.id).filter(|e| secs(e, "time_left_secs") <= 7)
    });
    assert_eq!(first["kind"], "announcement");

    // A newer announcement replaces the entry and extends its expiry.
    let v2 = announcement_at(&server, &owner, "moving", &[Keys::generate().public_key()], now() - 50);
    held(&mut c, &v2).await;
    let l = purgatory_listing(&server).await;
    let e = entry(&l, &v2.id).expect("replacement listed");
    assert!(secs(&e, "time_left_secs") >= 9, "expiry extended: {e}");
    assert!(entry(&l, &v1.id).is_none(), "one entry per (owner, identifier): {l}");
    assert_eq!(l["stats"]["announcements"], 1);

    // A state event for it resets the timer too (trigger 1).
    eventually!("time to pass again", WAIT, {
        let l = purgatory_listing(&server).await;
        entry(&l, &v2.id).filter(|e| secs(e, "time_left_secs") <= 7)
    });
    held(&mut c, &state(&owner, "moving", &[("refs/heads/main", &"9".repeat(40))], None)).await;
    let e = entry(&purgatory_listing(&server).await, &v2.id).unwrap();
    assert!(secs(&e, "time_left_secs") >= 9, "a state event extends the announcement: {e}");

    // An older replay never evicts the newer one, even one dropping this service.
    let (ok, msg) = c.send_event(&v1).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:") && msg.contains("newer"), "{msg}");
    let mut old_elsewhere = announcement_with_urls(&owner, "moving", "https://elsewhere.example/x.git", "wss://elsewhere.example");
    old_elsewhere = EventBuilder::new(Kind::from(30617u16), "")
        .tags(old_elsewhere.tags.iter().cloned())
        .custom_created_at(Timestamp::from(now() - 70))
        .finalize(&owner)
        .unwrap();
    let (ok, msg) = c.send_event(&old_elsewhere).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:") && msg.contains("newer"), "{msg}");
    let l = purgatory_listing(&server).await;
    assert!(entry(&l, &v2.id).is_some() && bare.exists());

    // A newer announcement that no longer lists this service ends the entry and its repository.
    let elsewhere = announcement_with_urls(&owner, "moving", "https://elsewhere.example/x.git", "wss://elsewhere.example");
    let (ok, msg) = c.send_event(&elsewhere).await.unwrap();
    assert!(ok, "{msg}");
    let l = purgatory_listing(&server).await;
    assert!(entry(&l, &v2.id).is_none(), "{l}");
    assert!(!bare.exists(), "repository deleted");
    let logs = server.logs();
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("announcement replaced") && l.contains(&v2.id.to_hex())));
    assert!(logs.lines().any(|l| l.contains("INFO") && l.contains("held announcement removed") && l.contains(&v2.id.to_hex())));
}

#[tokio::test]
async fn deletions_remove_purgatory_entries_by_id_and_coordinate() {
    let (server, mut c) = connected(&[]).await;
    let owner = Keys::generate();
    let contributor = Keys::generate();
    let t = now();
    let ann = announcement_at(&server, &owner, "del", &[], t - 100);
    held(&mut c, &ann).await;
    let other = announcement_at(&server, &owner, "del-by-id", &[], t - 100);
    held(&mut c, &other).await;
    let s1 = state_at(&owner, "del", &[("refs/heads/main", &"1".repeat(40))], None, t - 90);
    let s2 = state_at(&owner, "del", &[("refs/heads/main", &"2".repeat(40))], None, t - 50);
    held(&mut c, &s1).await;
    held(&mut c, &s2).await;
    let pr = pull_request(&contributor, &owner.public_key(), "del", &"3".repeat(40), &[]);
    held(&mut c, &pr).await;
    let listed = |l: &Value, id: &EventId| entry(l, id).is_some();

    // Someone else's deletion removes nothing (the relay refuses it, or stores it harmlessly).
    for del in [
        deletion_at(&contributor, &[s1.id, ann.id], &[], t),
        deletion_at(&contributor, &[], &[coordinate(30617, &owner.public_key(), "del")], t),
    ] {
        let (ok, msg) = c.send_event(&del).await.unwrap();
        assert!(ok || msg.starts_with("invalid:"), "{msg}");
    }
    let l = purgatory_listing(&server).await;
    assert!(listed(&l, &s1.id) && listed(&l, &ann.id), "{l}");

    // By id.
    c.send_event(&deletion_at(&owner, &[s1.id], &[], t)).await.unwrap();
    c.send_event(&deletion_at(&contributor, &[pr.id], &[], t)).await.unwrap();
    let l = purgatory_listing(&server).await;
    assert!(!listed(&l, &s1.id) && !listed(&l, &pr.id) && listed(&l, &s2.id), "{l}");

    // By coordinate, respecting created_at: an older deletion does not cover the newer state.
    c.send_event(&deletion_at(&owner, &[], &[coordinate(30618, &owner.public_key(), "del")], t - 60)).await.unwrap();
    assert!(listed(&purgatory_listing(&server).await, &s2.id));
    c.send_event(&deletion_at(&owner, &[], &[coordinate(30618, &owner.public_key(), "del")], t - 40)).await.unwrap();
    assert!(!listed(&purgatory_listing(&server).await, &s2.id));

    // The announcement: an older coordinate deletion leaves it, a newer one removes it and its
    // repository.
    let bare = repo_dir(&server, &owner.public_key(), "del");
    c.send_event(&deletion_at(&owner, &[], &[coordinate(30617, &owner.public_key(), "del")], t - 200)).await.unwrap();
    assert!(listed(&purgatory_listing(&server).await, &ann.id) && bare.exists());
    c.send_event(&deletion_at(&owner, &[], &[coordinate(30617, &owner.public_key(), "del")], t)).await.unwrap();
    assert!(!listed(&purgatory_listing(&server).await, &ann.id));
    assert!(!bare.exists(), "a deleted held announcement's repository is deleted");

    // A held announcement deleted by id.
    let bare2 = repo_dir(&server, &owner.public_key(), "del-by-id");
    assert!(bare2.exists());
    c.send_event(&deletion_at(&owner, &[other.id], &[], t)).await.unwrap();
    assert!(!listed(&purgatory_listing(&server).await, &other.id));
    assert!(!bare2.exists());
    // Republishing a deleted event is refused.
    let (ok, msg) = c.send_event(&other).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    assert!(server.logs().contains("removed by deletion"));
}

#[tokio::test]
async fn placeholder_caps_refuse_the_push_before_its_refs_land() {
    let (server, tmp, mut c) = started(&["--placeholders-per-repo", "1", "--placeholders-total", "2"]).await;
    let mut pushes = Vec::new();
    for (n, name) in ["a", "b", "c"].iter().enumerate() {
        let owner = Keys::generate();
        held(&mut c, &announcement(&server, &owner, name, &[])).await;
        let work = Repo::new(&tmp.path().join(name), &server, &owner.public_key(), name);
        work.commit("f.txt", &format!("{n}"));
        pushes.push((owner, work));
    }
    let push = |work: &Repo| {
        let id = random_id();
        (id, work.push(&[&format!("HEAD:refs/nostr/{}", id.to_hex())]))
    };
    let (first, ok) = push(&pushes[0].1);
    ok.expect("first placeholder");
    // Per repository.
    let (second, refused) = push(&pushes[0].1);
    let err = refused.expect_err("second placeholder in the same repository");
    assert!(err.contains("rate-limited"), "{err}");
    let bare = repo_dir(&server, &pushes[0].0.public_key(), "a");
    let refs = bare_refs(&bare);
    assert!(refs.contains_key(&format!("refs/nostr/{}", first.to_hex())));
    assert!(!refs.contains_key(&format!("refs/nostr/{}", second.to_hex())), "refused ref did not land");
    // In total.
    push(&pushes[1].1).1.expect("placeholder in another repository");
    let (_, refused) = push(&pushes[2].1);
    let err = refused.expect_err("over the total");
    assert!(err.contains("blocked"), "{err}");
    let l = purgatory_listing(&server).await;
    assert_eq!(l["stats"]["placeholders"], 2, "{l}");
}

#[tokio::test]
async fn announcement_whose_repository_vanished_is_not_restored() {
    let (mut server, mut c) = connected(&["--checkpoint-interval", "1h"]).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "vanishing", &[]);
    held(&mut c, &ann).await;
    let kept = announcement(&server, &owner, "staying", &[]);
    held(&mut c, &kept).await;
    drop(c);
    server.stop();
    std::fs::remove_dir_all(repo_dir(&server, &owner.public_key(), "vanishing")).unwrap();
    server.restart();
    let l = purgatory_listing(&server).await;
    assert!(entry(&l, &ann.id).is_none(), "{l}");
    assert!(entry(&l, &kept.id).is_some(), "{l}");
    assert!(server.logs().contains("not restored"));

    // The operator's command asks the running relay.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(grasp_tests::binary_path("grasp-relay")).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let data = server.data_dir().to_str().unwrap().to_owned();
    let (ok, table, err) = run(&["purgatory", "--data-dir", &data]);
    assert!(ok, "{err}");
    let line = table.lines().find(|l| l.contains("staying")).unwrap_or_else(|| panic!("{table}"));
    assert!(line.starts_with("announcement") && line.contains(&kept.id.to_hex()[..12]), "{table}");
    let (ok, json, err) = run(&["purgatory", "--json", "--data-dir", &data]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(entry(&v, &kept.id).is_some(), "{json}");
    server.stop();
    let (ok, _, err) = run(&["purgatory", "--data-dir", &data]);
    assert!(!ok && err.contains("is grasp-relay running"), "{err}");
}

#[tokio::test]
async fn one_address_holds_only_its_share_of_the_purgatory_whatever_keys_it_uses() {
    // Far below the total: without the per-address share the throwaway keys fill it.
    let (mut server, mut c) = connected(&["--purgatory-per-address", "3", "--purgatory-total", "50", "--checkpoint-interval", "1h"]).await;
    let mut held_ids = Vec::new();
    let mut refusals = Vec::new();
    for n in 0..6 {
        let k = Keys::generate();
        let ann = announcement(&server, &k, &format!("throwaway{n}"), &[]);
        let (ok, msg) = c.send_event(&ann).await.unwrap();
        if ok {
            held_ids.push(ann.id);
        } else {
            refusals.push(msg);
        }
    }
    assert_eq!(held_ids.len(), 3, "{refusals:?}");
    assert_eq!(refusals.len(), 3);
    for msg in &refusals {
        assert!(
            msg.starts_with("rate-limited: this server holds 3 events waiting for git data from your address; push the git data"),
            "{msg}"
        );
    }
    let l = purgatory_listing(&server).await;
    assert_eq!(l["entries"].as_array().unwrap().len(), 3, "{l}");
    // The share survives a restart: the address is kept with each held entry (journal).
    drop(c);
    server.stop();
    server.restart();
    let mut c = connect(&server).await;
    let late = Keys::generate();
    let (ok, msg) = c.send_event(&announcement(&server, &late, "after-restart", &[])).await.unwrap();
    assert!(!ok && msg.contains("from your address"), "{msg}");
    assert!(!repo_dir(&server, &late.public_key(), "after-restart").exists(), "a refused announcement leaves no repository");
}

#[tokio::test]
async fn one_address_pushes_only_its_share_of_the_placeholders() {
    // Far below the per-repository cap and the total: only the address's share refuses.
    let (server, tmp, mut c) = started(&["--placeholders-per-address", "2", "--placeholders-per-repo", "50", "--placeholders-total", "50"]).await;
    let owner = Keys::generate();
    let work = held_repo(&server, &mut c, &tmp.path().join("w"), &owner, "parked").await;
    work.commit("f.txt", "data");
    let push = || {
        let id = random_id();
        (id, work.push(&[&format!("HEAD:refs/nostr/{}", id.to_hex())]))
    };
    push().1.expect("first placeholder");
    push().1.expect("second placeholder");
    let (third, refused) = push();
    let err = refused.expect_err("over the address's share");
    assert!(err.contains("rate-limited: this server holds 2 refs/nostr/* pushes from your address"), "{err}");
    let refs = bare_refs(&repo_dir(&server, &owner.public_key(), "parked"));
    assert!(!refs.contains_key(&format!("refs/nostr/{}", third.to_hex())), "refused ref did not land");
    let l = purgatory_listing(&server).await;
    assert_eq!(l["stats"]["placeholders"], 2, "{l}");
}
