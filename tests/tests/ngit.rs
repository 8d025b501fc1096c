//! The real client, as users run it: ngit 3.0.4 and `git-remote-nostr` (the project's shared
//! tools) against real relays, each user in a sandbox of their own whose Nostr relays are a plain
//! relay apart from the GRASP server (`grasp_tests::plain_relay`), every address loopback.
//! Assertions are what the user sees: exit status, the refs a server serves, the events it serves.
//!
//! The tests are `#[ignore]`d so the README's test command works on a machine without the shared
//! tools; `.ci/run` runs them, and a missing tool fails them. Run alone:
//! `cargo build --workspace && cargo test -p grasp-tests --test ngit -- --ignored`.

use grasp_tests::grasp::*;
use grasp_tests::ngit::{NgitUser, Run};
use grasp_tests::plain_relay::PlainRelay;
use grasp_tests::{eventually, NostrClient, TestServer};
use nostr::prelude::*;

/// The maintainer-authority rule (confirmed maintainers only): tests/tests/ngit/roles.rs.
#[path = "ngit/roles.rs"]
mod roles;

/// GRASP-03 Sync+: a comment published by ngit to its author's own relays only: tests/tests/ngit/sync_plus.rs.
#[path = "ngit/sync_plus.rs"]
mod sync_plus;

/// `http://127.0.0.1:PORT`: a GRASP server as ngit is given it.
fn grasp_url(server: &TestServer) -> String {
    format!("http://{}", host(server))
}

/// The `nostr://` URL ngit prints for `owner`'s `identifier` on `server` (a plain-WebSocket relay
/// is named whole, percent-encoded).
fn nostr_url(server: &TestServer, owner: &NgitUser, identifier: &str) -> String {
    format!("nostr://{}/ws%3A%2F%2F{}/{identifier}", owner.npub(), host(server).replace(':', "%3A"))
}

/// The branches and tags `server` serves for `owner`'s `identifier` (`git ls-remote` over plain
/// HTTP): refname -> oid, `HEAD` left out.
fn served_refs(user: &NgitUser, server: &TestServer, owner: &NgitUser, identifier: &str) -> Vec<(String, String)> {
    let url = repo_url(server, &owner.keys.public_key(), identifier);
    let out = user.git(&user.home, &["ls-remote", &url]);
    out.expect_ok("git ls-remote");
    let mut refs: Vec<(String, String)> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, name)| *name != "HEAD" && !name.ends_with("^{}"))
        .map(|(oid, name)| (name.to_string(), oid.to_string()))
        .collect();
    refs.sort();
    refs
}

fn refs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs.iter().map(|(n, o)| (n.to_string(), o.to_string())).collect();
    v.sort();
    v
}

/// The newest event of `kind` by `author` for `identifier` that `server` serves.
async fn served_event(server: &TestServer, kind: u16, author: &PublicKey, identifier: &str) -> Option<Event> {
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let filter = Filter::new().kind(Kind::Custom(kind)).author(*author).identifier(identifier);
    c.req(vec![filter]).await.unwrap().into_iter().max_by_key(|e| e.created_at)
}

/// The branches the newest served state event of `owner` declares.
async fn served_state_refs(server: &TestServer, owner: &NgitUser, identifier: &str) -> Vec<(String, String)> {
    let Some(state) = served_event(server, 30618, &owner.keys.public_key(), identifier).await else { return Vec::new() };
    let mut v: Vec<(String, String)> = state
        .tags
        .iter()
        .map(Tag::as_slice)
        .filter(|t| t.len() >= 2 && (t[0].starts_with("refs/heads/") || t[0].starts_with("refs/tags/")) && !t[0].ends_with("^{}"))
        .map(|t| (t[0].clone(), t[1].clone()))
        .collect();
    v.sort();
    v
}

