//! Maintainer authority end to end (docs/protocol.md#maintainer-authority): NIP-34 role tags and
//! reciprocal confirmation decide whose state moves a repository's refs, as ngit 3 decides it.
//! An invitee's state waits in the purgatory and moves nothing until they accept; a maintainer
//! who leaves moves nothing after; the served refs follow every change of the confirmed set; the
//! authorization-integrity pass realigns what an earlier rule let through.

use grasp_tests::grasp::*;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

fn sign(keys: &Keys, kind: u16, at: u64, tags: Vec<Vec<String>>) -> Event {
    let tags: Vec<Tag> = tags.into_iter().map(|t| Tag::parse(t).unwrap()).collect();
    EventBuilder::new(Kind::from(kind), "").tags(tags).custom_created_at(Timestamp::from(at)).finalize(keys).unwrap()
}

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// An announcement of `identifier` by `keys` listing `server`, with NIP-34 role tags (`roles`:
/// (letter, key, boundaries)), created at `at`.
fn with_roles(server: &TestServer, keys: &Keys, identifier: &str, roles: &[(&str, PublicKey, &[&str])], at: u64) -> Event {
    let mut tags = vec![
        v(&["d", identifier]),
        v(&["clone", &repo_url(server, &keys.public_key(), identifier)]),
        v(&["relays", &format!("ws://{}", host(server))]),
    ];
    for (letter, pk, bounds) in roles {
        let mut tag = v(&[letter, &pk.to_hex()]);
        tag.extend(bounds.iter().map(|b| b.to_string()));
        tags.push(tag);
    }
    sign(keys, 30617, at, tags)
}

async fn accepted(c: &mut NostrClient, ev: &Event) -> String {
    let (ok, msg) = c.send_event(ev).await.unwrap();
    assert!(ok, "refused: {msg}");
    msg
}

fn main_of(server: &TestServer, owner: &PublicKey, identifier: &str) -> Option<String> {
    bare_refs(&repo_dir(server, owner, identifier)).get("refs/heads/main").cloned()
}

/// Invite, accept, leave: the owner's repository follows only confirmed maintainers.
#[tokio::test]
async fn an_invitee_moves_nothing_until_they_accept_and_nothing_after_they_leave() {
    let (server, tmp, mut c) = started(&[]).await;
    let (owner, invitee) = (Keys::generate(), Keys::generate());
    let t = now() - 100;
    // The owner publishes two states and pushes both commits: main is at `second`.
    held(&mut c, &with_roles(&server, &owner, "team", &[("M", owner.public_key(), &[])], t)).await;
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "team");
    let first = repo.commit("a", "1");
    accepted(&mut c, &state_at(&owner, "team", &[("refs/heads/main", &first)], Some("main"), t + 1)).await;
    repo.push(&["main"]).unwrap();
    let second = repo.commit("b", "2");
    accepted(&mut c, &state_at(&owner, "team", &[("refs/heads/main", &second)], Some("main"), t + 2)).await;
    repo.push(&["main"]).unwrap();
    assert_eq!(main_of(&server, &owner.public_key(), "team").as_deref(), Some(second.as_str()));

    // The owner invites a co-maintainer (`ngit repo edit --add-maintainer`).
    let invite = with_roles(&server, &owner, "team", &[("M", owner.public_key(), &[]), ("m", invitee.public_key(), &[])], t + 3);
    accepted(&mut c, &invite).await;
    // The invitee's state (main back at `first`, whose objects are here) waits: it moves nothing.
    let theirs = state_at(&invitee, "team", &[("refs/heads/main", &first)], Some("main"), t + 4);
    let msg = accepted(&mut c, &theirs).await;
    assert!(msg.starts_with("purgatory:") && msg.contains("ngit repo accept"), "{msg}");
    // A push matching it is refused, and says what to do.
    let err = repo.push(&["+HEAD~1:main"]).unwrap_err();
    assert!(err.contains("is invited as a maintainer") && err.contains("ngit repo accept"), "{err}");
    assert!(err.contains(&owner.public_key().to_bech32().unwrap()), "names the inviter: {err}");
    assert_eq!(main_of(&server, &owner.public_key(), "team").as_deref(), Some(second.as_str()));

    // The invitee accepts (`ngit repo accept`: their own announcement lists the owner back).
    let accept = with_roles(&server, &invitee, "team", &[("M", owner.public_key(), &[]), ("m", invitee.public_key(), &[])], t + 5);
    let msg = accepted(&mut c, &accept).await;
    // An accepted invitation to a served repository is served at once (the inviter vouches for
    // it): held, it would expire with the confirmation if the invitee never pushed here.
    assert!(!msg.starts_with("purgatory:"), "{msg}");
    assert!(stored(&mut c, accept.id).await, "the acceptance is served");
    // Their held state is now authoritative: released, and the owner's repository follows it.
    eventually!("the owner's repository to follow the accepted co-maintainer's state", {
        (main_of(&server, &owner.public_key(), "team").as_deref() == Some(first.as_str())).then_some(())
    });
    eventually!("the co-maintainer's state to be served", stored(&mut c, theirs.id).await.then_some(()));

    // The co-maintainer leaves (`ngit repo leave`: their own entry ends). Their state is no longer
    // authoritative: the repository goes back to the owner's newest state, never to nothing.
    let leave = with_roles(&server, &invitee, "team", &[("M", owner.public_key(), &[]), ("m", invitee.public_key(), &["0", &(t + 6).to_string()])], t + 6);
    accepted(&mut c, &leave).await;
    eventually!("the owner's repository to go back to the owner's newest state", {
        (main_of(&server, &owner.public_key(), "team").as_deref() == Some(second.as_str())).then_some(())
    });
    // A new state from the leaver is refused, saying so.
    let (ok, msg) = c.send_event(&state_at(&invitee, "team", &[("refs/heads/main", &first)], Some("main"), t + 7)).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:") && msg.contains("left the maintainers"), "{msg}");
    let page = operator_get(&server, &format!("/v1/repo/{}/team", owner.public_key().to_bech32().unwrap())).await.unwrap();
    assert_eq!(page["maintainers"], serde_json::json!([owner.public_key().to_bech32().unwrap()]), "{page}");
}

