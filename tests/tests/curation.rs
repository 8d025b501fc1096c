//! The operator's allow and deny lists end to end (docs/protocol.md#trust): blocked authors and
//! event ids, repository allow and deny lists, a curation file re-read while the relay runs
//! (held entries of a newly blocked author dropped, stored data kept), the NIP-11 `curation`
//! summary, and `grasp-relay purge-author`.

use grasp_tests::grasp::*;
use grasp_tests::{binary_path, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}


/// Polls `cond` (async) with a deadline.
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !cond().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn no_curation_no_summary() {
    let server = TestServer::start();
    assert!(nip11(&server).await.get("curation").is_none());
}

#[tokio::test]
async fn blocked_authors_and_events_and_denied_repositories_are_refused() {
    let (spammer, alice) = (Keys::generate(), Keys::generate());
    let bad = event(&alice, 10317, &[&["g", "ws://bad.example.com"]]);
    let hex = spammer.public_key().to_hex();
    let id = bad.id.to_hex();
    let server = TestServer::start_with(&["--block-author", &hex, "--block-event", &id, "--deny-repo", "forbidden"]);
    assert!(nip11(&server).await["curation"].as_str().unwrap().contains("Curated"));
    let mut c = connect(&server).await;
    for ev in [event(&spammer, 10317, &[]), announcement(&server, &spammer, "mine", &[])] {
        let (ok, msg) = c.send_event(&ev).await.unwrap();
        assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    }
    assert!(!repo_dir(&server, &spammer.public_key(), "mine").exists());
    let (ok, msg) = c.send_event(&bad).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    let (ok, msg) = c.send_event(&announcement(&server, &alice, "forbidden", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("deny list"), "{msg}");
    assert!(!repo_dir(&server, &alice.public_key(), "forbidden").exists());
    assert!(c.send_event(&announcement(&server, &alice, "fine", &[])).await.unwrap().0);
    assert!(c.req(vec![Filter::new().author(spammer.public_key())]).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_allow_list_admits_only_its_repositories() {
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let npub = alice.public_key().to_bech32().unwrap();
    let one = format!("{}/tools", bob.public_key().to_bech32().unwrap());
    let (server, mut c) = connected(&["--allow-repo", &npub, "--allow-repo", &one]).await;
    assert!(c.send_event(&announcement(&server, &alice, "anything", &[])).await.unwrap().0);
    assert!(c.send_event(&announcement(&server, &bob, "tools", &[])).await.unwrap().0);
    let (ok, msg) = c.send_event(&announcement(&server, &bob, "other", &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("allow list"), "{msg}");
    assert!(!repo_dir(&server, &bob.public_key(), "other").exists());
}

#[tokio::test]
async fn the_curation_file_is_reread_and_purge_author_removes_stored_data() {
    let (spammer, alice) = (Keys::generate(), Keys::generate());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("curation");
    std::fs::write(&file, "# nothing yet\n").unwrap();
    let server = TestServer::start_with(&["--curation-file", file.to_str().unwrap()]);
    assert!(nip11(&server).await.get("curation").is_none(), "an empty file curates nothing");
    let mut c = connect(&server).await;

    // Before the block: a stored event, a held announcement (and its repository), a held state.
    let stored = event(&spammer, 10317, &[&["g", "ws://example.com"]]);
    assert!(c.send_event(&stored).await.unwrap().0);
    let held = announcement(&server, &spammer, "spam", &[]);
    assert!(c.send_event(&held).await.unwrap().0);
    let held_state = state(&spammer, "spam", &[("refs/heads/main", &"a".repeat(40))], Some("main"));
    assert!(c.send_event(&held_state).await.unwrap().0);
    let alices = announcement(&server, &alice, "good", &[]);
    assert!(c.send_event(&alices).await.unwrap().0);
    // A held pull request of the spammer's to someone else's repository.
    let held_pr = pull_request(&spammer, &alice.public_key(), "good", &"b".repeat(40), &[]);
    let (ok, msg) = c.send_event(&held_pr).await.unwrap();
    assert!(ok && msg.starts_with("purgatory"), "{msg}");
    let dir = repo_dir(&server, &spammer.public_key(), "spam");
    assert!(dir.exists());

    std::fs::write(&file, format!("block-author {}\n", spammer.public_key().to_bech32().unwrap())).unwrap();
    eventually("the NIP-11 curation summary", || async { nip11(&server).await.get("curation").is_some() }).await;
    eventually("the blocked author's held entries to go", || async {
        let ids = purgatory_ids(&server).await;
        !ids.contains(&held.id.to_hex()) && !ids.contains(&held_state.id.to_hex()) && !ids.contains(&held_pr.id.to_hex())
    })
    .await;
    assert!(!dir.exists(), "the held announcement's repository goes with it");
    assert!(purgatory_ids(&server).await.contains(&alices.id.to_hex()), "others' held entries stay");
    let (ok, msg) = c.send_event(&event(&spammer, 10317, &[])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    assert_eq!(c.req(vec![Filter::new().id(stored.id)]).await.unwrap().len(), 1, "stored data stays until purged");

    // A broken edit keeps the last good rules.
    std::fs::write(&file, "block-author not-a-key\n").unwrap();
    let (ok, _) = c.send_event(&event(&spammer, 10317, &[&["t", "again"]])).await.unwrap();
    assert!(!ok);

    let out = std::process::Command::new(binary_path("grasp-relay"))
        .args(["purge-author", &spammer.public_key().to_bech32().unwrap(), "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1 stored events"), "{text}");
    assert!(c.req(vec![Filter::new().author(spammer.public_key())]).await.unwrap().is_empty());
    assert_eq!(c.req(vec![Filter::new().author(alice.public_key())]).await.unwrap().len(), 0, "alice's held announcement is not served");
    assert!(purgatory_ids(&server).await.contains(&alices.id.to_hex()), "and still held");
}