/// `ngit init` of a new repository `identifier` from a work tree with one commit, hosted on
/// `servers`; returns the work tree and its commit.
fn init_repo(owner: &NgitUser, servers: &[&TestServer], identifier: &str, extra: &[&str]) -> (std::path::PathBuf, String) {
    let work = owner.new_work_tree(identifier, "README", &format!("{identifier}\n"));
    let tip = owner.git_ok(&work, &["rev-parse", "HEAD"]);
    let mut args = vec!["init", "--name", identifier, "--identifier", identifier, "--description", "a test repository", "-d"];
    let urls: Vec<String> = servers.iter().map(|s| grasp_url(s)).collect();
    for u in &urls {
        args.extend(["--grasp-server", u.as_str()]);
    }
    args.extend_from_slice(extra);
    owner.ngit(&work, &args).expect_ok("ngit init");
    (work, tip)
}

fn clone_into(user: &NgitUser, url: &str, name: &str) -> (Run, std::path::PathBuf) {
    let dir = user.home.join(name);
    let run = user.git(&user.home, &["clone", url, dir.to_str().unwrap()]);
    (run, dir)
}

/// The users' own relay (apart from the GRASP servers, as real users keep them), a home for the
/// users, and ngit users named `names` whose relay that is and whose GRASP servers are `servers`.
fn ngit_users<const N: usize>(servers: &[&TestServer], names: [&str; N]) -> (PlainRelay, tempfile::TempDir, [NgitUser; N]) {
    let users = PlainRelay::start();
    let tmp = tempfile::tempdir().unwrap();
    let urls: Vec<String> = servers.iter().map(|s| grasp_url(s)).collect();
    let made = names.map(|name| NgitUser::new(tmp.path(), name, &users.url(), &urls));
    (users, tmp, made)
}

/// One public server and [`ngit_users`] of it.
fn one_server<const N: usize>(names: [&str; N]) -> (TestServer, PlainRelay, tempfile::TempDir, [NgitUser; N]) {
    let server = TestServer::start();
    let (users, tmp, made) = ngit_users(&[&server], names);
    (server, users, tmp, made)
}

