//! Owners' quotas (docs/protocol.md#budgets): the bytes one client address may push in a day into
//! the repositories of owners new here (`--new-owner-bytes-per-address-per-day`), and the bytes
//! all of one owner's repositories may hold (`--owner-quota`). Owners with data here for a day,
//! and owners the operator exempts, keep pushing while newcomers from one place are slowed down.

use std::time::{Duration, SystemTime};

use grasp_tests::grasp::*;
use grasp_tests::TestServer;
use nostr::prelude::*;

const MIB: u64 = 1 << 20;

/// Makes `owner`'s repository of `identifier` look two days old (its creation marker).
fn age(server: &TestServer, owner: &PublicKey, identifier: &str) {
    let marker = repo_dir(server, owner, identifier).join(grasp_state::contract::layout::PUSH_LOCK_FILE);
    let file = std::fs::File::options().write(true).open(&marker).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(2 * 24 * 3600)).unwrap();
}

/// `owner` signs a state for `tip` on `main` and pushes it.
async fn push_main(c: &mut grasp_tests::NostrClient, repo: &Repo, owner: &Keys, identifier: &str, tip: &str, at: u64) -> Result<String, String> {
    let st = state_at(owner, identifier, &[("refs/heads/main", tip)], Some("main"), at);
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["HEAD:refs/heads/main"])
}

#[tokio::test]
async fn new_owners_from_one_address_are_slowed_down_and_established_ones_are_not() {
    let exempt = Keys::generate();
    let server = TestServer::start_with(&[
        "--new-owner-bytes-per-address-per-day",
        &MIB.to_string(),
        "--quota-exempt-owner",
        &exempt.public_key().to_hex(),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;

    // An owner whose repository has had data here for two days.
    let settled = Keys::generate();
    let s = publish_repo(&server, &mut c, &tmp.path().join("s"), &settled, "old").await;
    age(&server, &settled.public_key(), "old");

    // A newcomer pushes 700 KiB: within the address's day.
    let first = Keys::generate();
    let a = publish_repo(&server, &mut c, &tmp.path().join("a"), &first, "new").await;
    let tip = commit_random(&a.repo.work, "a", 1, 700);
    push_main(&mut c, &a.repo, &first, "new", &tip, now() + 1).await.expect("within the day's budget");

    // Another newcomer from the same address would pass 1 MiB: refused, nothing lands.
    let second = Keys::generate();
    let b = publish_repo(&server, &mut c, &tmp.path().join("b"), &second, "new").await;
    let tip = commit_random(&b.repo.work, "b", 1, 700);
    let err = push_main(&mut c, &b.repo, &second, "new", &tip, now() + 1).await.expect_err("past the address's day");
    assert!(
        err.contains("remote: grasp: this server took ") && err.contains(
            " MiB for new owners' repositories from your address in the last 24 hours (budget 1 MiB); push the rest later, or to another GRASP server listed for the repository"
        ),
        "{err}"
    );
    assert_ne!(bare_refs(&repo_dir(&server, &second.public_key(), "new")).get("refs/heads/main"), Some(&tip), "nothing landed");

    // The established owner, and an exempt newcomer, push as much from the same address.
    let tip = commit_random(&s.repo.work, "s", 1, 700);
    push_main(&mut c, &s.repo, &settled, "old", &tip, now() + 1).await.expect("an established owner is no newcomer");
    let e = publish_repo(&server, &mut c, &tmp.path().join("e"), &exempt, "new").await;
    let tip = commit_random(&e.repo.work, "e", 1, 700);
    push_main(&mut c, &e.repo, &exempt, "new", &tip, now() + 1).await.expect("an exempt owner");
}

#[tokio::test]
async fn an_owner_past_their_quota_is_refused_but_contributors_are_not_counted_there() {
    let (server, tmp, mut c) = started(&["--owner-quota", &MIB.to_string()]).await;
    let owner = Keys::generate();
    let p = publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "proj").await;
    let tip = commit_random(&p.repo.work, "a", 1, 700);
    push_main(&mut c, &p.repo, &owner, "proj", &tip, now() + 1).await.expect("within the quota");
    let tip = commit_random(&p.repo.work, "b", 1, 700);
    let err = push_main(&mut c, &p.repo, &owner, "proj", &tip, now() + 2).await.expect_err("past the owner's quota");
    assert!(err.contains("of this owner's repositories (quota 1 MiB per owner); delete repositories you no longer need here"), "{err}");

    // A stranger's pull request data has budgets of its own.
    let pr = pull_request(&Keys::generate(), &owner.public_key(), "proj", &tip, &[]);
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok, "{msg}");
    p.repo.push(&[&format!("HEAD:refs/nostr/{}", pr.id.to_hex())]).expect("a pull request's data is not the owner's quota");
}
