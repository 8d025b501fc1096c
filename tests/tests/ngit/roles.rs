//! Maintainer authority as ngit 3.0.4 decides it (`../shared/specs/maintainer-roles.md`): only
//! *confirmed* maintainers' state events (30618) move the refs of `/<owner>/<identifier>.git`.
//! A listed key is confirmed when a confirmed member's announcement lists it as an active
//! maintainer and its own announcement lists a confirmed member back (`ngit repo accept`);
//! invitees, keys that left, removed keys and moderators move nothing.
//!
//! ngit refuses an unconfirmed key's `git push origin main` itself, before it reaches any server
//! (git-remote-nostr: "you are invited as a maintainer but have not accepted; run `ngit repo
//! accept` first"). So that the *server* is what is tested, those steps sign the key's state
//! event here (with the key ngit uses) and send it to the server over WebSocket, then push the
//! commit with plain `git push` to the owner's HTTP URL: the server's pre-receive hook decides.
//! Steps ngit has no command for (assigning a moderator, an older client's announcement without
//! role tags) publish hand-signed announcements, and say so.

use std::path::Path;
use std::time::Duration;

use grasp_tests::grasp::*;
use grasp_tests::ngit::{NgitUser, Run};
use grasp_tests::plain_relay::PlainRelay;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

use super::{clone_into, grasp_url, init_repo, nostr_url, refs, served_event, served_refs};

/// How long relay sync and git sync between two servers may take.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// One GRASP server, the users' own relay apart from it, and a directory for their homes.
struct World {
    server: TestServer,
    users: PlainRelay,
    tmp: tempfile::TempDir,
}

impl World {
    fn start() -> World {
        World { server: TestServer::start(), users: PlainRelay::start(), tmp: tempfile::tempdir().unwrap() }
    }

    /// A user whose relay is the users' relay and whose GRASP server is this server.
    fn user(&self, name: &str) -> NgitUser {
        NgitUser::new(self.tmp.path(), name, &self.users.url(), &[grasp_url(&self.server)])
    }
}