/// The owner's everyday life with ngit on one public server: init and push, clones by the
/// `nostr://` URL ngit prints, by the one the repository page shows and by plain HTTP, a second
/// commit pushed and pulled, branches and tags created and deleted, a force-push, and a
/// stranger's push refused with a message a person can read.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn an_owner_publishes_pushes_and_others_clone() {
    let (server, _users, _tmp, [owner, reader]) = one_server(["owner", "reader"]);

    let (work, first) = init_repo(&owner, &[&server], "demo", &[]);
    assert_eq!(served_refs(&reader, &server, &owner, "demo"), refs(&[("refs/heads/main", &first)]));
    assert!(served_event(&server, 30617, &owner.keys.public_key(), "demo").await.is_some(), "the announcement is served");
    assert_eq!(served_state_refs(&server, &owner, "demo").await, refs(&[("refs/heads/main", &first)]));

    // Clones: the URL ngit prints, the one the repository page shows, plain HTTP.
    let (run, by_nostr) = clone_into(&reader, &nostr_url(&server, &owner, "demo"), "by-nostr");
    run.expect_ok("git clone nostr://");
    assert_eq!(reader.git_ok(&by_nostr, &["rev-parse", "HEAD"]), first);
    let page_url = page_nostr_url(&server, &owner, "demo").await;
    assert_eq!(page_url, nostr_url(&server, &owner, "demo"), "the page shows the URL ngit prints");
    let (run, by_page) = clone_into(&reader, &page_url, "by-page");
    run.expect_ok("git clone of the page's nostr:// URL");
    assert_eq!(reader.git_ok(&by_page, &["rev-parse", "HEAD"]), first);
    let (run, by_http) = clone_into(&reader, &repo_url(&server, &owner.keys.public_key(), "demo"), "by-http");
    run.expect_ok("git clone over plain HTTP");
    assert_eq!(reader.git_ok(&by_http, &["rev-parse", "HEAD"]), first);

    // A second commit, pushed and pulled.
    let second = owner.commit(&work, "b.txt", "two");
    owner.git(&work, &["push", "origin", "main"]).expect_ok("git push of a second commit");
    assert_eq!(served_refs(&reader, &server, &owner, "demo"), refs(&[("refs/heads/main", &second)]));
    assert_eq!(served_state_refs(&server, &owner, "demo").await, refs(&[("refs/heads/main", &second)]));
    reader.git(&by_nostr, &["pull", "--ff-only"]).expect_ok("git pull");
    assert_eq!(reader.git_ok(&by_nostr, &["rev-parse", "HEAD"]), second);

    // A branch and a tag, created and deleted.
    owner.git_ok(&work, &["checkout", "-q", "-b", "feature"]);
    let feature = owner.commit(&work, "f.txt", "feature");
    owner.git(&work, &["push", "origin", "feature"]).expect_ok("git push of a new branch");
    owner.git_ok(&work, &["tag", "v1.0", &second]);
    owner.git(&work, &["push", "origin", "v1.0"]).expect_ok("git push of a tag");
    assert_eq!(
        served_refs(&reader, &server, &owner, "demo"),
        refs(&[("refs/heads/feature", &feature), ("refs/heads/main", &second), ("refs/tags/v1.0", &second)])
    );
    owner.git(&work, &["push", "origin", "--delete", "feature"]).expect_ok("git push --delete of a branch");
    owner.git(&work, &["push", "origin", "--delete", "v1.0"]).expect_ok("git push --delete of a tag");
    assert_eq!(served_refs(&reader, &server, &owner, "demo"), refs(&[("refs/heads/main", &second)]));

    // A force-push replaces main.
    owner.git_ok(&work, &["checkout", "-q", "main"]);
    owner.git_ok(&work, &["reset", "-q", "--hard", &first]);
    let rewritten = owner.commit(&work, "c.txt", "rewritten");
    owner.git(&work, &["push", "origin", "main"]).expect_refused("a non-fast-forward push without --force");
    owner.git(&work, &["push", "--force", "origin", "main"]).expect_ok("git push --force");
    assert_eq!(served_refs(&reader, &server, &owner, "demo"), refs(&[("refs/heads/main", &rewritten)]));
    assert_eq!(served_state_refs(&server, &owner, "demo").await, refs(&[("refs/heads/main", &rewritten)]));

    // A stranger cannot push, and is told so.
    reader.git_ok(&by_http, &["fetch", "-q", "origin"]);
    reader.git_ok(&by_http, &["reset", "-q", "--hard", "origin/main"]);
    reader.commit(&by_http, "evil.txt", "nope");
    let refused = reader.git(&by_http, &["push", "origin", "main"]).expect_refused("a stranger's push over HTTP");
    assert!(refused.contains("grasp: push rejected") && refused.contains("state expects"), "the refusal explains itself: {refused}");
    reader.git_ok(&by_nostr, &["fetch", "-q", "origin"]);
    reader.git_ok(&by_nostr, &["reset", "-q", "--hard", "origin/main"]);
    reader.commit(&by_nostr, "evil.txt", "nope");
    let refused = reader.git(&by_nostr, &["push", "origin", "main"]);
    let text = refused.expect_refused("a stranger's push through nostr://");
    assert!(text.contains("not a confirmed maintainer"), "the refusal explains itself: {text}");
    assert_eq!(served_refs(&reader, &server, &owner, "demo"), refs(&[("refs/heads/main", &rewritten)]));
}

/// The `nostr://` clone URL on the repository page (`GET` of the repository URL by a browser).
async fn page_nostr_url(server: &TestServer, owner: &NgitUser, identifier: &str) -> String {
    let url = repo_url(server, &owner.keys.public_key(), identifier);
    let page = reqwest::Client::new().get(&url).header("Accept", "text/html").send().await.unwrap().text().await.unwrap();
    let start = page.find("git clone nostr://").unwrap_or_else(|| panic!("no nostr:// clone URL on the page:\n{page}")) + "git clone ".len();
    let end = start + page[start..].find('<').unwrap();
    page[start..end].replace("&amp;", "&")
}

