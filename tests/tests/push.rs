//! Push authorisation through the git hooks and release of held events (issue: push flow),
//! end to end: real relay, real `git push` over HTTP, a WebSocket Nostr client.

use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer};
use nostr::prelude::*;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

async fn stored(c: &mut NostrClient, id: EventId) -> bool {
    !c.req(vec![Filter::new().id(id)]).await.unwrap().is_empty()
}

#[tokio::test]
async fn state_then_push_releases_state_and_announcement() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "hello", &[]);
    let (ok, msg) = c.send_event(&ann).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    assert!(!stored(&mut c, ann.id).await, "announcement must not be served before git data");

    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "hello");
    let tip = repo.commit("a.txt", "one");

    // No state yet: rejected, with a reason.
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("repository state"), "{err}");

    let st = state(&owner, "hello", &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");

    let out = repo.push(&["main"]).unwrap();
    assert!(out.contains("released"), "{out}");
    assert!(stored(&mut c, st.id).await);
    assert!(stored(&mut c, ann.id).await);
    let refs = bare_refs(&repo_dir(&server, &owner.public_key(), "hello"));
    assert_eq!(refs.get("refs/heads/main"), Some(&tip));

    // Anyone can clone it now.
    clone(&repo.url, &tmp.path().join("clone"), &[]).unwrap();
}

#[tokio::test]
async fn wrong_commit_is_rejected_with_a_readable_reason() {
    let server = TestServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    let owner = Keys::generate();
    c.send_event(&announcement(&server, &owner, "r", &[])).await.unwrap();
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "r");
    let first = repo.commit("a", "1");
    let second = repo.commit("b", "2");
    c.send_event(&state(&owner, "r", &[("refs/heads/main", &first)], Some("main"))).await.unwrap();
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("refs/heads/main") && err.contains(&second[..7]) && err.contains(&first[..7]), "{err}");
    assert!(bare_refs(&repo_dir(&server, &owner.public_key(), "r")).is_empty());
}