fn tag(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn hex(user: &NgitUser) -> String {
    user.keys.public_key().to_hex()
}

fn signed(keys: &Keys, kind: u16, tags: Vec<Vec<String>>, at: u64) -> Event {
    EventBuilder::new(Kind::from(kind), "")
        .tags(tags.into_iter().map(|t| Tag::parse(t).expect("valid tag")))
        .custom_created_at(Timestamp::from(at))
        .finalize(keys)
        .expect("signing")
}

/// Sends `event` to `server`; the relay's `OK` (status, message).
async fn send(server: &TestServer, event: &Event) -> (bool, String) {
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    c.send_event(event).await.unwrap()
}

/// A `created_at` for a hand-signed event: newer than every announcement and state `server`
/// serves for `identifier`, and now (waits for the clock to pass the newest, at most a second).
async fn fresh_time(server: &TestServer, identifier: &str) -> u64 {
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let filter = Filter::new().kinds([Kind::Custom(30617), Kind::Custom(30618)]).identifier(identifier);
    let newest = c.req(vec![filter]).await.unwrap().iter().map(|e| e.created_at.as_secs()).max().unwrap_or(0);
    wait_past(newest).await;
    now()
}

/// Waits until the clock is past `at`, so that what ngit signs next is newer than an event
/// signed here at `at`.
async fn wait_past(at: u64) {
    eventually!("the clock to pass a hand-signed event's created_at", (now() > at).then_some(()));
}

/// A state event by `keys` for `identifier` (`refs`, HEAD at `main`), signed here and sent to
/// `server`: what git-remote-nostr would publish, for a key ngit will not push for. Returns the
/// relay's answer.
async fn send_state(server: &TestServer, keys: &Keys, identifier: &str, refs: &[(&str, &str)]) -> (bool, String) {
    let at = fresh_time(server, identifier).await;
    let event = state_at(keys, identifier, refs, Some("main"), at);
    let answer = send(server, &event).await;
    eprintln!("state by {} for {identifier}: OK {} {:?}", keys.public_key().to_bech32().unwrap(), answer.0, answer.1);
    wait_past(at).await;
    answer
}

/// `git push <owner's HTTP URL> HEAD:refs/heads/main` from `dir` as `user`, plain git without
/// git-remote-nostr: the server's hooks decide.
fn push_over_http(user: &NgitUser, dir: &Path, server: &TestServer, owner: &PublicKey, identifier: &str) -> Run {
    user.git(dir, &["push", &repo_url(server, owner, identifier), "HEAD:refs/heads/main"])
}

/// Asserts that the server's hooks refused a plain push (`grasp: ...` from the pre-receive hook,
/// not git's own refusal such as a non-fast-forward); returns everything printed.
#[track_caller]
fn refused_by_server(run: &Run, what: &str) -> String {
    let text = run.expect_refused(what);
    assert!(text.contains("grasp:") && !text.contains("non-fast-forward"), "{what}: the server refuses it, not git: {text}");
    text
}

/// An announcement by `keys` for `identifier` listing `servers` (clone and relays) with the
/// `extra` tags (role tags, `maintainers`), created at `at`: what ngit or an older client would
/// publish, signed here.
fn announcement_with(servers: &[&TestServer], keys: &Keys, identifier: &str, extra: Vec<Vec<String>>, at: u64) -> Event {
    let mut clone = tag(&["clone"]);
    clone.extend(servers.iter().map(|s| repo_url(s, &keys.public_key(), identifier)));
    let mut relays = tag(&["relays"]);
    relays.extend(servers.iter().map(|s| format!("ws://{}", host(s))));
    let mut tags = vec![tag(&["d", identifier]), tag(&["name", identifier]), clone, relays];
    tags.extend(extra);
    signed(keys, 30617, tags, at)
}

/// Republishes `user`'s announcement that `server` serves for `identifier`, its tags changed by
/// `edit`, signed here (newer than everything served); asserts the server took it.
async fn republish(server: &TestServer, user: &NgitUser, identifier: &str, edit: impl FnOnce(&mut Vec<Vec<String>>)) -> Event {
    let served = served_event(server, 30617, &user.keys.public_key(), identifier).await.expect("the announcement is served");
    let mut tags: Vec<Vec<String>> = served.tags.iter().map(|t| t.as_slice().to_vec()).collect();
    edit(&mut tags);
    let event = signed(&user.keys, 30617, tags, fresh_time(server, identifier).await);
    let (ok, msg) = send(server, &event).await;
    assert!(ok, "the republished announcement was refused: {msg}");
    wait_past(event.created_at.as_secs()).await;
    event
}

/// A repository announced, stated and pushed with hand-signed events and plain git (an older
/// client's way): `owner`'s announcement carries `extra` tags; returns the work tree and tip.
async fn publish_by_hand(server: &TestServer, owner: &NgitUser, identifier: &str, extra: Vec<Vec<String>>) -> (std::path::PathBuf, String) {
    let work = owner.new_work_tree(identifier, "README", &format!("{identifier}\n"));
    let tip = owner.git_ok(&work, &["rev-parse", "HEAD"]);
    owner.git_ok(&work, &["branch", "-M", "main"]);
    let announcement = announcement_with(&[server], &owner.keys, identifier, extra, now());
    let (ok, msg) = send(server, &announcement).await;
    assert!(ok, "the announcement was refused: {msg}");
    let (ok, msg) = send_state(server, &owner.keys, identifier, &[("refs/heads/main", &tip)]).await;
    assert!(ok, "the owner's state was refused: {msg}");
    owner.git(&work, &["push", &repo_url(server, &owner.keys.public_key(), identifier), "main"]).expect_ok("the owner's push");
    assert_eq!(served_refs(owner, server, owner, identifier), refs(&[("refs/heads/main", &tip)]));
    (work, tip)
}

/// `user`'s clone of `owner`'s repository over plain HTTP with one more commit on `main`;
/// returns the work tree and the commit.
fn clone_and_commit(user: &NgitUser, server: &TestServer, owner: &NgitUser, identifier: &str, name: &str) -> (std::path::PathBuf, String) {
    let (run, dir) = clone_into(user, &repo_url(server, &owner.keys.public_key(), identifier), name);
    run.expect_ok("a clone over HTTP");
    let tip = user.commit(&dir, &format!("{name}.txt"), &format!("from {name}"));
    (dir, tip)
}

/// The confirmed maintainers (npubs) ngit shows in `user`'s checkout `dir` (`ngit repo --json`):
/// what the client decides, to check the server against.
fn ngit_confirmed(user: &NgitUser, dir: &Path) -> Vec<String> {
    let run = user.ngit(dir, &["repo", "--json"]);
    let text = run.expect_ok("ngit repo --json");
    let view: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("ngit repo --json: {e}: {text}"));
    view["confirmed_maintainers"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// Brings `dir`'s `main` to what `server` serves for `owner`'s repository (plain git over HTTP).
fn catch_up(user: &NgitUser, dir: &Path, server: &TestServer, owner: &NgitUser, identifier: &str) {
    user.git(dir, &["fetch", "-q", &repo_url(server, &owner.keys.public_key(), identifier), "main"]).expect_ok("git fetch of the owner's main");
    user.git_ok(dir, &["reset", "-q", "--hard", "FETCH_HEAD"]);
}

/// `user` commits on top of the owner's served `main`, signs a state for it and pushes it to the
/// owner's repository with plain git; returns the push and the commit.
async fn try_to_move(user: &NgitUser, dir: &Path, server: &TestServer, owner: &NgitUser, identifier: &str, what: &str) -> (Run, String) {
    catch_up(user, dir, server, owner, identifier);
    let next = user.commit(dir, &format!("{what}.txt"), what);
    send_state(server, &user.keys, identifier, &[("refs/heads/main", &next)]).await;
    (push_over_http(user, dir, server, &owner.keys.public_key(), identifier), next)
}

/// The owner adds `co`, who clones, accepts, and pushes a commit through git-remote-nostr; the
/// owner pulls it and pushes one more on top, so the owner's own latest state holds `co`'s work
/// (whatever is decided about `co` later, the owner's state stays authoritative). Returns the
/// owner's work tree, `co`'s work tree and the owner's tip.
async fn co_maintainer_accepted_and_pushed(w: &World, owner: &NgitUser, co: &NgitUser, identifier: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let (work, _first) = init_repo(owner, &[&w.server], identifier, &[]);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &co.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");
    let (run, theirs) = clone_into(co, &nostr_url(&w.server, owner, identifier), "theirs");
    run.expect_ok("the co-maintainer's clone");
    co.ngit(&theirs, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    let pushed = co.commit(&theirs, "co.txt", "from the co-maintainer");
    co.git(&theirs, &["push", "origin", "main"]).expect_ok("the co-maintainer's push");
    let want = refs(&[("refs/heads/main", &pushed)]);
    // Pushed through git-remote-nostr to the co-maintainer's own repository and the owner's, or
    // to one of them only: then the relay brings the owner's repository to it in the background.
    eventually!("the owner's repository to serve the co-maintainer's push", (served_refs(co, &w.server, owner, identifier) == want).then_some(()));
    // Plain git from the server: what the owner's nostr remote lists may lag behind the relay.
    catch_up(owner, &work, &w.server, owner, identifier);
    assert_eq!(owner.git_ok(&work, &["rev-parse", "HEAD"]), pushed);
    let on_top = owner.commit(&work, "owner.txt", "the owner again");
    owner.git(&work, &["push", "origin", "main"]).expect_ok("the owner's push on top");
    assert_eq!(served_refs(owner, &w.server, owner, identifier), refs(&[("refs/heads/main", &on_top)]));
    catch_up(co, &theirs, &w.server, owner, identifier);
    (work, theirs, on_top)
}

/// 1. An invited key that has not accepted moves nothing: ngit refuses its push itself, and the
/// server refuses its state and push, saying how to accept.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_invitee_cannot_move_the_owners_branch() {
    let w = World::start();
    let owner = w.user("owner");
    let invitee = w.user("invitee");
    let (work, first) = init_repo(&owner, &[&w.server], "invite", &[]);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &invitee.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");

    let (run, theirs) = clone_into(&invitee, &nostr_url(&w.server, &owner, "invite"), "theirs");
    run.expect_ok("the invitee's clone");
    let next = invitee.commit(&theirs, "invitee.txt", "from the invitee");
    // The client refuses before reaching any server.
    let text = invitee.git(&theirs, &["push", "origin", "main"]).expect_refused("an invitee's git push origin main");
    assert!(text.contains("ngit repo accept"), "ngit tells the invitee to accept: {text}");

    assert_eq!(ngit_confirmed(&owner, &work), vec![owner.npub()], "ngit agrees: the invitee is not confirmed");
    // The server: the invitee's state signed here, the commit pushed with plain git.
    send_state(&w.server, &invitee.keys, "invite", &[("refs/heads/main", &next)]).await;
    let refused = refused_by_server(&push_over_http(&invitee, &theirs, &w.server, &owner.keys.public_key(), "invite"), "an invitee's push to the owner's repository");
    assert!(refused.contains("ngit repo accept"), "the refusal says how to accept: {refused}");
    assert_eq!(served_refs(&owner, &w.server, &owner, "invite"), refs(&[("refs/heads/main", &first)]));
}

/// 2. The invitee's push is refused until `ngit repo accept`; then the same push goes through
/// and the owner's repository serves it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_invitee_who_accepts_can_push() {
    let w = World::start();
    let owner = w.user("owner");
    let invitee = w.user("invitee");
    let (work, first) = init_repo(&owner, &[&w.server], "accept", &[]);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &invitee.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");
    let (run, theirs) = clone_into(&invitee, &nostr_url(&w.server, &owner, "accept"), "theirs");
    run.expect_ok("the invitee's clone");
    let next = invitee.commit(&theirs, "invitee.txt", "from the invitee");

    let text = invitee.git(&theirs, &["push", "origin", "main"]).expect_refused("the push before accepting");
    assert!(text.contains("ngit repo accept"), "{text}");
    assert_eq!(served_refs(&owner, &w.server, &owner, "accept"), refs(&[("refs/heads/main", &first)]));

    invitee.ngit(&theirs, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    invitee.git(&theirs, &["push", "origin", "main"]).expect_ok("the same push after accepting");
    let want = refs(&[("refs/heads/main", &next)]);
    eventually!("the owner's repository to serve the accepted push", (served_refs(&owner, &w.server, &owner, "accept") == want).then_some(()));
}

/// 3. An invitee's state whose git data is on the server already waits in the purgatory (it
/// moves nothing) and is released into the owner's repository once the invitee accepts.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_invitees_held_state_is_released_when_they_accept() {
    let w = World::start();
    let owner = w.user("owner");
    let invitee = w.user("invitee");
    let (work, first) = init_repo(&owner, &[&w.server], "held", &[]);
    // The commit the invitee's state will name reaches the server on the owner's branch `feature`.
    owner.git_ok(&work, &["checkout", "-q", "-b", "feature"]);
    let feature = owner.commit(&work, "feature.txt", "on a branch");
    owner.git(&work, &["push", "origin", "feature"]).expect_ok("the owner's push of a branch");
    let before = refs(&[("refs/heads/feature", &feature), ("refs/heads/main", &first)]);
    assert_eq!(served_refs(&owner, &w.server, &owner, "held"), before);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &invitee.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");

    // The invitee's state: main at that commit, no `feature`.
    let (ok, msg) = send_state(&w.server, &invitee.keys, "held", &[("refs/heads/main", &feature)]).await;
    assert!(ok && msg.starts_with("purgatory:"), "the invitee's state is held, not authoritative: OK {ok} {msg:?}");
    assert_eq!(served_refs(&owner, &w.server, &owner, "held"), before, "the held state moved nothing");

    let (run, theirs) = clone_into(&invitee, &nostr_url(&w.server, &owner, "held"), "theirs");
    run.expect_ok("the invitee's clone");
    invitee.ngit(&theirs, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    let want = refs(&[("refs/heads/main", &feature)]);
    eventually!("the owner's repository to serve the released state", (served_refs(&owner, &w.server, &owner, "held") == want).then_some(()));
}

/// 4. A co-maintainer who accepted and pushed, then ran `ngit repo leave`, moves nothing; the
/// refusal says they left.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_maintainer_who_left_cannot_move_the_owners_branch() {
    let w = World::start();
    let owner = w.user("owner");
    let co = w.user("co");
    let (work, theirs, tip) = co_maintainer_accepted_and_pushed(&w, &owner, &co, "leave").await;

    co.ngit(&theirs, &["repo", "leave"]).expect_ok("ngit repo leave");
    assert_eq!(ngit_confirmed(&owner, &work), vec![owner.npub()], "ngit agrees: the co-maintainer left");
    let next = co.commit(&theirs, "after.txt", "after leaving");
    let text = co.git(&theirs, &["push", "origin", "main"]).expect_refused("ngit's push after leaving");
    eprintln!("ngit after leaving: {text}");
    let (ok, answer) = send_state(&w.server, &co.keys, "leave", &[("refs/heads/main", &next)]).await;
    let refused = refused_by_server(&push_over_http(&co, &theirs, &w.server, &owner.keys.public_key(), "leave"), "a push after leaving");
    // The explanation comes with the state's refusal (`OK false "blocked: ... left ..."`) or with
    // the push's, wherever the server refuses first.
    assert!(
        (!ok && answer.contains("left")) || refused.contains("left"),
        "the refusal says they left: state OK {ok} {answer:?}; push: {refused}"
    );
    assert_eq!(served_refs(&owner, &w.server, &owner, "leave"), refs(&[("refs/heads/main", &tip)]));
}

/// 5. A co-maintainer the owner removed (`ngit repo edit --remove-maintainer`) moves nothing.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_removed_maintainer_cannot_move_the_owners_branch() {
    let w = World::start();
    let owner = w.user("owner");
    let co = w.user("co");
    let (work, theirs, tip) = co_maintainer_accepted_and_pushed(&w, &owner, &co, "remove").await;

    let removed = owner.ngit(&work, &["repo", "edit", "--remove-maintainer", &co.npub(), "-d"]);
    removed.expect_ok("ngit repo edit --remove-maintainer");
    assert_eq!(ngit_confirmed(&owner, &work), vec![owner.npub()], "ngit agrees: the co-maintainer was removed");
    let next = co.commit(&theirs, "after.txt", "after removal");
    send_state(&w.server, &co.keys, "remove", &[("refs/heads/main", &next)]).await;
    let refused = refused_by_server(&push_over_http(&co, &theirs, &w.server, &owner.keys.public_key(), "remove"), "a removed maintainer's push");
    assert!(
        refused.contains("not a maintainer") || refused.contains("not a confirmed maintainer") || refused.contains(&owner.npub()),
        "the refusal says who may push: {refused}"
    );
    assert_eq!(served_refs(&owner, &w.server, &owner, "remove"), refs(&[("refs/heads/main", &tip)]));
}