/// Pull requests as contributors open them: `git push -u origin pr/<name>` and `ngit send`; the
/// maintainer lists them and checks them out.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn contributors_open_pull_requests_the_maintainer_checks_them_out() {
    let (server, _users, _tmp, [owner, contributor]) = one_server(["owner", "contributor"]);
    let (work, _first) = init_repo(&owner, &[&server], "prs", &[]);

    let (run, theirs) = clone_into(&contributor, &nostr_url(&server, &owner, "prs"), "theirs");
    run.expect_ok("the contributor's clone");
    contributor.git_ok(&theirs, &["checkout", "-q", "-b", "pr/fix-typo"]);
    let fix = contributor.commit(&theirs, "fix.txt", "a fix");
    contributor
        .git(&theirs, &["push", "-o", "title=Fix the typo", "-o", "description=It was wrong.", "-u", "origin", "pr/fix-typo"])
        .expect_ok("git push -u origin pr/fix-typo");
    // The server holds the pull request and its commit: the event is served, and so is
    // refs/nostr/<event id> at the pushed commit.
    let pr = served_pull_request(&server, &contributor).await.expect("the pull request event is served");
    assert!(served_nostr_refs(&contributor, &server, &owner, "prs").contains(&(format!("refs/nostr/{}", pr.id.to_hex()), fix.clone())));

    // `ngit send` of a second change, as a pull request.
    contributor.git_ok(&theirs, &["checkout", "-q", "-b", "feature", "main"]);
    let feature = contributor.commit(&theirs, "feature.txt", "a feature");
    contributor
        .ngit(&theirs, &["send", "HEAD~1", "--force-pr", "--subject", "Add a feature", "--description", "Please.", "-d"])
        .expect_ok("ngit send");
    let sent = eventually!("the sent pull request is served", served_pull_requests(&server, &contributor).await.into_iter().find(|e| e.id != pr.id));
    assert!(served_nostr_refs(&contributor, &server, &owner, "prs").contains(&(format!("refs/nostr/{}", sent.id.to_hex()), feature.clone())));

    // The maintainer lists both and checks each out.
    let listed = owner.ngit(&work, &["pr", "list"]).expect_ok("ngit pr list");
    assert!(listed.contains(&pr.id.to_hex()) && listed.contains("Fix the typo"), "{listed}");
    assert!(listed.contains(&sent.id.to_hex()) && listed.contains("Add a feature"), "{listed}");
    for (event, tip) in [(&pr, &fix), (&sent, &feature)] {
        owner.ngit(&work, &["pr", "checkout", &event.id.to_hex()]).expect_ok("ngit pr checkout");
        assert_eq!(&owner.git_ok(&work, &["rev-parse", "HEAD"]), tip, "the checked-out branch is the contributor's commit");
        owner.git_ok(&work, &["checkout", "-q", "main"]);
    }
}

/// A contributor's 50 MiB pull request, pushed as ngit does it (git first, then the event), passes
/// the byte budgets untouched and counts as its author's contributor data (docs/protocol.md#budgets).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_large_pull_request_passes_the_budgets_untouched() {
    use std::io::Read;
    let (server, _users, _tmp, [owner, contributor]) = one_server(["owner", "contributor"]);
    init_repo(&owner, &[&server], "big", &[]);

    let (run, theirs) = clone_into(&contributor, &nostr_url(&server, &owner, "big"), "theirs");
    run.expect_ok("the contributor's clone");
    contributor.git_ok(&theirs, &["checkout", "-q", "-b", "pr/big"]);
    let mut blob = vec![0u8; 50 << 20];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut blob).unwrap();
    std::fs::write(theirs.join("data.bin"), &blob).unwrap();
    contributor.git_ok(&theirs, &["add", "data.bin"]);
    contributor.git_ok(&theirs, &["commit", "-q", "-m", "50 MiB of data"]);
    let tip = contributor.git_ok(&theirs, &["rev-parse", "HEAD"]);
    contributor
        .git(&theirs, &["push", "-o", "title=Big data", "-o", "description=Large.", "-u", "origin", "pr/big"])
        .expect_ok("git push -u origin pr/big");
    let pr = served_pull_request(&server, &contributor).await.expect("the pull request event is served");
    assert!(served_nostr_refs(&contributor, &server, &owner, "big").contains(&(format!("refs/nostr/{}", pr.id.to_hex()), tip)));
    let listing = purgatory_listing(&server).await;
    let c = &listing["contributors"];
    let npub = contributor.keys.public_key().to_bech32().unwrap();
    let counted = c["top_authors"].as_array().unwrap().iter().find(|a| a["who"] == npub.as_str()).map_or(0, |a| a["bytes"].as_u64().unwrap());
    assert!(counted >= 50 << 20, "the pull request's data is its author's: {listing}");
    assert_eq!(listing["unsigned"]["total_bytes"], 0, "no longer unsigned once its event arrived: {listing}");
}

