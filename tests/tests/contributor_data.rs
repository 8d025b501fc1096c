//! Contributor data (docs/protocol.md#budgets, docs/security.md): the git data of pull requests
//! by keys that are not maintainers of the repository counts against its author's budget
//! (`--contributor-bytes-per-author`), its address's and everyone's; a push or a pull request
//! event past a budget is refused; the bytes leave when maintainers' refs reach them (a merge),
//! when the pull request was closed for longer than `--pr-data-grace` (its refs are pruned), or
//! with its author (`purge-author`). The ledger survives a restart and is rebuilt from disk when
//! lost. Every wait is on an observable condition with a deadline.

use std::time::Duration;

use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;

/// The contributor data the operator listing reports: total bytes, and the bytes of `author`.
async fn contributors(server: &TestServer, author: &PublicKey) -> (u64, u64) {
    let l: Value = purgatory_listing(server).await;
    let c = &l["contributors"];
    let npub = npub_of(author);
    let mine = c["top_authors"].as_array().unwrap().iter().find(|a| a["who"] == npub.as_str()).map_or(0, |a| a["bytes"].as_u64().unwrap());
    (c["total_bytes"].as_u64().unwrap_or_else(|| panic!("no contributor data in {l}")), mine)
}

/// The unsigned data the listing reports in total.
async fn unsigned_total(server: &TestServer) -> u64 {
    purgatory_listing(server).await["unsigned"]["total_bytes"].as_u64().unwrap()
}

fn nostr_ref(id: &EventId) -> String {
    format!("refs/nostr/{}", id.to_hex())
}

/// A status (`kind`: 1630 open ... 1632 closed) of pull request `pr` of `owner`'s `identifier`.
fn status(keys: &Keys, kind: u16, pr: &EventId, owner: &PublicKey, identifier: &str) -> Event {
    event(keys, kind, &[&["e", &pr.to_hex(), "", "root"], &["a", &format!("30617:{}:{identifier}", owner.to_hex())]])
}

/// An owner's repository `proj` published on `server` (announcement, state, push), with the
/// client that published it.
async fn owners_repo(server: &TestServer) -> (tempfile::TempDir, grasp_tests::NostrClient, Keys, Published) {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(server).await;
    let owner = Keys::generate();
    let published = publish_repo(server, &mut c, &tmp.path().join("w"), &owner, "proj").await;
    (tmp, c, owner, published)
}

/// A new commit of 700 KiB on `repo` (`tag` names its file) and `author`'s pull request for it
/// on `owner`'s `proj`, sent on `c` and held in the purgatory until its data comes: (the commit,
/// the pull request).
async fn held_pull_request(c: &mut grasp_tests::NostrClient, repo: &Repo, author: &Keys, owner: &Keys, tag: &str) -> (String, Event) {
    let commit = commit_random(&repo.work, tag, 1, 700);
    let pr = pull_request(author, &owner.public_key(), "proj", &commit, &[]);
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    (commit, pr)
}

#[tokio::test]
async fn a_strangers_pull_request_data_counts_for_its_author_until_a_merge() {
    let server = TestServer::start_with(&["--contributor-bytes-per-author", &MIB.to_string(), "--contributor-reconcile-interval", "1s"]);
    let (_tmp, mut c, owner, published) = owners_repo(&server).await;
    let repo = &published.repo;
    let stranger = Keys::generate();

    // The event first, then 700 KiB of its commit: counted for its author.
    let (first, pr) = held_pull_request(&mut c, repo, &stranger, &owner, "a").await;
    repo.push(&[&format!("HEAD:{}", nostr_ref(&pr.id))]).expect("the first pull request's data fits");
    let (total, mine) = contributors(&server, &stranger.public_key()).await;
    assert!(mine >= 700 << 10 && total == mine, "the push's bytes count for the pull request's author: {total} {mine}");

    // A second one would take the author past 1 MiB: refused, nothing lands.
    let (_, pr2) = held_pull_request(&mut c, repo, &stranger, &owner, "b").await;
    let err = repo.push(&[&format!("HEAD:{}", nostr_ref(&pr2.id))]).expect_err("past the author's budget");
    assert!(
        err.contains(&format!("MiB of pull request data from {} (budget 1 MiB); close the pull requests", npub_of(&stranger.public_key()))),
        "{err}"
    );
    let dir = repo_dir(&server, &owner.public_key(), "proj");
    assert!(!bare_refs(&dir).contains_key(&nostr_ref(&pr2.id)), "the refused ref did not land");
    assert_eq!(contributors(&server, &stranger.public_key()).await.1, mine, "a refused push counts nothing");

    // A maintainer merges the first: main reaches its data, which leaves the budget.
    let st = state_at(&owner, "proj", &[("refs/heads/main", &first)], Some("main"), now() + 1);
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&[&format!("{first}:refs/heads/main")]).expect("the maintainer's merge");
    eventually!("the merged data to leave the budget", WAIT, { (contributors(&server, &stranger.public_key()).await == (0, 0)).then_some(()) });
    repo.push(&[&format!("HEAD:{}", nostr_ref(&pr2.id))]).expect("room again once the first was merged");
    assert!(contributors(&server, &stranger.public_key()).await.1 >= 700 << 10);
}