/// 7. A moderator (`o`) never moves refs: neither with the owner's announcement as ngit writes
/// it, nor when a stale `maintainers` compatibility list also names the moderator (role tags
/// decide). ngit 3.0.4 has no command that assigns `o`: the owner's announcement is republished
/// here with the `o` tag, and the moderator's acknowledgement (its own announcement, `o` on
/// itself and `M` on the owner, as ngit's own test fixtures write it) is signed here too.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_moderator_cannot_move_refs() {
    let w = World::start();
    let owner = w.user("owner");
    let moderator = w.user("moderator");
    let (work, first) = init_repo(&owner, &[&w.server], "moderated", &[]);
    let announced = served_event(&w.server, 30617, &owner.keys.public_key(), "moderated").await.unwrap();
    eprintln!("ngit's announcement tags: {:?}", announced.tags);
    republish(&w.server, &owner, "moderated", |tags| tags.push(tag(&["o", &hex(&moderator)]))).await;
    let at = fresh_time(&w.server, "moderated").await;
    let acknowledgement = announcement_with(
        &[&w.server],
        &moderator.keys,
        "moderated",
        vec![tag(&["M", &hex(&owner)]), tag(&["o", &hex(&moderator)]), tag(&["maintainers", &hex(&owner)])],
        at,
    );
    let (ok, msg) = send(&w.server, &acknowledgement).await;
    assert!(ok, "the moderator's announcement was refused: {msg}");
    wait_past(at).await;

    assert_eq!(ngit_confirmed(&owner, &work), vec![owner.npub()], "ngit agrees: the moderator is no maintainer");
    let (dir, next) = clone_and_commit(&moderator, &w.server, &owner, "moderated", "moderator");
    send_state(&w.server, &moderator.keys, "moderated", &[("refs/heads/main", &next)]).await;
    refused_by_server(&push_over_http(&moderator, &dir, &w.server, &owner.keys.public_key(), "moderated"), "a moderator's push");
    assert_eq!(served_refs(&owner, &w.server, &owner, "moderated"), refs(&[("refs/heads/main", &first)]));

    // A `maintainers` tag naming the moderator too (stale, or written by another tool): the role
    // tags decide, and they say moderator.
    republish(&w.server, &owner, "moderated", |tags| {
        match tags.iter_mut().find(|t| t[0] == "maintainers") {
            Some(list) => list.push(hex(&moderator)),
            None => tags.push(tag(&["maintainers", &hex(&owner), &hex(&moderator)])),
        }
    })
    .await;
    let again = moderator.commit(&dir, "again.txt", "the moderator again");
    send_state(&w.server, &moderator.keys, "moderated", &[("refs/heads/main", &again)]).await;
    refused_by_server(
        &push_over_http(&moderator, &dir, &w.server, &owner.keys.public_key(), "moderated"),
        "a moderator's push with a stale maintainers tag naming them",
    );
    assert_eq!(served_refs(&owner, &w.server, &owner, "moderated"), refs(&[("refs/heads/main", &first)]));
}