/// The pull requests (1618) by `author` that `server` serves.
async fn served_pull_requests(server: &TestServer, author: &NgitUser) -> Vec<Event> {
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    c.req(vec![Filter::new().kind(Kind::Custom(1618)).author(author.keys.public_key())]).await.unwrap()
}

async fn served_pull_request(server: &TestServer, author: &NgitUser) -> Option<Event> {
    served_pull_requests(server, author).await.into_iter().next()
}

/// The `refs/nostr/*` refs `server` serves for `owner`'s `identifier`: (refname, oid).
fn served_nostr_refs(user: &NgitUser, server: &TestServer, owner: &NgitUser, identifier: &str) -> Vec<(String, String)> {
    let url = repo_url(server, &owner.keys.public_key(), identifier);
    let out = user.git(&user.home, &["ls-remote", &url, "refs/nostr/*"]);
    out.expect_ok("git ls-remote refs/nostr/*");
    out.stdout.lines().filter_map(|l| l.split_once('\t')).map(|(oid, name)| (name.to_string(), oid.to_string())).collect()
}

/// A co-maintainer added by the owner accepts and pushes; the owner's repository serves it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_co_maintainer_is_added_and_pushes() {
    let (server, _users, _tmp, [owner, co]) = one_server(["owner", "co"]);
    let (work, _first) = init_repo(&owner, &[&server], "team", &[]);
    owner.ngit(&work, &["repo", "edit", "--add-maintainer", &co.npub(), "-d"]).expect_ok("ngit repo edit --add-maintainer");

    let (run, theirs) = clone_into(&co, &nostr_url(&server, &owner, "team"), "theirs");
    run.expect_ok("the co-maintainer's clone");
    co.ngit(&theirs, &["repo", "accept", "-d"]).expect_ok("ngit repo accept");
    let next = co.commit(&theirs, "co.txt", "from the co-maintainer");
    co.git(&theirs, &["push", "origin", "main"]).expect_ok("the co-maintainer's push");
    // Both repositories serve it: the co-maintainer's own, and the owner's, whose maintainer set
    // now holds the co-maintainer: right after the push, or, where ngit pushed to one of them
    // only, once the relay carried the state over in the background.
    let want = refs(&[("refs/heads/main", &next)]);
    assert_eq!(served_refs(&co, &server, &co, "team"), want);
    eventually!("the owner's repository to serve the co-maintainer's push", (served_refs(&co, &server, &owner, "team") == want).then_some(()));
    // One object store for the family: both repositories borrow from the identifier's pool, which
    // records both of their refs, and a fresh clone of either is the history.
    let pool = server.data_dir().join("git/.pools/team.git");
    for user in [&owner, &co] {
        let dir = repo_dir(&server, &user.keys.public_key(), "team");
        // The pool join runs in the background after the push: wait for it, then check the path.
        let alternates = eventually!("the repository to borrow from the pool", {
            let text = std::fs::read_to_string(dir.join("objects/info/alternates")).unwrap_or_default();
            (!text.trim().is_empty()).then_some(text)
        });
        assert_eq!(alternates.trim(), "../../../.pools/team.git/objects", "{} borrows from the pool", dir.display());
        let member = format!("refs/members/{}/heads/main", user.npub());
        eventually!("the pool to record the member's refs", (bare_refs(&pool).get(&member) == Some(&next)).then_some(()));
    }
    let (run, again) = clone_into(&owner, &repo_url(&server, &co.keys.public_key(), "team"), "again");
    run.expect_ok("a clone of the co-maintainer's repository");
    assert_eq!(owner.git(&again, &["rev-parse", "HEAD"]).stdout.trim(), next);
}