#[tokio::test]
async fn a_pull_request_event_takes_its_unsigned_data_into_its_authors_budget() {
    let server = TestServer::start_with(&["--contributor-bytes-per-author", &MIB.to_string()]);
    let (_tmp, mut c, owner, published) = owners_repo(&server).await;
    let repo = &published.repo;
    let stranger = Keys::generate();

    // Git first (unsigned data), then the event: the bytes move to its author.
    let first = commit_random(&repo.work, "a", 1, 700);
    let pr = pull_request(&stranger, &owner.public_key(), "proj", &first, &[]);
    repo.push(&[&format!("HEAD:{}", nostr_ref(&pr.id))]).expect("a git-first push");
    let parked = unsigned_total(&server).await;
    assert!(parked >= 700 << 10, "{parked}");
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok && !msg.starts_with("purgatory:"), "served at once: {msg}");
    assert_eq!(unsigned_total(&server).await, 0, "no longer unsigned");
    assert_eq!(contributors(&server, &stranger.public_key()).await.1, parked, "the same bytes, now the author's");

    // The same author's next git-first push is unsigned data of its address and fits there, but
    // its event would take the author past 1 MiB: refused, the placeholder stays unsigned.
    let second = commit_random(&repo.work, "b", 1, 700);
    let pr2 = pull_request(&stranger, &owner.public_key(), "proj", &second, &[]);
    repo.push(&[&format!("HEAD:{}", nostr_ref(&pr2.id))]).expect("a git-first push");
    let (ok, msg) = c.send_event(&pr2).await.unwrap();
    assert!(!ok && msg.starts_with("rate-limited: this server keeps 0.") && msg.contains("MiB of pull request data from npub1"), "{msg}");
    assert!(unsigned_total(&server).await >= 700 << 10, "still unsigned, expiring as any placeholder");

    // The owner's own pull request data is never counted, whatever the budgets hold.
    let (_, own) = held_pull_request(&mut c, repo, &owner, &owner, "c").await;
    repo.push(&[&format!("HEAD:{}", nostr_ref(&own.id))]).expect("a maintainer's pull request data is not counted");
    let (total, _) = contributors(&server, &stranger.public_key()).await;
    assert_eq!(total, parked, "only the stranger's data counts");
}