/// 8a. An older client's announcement (only a `maintainers` tag, no role tags) lists a key that
/// never announced the repository: invited, not a maintainer.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_older_clients_listed_key_without_an_announcement_is_refused() {
    let w = World::start();
    let owner = w.user("owner");
    let listed = w.user("listed");
    let (_work, first) = publish_by_hand(&w.server, &owner, "legacy", vec![tag(&["maintainers", &hex(&listed)])]).await;

    let (dir, next) = clone_and_commit(&listed, &w.server, &owner, "legacy", "listed");
    send_state(&w.server, &listed.keys, "legacy", &[("refs/heads/main", &next)]).await;
    let refused = refused_by_server(&push_over_http(&listed, &dir, &w.server, &owner.keys.public_key(), "legacy"), "a listed key's push without its announcement");
    assert!(refused.contains("ngit repo accept") || refused.contains(&owner.npub()), "the refusal says why: {refused}");
    assert_eq!(served_refs(&owner, &w.server, &owner, "legacy"), refs(&[("refs/heads/main", &first)]));
}

/// 8b. The same older client's announcement, and the listed key's own announcement (also without
/// role tags) listing the owner back: confirmed, its push moves `main`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_older_clients_listed_key_that_announced_back_is_confirmed() {
    let w = World::start();
    let owner = w.user("owner");
    let listed = w.user("listed");
    publish_by_hand(&w.server, &owner, "legacy", vec![tag(&["maintainers", &hex(&listed)])]).await;
    let at = fresh_time(&w.server, "legacy").await;
    let back = announcement_with(&[&w.server], &listed.keys, "legacy", vec![tag(&["maintainers", &hex(&owner)])], at);
    let (ok, msg) = send(&w.server, &back).await;
    assert!(ok, "the listed key's announcement was refused: {msg}");
    wait_past(at).await;

    let (dir, next) = clone_and_commit(&listed, &w.server, &owner, "legacy", "listed");
    let (ok, msg) = send_state(&w.server, &listed.keys, "legacy", &[("refs/heads/main", &next)]).await;
    assert!(ok, "a confirmed maintainer's state was refused: {msg}");
    push_over_http(&listed, &dir, &w.server, &owner.keys.public_key(), "legacy").expect_ok("a confirmed maintainer's push");
    assert_eq!(served_refs(&owner, &w.server, &owner, "legacy"), refs(&[("refs/heads/main", &next)]));
}

