//! A private GRASP-08 service end to end (docs/protocol.md#trust): NIP-11, members-only REQ and
//! EVENT over NIP-42, live subscriptions ending with membership, git over HTTP only with a
//! member's `Authorization: Nostr` proof (every refusal a bare `401`), and the data directory
//! staying private.

use grasp_tests::git::git_output;
use grasp_tests::grasp::*;
use grasp_tests::{binary_path, NostrClient, ReqOutcome, TestServer, TIMEOUT};
use nostr::prelude::*;

async fn connect(server: &TestServer) -> NostrClient {
    NostrClient::connect(&server.ws_url()).await.unwrap()
}

fn start_private(member: &Keys, extra: &[&str]) -> TestServer {
    let hex = member.public_key().to_hex();
    let mut args = vec!["--private", "--member", hex.as_str()];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

/// An announcement with `["private","true"]` listing `server`.
fn private_announcement(server: &TestServer, keys: &Keys, identifier: &str) -> Event {
    event(
        keys,
        30617,
        &[
            &["d", identifier],
            &["clone", &repo_url(server, &keys.public_key(), identifier)],
            &["relays", &format!("ws://{}", host(server))],
            &["private", "true"],
        ],
    )
}

async fn get_refs(url: &str, authorization: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(format!("{url}/info/refs?service=git-upload-pack"));
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    req.send().await.unwrap()
}

async fn assert_401(resp: reqwest::Response, what: &str) {
    assert_eq!(resp.status(), 401, "{what}");
    assert_eq!(resp.headers().get("www-authenticate").map(|v| v.to_str().unwrap()), Some("Nostr"), "{what}");
    assert_eq!(resp.headers().get("access-control-allow-origin").map(|v| v.to_str().unwrap()), Some("*"), "{what}");
    assert!(resp.bytes().await.unwrap().is_empty(), "{what}: the body is empty");
}

/// Waits until the relay has re-read its members file and no longer counts `who` as a member:
/// a fresh connection of theirs, authenticated, is refused `restricted:`.
async fn wait_until_refused(server: &TestServer, who: &Keys) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let mut probe = connect(server).await;
        assert!(probe.auth(who).await.unwrap().0);
        let id = SubscriptionId::new("probe");
        if matches!(probe.req_with_id(&id, vec![Filter::new().limit(0)]).await.unwrap(), ReqOutcome::Closed(m) if m.starts_with("restricted:")) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the members file was never re-read");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn nip11_says_reads_and_writes_need_membership() {
    let server = start_private(&Keys::generate(), &[]);
    let doc: serde_json::Value = nip11(&server).await;
    assert!(doc["supported_grasps"].as_array().unwrap().iter().any(|g| g == "GRASP-08"), "{doc}");
    assert!(doc["supported_nips"].as_array().unwrap().iter().any(|n| n == 42));
    assert_eq!(doc["limitation"]["auth_required"], true);
    assert!(doc["repo_acceptance_criteria"].as_str().unwrap().contains("member"));
}