/// A repository on two servers: with one stopped, pushes and clones still work through the
/// other; restarted, it catches up by itself (relay sync, then git sync from the other server).
/// A restart keeps everything served.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn two_servers_one_stopped_then_restarted() {
    // Loopback peers: each may fetch from the other.
    let mut a = TestServer::start_with(&["--sync-allow-private"]);
    let mut b = TestServer::start_with(&["--sync-allow-private"]);
    let (_users, _tmp, [owner, reader]) = ngit_users(&[&a, &b], ["owner", "reader"]);
    let (work, first) = init_repo(&owner, &[&a, &b], "both", &[]);
    for s in [&a, &b] {
        assert_eq!(served_refs(&reader, s, &owner, "both"), refs(&[("refs/heads/main", &first)]));
    }

    b.stop();
    let second = owner.commit(&work, "b.txt", "while b is down");
    owner.git(&work, &["push", "origin", "main"]).expect_ok("a push with one server down");
    assert_eq!(served_refs(&reader, &a, &owner, "both"), refs(&[("refs/heads/main", &second)]));
    let (run, clone) = clone_into(&reader, &nostr_url(&a, &owner, "both"), "while-down");
    run.expect_ok("a clone with one server down");
    assert_eq!(reader.git_ok(&clone, &["rev-parse", "HEAD"]), second);

    b.restart();
    eventually!(
        "the restarted server catches up",
        (served_refs(&reader, &b, &owner, "both") == refs(&[("refs/heads/main", &second)])).then_some(())
    );
    a.restart();
    assert_eq!(served_refs(&reader, &a, &owner, "both"), refs(&[("refs/heads/main", &second)]));
    assert_eq!(served_state_refs(&a, &owner, "both").await, refs(&[("refs/heads/main", &second)]));
    let (run, clone) = clone_into(&reader, &nostr_url(&a, &owner, "both"), "after-restart");
    run.expect_ok("a clone after a restart");
    assert_eq!(reader.git_ok(&clone, &["rev-parse", "HEAD"]), second);
}

/// A private (GRASP-08) service: ngit authenticates there (the challenge comes on connect), a
/// member publishes, pushes and clones a private repository; a non-member can neither clone it
/// nor read its events.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_private_service_serves_members_only() {
    let users = PlainRelay::start();
    let tmp = tempfile::tempdir().unwrap();
    let member_keys = Keys::generate();
    let server = TestServer::start_with(&["--private", "--member", &member_keys.public_key().to_hex()]);
    let servers = [grasp_url(&server)];
    let member = NgitUser::with_keys(tmp.path(), "member", member_keys, &users.url(), &servers);
    let stranger = NgitUser::new(tmp.path(), "stranger", &users.url(), &servers);

    let (work, _first) = init_repo(&member, &[&server], "secret", &["--private"]);
    let second = member.commit(&work, "b.txt", "two");
    member.git(&work, &["push", "origin", "main"]).expect_ok("a member's push");
    let (run, clone) = clone_into(&member, &nostr_url(&server, &member, "secret"), "clone");
    run.expect_ok("a member's clone");
    assert_eq!(member.git_ok(&clone, &["rev-parse", "HEAD"]), second);

    let (run, _) = clone_into(&stranger, &nostr_url(&server, &member, "secret"), "stranger-nostr");
    let refused = run.expect_refused("a non-member's clone through nostr://");
    assert!(refused.contains("restricted:") && refused.contains("private GRASP service"), "{refused}");
    let (run, _) = clone_into(&stranger, &repo_url(&server, &member.keys.public_key(), "secret"), "stranger-http");
    run.expect_refused("a non-member's clone over HTTP");
    let theirs = stranger.new_work_tree("theirs", "x.txt", "not a member");
    let url = repo_url(&server, &member.keys.public_key(), "secret");
    stranger.git(&theirs, &["push", &url, "HEAD:refs/heads/main"]).expect_refused("a non-member's push");
    member.git(&clone, &["fetch", "-q", "origin"]).expect_ok("a member's fetch");
    assert_eq!(member.git_ok(&clone, &["rev-parse", "origin/main"]), second, "the non-member's push changed nothing");
}