/// 9. A cycle of invitees: the owner lists A, A lists B, B lists C, C lists A, and none lists the
/// owner back. Every one of them can reach the owner, but nobody is confirmed: nobody's state
/// moves the owner's repository. (Announcements signed here, as an older client writes them.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_cycle_of_invitees_moves_nothing() {
    let w = World::start();
    let owner = w.user("owner");
    let [a, b, c] = ["a", "b", "c"].map(|n| w.user(n));
    let (_work, first) = publish_by_hand(&w.server, &owner, "cycle", vec![tag(&["maintainers", &hex(&a)])]).await;
    let at = fresh_time(&w.server, "cycle").await;
    for (author, lists) in [(&a, &b), (&b, &c), (&c, &a)] {
        let event = announcement_with(&[&w.server], &author.keys, "cycle", vec![tag(&["maintainers", &hex(lists)])], at);
        let (ok, msg) = send(&w.server, &event).await;
        assert!(ok, "an announcement of the cycle was refused: {msg}");
    }
    wait_past(at).await;

    for (user, name) in [(&a, "a"), (&b, "b"), (&c, "c")] {
        let (dir, next) = clone_and_commit(user, &w.server, &owner, "cycle", name);
        send_state(&w.server, &user.keys, "cycle", &[("refs/heads/main", &next)]).await;
        let refused = push_over_http(user, &dir, &w.server, &owner.keys.public_key(), "cycle");
        refused_by_server(&refused, &format!("the push of {name}, in a cycle of invitees"));
        assert_eq!(served_refs(&owner, &w.server, &owner, "cycle"), refs(&[("refs/heads/main", &first)]), "after {name}'s push");
    }
}