/// Moderators and keys listed in an announcement with role tags' dead `maintainers` tag are not
/// maintainers; an older client's `maintainers` list counts once the listed key accepts.
#[tokio::test]
async fn role_tags_decide_and_older_announcements_are_reciprocal_too() {
    let (server, mut c) = connected(&[]).await;
    let (owner, moderator, old_client) = (Keys::generate(), Keys::generate(), Keys::generate());
    let t = now() - 100;
    let mut ann = with_roles(&server, &owner, "mix", &[("o", moderator.public_key(), &[])], t);
    // Role tags present: a `maintainers` tag beside them is dead.
    let mut tags: Vec<Vec<String>> = ann.tags.iter().map(|t| t.as_slice().to_vec()).collect();
    tags.push(v(&["maintainers", &moderator.public_key().to_hex()]));
    ann = sign(&owner, 30617, t, tags);
    held(&mut c, &ann).await;
    held(&mut c, &announcement_at(&server, &moderator, "mix", &[owner.public_key()], t + 1)).await;
    let (ok, msg) = c.send_event(&state_at(&moderator, "mix", &[("refs/heads/main", &"a".repeat(40))], Some("main"), t + 2)).await.unwrap();
    // The moderator is confirmed in its own repository (it owns one), never in the owner's.
    assert!(ok, "{msg}");
    let page = operator_get(&server, &format!("/v1/repo/{}/mix", owner.public_key().to_bech32().unwrap())).await.unwrap();
    assert_eq!(page["maintainers"], serde_json::json!([owner.public_key().to_bech32().unwrap()]), "{page}");

    // An older client: `maintainers` only. Listed without an announcement: invited.
    held(&mut c, &announcement_at(&server, &owner, "old", &[old_client.public_key()], t + 3)).await;
    let (ok, msg) = c.send_event(&state_at(&old_client, "old", &[("refs/heads/main", &"b".repeat(40))], Some("main"), t + 4)).await.unwrap();
    assert!(ok && msg.contains("ngit repo accept"), "{msg}");
    let page = operator_get(&server, &format!("/v1/repo/{}/old", owner.public_key().to_bech32().unwrap())).await.unwrap();
    assert_eq!(page["invited"], serde_json::json!([old_client.public_key().to_bech32().unwrap()]), "{page}");
    // Its own announcement lists the owner back: confirmed.
    held(&mut c, &announcement_at(&server, &old_client, "old", &[owner.public_key()], t + 5)).await;
    let page = operator_get(&server, &format!("/v1/repo/{}/old", owner.public_key().to_bech32().unwrap())).await.unwrap();
    assert_eq!(page["invited"], serde_json::json!([]), "{page}");
    assert_eq!(page["maintainers"].as_array().map(Vec::len), Some(2), "{page}");
}

fn authority(server: &TestServer, args: &[&str]) -> String {
    operator_command(server, "authority", args)
}

/// Refs moved behind the maintainers' back (as the earlier rule let an invitee do) are reported by
/// the dry run, realigned by `--apply`, and by the pass every start runs.
#[tokio::test]
async fn the_integrity_pass_realigns_refs_no_confirmed_maintainer_signed() {
    let (mut server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    let published = publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "audit").await;
    let second = published.repo.commit("b", "2");
    accepted(&mut c, &state_at(&owner, "audit", &[("refs/heads/main", &second)], Some("main"), now() + 5)).await;
    published.repo.push(&["main"]).unwrap();
    let bare = repo_dir(&server, &owner.public_key(), "audit");
    let moved = |to: &str| {
        grasp_tests::git::git(&bare, &["update-ref", "refs/heads/main", to]);
    };
    moved(&published.tip);
    let report = authority(&server, &[]);
    assert!(report.contains("would realign") && report.contains("refs/heads/main") && report.contains("dry run"), "{report}");
    assert_eq!(main_of(&server, &owner.public_key(), "audit").as_deref(), Some(published.tip.as_str()), "a dry run changes nothing");
    let report = authority(&server, &["--apply"]);
    assert!(report.contains("realigned"), "{report}");
    assert_eq!(main_of(&server, &owner.public_key(), "audit").as_deref(), Some(second.as_str()));
    assert!(authority(&server, &[]).contains("0 not at their confirmed maintainers' newest state"));
    // Moved with the relay down: the next start realigns it by itself.
    server.stop();
    moved(&published.tip);
    server.restart();
    eventually!("the startup pass to realign the repository", {
        (main_of(&server, &owner.public_key(), "audit").as_deref() == Some(second.as_str())).then_some(())
    });
}
