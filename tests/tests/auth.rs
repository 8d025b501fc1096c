//! NIP-42 authentication, NIP-70 protected events and the public service's refusal of private
//! repositories, end to end (docs/protocol.md#trust).

use grasp_tests::grasp::*;
use grasp_tests::{NostrClient, TestServer};
use nostr::prelude::*;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}



/// A public service sends no challenge until something needs one (ngit drops a public relay whose
/// first frame is an unasked `AUTH`): then it comes before the `auth-required:` answer.
#[tokio::test]
async fn a_public_service_challenges_only_when_authentication_is_needed() {
    let (_server, mut c) = connected(&[]).await;
    let author = Keys::generate();
    c.ws_ping().await.unwrap();
    let plain = signed_event(&author, 10317, now(), "", &[&["g", "ws://example.com"]]);
    assert_eq!(c.send_event(&plain).await.unwrap(), (true, String::new()));
    c.ping_relay().await.unwrap();
    assert_eq!(c.challenge(), None, "no challenge before anything needs authentication");

    let protected = signed_event(&author, 10317, now() + 1, "", &[&["-"], &["g", "ws://example.org"]]);
    let (ok, msg) = c.send_event(&protected).await.unwrap();
    assert!(!ok && msg.starts_with("auth-required:"), "{msg}");
    let challenge = c.challenge().expect("the challenge came before the auth-required answer").to_string();
    assert_eq!(challenge.len(), 32, "{challenge}");
    assert!(c.auth(&author).await.unwrap().0);
    assert_eq!(c.send_event(&protected).await.unwrap(), (true, String::new()));
    // Sent once: the connection's challenge does not change.
    assert_eq!(c.challenge(), Some(challenge.as_str()));
}

/// A client that sends `AUTH` before any challenge is given one and authenticates with it.
#[tokio::test]
async fn auth_before_any_challenge_gets_the_challenge_and_then_authenticates() {
    let (_server, mut c) = connected(&[]).await;
    let msg = c.request_challenge().await.unwrap();
    assert!(msg.starts_with("auth-required:") && msg.contains("AUTH again"), "{msg}");
    assert_eq!(c.auth(&Keys::generate()).await.unwrap(), (true, String::new()));
}

#[tokio::test]
async fn challenges_differ_and_several_keys_authenticate() {
    let (server, mut c) = connected(&[]).await;
    let challenge = c.challenge_now().await.unwrap();
    assert_eq!(challenge.len(), 32, "{challenge}");
    let mut other = connect(&server).await;
    assert_ne!(other.challenge_now().await.unwrap(), challenge, "each connection has its own challenge");
    let (a, b) = (Keys::generate(), Keys::generate());
    assert_eq!(c.auth(&a).await.unwrap(), (true, String::new()));
    assert_eq!(c.auth(&b).await.unwrap(), (true, String::new()));
    // The relay URL is compared after normalising (scheme case, host case, trailing slash).
    let url = format!("WS://{}", host(&server).to_uppercase());
    let ev = signed_event(&a, 22242, now(), "", &[&["relay", &url], &["challenge", &challenge]]);
    assert_eq!(c.send_auth(&ev).await.unwrap(), (true, String::new()));
    assert!(nip11(&server).await["supported_nips"].as_array().unwrap().iter().any(|n| n == 42));
}

