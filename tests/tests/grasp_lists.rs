//! User grasp lists (kind 10317) in discovery, end to end (docs/protocol.md#background-sync,
//! #relay-sync), with several real relays on loopback: relay sync carries the lists of the
//! owners and maintainers of the repositories a relay serves (and of nobody else), and when the
//! clone URLs an announcement names do not yield the missing data, the background git sync finds
//! it on the servers of the owner's list.

use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

/// A relay that fetches from loopback, one second after a user's event, retrying quickly.
fn relay(extra: &[&str]) -> TestServer {
    let mut args = vec!["--sync-allow-private", "--sync-user-delay", "1s", "--sync-backoff", "500ms", "--sync-backoff-cap", "1s"];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

/// `keys`' user grasp list (10317) naming `servers` (their WebSocket URLs), created at `at`.
fn grasp_list(keys: &Keys, servers: &[String], at: u64) -> Event {
    let tags: Vec<Tag> = servers.iter().map(|s| Tag::parse(["g", s.as_str()]).unwrap()).collect();
    EventBuilder::new(Kind::Custom(10317), "").tags(tags).custom_created_at(Timestamp::from(at)).finalize(keys).unwrap()
}

/// The user grasp lists `server` stores by `author`.
async fn lists_of(server: &TestServer, author: &PublicKey) -> Vec<Event> {
    let mut c = connect(server).await;
    c.req(vec![Filter::new().kind(Kind::Custom(10317)).author(*author)]).await.unwrap()
}

#[tokio::test]
async fn relay_sync_carries_the_grasp_lists_of_owners_and_maintainers_only() {
    let (a, b) = (relay(&[]), relay(&[]));
    let (owner, maintainer, stranger) = (Keys::generate(), Keys::generate(), Keys::generate());
    let (mut ca, mut cb) = (connect(&a).await, connect(&b).await);
    // One repository listing both servers, with a maintainer; its announcement on both.
    let listing = |keys: &Keys, listed: &PublicKey| {
        let ann = announcement_on(&[&a, &b], keys, "listed", &[]);
        let mut tags: Vec<Tag> = ann.tags.iter().cloned().collect();
        tags.push(Tag::parse(["maintainers", &listed.to_hex()]).unwrap());
        EventBuilder::new(Kind::Custom(30617), "").tags(tags).finalize(keys).unwrap()
    };
    // The maintainer accepts (its own announcement lists the owner back): a confirmed maintainer
    // (docs/protocol.md#maintainer-authority), whose list relay sync then carries.
    for ann in [listing(&owner, &maintainer.public_key()), listing(&maintainer, &owner.public_key())] {
        held(&mut ca, &ann).await;
        held(&mut cb, &ann).await;
    }
    // The lists are published on b only; a follows b (a relay the announcement lists).
    for keys in [&owner, &maintainer, &stranger] {
        let list = grasp_list(keys, &[format!("wss://{}.example", keys.public_key().to_hex()[..8].to_owned())], now());
        assert!(cb.send_event(&list).await.unwrap().0);
    }
    eventually!("a has the owner's and the maintainer's lists", {
        (!lists_of(&a, &owner.public_key()).await.is_empty() && !lists_of(&a, &maintainer.public_key()).await.is_empty()).then_some(())
    });
    // A newer list replaces the older one here too.
    let newer = grasp_list(&owner, &["wss://newer.example".to_string()], now() + 5);
    assert!(cb.send_event(&newer).await.unwrap().0);
    eventually!("a has the owner's newer list", (lists_of(&a, &owner.public_key()).await.first().map(|e| e.id) == Some(newer.id)).then_some(()));
    // Nobody else's: a stranger's list, published on the same relay, is not asked for.
    assert!(lists_of(&a, &stranger.public_key()).await.is_empty(), "a stranger's grasp list came along");
}

#[tokio::test]
async fn git_sync_finds_the_data_on_the_servers_of_the_owners_grasp_list() {
    // a hosts the repository (its announcement there names a, and a server that is down); b
    // hosts it too, under an announcement a never sees, and holds the data. The owner's grasp
    // list, published on a, names b.
    let (a, b) = (relay(&[]), relay(&[]));
    let tmp = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let (mut ca, mut cb): (NostrClient, NostrClient) = (connect(&a).await, connect(&b).await);
    let dead = "http://127.0.0.1:9/nobody/here.git";
    let on_a = {
        let tags = vec![
            Tag::identifier("moved"),
            Tag::parse(["clone", &repo_url(&a, &owner.public_key(), "moved"), dead]).unwrap(),
            Tag::parse(["relays", &format!("ws://{}", host(&a))]).unwrap(),
        ];
        EventBuilder::new(Kind::Custom(30617), "").tags(tags).finalize(&owner).unwrap()
    };
    held(&mut ca, &on_a).await;
    let published = publish_repo(&b, &mut cb, &tmp.path().join("w"), &owner, "moved").await;
    let st = state(&owner, "moved", &[("refs/heads/main", &published.tip)], Some("main"));
    held(&mut ca, &st).await;
    // Without the list, a's clone URLs yield nothing: the state stays held.
    let on_a_repo = repo_dir(&a, &owner.public_key(), "moved");
    let list = grasp_list(&owner, &[format!("ws://{}", host(&b))], now());
    assert!(ca.send_event(&list).await.unwrap().0);
    eventually!("a fetches main from the server the owner's grasp list names", {
        (bare_refs(&on_a_repo).get("refs/heads/main") == Some(&published.tip)).then_some(())
    });
    assert!(stored(&mut ca, st.id).await, "the state is released on a");
    assert!(stored(&mut ca, on_a.id).await, "and the announcement with it");
}

#[tokio::test]
async fn without_a_grasp_list_the_clone_urls_alone_are_tried() {
    // The same as above without the list: nothing names b, so a never gets the data. (The test
    // above fails without the grasp list sources; this one shows it is the list that helps.)
    let (a, b) = (relay(&[]), relay(&[]));
    let tmp = tempfile::tempdir().unwrap();
    let owner = Keys::generate();
    let (mut ca, mut cb) = (connect(&a).await, connect(&b).await);
    held(&mut ca, &announcement(&a, &owner, "moved", &[])).await;
    let published = publish_repo(&b, &mut cb, &tmp.path().join("w"), &owner, "moved").await;
    let st = state(&owner, "moved", &[("refs/heads/main", &published.tip)], Some("main"));
    held(&mut ca, &st).await;
    // A list naming other servers (down) changes nothing.
    assert!(ca.send_event(&grasp_list(&owner, &["ws://127.0.0.1:9".to_string()], now())).await.unwrap().0);
    eventually!("a tried to sync the identifier twice", {
        let stats = operator_get(&a, "/v1/sync").await.unwrap();
        let attempts = stats["identifiers"].as_array().and_then(|ids| ids.iter().find(|e| e["identifier"] == "moved")).and_then(|e| e["attempt_count"].as_u64());
        attempts.filter(|n| *n >= 2)
    });
    assert!(!stored(&mut ca, st.id).await);
    assert!(bare_refs(&repo_dir(&a, &owner.public_key(), "moved")).is_empty());
}
