//! GRASP-05 archive mode end to end (docs/protocol.md#archive-mode), with several real relays on
//! loopback: an archive takes announcements that do not list it when they match its
//! configuration, follows the servers they list for their events and git data, serves them, and
//! refuses pushes (unless `--archive-writable`); an announcement listing it stays hosted.

use grasp_state::names::identifier::npub_of;
use grasp_tests::grasp::*;
use grasp_tests::{eventually, TestServer};
use nostr::prelude::*;

/// An announcement by `keys` of `identifier` hosted elsewhere: `clone` URL on `host`, relay there.
fn hosted_on(keys: &Keys, identifier: &str, host: &str) -> Event {
    announcement_with_urls(keys, identifier, &format!("https://{host}/{}/{identifier}.git", npub_of(&keys.public_key())), &format!("wss://{host}"))
}

#[tokio::test]
async fn archive_all_follows_a_repository_published_elsewhere_and_refuses_pushes() {
    let origin = TestServer::start();
    let archive = TestServer::start_with(&[
        "--archive-all",
        "--sync-bootstrap-relay",
        &origin.ws_url(),
        "--sync-allow-private",
        "--sync-delay",
        "100ms",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    // Announced, stated and pushed on the origin; the owner does nothing for the archive.
    let mut co = connect(&origin).await;
    let published = publish_repo(&origin, &mut co, &tmp.path().join("w"), &owner, "mirrored").await;

    let mut ca = connect(&archive).await;
    eventually!("the archive serves the announcement", stored(&mut ca, published.announcement).await.then_some(()));
    eventually!("the archive serves the state", stored(&mut ca, published.state).await.then_some(()));
    let bare = repo_dir(&archive, &owner.public_key(), "mirrored");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&published.tip));
    let cloned = tmp.path().join("clone");
    clone(&repo_url(&archive, &owner.public_key(), "mirrored"), &cloned, &[]).unwrap();
    assert_eq!(grasp_tests::git::git(&cloned, &["rev-parse", "HEAD"]), published.tip);

    // Events about it come along too (level full once served).
    let issue = issue(&Keys::generate(), &owner.public_key(), "mirrored");
    assert!(co.send_event(&issue).await.unwrap().0);
    eventually!("the archive has the issue", stored(&mut ca, issue.id).await.then_some(()));

    // A push to the archive is refused, naming where the repository is hosted; nothing moves.
    let next = published.repo.commit("b.txt", "two");
    let st = state(&owner, "mirrored", &[("refs/heads/main", &next)], Some("main"));
    let refused = published.repo.push_to(&repo_url(&archive, &owner.public_key(), "mirrored"), &["main"]).unwrap_err();
    assert!(refused.contains("read-only archive") && refused.contains(&published.repo.url), "{refused}");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&published.tip));
    // It follows the origin instead.
    assert!(co.send_event(&st).await.unwrap().0);
    published.repo.push(&["main"]).unwrap();
    eventually!("the archive follows the next push on the origin", (bare_refs(&bare).get("refs/heads/main") == Some(&next)).then_some(()));

    let doc = nip11(&archive).await;
    assert!(doc["supported_grasps"].as_array().unwrap().iter().any(|g| g == "GRASP-05"), "{doc}");
    assert!(doc["curation"].as_str().unwrap().contains("Read-only archive (GRASP-05)"), "{doc}");
}

#[tokio::test]
async fn an_archive_takes_only_what_it_names_and_a_listing_announcement_stays_writable() {
    let (alice, bob, carol) = (Keys::generate(), Keys::generate(), Keys::generate());
    let archive = TestServer::start_with(&[
        "--archive",
        &format!("{}/linux", npub_of(&alice.public_key())),
        "--archive",
        "bitcoin",
        "--archive-grasp-service",
        "git.example.org",
    ]);
    let mut c = connect(&archive).await;
    // Named repository, named identifier (whoever owns it), a named service: held, with a
    // repository.
    held(&mut c, &hosted_on(&alice, "linux", "elsewhere.example")).await;
    held(&mut c, &hosted_on(&bob, "bitcoin", "elsewhere.example")).await;
    held(&mut c, &hosted_on(&carol, "anything", "git.example.org")).await;
    assert!(repo_dir(&archive, &alice.public_key(), "linux").is_dir());
    assert!(repo_dir(&archive, &carol.public_key(), "anything").is_dir());
    // Anything else is refused as before.
    for ev in [hosted_on(&alice, "other", "elsewhere.example"), hosted_on(&Keys::generate(), "anything", "git.example.org.evil")] {
        let (ok, msg) = c.send_event(&ev).await.unwrap();
        assert!(!ok && msg.starts_with("blocked:") && msg.contains("does not list this server"), "{ok} {msg}");
    }
    let doc = nip11(&archive).await;
    let curation = doc["curation"].as_str().unwrap();
    assert!(curation.contains("bitcoin") && curation.contains("hosted on git.example.org"), "{curation}");

    // An announcement of a named repository that lists this server is hosted: pushes go in.
    let tmp = tempfile::tempdir().unwrap();
    let listing = Keys::generate();
    let archive2 = TestServer::start_with(&["--archive", &npub_of(&listing.public_key())]);
    let mut c2 = connect(&archive2).await;
    let published = publish_repo(&archive2, &mut c2, &tmp.path().join("w"), &listing, "mine").await;
    assert!(stored(&mut c2, published.state).await);
}

#[tokio::test]
async fn archive_writable_takes_pushes_its_state_events_authorise() {
    let owner = Keys::generate();
    let archive = TestServer::start_with(&["--archive-all", "--archive-writable"]);
    let mut c = connect(&archive).await;
    let tmp = tempfile::tempdir().unwrap();
    held(&mut c, &hosted_on(&owner, "kept", "elsewhere.example")).await;
    let repo = Repo::new(&tmp.path().join("w"), &archive, &owner.public_key(), "kept");
    let tip = repo.commit("a.txt", "a");
    held(&mut c, &state(&owner, "kept", &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap();
    assert_eq!(bare_refs(&repo_dir(&archive, &owner.public_key(), "kept")).get("refs/heads/main"), Some(&tip));
    let doc = nip11(&archive).await;
    assert!(doc["curation"].as_str().unwrap().starts_with("Writable archive"), "{doc}");
}

#[tokio::test]
async fn the_repository_cap_bounds_an_archive_of_everything() {
    let archive = TestServer::start_with(&["--archive-all", "--max-repos", "2"]);
    let mut c = connect(&archive).await;
    held(&mut c, &hosted_on(&Keys::generate(), "one", "a.example")).await;
    held(&mut c, &hosted_on(&Keys::generate(), "two", "b.example")).await;
    let (ok, msg) = c.send_event(&hosted_on(&Keys::generate(), "three", "c.example")).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("maximum of 2 repositories"), "{ok} {msg}");
}