#[tokio::test]
async fn bad_auth_events_are_refused_and_the_connection_stays_usable() {
    let (server, mut c) = connected(&[]).await;
    let challenge = c.challenge_now().await.unwrap();
    let keys = Keys::generate();
    let relay = server.ws_url();
    let cases: Vec<(&str, Event)> = vec![
        ("wrong challenge", signed_event(&keys, 22242, now(), "", &[&["relay", &relay], &["challenge", "nope"]])),
        ("challenge of another connection", {
            let mut other = connect(&server).await;
            let theirs = other.challenge_now().await.unwrap();
            signed_event(&keys, 22242, now(), "", &[&["relay", &relay], &["challenge", &theirs]])
        }),
        ("other relay", signed_event(&keys, 22242, now(), "", &[&["relay", "wss://relay.example.com/"], &["challenge", &challenge]])),
        ("no relay tag", signed_event(&keys, 22242, now(), "", &[&["challenge", &challenge]])),
        ("too old", signed_event(&keys, 22242, now() - 700, "", &[&["relay", &relay], &["challenge", &challenge]])),
        ("in the future", signed_event(&keys, 22242, now() + 700, "", &[&["relay", &relay], &["challenge", &challenge]])),
        ("wrong kind", signed_event(&keys, 1, now(), "", &[&["relay", &relay], &["challenge", &challenge]])),
    ];
    for (what, ev) in cases {
        let (ok, msg) = c.send_auth(&ev).await.unwrap();
        assert!(!ok && msg.starts_with("invalid:"), "{what}: {msg}");
    }
    // A forged signature.
    let good = signed_event(&keys, 22242, now(), "", &[&["relay", &relay], &["challenge", &challenge]]);
    let mut json = serde_json::to_value(&good).unwrap();
    json["sig"] = serde_json::to_value(signed_event(&Keys::generate(), 22242, now(), "", &[]).sig).unwrap();
    c.raw_send(format!("[\"AUTH\",{json}]")).await.unwrap();
    let (ok, msg) = c.wait_ok(good.id).await.unwrap();
    assert!(!ok && msg.contains("signature"), "{msg}");
    // Malformed AUTH messages get a NOTICE.
    c.raw_send(r#"["AUTH"]"#).await.unwrap();
    assert!(c.wait_notice().await.unwrap().starts_with("invalid:"));
    // None of this authenticated: a protected event is still refused auth-required.
    let protected = signed_event(&keys, 10317, now(), "", &[&["-"]]);
    let (ok, msg) = c.send_event(&protected).await.unwrap();
    assert!(!ok && msg.starts_with("auth-required:"), "{msg}");
    c.ping_relay().await.unwrap();
}

#[tokio::test]
async fn protected_events_only_from_their_authenticated_author() {
    let (server, mut c) = connected(&[]).await;
    let author = Keys::generate();
    let someone = Keys::generate();
    let protected = signed_event(&author, 10317, now(), "", &[&["-"], &["g", "ws://example.com"]]);

    let (ok, msg) = c.send_event(&protected).await.unwrap();
    assert!(!ok && msg.starts_with("auth-required:"), "{msg}");
    assert!(c.auth(&someone).await.unwrap().0);
    let (ok, msg) = c.send_event(&protected).await.unwrap();
    assert!(!ok && msg.starts_with("restricted:"), "{msg}");
    assert!(c.req(vec![Filter::new().id(protected.id)]).await.unwrap().is_empty(), "nothing stored when refused");

    assert!(c.auth(&author).await.unwrap().0);
    assert_eq!(c.send_event(&protected).await.unwrap(), (true, String::new()));
    let stored = c.req(vec![Filter::new().id(protected.id)]).await.unwrap();
    assert_eq!(stored.len(), 1);

    // Unprotected events need no AUTH.
    let mut anon = connect(&server).await;
    let plain = signed_event(&someone, 10317, now(), "", &[&["g", "ws://example.com"]]);
    assert_eq!(anon.send_event(&plain).await.unwrap(), (true, String::new()));
    // Anyone may read the protected event once stored.
    assert_eq!(anon.req(vec![Filter::new().id(protected.id)]).await.unwrap().len(), 1);
    assert!(nip11(&server).await["supported_nips"].as_array().unwrap().iter().any(|n| n == 70));
}

#[tokio::test]
async fn auth_events_are_never_stored_or_broadcast() {
    let (server, mut watcher) = connected(&[]).await;
    let keys = Keys::generate();
    let kinds = [Kind::Custom(22242), Kind::Custom(10317)];
    let (sub, _) = watcher.subscribe(vec![Filter::new().kinds(kinds)]).await.unwrap();
    let mut c = connect(&server).await;
    let ev = c.auth_event(&keys).await.unwrap();
    let (ok, msg) = c.send_event(&ev).await.unwrap();
    assert!(!ok && msg.starts_with("invalid:") && msg.contains("AUTH"), "{msg}");
    assert_eq!(c.send_auth(&ev).await.unwrap(), (true, String::new()));
    assert!(c.req(vec![Filter::new().kind(Kind::Custom(22242))]).await.unwrap().is_empty());
    // The watcher's next live event is a later marker, not the AUTH event.
    let marker = signed_event(&keys, 10317, now(), "", &[]);
    assert!(c.send_event(&marker).await.unwrap().0);
    assert_eq!(watcher.next_event(&sub).await.unwrap().id, marker.id);
}

#[tokio::test]
async fn public_service_refuses_private_repositories_before_creating_anything() {
    let (server, mut c) = connected(&[]).await;
    let owner = Keys::generate();
    // A public repository first: held, bare repository created.
    let public = announcement(&server, &owner, "shared", &[]);
    assert!(c.send_event(&public).await.unwrap().0);
    let dir = repo_dir(&server, &owner.public_key(), "shared");
    assert!(dir.exists());

    let private_tags = |identifier: &str| -> Vec<Vec<String>> {
        let url = repo_url(&server, &owner.public_key(), identifier);
        let relay = format!("ws://{}", host(&server));
        vec![
            vec!["d".into(), identifier.into()],
            vec!["clone".into(), url],
            vec!["relays".into(), relay],
            vec!["private".into(), "true".into()],
        ]
    };
    let sign = |tags: Vec<Vec<String>>, at: u64| -> Event {
        let tags: Vec<Tag> = tags.into_iter().map(|t| Tag::parse(t).unwrap()).collect();
        EventBuilder::new(Kind::Custom(30617), "").tags(tags).custom_created_at(Timestamp::from(at)).finalize(&owner).unwrap()
    };
    let expected = "blocked: this is a public GRASP server; private repositories need a GRASP-08 private service";
    let fresh = sign(private_tags("secret"), now());
    assert_eq!(c.send_event(&fresh).await.unwrap(), (false, expected.to_string()));
    assert!(!repo_dir(&server, &owner.public_key(), "secret").exists(), "no repository for a refused announcement");

    // A private replacement of the held public announcement is refused and loses nothing.
    let replacement = sign(private_tags("shared"), now() + 1);
    assert_eq!(c.send_event(&replacement).await.unwrap(), (false, expected.to_string()));
    assert!(dir.exists());
    let held = purgatory_ids(&server).await;
    assert!(held.contains(&public.id.to_hex()), "the held announcement stays: {held:?}");
    assert!(!held.contains(&replacement.id.to_hex()));
}