#[tokio::test]
async fn closed_pull_requests_are_pruned_and_the_ledger_survives_restarts() {
    let mut server = TestServer::start_with(&["--pr-data-grace", "1s", "--contributor-reconcile-interval", "1s"]);
    let (_tmp, mut c, owner, published) = owners_repo(&server).await;
    let repo = &published.repo;
    let stranger = Keys::generate();
    let dir = repo_dir(&server, &owner.public_key(), "proj");

    let mut prs = Vec::new();
    for tag in ["a", "b"] {
        let tip = commit_random(&repo.work, tag, 1, 300);
        let pr = pull_request(&stranger, &owner.public_key(), "proj", &tip, &[]);
        let (ok, msg) = c.send_event(&pr).await.unwrap();
        assert!(ok, "{msg}");
        repo.push(&[&format!("HEAD:{}", nostr_ref(&pr.id))]).expect("pull request data");
        prs.push(pr);
    }
    let counted = contributors(&server, &stranger.public_key()).await;
    assert!(counted.1 >= 600 << 10, "{counted:?}");

    // A stop keeps the ledger; a lost file is rebuilt from disk (addresses unknown).
    drop(c);
    server.stop();
    server.restart();
    // Kept (the reconciliation may have measured it on disk since: the same bytes, give or take
    // how git stored them).
    eventually!("the ledger kept across a restart", WAIT, {
        let kept = contributors(&server, &stranger.public_key()).await;
        (kept.1.abs_diff(counted.1) < 64 << 10 && kept.0 == kept.1).then_some(())
    });
    server.kill();
    std::fs::remove_file(server.data_dir().join(grasp_state::contract::layout::CONTRIBUTOR_DATA_FILE)).expect("the ledger was written");
    server.restart();
    eventually!("the ledger rebuilt from disk", WAIT, {
        let now = contributors(&server, &stranger.public_key()).await;
        (now.1.abs_diff(counted.1) < 64 << 10).then_some(())
    });

    // Closed by someone who is neither its author nor a maintainer: nothing changes. Closed by
    // its author: its data is pruned after the grace, the event stays.
    let mut c = connect(&server).await;
    let (ok, msg) = c.send_event(&status(&Keys::generate(), 1632, &prs[0].id, &owner.public_key(), "proj")).await.unwrap();
    assert!(ok, "{msg}");
    let (ok, msg) = c.send_event(&status(&stranger, 1632, &prs[1].id, &owner.public_key(), "proj")).await.unwrap();
    assert!(ok, "{msg}");
    eventually!("the closed pull request's data to be pruned", WAIT, { (!bare_refs(&dir).contains_key(&nostr_ref(&prs[1].id))).then_some(()) });
    eventually!("its bytes to leave the budget", WAIT, {
        let l = purgatory_listing(&server).await;
        (l["contributors"]["pull_requests"] == 1).then_some(())
    });
    assert!(bare_refs(&dir).contains_key(&nostr_ref(&prs[0].id)), "a stranger's status prunes nothing");
    let served = c.req(vec![Filter::new().id(prs[1].id)]).await.unwrap();
    assert_eq!(served.len(), 1, "the pull request event itself stays");

    // The operator purges the author: the rest of their data goes.
    operator_command(&server, "purge-author", &[&npub_of(&stranger.public_key())]);
    assert!(!bare_refs(&dir).contains_key(&nostr_ref(&prs[0].id)), "purged with its author");
    assert_eq!(contributors(&server, &stranger.public_key()).await, (0, 0));
}

#[tokio::test]
async fn strangers_from_many_addresses_fill_the_total_and_a_maintainer_still_pushes() {
    // The pushes come through a trusted proxy naming their client addresses.
    let server = TestServer::start_with(&["--contributor-bytes-total", &MIB.to_string(), "--trusted-proxy", "127.0.0.1/32"]);
    let (_tmp, mut c, owner, published) = owners_repo(&server).await;
    let repo = &published.repo;
    let from = |n: u8| grasp_tests::git::git(&repo.work.dir, &["config", "http.extraHeader", &format!("X-Forwarded-For: 10.0.0.{n}")]);

    let mut refused = None;
    for n in 1..=3u8 {
        let tip = commit_random(&repo.work, &format!("s{n}"), 1, 450);
        let pr = pull_request(&Keys::generate(), &owner.public_key(), "proj", &tip, &[]);
        let (ok, msg) = c.send_event(&pr).await.unwrap();
        assert!(ok, "{msg}");
        from(n);
        match repo.push(&[&format!("HEAD:{}", nostr_ref(&pr.id))]) {
            Ok(_) => assert!(refused.is_none(), "nothing fits once the total is reached"),
            Err(err) => refused = Some(err),
        }
    }
    let err = refused.expect("the third stranger passes the total");
    assert!(err.contains("MiB of pull request data from contributors (budget 1 MiB)"), "{err}");
    let l = purgatory_listing(&server).await;
    assert_eq!(l["contributors"]["addresses"], 2, "counted per address: {l}");

    // The owner's own push is neither counted nor refused.
    grasp_tests::git::git(&repo.work.dir, &["config", "--unset", "http.extraHeader"]);
    let tip = commit_random(&repo.work, "mine", 1, 700);
    let st = state_at(&owner, "proj", &[("refs/heads/main", &tip)], Some("main"), now() + 1);
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["HEAD:refs/heads/main"]).expect("a maintainer's push ignores the strangers' budgets");
}