/// GRASP-06 with the real client: the repository's own server takes no pull request data (its
/// `--max-pr-push-bytes` is spent), so the contributor pushes the pull request to another
/// server's contributor repository with `git push -o git-server=<that server>`. The pull request
/// event goes to the repository's relay as usual, naming that contributor repository in its
/// `clone` tag; the repository's server fetches the commit from there (background sync), and the
/// maintainer lists the pull request and checks it out.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the real client: needs ../shared/tools (ngit); .ci/run runs it"]
async fn a_pull_request_the_repositorys_server_cannot_take_goes_to_another_servers_contributor_repository() {
    let users = PlainRelay::start();
    let tmp = tempfile::tempdir().unwrap();
    let own = TestServer::start_with(&["--max-pr-push-bytes", "1", "--sync-allow-private", "--sync-user-delay", "1s", "--sync-delay", "100ms"]);
    let other = TestServer::start_with(&["--grasp06"]);
    let owner = NgitUser::new(tmp.path(), "owner", &users.url(), &[grasp_url(&own)]);
    let contributor = NgitUser::new(tmp.path(), "contributor", &users.url(), &[grasp_url(&own)]);
    let (work, _first) = init_repo(&owner, &[&own], "proj", &[]);

    let (run, theirs) = clone_into(&contributor, &nostr_url(&own, &owner, "proj"), "theirs");
    run.expect_ok("the contributor's clone");
    contributor.git_ok(&theirs, &["checkout", "-q", "-b", "pr/elsewhere"]);
    let fix = contributor.commit(&theirs, "fix.txt", "a fix the repository's server cannot take");
    let pushed = contributor.git(
        &theirs,
        &["push", "-o", &format!("git-server={}", grasp_url(&other)), "-o", "title=Fix elsewhere", "-o", "description=Sent through another server.", "-u", "origin", "pr/elsewhere"],
    );
    let text = pushed.expect_ok("git push -o git-server=<another GRASP server> of a pull request");
    assert!(text.contains(&format!("commit data sent to {}/prs", grasp_url(&other))), "{text}");

    // The other server holds the commit in the contributor's repository there.
    let prs = format!("{}/prs/{}/proj.git", grasp_url(&other), contributor.npub());
    let listed = contributor.git(&contributor.home, &["ls-remote", &prs]).expect_ok("git ls-remote of the contributor repository");
    let id = listed.lines().find_map(|l| l.strip_prefix(&format!("{fix}\trefs/nostr/"))).unwrap_or_else(|| panic!("{listed}")).to_string();
    // The repository's server fetched it from there and serves the pull request with it.
    let pr = eventually!("the repository's server releases the pull request", served_pull_request(&own, &contributor).await);
    assert_eq!(pr.id.to_hex(), id);
    let clone_urls: Vec<&str> = pr.tags.iter().filter(|t| t.as_slice()[0] == "clone").flat_map(|t| t.as_slice()[1..].iter().map(String::as_str)).collect();
    assert!(clone_urls.contains(&prs.as_str()), "the pull request names the contributor repository: {clone_urls:?}");
    assert!(served_nostr_refs(&owner, &own, &owner, "proj").contains(&(format!("refs/nostr/{id}"), fix.clone())));

    // The maintainer sees it and checks it out.
    let listed = owner.ngit(&work, &["pr", "list"]).expect_ok("ngit pr list");
    assert!(listed.contains(&id) && listed.contains("Fix elsewhere"), "{listed}");
    owner.ngit(&work, &["pr", "checkout", &id]).expect_ok("ngit pr checkout");
    assert_eq!(owner.git_ok(&work, &["rev-parse", "HEAD"]), fix, "the checked-out branch is the contributor's commit");
}