/// 10. The invite/accept flow on a repository hosted on two servers that sync with each other:
/// the invitee is refused on both; after `ngit repo accept`, a state and push sent to one server
/// only reach the other by relay sync and git sync.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn invite_and_accept_across_two_servers() {
    let one = TestServer::start_with(&["--sync-allow-private"]);
    let two = TestServer::start_with(&["--sync-allow-private"]);
    let (_users, _tmp, [owner, invitee]) = super::ngit_users(&[&one, &two], ["owner", "invitee"]);
    let (work, first) = init_repo(&owner, &[&one, &two], "both", &[]);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &invitee.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");
    let (run, theirs) = clone_into(&invitee, &nostr_url(&one, &owner, "both"), "theirs");
    run.expect_ok("the invitee's clone");
    let next = invitee.commit(&theirs, "invitee.txt", "from the invitee");

    for server in [&one, &two] {
        send_state(server, &invitee.keys, "both", &[("refs/heads/main", &next)]).await;
        let refused = refused_by_server(&push_over_http(&invitee, &theirs, server, &owner.keys.public_key(), "both"), "an invitee's push");
        assert!(refused.contains("ngit repo accept"), "{refused}");
        assert_eq!(served_refs(&owner, server, &owner, "both"), refs(&[("refs/heads/main", &first)]));
    }

    invitee.ngit(&theirs, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    let accepted = eventually!(
        "both servers to serve the invitee's announcement",
        {
            let mut found = Vec::new();
            for server in [&one, &two] {
                found.extend(served_event(server, 30617, &invitee.keys.public_key(), "both").await);
            }
            (found.len() == 2).then_some(found)
        }
    );
    assert_eq!(accepted[0].id, accepted[1].id);
    let later = invitee.commit(&theirs, "later.txt", "after accepting");
    let (ok, msg) = send_state(&one, &invitee.keys, "both", &[("refs/heads/main", &later)]).await;
    assert!(ok, "a confirmed maintainer's state was refused: {msg}");
    push_over_http(&invitee, &theirs, &one, &owner.keys.public_key(), "both").expect_ok("the push after accepting, to one server");
    let want = refs(&[("refs/heads/main", &later)]);
    assert_eq!(served_refs(&owner, &one, &owner, "both"), want);
    eventually!(
        "the other server to catch up by relay sync and git sync",
        SYNC_TIMEOUT,
        (served_refs(&owner, &two, &owner, "both") == want).then_some(())
    );
}

