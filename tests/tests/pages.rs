//! The web pages end to end (README, docs/security.md): the home page lists served
//! repositories newest first, paged, linking to each repository page; the repository page (served
//! by grasp-cgi from the relay's hook API) shows name, description, maintainers, clone URLs,
//! default branch and latest state; hostile names and descriptions are escaped; a forged `Host`
//! header changes no URL on either page.

use grasp_state::names::identifier::npub_of;
use grasp_tests::git::WorkTree;
use grasp_tests::grasp::*;
use grasp_tests::TestServer;
use nostr::prelude::*;

const FORGED_HOST: &str = "evil.example";

async fn get_html(url: &str) -> (u16, String) {
    let resp = reqwest::Client::new()
        .get(url)
        .header("Accept", "text/html,application/xhtml+xml")
        .header("Host", FORGED_HOST)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("text/html"), "{url}: {kind}");
    (status, resp.text().await.unwrap())
}

/// Puts `identifier` with one commit on disk for `owner` (as a crash-restored or synced
/// repository would be), so that its announcement is served at once.
fn repo_with_data(server: &TestServer, dir: &std::path::Path, owner: &PublicKey, identifier: &str) {
    let bare = repo_dir(server, owner, identifier);
    std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
    let out = std::process::Command::new("git").args(["init", "--bare", "--quiet"]).arg(&bare).output().unwrap();
    assert!(out.status.success());
    let work = WorkTree::new(dir.join(identifier));
    work.commit("README", identifier);
    work.push_to(&bare, &["main:refs/heads/main"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn home_page_lists_served_repositories_newest_first_in_pages() {
    let (server, tmp, mut client) = started(&[]).await;
    let owner = Keys::generate();
    let base = now() - 1000;
    // 21 served repositories: one page of 20 and one more.
    for i in 0..21u64 {
        let id = format!("repo-{i:02}");
        repo_with_data(&server, tmp.path(), &owner.public_key(), &id);
        let (ok, msg) = client.send_event(&announcement_at(&server, &owner, &id, &[], base + i)).await.unwrap();
        assert!(ok && !msg.starts_with("purgatory:"), "{id} not served at once: {msg}");
    }
    // A held announcement (no git data yet) is not listed.
    let (ok, msg) = client.send_event(&announcement(&server, &owner, "waiting", &[])).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");

    let npub = npub_of(&owner.public_key());
    let (status, page1) = get_html(&format!("{}/", server.http_url())).await;
    assert_eq!(status, 200);
    let host = host(&server);
    let newest = format!("href=\"http://{host}/{npub}/repo-20.git\"");
    assert!(page1.contains(&newest), "newest repository missing or unlinked: {page1}");
    assert!(page1.contains(&format!("href=\"http://{host}/{npub}/repo-01.git\"")));
    assert!(!page1.contains("/repo-00.git"), "the oldest belongs on page 2");
    assert!(!page1.contains("waiting.git"), "held repositories are not listed");
    assert!(page1.find("repo-20").unwrap() < page1.find("repo-19").unwrap(), "newest first");
    assert!(page1.contains(&format!("href=\"http://{host}/?page=2\"")), "no link to page 2");
    // What a visitor needs: relay URL, how to clone, GRASPs and NIPs, the rules.
    let relay = format!("ws://{host}");
    for needle in [relay.as_str(), "git clone nostr://", "GRASP-01", "NIP-34", "What this server accepts"] {
        assert!(page1.contains(needle), "{needle} missing");
    }
    assert!(!page1.contains(FORGED_HOST), "the Host header leaked into the page");

    let (status, page2) = get_html(&format!("{}/?page=2", server.http_url())).await;
    assert_eq!(status, 200);
    assert!(page2.contains(&format!("href=\"http://{host}/{npub}/repo-00.git\"")), "{page2}");
    assert!(!page2.contains("/repo-20.git") && !page2.contains("?page=3"));
    assert!(page2.contains(&format!("href=\"http://{host}/?page=1\"")));
    // Hostile page numbers are harmless.
    for q in ["?page=-1", "?page=99999999999999999999", "?page=%3Cscript%3E"] {
        let (status, page) = get_html(&format!("{}/{q}", server.http_url())).await;
        assert_eq!(status, 200, "{q}");
        assert!(!page.contains("<script"), "{q}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn repository_page_shows_its_fields_escaped_with_the_configured_host() {
    let (server, tmp, mut client) = started(&[]).await;
    let owner = Keys::generate();
    let maintainer = Keys::generate();
    let id = "hostile";
    let host = host(&server);
    let hostile_name = "<script>alert('name')</script>";
    let hostile_desc = "\"><img src=x onerror=alert(1)> & 'more'";
    let ann = event(
        &owner,
        30617,
        &[
            &["d", id],
            &["name", hostile_name],
            &["description", hostile_desc],
            &["web", "javascript:alert(1)"],
            &["clone", &repo_url(&server, &owner.public_key(), id)],
            &["relays", &format!("ws://{host}")],
            &["maintainers", &maintainer.public_key().to_hex()],
        ],
    );
    let (ok, msg) = client.send_event(&ann).await.unwrap();
    assert!(ok, "{msg}");
    // The maintainer accepts: its own announcement lists the owner back.
    let (ok, msg) = client.send_event(&announcement(&server, &maintainer, id, &[owner.public_key()])).await.unwrap();
    assert!(ok, "{msg}");
    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), id);
    let tip = repo.commit("README", "hi\n");
    let st = state(&maintainer, id, &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = client.send_event(&st).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["main"]).unwrap();

    let npub = npub_of(&owner.public_key());
    let (status, page) = get_html(&repo_url(&server, &owner.public_key(), id)).await;
    assert_eq!(status, 200, "{page}");
    for needle in [
        "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;".to_string(),
        "&quot;&gt;&lt;img src=x onerror=alert(1)&gt; &amp; &#39;more&#39;".to_string(),
        // A plain-WebSocket relay is named whole, as ngit prints it (a bare host means wss://).
        format!("git clone nostr://{npub}/ws%3A%2F%2F{}/{id}", host.replace(':', "%3A")),
        format!("git clone http://{host}/{npub}/{id}.git"),
        format!("<code>{}</code>", npub_of(&maintainer.public_key())),
        "<th>Default branch</th><td><code>main</code>".to_string(),
        tip.clone(),
        "href=\"https://gitworkshop.dev/naddr1".to_string(),
    ] {
        assert!(page.contains(&needle), "{needle} missing in {page}");
    }
    assert!(!page.contains("<script") && !page.contains("<img"), "markup injected: {page}");
    assert!(!page.contains("href=\"javascript:"), "{page}");
    assert!(!page.contains(FORGED_HOST), "the Host header leaked into the page: {page}");

    // The home page lists it with the escaped name, under the configured host.
    let (_, home) = get_html(&format!("{}/", server.http_url())).await;
    assert!(home.contains("&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;"), "{home}");
    assert!(home.contains("&quot;&gt;&lt;img src=x"));
    assert!(!home.contains("<script") && !home.contains("<img") && !home.contains(FORGED_HOST));
    assert!(home.contains(&format!("href=\"http://{host}/{npub}/{id}.git\"")));

    // A held repository's page says it is not served yet; an unknown one is the 404 page.
    let (ok, _) = client.send_event(&announcement(&server, &owner, "later", &[])).await.unwrap();
    assert!(ok);
    let (status, held) = get_html(&repo_url(&server, &owner.public_key(), "later")).await;
    assert_eq!(status, 200);
    assert!(held.contains("Not served yet"), "{held}");
    let (status, _) = get_html(&repo_url(&server, &owner.public_key(), "nothing")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_use_the_configured_public_host() {
    // Announcements must list the public host; the pages show it, whatever Host the request has.
    let server = TestServer::start_with(&["--public-host", "git.example.com"]);
    let (status, home) = get_html(&format!("{}/", server.http_url())).await;
    assert_eq!(status, 200);
    assert!(home.contains("<code>wss://git.example.com</code>"), "{home}");
    assert!(home.contains("ngit init --grasp-server https://git.example.com"));
    assert!(!home.contains(FORGED_HOST) && !home.contains(&server.addr().to_string()), "{home}");
}

/// Screenshots of both pages in a real headless browser (Debian `chromium`), written to
/// `docs/screenshots/`. Ignored by default (needs chromium); run by `docs/screenshots/take.sh`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs chromium; run docs/screenshots/take.sh"]
async fn screenshots() {
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
    let (server, tmp, mut client) = started(&["--name", "grasp.example", "--description", "A GRASP server for NIP-34 git repositories."]).await;
    let host = host(&server);
    let (alice, bob) = (Keys::generate(), Keys::generate());
    let samples: [(&Keys, &str, &str, &str); 3] = [
        (&alice, "grasp-relay", "grasp-relay", "A GRASP server: Nostr relay and git smart HTTP on one port."),
        (&bob, "notes", "Bob's <notes> & \"drafts\"", "Escaping check: <script>alert(1)</script> stays text."),
        (&alice, "ngit-plugins", "ngit plugins", "Small helpers around git-remote-nostr."),
    ];
    for (keys, id, name, desc) in samples {
        let ann = event(
            keys,
            30617,
            &[
                &["d", id],
                &["name", name],
                &["description", desc],
                &["clone", &repo_url(&server, &keys.public_key(), id)],
                &["relays", &format!("ws://{host}")],
                &["maintainers", &bob.public_key().to_hex()],
            ],
        );
        assert!(client.send_event(&ann).await.unwrap().0);
        let repo = Repo::new(&tmp.path().join(id), &server, &keys.public_key(), id);
        let tip = repo.commit("README", id);
        let st = state(keys, id, &[("refs/heads/main", &tip), ("refs/tags/v0.1.0", &tip)], Some("main"));
        assert!(client.send_event(&st).await.unwrap().0);
        repo.push(&["main", "main:refs/tags/v0.1.0"]).unwrap();
    }
    // The home page is long: a taller window shows the repository list too.
    let shots = [
        ("home.png", format!("{}/", server.http_url()), "1200,2000"),
        ("repository.png", repo_url(&server, &alice.public_key(), "grasp-relay"), "1200,900"),
        ("hostile-repository.png", repo_url(&server, &bob.public_key(), "notes"), "1200,900"),
    ];
    for (file, url, size) in shots {
        let profile = tempfile::tempdir().unwrap();
        let target = out_dir.join(file);
        let status = std::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
            .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--screenshot={}", target.display()))
            .arg(format!("--window-size={size}"))
            .arg(&url)
            .status()
            .expect("running chromium");
        assert!(status.success() && target.is_file(), "chromium failed for {url}");
    }
}
