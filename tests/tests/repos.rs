//! Repository maintenance end to end (docs/hook-api.md): `grasp-relay repos` lists served and held
//! repositories; orphans (a bare repository nothing justifies, a directory left by a crash) are
//! found, shown by a dry run and removed only with `--yes`; `git maintenance` runs after a push.

use std::path::Path;
use std::time::{Duration, SystemTime};

use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::{wait_until, TestServer, TIMEOUT};
use nostr::prelude::*;

fn repos(server: &TestServer, args: &[&str]) -> String {
    operator_command(server, "repos", args)
}

/// Makes `path` look an hour old (orphans younger than 10 minutes are never purged).
fn backdate(path: &Path) {
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(path).unwrap().set_modified(hour_ago).unwrap();
}

fn line_of<'a>(table: &'a str, identifier: &str) -> &'a str {
    table.lines().find(|l| l.ends_with(&format!(" {identifier}"))).unwrap_or_else(|| panic!("{identifier} not listed:\n{table}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_shows_served_and_held_repositories() {
    let (server, tmp, mut client) = started(&[]).await;
    let owner = Keys::generate();
    publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "served-one").await;
    let (ok, msg) = client.send_event(&announcement(&server, &owner, "held-one", &[])).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");

    let table = repos(&server, &[]);
    let npub = npub_of(&owner.public_key());
    let served = line_of(&table, "served-one");
    assert!(served.starts_with("served ") && served.contains(&npub), "{table}");
    assert!(line_of(&table, "held-one").starts_with("held "), "{table}");
    assert!(table.contains("1 served, 1 held, 0 orphaned, 0 leftovers"), "{table}");

    let json: serde_json::Value = serde_json::from_str(&repos(&server, &["--json"])).unwrap();
    let served = json["repos"].as_array().unwrap().iter().find(|r| r["identifier"] == "served-one").unwrap();
    assert_eq!(served["status"], "served");
    // Objects, refs and config (no git template files: docs/security.md).
    assert!(served["size_bytes"].as_u64().unwrap() > 300, "{served}");
}

#[tokio::test(flavor = "multi_thread")]
async fn orphans_are_found_and_purged_only_with_confirmation() {
    let (server, tmp, mut client) = started(&[]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "kept").await;

    // A bare repository no announcement justifies, and a directory left by a crash mid-creation.
    let stranger = Keys::generate().public_key();
    let orphan = repo_dir(&server, &stranger, "orphan");
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    assert!(std::process::Command::new("git").args(["init", "--bare", "--quiet"]).arg(&orphan).status().unwrap().success());
    let crashed = repo_dir(&server, &owner.public_key(), "kept").parent().unwrap().join(".tmp-4242-1");
    std::fs::create_dir_all(crashed.join("objects")).unwrap();
    // A fresh orphan may be in the making: it is listed but kept.
    let fresh = repo_dir(&server, &stranger, "fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    for p in [&orphan, &crashed] {
        backdate(p);
    }

    let orphans = repos(&server, &["--orphans"]);
    assert!(line_of(&orphans, "orphan").starts_with("orphaned "), "{orphans}");
    assert!(orphans.contains(".tmp-4242-1") && orphans.contains("leftover"), "{orphans}");
    assert!(!orphans.lines().any(|l| l.ends_with(" kept")), "served repository listed as orphan: {orphans}");

    let dry = repos(&server, &["--purge"]);
    assert!(dry.contains("dry run") && dry.contains("orphan.git") && dry.contains(".tmp-4242-1"), "{dry}");
    assert!(orphan.exists() && crashed.exists(), "a dry run removed something");

    let done = repos(&server, &["--purge", "--yes"]);
    assert!(!orphan.exists() && !crashed.exists(), "{done}");
    assert!(fresh.exists() && done.contains("younger than 10 minutes"), "{done}");
    // The served repository is untouched and still clones.
    let served = repo_dir(&server, &owner.public_key(), "kept");
    assert_eq!(bare_refs(&served).get("refs/heads/main"), Some(&published.tip));
    assert!(server.logs().contains("orphan purged"));
    let after = repos(&server, &[]);
    assert!(after.contains("1 served, 0 held, 1 orphaned, 0 leftovers"), "{after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_runs_after_a_push() {
    let (server, tmp, mut client) = started(&[]).await;
    let owner = Keys::generate();
    publish_repo(&server, &mut client, &tmp.path().join("w"), &owner, "tidy").await;
    let wanted = format!("{}/tidy.git", npub_of(&owner.public_key()));
    // The relay runs git's auto maintenance itself, after the answer (receive-pack's auto-gc is
    // off in GRASP repositories, so the pusher does not wait for it).
    wait_until("maintenance after the push", TIMEOUT, || {
        server
            .logs()
            .lines()
            .any(|l| l.contains("repository maintenance done") && l.contains(&wanted) && l.contains("maintenance run --auto"))
            .then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", server.logs()));
}