/// 6. A lead handover as ngit 3.0.4 does it, and the `M` path that seeds the owner's repository.
/// ngit refuses the owner's `--lead-maintainer <L>` until L's own announcement holds the whole
/// roster, so L prepares first (`ngit repo edit --lead-maintainer <L>`: a self-`M`), then the
/// owner hands over (the owner's `M` names L, the owner stays `m`, the third co-maintainer's entry
/// is deferred to L), then that co-maintainer runs `ngit repo follow-lead` (its `M` names L). All
/// along, the path from the owner ends at L's self-`M` and the three stay confirmed: each moves
/// `main`. Then L's announcement with its self-`M` ended (signed here: ngit has no command that
/// leaves the path dangling): the owner's `M` path ends at no lead, the seed is nobody, and not
/// even the owner's own state moves the owner's repository.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_lead_handover_and_the_m_path_decide_who_moves_the_owners_repository() {
    let w = World::start();
    let owner = w.user("owner");
    let lead = w.user("lead");
    let co = w.user("co");
    let (work, lead_dir, _tip) = co_maintainer_accepted_and_pushed(&w, &owner, &lead, "lead").await;
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &co.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");
    let (run, co_dir) = clone_into(&co, &nostr_url(&w.server, &owner, "lead"), "co-clone");
    run.expect_ok("the co-maintainer's clone");
    co.ngit(&co_dir, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    let everyone = [("owner", &owner, &work), ("lead", &lead, &lead_dir), ("co", &co, &co_dir)];
    let all_move = |phase: &'static str| {
        let everyone = &everyone;
        let w = &w;
        let owner = &owner;
        async move {
            for (name, user, dir) in everyone {
                let (run, next) = try_to_move(user, dir, &w.server, owner, "lead", &format!("{name} {phase}")).await;
                run.expect_ok(&format!("{name}'s push {phase}"));
                assert_eq!(served_refs(owner, &w.server, owner, "lead"), refs(&[("refs/heads/main", &next)]), "{name} {phase}");
            }
        }
    };

    let refused = owner.ngit(&work, &["repo", "edit", "--lead-maintainer", &lead.npub(), "-d"]);
    let text = refused.expect_refused("a handover to a lead who has not prepared");
    eprintln!("ngit before the lead prepared: {text}");
    lead.ngit(&lead_dir, &["repo", "edit", "--lead-maintainer", &lead.npub(), "-d"]).expect_ok("the lead prepares");
    all_move("after the lead prepared").await;
    owner.ngit(&work, &["repo", "edit", "--lead-maintainer", &lead.npub(), "-d"]).expect_ok("the owner hands over");
    all_move("after the handover").await;
    co.ngit(&co_dir, &["repo", "follow-lead"]).expect_ok("ngit repo follow-lead");
    all_move("after follow-lead").await;

    // The lead's own `M` ended: the owner's path dangles.
    let lead_hex = hex(&lead);
    let ended = now().to_string();
    republish(&w.server, &lead, "lead", |tags| {
        for t in tags.iter_mut().filter(|t| t.len() >= 2 && t[0] == "M" && t[1] == lead_hex && t.len() % 2 == 1) {
            t.push(ended.clone());
        }
        for t in tags.iter_mut().filter(|t| t.len() == 2 && t[0] == "M" && t[1] == lead_hex) {
            t.extend(["0".to_string(), ended.clone()]);
        }
    })
    .await;
    assert_eq!(ngit_confirmed(&owner, &work), Vec::<String>::new(), "ngit agrees: nobody is confirmed");
    let before = served_refs(&owner, &w.server, &owner, "lead");
    for (name, user, dir) in &everyone {
        let (run, _) = try_to_move(user, dir, &w.server, &owner, "lead", &format!("{name} with no lead")).await;
        refused_by_server(&run, &format!("{name}'s push with the owner's M path ending at no lead"));
        assert_eq!(served_refs(&owner, &w.server, &owner, "lead"), before, "{name} with no lead");
    }
}
