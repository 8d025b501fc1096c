//! GRASP-03 Sync+ with the real client: a contributor comments on an issue with ngit while the
//! repository's server is down, so ngit publishes the comment to the contributor's own relays
//! only (their NIP-65 outbox, whose list the index relay holds); once the server is back, another
//! ngit user, who reads the repository's conversation from its server only (`repo-relay-only`),
//! sees the comment.

use std::time::Duration;

use grasp_tests::ngit::NgitUser;
use grasp_tests::plain_relay::PlainRelay;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

use super::{clone_into, grasp_url, init_repo, nostr_url};

/// How long the server may take to find the comment after it is back (passes every 500 ms).
const SYNC_PLUS: Duration = Duration::from_secs(60);

/// The hex id of the first 64-hex-digit word in `text` (ngit prints the issue's id).
fn event_id_in(text: &str) -> Option<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric()).find(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit())).map(str::to_string)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_comment_ngit_published_to_its_authors_relays_only_is_listed_through_the_server() {
    // The users' own relay: where ngit publishes besides the repository's relays, and the index
    // relay where the contributor's relay list is found.
    let users = PlainRelay::start();
    let mut server = TestServer::start_with(&["--sync-allow-private", "--index-relay", &users.url(), "--sync-plus-interval", "500ms", "--relay-sync-backoff", "300ms"]);
    let tmp = tempfile::tempdir().unwrap();
    let servers = [grasp_url(&server)];
    let owner = NgitUser::new(tmp.path(), "owner", &users.url(), &servers);
    let contributor = NgitUser::new(tmp.path(), "contributor", &users.url(), &servers).publishing_to_own_relays();
    let reader = NgitUser::new(tmp.path(), "reader", &users.url(), &servers);
    init_repo(&owner, &[&server], "talk", &[]);
    let repo = nostr_url(&server, &owner, "talk");

    // Their NIP-65 list names their relay (a client publishes it once, to the indexers; ngit reads it too).
    let list = EventBuilder::new(Kind::Custom(10002), "").tag(Tag::parse(["r", &users.url()]).unwrap()).finalize(&contributor.keys).unwrap();
    let mut c = NostrClient::connect(&users.url()).await.unwrap();
    assert!(c.send_event(&list).await.unwrap().0);

    // The contributor opens an issue (it reaches the server: the contributor is a participant).
    let (run, home) = clone_into(&contributor, &repo, "talk");
    run.expect_ok("git clone by the contributor");
    let created = contributor.ngit(&home, &["issue", "create", "--repo", &repo, "--subject", "it breaks", "--body", "steps to reproduce", "-d"]);
    let text = created.expect_ok("ngit issue create");
    let issue = eventually!("the issue to be served", {
        let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
        let found = c.req(vec![Filter::new().kind(Kind::Custom(1621)).author(contributor.keys.public_key())]).await.unwrap();
        found.into_iter().next()
    });
    if let Some(id) = event_id_in(&text) {
        assert_eq!(id, issue.id.to_hex(), "{text}");
    }

    // The server is down: ngit's comment reaches the contributor's relay only.
    assert!(server.stop().success(), "{}", server.logs());
    let commented = contributor.ngit(&home, &["issue", "comment", "--repo", &repo, &issue.id.to_hex(), "--body", "same here, on 3.0.4", "-d"]);
    let comment = users
        .events()
        .into_iter()
        .find(|e| e.pubkey == contributor.keys.public_key() && e.kind.as_u16() == 1111)
        .unwrap_or_else(|| panic!("ngit published no comment to the contributor's relay:\n{}", commented.text()));

    // Back up: Sync+ finds it on the contributor's relay, and a reader listing the issue through
    // the server (repository relays only) sees it.
    server.restart();
    eventually!("the comment to be served", SYNC_PLUS, {
        let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
        (!c.req(vec![Filter::new().id(comment.id)]).await.unwrap().is_empty()).then_some(())
    });
    let (run, rhome) = clone_into(&reader, &repo, "talk");
    run.expect_ok("git clone by the reader");
    let viewed = reader.ngit(&rhome, &["issue", "view", "--repo", &repo, &issue.id.to_hex(), "--comments", "-d"]);
    let text = viewed.expect_ok("ngit issue view --comments");
    assert!(text.contains("same here, on 3.0.4"), "the reader sees the comment:\n{text}");
}