#[tokio::test]
async fn reqs_and_events_need_a_members_auth() {
    let member = Keys::generate();
    let server = start_private(&member, &[]);
    let stranger = Keys::generate();
    let mut c = connect(&server).await;
    // Everything here needs AUTH: the challenge comes unasked, on connect (ngit answers it).
    c.ws_ping().await.unwrap();
    assert!(c.challenge().is_some(), "a private service challenges on connect");
    let list = event(&member, 10317, &[&["g", "ws://example.com"]]);

    let id = SubscriptionId::new("s");
    assert!(matches!(c.req_with_id(&id, vec![Filter::new()]).await.unwrap(), ReqOutcome::Closed(m) if m.starts_with("auth-required:")));
    let (ok, msg) = c.send_event(&list).await.unwrap();
    assert!(!ok && msg.starts_with("auth-required:"), "{msg}");

    assert!(c.auth(&stranger).await.unwrap().0);
    assert!(matches!(c.req_with_id(&id, vec![Filter::new()]).await.unwrap(), ReqOutcome::Closed(m) if m.starts_with("restricted:")));
    let (ok, msg) = c.send_event(&list).await.unwrap();
    assert!(!ok && msg.starts_with("restricted:"), "{msg}");

    assert!(c.auth(&member).await.unwrap().0);
    assert_eq!(c.send_event(&list).await.unwrap(), (true, String::new()));
    assert_eq!(c.req(vec![Filter::new().id(list.id)]).await.unwrap().len(), 1);
    // Private and public announcements, and the member's private service list (10318).
    let private = private_announcement(&server, &member, "secret");
    assert!(c.send_event(&private).await.unwrap().0);
    assert!(repo_dir(&server, &member.public_key(), "secret").exists());
    assert!(c.send_event(&announcement(&server, &member, "open", &[])).await.unwrap().0);
    let services = event(&member, 10318, &[]);
    assert_eq!(c.send_event(&services).await.unwrap(), (true, String::new()));
    // An unauthenticated connection is served nothing of it, not even by NIP-77 reconciliation.
    let mut anon = connect(&server).await;
    let id2 = SubscriptionId::new("t");
    assert!(matches!(anon.req_with_id(&id2, vec![Filter::new().id(list.id)]).await.unwrap(), ReqOutcome::Closed(_)));
    anon.raw_send(r#"["NEG-OPEN","n1",{},"6100"]"#).await.unwrap();
    let refusal = anon
        .wait_for(|m| match m {
            RelayMessage::NegErr { message, .. } => Some(message.to_string()),
            RelayMessage::NegMsg { .. } => Some("NEG-MSG".into()),
            _ => None,
        })
        .await
        .unwrap();
    assert!(refusal.starts_with("auth-required:"), "{refusal}");
}

#[tokio::test]
async fn live_subscriptions_end_when_membership_ends() {
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let tmp = tempfile::tempdir().unwrap();
    let members = tmp.path().join("members");
    std::fs::write(&members, format!("# team\n{}\n", bob.public_key().to_bech32().unwrap())).unwrap();
    let server = start_private(&alice, &["--members-file", members.to_str().unwrap()]);
    let mut b = connect(&server).await;
    assert!(b.auth(&bob).await.unwrap().0);
    let (sub, _) = b.subscribe(vec![Filter::new().kind(Kind::Custom(10317))]).await.unwrap();
    let mut a = connect(&server).await;
    assert!(a.auth(&alice).await.unwrap().0);
    // A second older than `second` below, which replaces it (a same-second tie could refuse it).
    let first = EventBuilder::new(Kind::from(10317), "")
        .tags([Tag::parse(["g", "ws://one.example.com"]).unwrap()])
        .custom_created_at(Timestamp::from(now() - 1))
        .finalize(&alice)
        .unwrap();
    assert!(a.send_event(&first).await.unwrap().0);
    assert_eq!(b.next_event(&sub).await.unwrap().id, first.id, "a member gets live events");

    std::fs::write(&members, "# nobody\n").unwrap();
    wait_until_refused(&server, &bob).await;
    let second = event(&alice, 10317, &[&["g", "ws://two.example.com"]]);
    assert!(a.send_event(&second).await.unwrap().0);
    let closed = b
        .wait_for(|m| match m {
            RelayMessage::Closed { subscription_id, message } if **subscription_id == sub => Some(message.to_string()),
            RelayMessage::Event { event, .. } if event.id == second.id => Some("EVENT".into()),
            _ => None,
        })
        .await
        .unwrap();
    assert!(closed.starts_with("restricted:"), "the former member's subscription ends instead of getting {closed}");
}

#[tokio::test]
async fn git_needs_a_members_proof_for_this_repository() {
    let member = Keys::generate();
    let stranger = Keys::generate();
    let server = start_private(&member, &[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = connect(&server).await;
    assert!(c.auth(&member).await.unwrap().0);
    let url = repo_url(&server, &member.public_key(), "secret");
    assert!(c.send_event(&private_announcement(&server, &member, "secret")).await.unwrap().0);
    let other_url = repo_url(&server, &member.public_key(), "other");
    assert!(c.send_event(&private_announcement(&server, &member, "other")).await.unwrap().0);

    // Every refusal looks the same.
    assert_401(get_refs(&url, None).await, "no proof").await;
    assert_401(get_refs(&url, Some(&git_proof_at(&stranger, &url, "GET", now()))).await, "non-member").await;
    assert_401(get_refs(&url, Some(&git_proof_at(&member, &url, "GET", now() - 120))).await, "expired proof").await;
    assert_401(get_refs(&url, Some(&git_proof_at(&member, &other_url, "GET", now()))).await, "proof for another repository").await;
    assert_401(get_refs(&url, Some(&git_proof_at(&member, &url, "POST", now()))).await, "method POST").await;
    assert_401(get_refs(&url, Some("Nostr garbage")).await, "garbage").await;
    let unknown = repo_url(&server, &stranger.public_key(), "nothing");
    assert_401(get_refs(&unknown, None).await, "unknown repository").await;
    let page = reqwest::get(&url).await.unwrap();
    assert_eq!(page.status(), 401, "the repository page too");
    assert_eq!(get_refs(&url, Some(&git_proof_at(&member, &url, "GET", now()))).await.status(), 200);

    // A real git client: push with the member's proof, the state authorises it, clone it back.
    let repo = Repo::new(&tmp.path().join("w"), &server, &member.public_key(), "secret");
    let tip = repo.commit("README", "secret\n");
    let st = state(&member, "secret", &[("refs/heads/main", &tip)], Some("main"));
    assert!(c.send_event(&st).await.unwrap().0);
    let auth = git_proof_at(&member, &url, "GET", now());
    let out = git_with(&repo.work.dir, &auth, &["push", &url, "main"]);
    assert!(out.status.success(), "member push: {}", String::from_utf8_lossy(&out.stderr));
    let out = git_with(tmp.path(), &auth, &["clone", "-q", &url, "clone-ok"]);
    assert!(out.status.success(), "member clone: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(grasp_tests::git::git(&tmp.path().join("clone-ok"), &["rev-parse", "HEAD"]), tip);

    for (what, header) in [
        ("non-member", git_proof_at(&stranger, &url, "GET", now())),
        ("expired", git_proof_at(&member, &url, "GET", now() - 120)),
        ("another repository", git_proof_at(&member, &other_url, "GET", now())),
        ("POST", git_proof_at(&member, &url, "POST", now())),
    ] {
        let out = git_with(tmp.path(), &header, &["clone", "-q", &url, &format!("clone-{}", what.replace(' ', "-"))]);
        assert!(!out.status.success(), "{what} must not clone");
        let out = git_with(&repo.work.dir, &header, &["push", &url, "main:refs/heads/other"]);
        assert!(!out.status.success(), "{what} must not push");
    }
    let out = git_output(tmp.path(), &["clone", "-q", &url, "clone-none"]);
    assert!(!out.status.success(), "no proof must not clone");
    assert_eq!(bare_refs(&repo_dir(&server, &member.public_key(), "secret")).get("refs/heads/other"), None);
}

#[tokio::test]
async fn a_private_data_directory_does_not_start_public() {
    let member = Keys::generate();
    let mut server = start_private(&member, &[]);
    server.stop();
    let out = std::process::Command::new(binary_path("grasp-relay"))
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("private-service") && err.contains("--private"), "{err}");
    server.restart();
}

/// grasp-cgi given only the git root (a volume mounted elsewhere, no `GRASP_DATA_DIR`, as a
/// misconfigured nginx might run it) still knows the service is private: the relay marks the git
/// root too, and a relay it cannot find allows nothing.
#[tokio::test]
async fn grasp_cgi_given_only_the_git_root_stays_private() {
    let member = Keys::generate();
    let server = start_private(&member, &[]);
    let mut c = connect(&server).await;
    assert!(c.auth(&member).await.unwrap().0);
    assert!(c.send_event(&private_announcement(&server, &member, "secret")).await.unwrap().0);
    assert!(repo_dir(&server, &member.public_key(), "secret").is_dir());

    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path().join("volume");
    std::os::unix::fs::symlink(server.data_dir().join(grasp_state::contract::layout::GIT_DIR), &volume).unwrap();
    let out = std::process::Command::new(binary_path("grasp-cgi"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", "GET")
        .env("PATH_INFO", format!("/{}/secret.git/info/refs", member.public_key().to_bech32().unwrap()))
        .env("QUERY_STRING", "service=git-upload-pack")
        .env(grasp_state::contract::env_names::GIT_ROOT, &volume)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("Status: 401"), "served without the relay's check: {stdout:.200}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// NIP-77 on a private service: every NEG-* message checks membership, so a reconciliation a
/// member opened is refused `restricted:` at its next NEG-MSG once the membership ends.
#[tokio::test]
async fn negentropy_sessions_end_when_membership_ends() {
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let tmp = tempfile::tempdir().unwrap();
    let members = tmp.path().join("members");
    std::fs::write(&members, format!("{}\n", bob.public_key().to_bech32().unwrap())).unwrap();
    let server = start_private(&alice, &["--members-file", members.to_str().unwrap()]);
    let mut a = connect(&server).await;
    assert!(a.auth(&alice).await.unwrap().0);
    assert!(a.send_event(&event(&alice, 10317, &[&["g", "ws://one.example.com"]])).await.unwrap().0);
    let mut b = connect(&server).await;
    assert!(b.auth(&bob).await.unwrap().0);
    let neg_answer = |sub: &'static str| {
        move |m: &RelayMessage<'static>| match m {
            RelayMessage::NegMsg { subscription_id, message } if subscription_id.as_str() == sub => Some(Ok(message.to_string())),
            RelayMessage::NegErr { subscription_id, message } if subscription_id.as_str() == sub => Some(Err(message.to_string())),
            _ => None,
        }
    };
    // An empty client's first message: the relay answers with fingerprints, the session stays open.
    let mut storage = negentropy::NegentropyStorageVector::new();
    storage.seal().unwrap();
    let mut client = negentropy::Negentropy::owned(storage, 60_000).unwrap();
    let first = faster_hex::hex_string(&client.initiate().unwrap());
    b.raw_send(format!(r#"["NEG-OPEN","n",{{"kinds":[10317]}},"{first}"]"#)).await.unwrap();
    b.wait_for(neg_answer("n")).await.unwrap().expect("a member reconciles");
    b.raw_send(format!(r#"["NEG-OPEN","m",{{"kinds":[10317]}},"{first}"]"#)).await.unwrap();
    b.wait_for(neg_answer("m")).await.unwrap().expect("a member reconciles");

    std::fs::write(&members, "# nobody\n").unwrap();
    wait_until_refused(&server, &bob).await;
    // The open session answers no more: NEG-ERR restricted, and the session is gone.
    b.raw_send(format!(r#"["NEG-MSG","n","{first}"]"#)).await.unwrap();
    let err = b.wait_for(neg_answer("n")).await.unwrap().unwrap_err();
    assert!(err.starts_with("restricted:"), "{err}");
    // NEG-CLOSE is never refused (nothing to answer), and a new NEG-OPEN is.
    b.raw_send(r#"["NEG-CLOSE","m"]"#).await.unwrap();
    b.raw_send(format!(r#"["NEG-OPEN","o",{{"kinds":[10317]}},"{first}"]"#)).await.unwrap();
    let err = b.wait_for(neg_answer("o")).await.unwrap().unwrap_err();
    assert!(err.starts_with("restricted:"), "{err}");
    assert!(
        !b.backlog().any(|m| matches!(m, RelayMessage::NegErr { subscription_id, .. } if subscription_id.as_str() == "m")),
        "NEG-CLOSE is not answered"
    );
}
