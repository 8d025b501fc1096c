//! Unsigned data (docs/protocol.md#caps, docs/security.md): the bytes of git-first pushes to
//! `refs/nostr/<id>` that no signed event stands for yet count against their address's budget
//! (`--unsigned-bytes-per-address`) and everyone's (`--unsigned-bytes-total`) until the
//! placeholder goes; a push past a budget is refused in pre-receive, before its data lands.
//! Maintainers' pushes never count. Every wait is on an observable condition with a deadline.

use std::time::Duration;

use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);
const MIB: u64 = 1 << 20;

/// The unsigned data the operator listing reports: total bytes, and the bytes of 127.0.0.1.
async fn unsigned(server: &TestServer) -> (u64, u64) {
    let l: Value = purgatory_listing(server).await;
    let u = &l["unsigned"];
    let local = u["top"].as_array().unwrap().iter().find(|a| a["address"] == "127.0.0.1").map_or(0, |a| a["bytes"].as_u64().unwrap());
    (u["total_bytes"].as_u64().unwrap_or_else(|| panic!("no unsigned data in {l}")), local)
}

#[tokio::test]
async fn an_address_at_its_unsigned_budget_is_refused_until_a_pull_request_event_releases_its_data() {
    let (server, tmp, mut c) = started(&["--unsigned-bytes-per-address", &MIB.to_string()]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "proj").await;
    let repo = &published.repo;
    let stranger = Keys::generate();

    // 700 KiB parked under a pull request event nobody has seen yet: within the budget.
    let first = commit_random(&repo.work, "a", 1, 700);
    let pr = pull_request(&stranger, &owner.public_key(), "proj", &first, &[]);
    repo.push(&[&format!("HEAD:refs/nostr/{}", pr.id.to_hex())]).expect("the first placeholder fits");
    let (total, local) = unsigned(&server).await;
    assert!(local >= 700 << 10 && total == local, "the push's bytes count for its address: {total} {local}");

    // 700 KiB more would take the address past 1 MiB: refused, nothing lands.
    commit_random(&repo.work, "b", 1, 700);
    let second = random_event_id();
    let err = repo.push(&[&format!("HEAD:refs/nostr/{second}")]).expect_err("past the address's budget");
    assert!(
        err.contains("remote: grasp: this server holds 0.") && err.contains(
            " MiB of unsigned data from your address (budget 1 MiB); publish the pull request event first (its data then no longer counts), or retry later"
        ),
        "{err}"
    );
    let refs = bare_refs(&repo_dir(&server, &owner.public_key(), "proj"));
    assert!(!refs.contains_key(&format!("refs/nostr/{second}")), "the refused ref did not land");
    assert_eq!(unsigned(&server).await.1, local, "a refused push counts nothing");

    // The pull request event arrives: its data is signed for, and leaves the budget.
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok && !msg.starts_with("purgatory:"), "the pull request is served at once: {msg}");
    eventually!("the released placeholder to leave the unsigned budget", WAIT, { (unsigned(&server).await == (0, 0)).then_some(()) });
    repo.push(&[&format!("HEAD:refs/nostr/{second}")]).expect("room again once the event released the first");
    assert!(unsigned(&server).await.1 >= 700 << 10);
}

#[tokio::test]
async fn the_total_budget_refuses_strangers_but_never_maintainers_and_survives_a_crash() {
    let (mut server, tmp, mut c) = started(&["--grasp06", "--unsigned-bytes-total", &MIB.to_string()]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "proj").await;
    let repo = &published.repo;

    // A stranger parks 700 KiB in a GRASP-06 contributor repository under a random npub.
    commit_random(&repo.work, "c", 1, 700);
    let contributor = npub_of(&Keys::generate().public_key());
    let prs_url = format!("http://{}/prs/{contributor}/proj.git", host(&server));
    repo.push_to(&prs_url, &[&format!("HEAD:refs/nostr/{}", random_event_id())]).expect("the first placeholder fits");
    let (held, _) = unsigned(&server).await;
    assert!(held >= 700 << 10, "{held}");

    // More from anyone would pass everyone's budget.
    commit_random(&repo.work, "d", 1, 700);
    let tip = repo.rev("HEAD");
    let parked = random_event_id();
    let err = repo.push(&[&format!("HEAD:refs/nostr/{parked}")]).expect_err("past the total budget");
    assert!(err.contains("MiB of unsigned data from everyone (budget 1 MiB); publish the pull request event first"), "{err}");

    // The maintainer's own push (1.4 MiB, matching their state) is neither counted nor refused.
    // A second later than publish_repo's state, so it is the newer one (same-second ties go by id).
    let st = state_at(&owner, "proj", &[("refs/heads/main", &tip)], Some("main"), now() + 1);
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["HEAD:refs/heads/main"]).expect("a maintainer's push ignores the unsigned budget");
    assert_eq!(unsigned(&server).await.0, held, "a maintainer's data is not unsigned");

    // The accounting survives a crash (journal), and still refuses.
    drop(c);
    server.kill();
    server.restart();
    assert_eq!(unsigned(&server).await.0, held, "the unsigned bytes are restored with their placeholder");
    commit_random(&repo.work, "e", 1, 700);
    let err = repo.push(&[&format!("HEAD:refs/nostr/{}", random_event_id())]).expect_err("still past the total after a restart");
    assert!(err.contains("unsigned data from everyone"), "{err}");
}
