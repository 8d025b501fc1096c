//! Git smart HTTP end to end: real `git` against `grasp_relay::git::http::serve`, which runs the
//! real `grasp-cgi` binary around stock `git http-backend`. Repositories are created with
//! `grasp_relay::git::repos::create_bare_repo` (or plain `git init --bare`) and filled through the file
//! system. Needs `cargo build --workspace` first (for `target/debug/grasp-cgi`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grasp_relay::git::repos::{create_bare_repo, read_refs};
use grasp_state::names::identifier::npub_of;
use grasp_tests::git::{git, git_output, git_root_with_hooks, test_owner, GitHttpServer, WorkTree};
use grasp_tests::wait_until;
use reqwest::blocking::Client;
use reqwest::StatusCode;

const CORS_HEADERS: &str =
    "Content-Type, Git-Protocol, Authorization, Accept, Content-Encoding, X-Requested-With";

struct Fixture {
    tmp: tempfile::TempDir,
    server: GitHttpServer,
    work: WorkTree,
    bare: std::path::PathBuf,
    first: String,
    tip: String,
}

/// A served git root holding `<owner 0>/<identifier>.git` with two commits on `main`.
fn fixture(identifier: &str) -> Fixture {
    let (tmp, root, hooks) = git_root_with_hooks();
    let server = GitHttpServer::start(&root, None);
    let bare = create_bare_repo(&server.layout, &test_owner(0), identifier, &hooks).unwrap();
    let work = WorkTree::new(tmp.path().join("work"));
    let first = work.commit("README", "hello\n");
    let tip = work.commit("big.txt", &"some blob content\n".repeat(1000));
    work.push_to(&bare, &["main:refs/heads/main"]);
    git(&bare, &["symbolic-ref", "HEAD", "refs/heads/main"]);
    Fixture {
        tmp,
        server,
        work,
        bare,
        first,
        tip,
    }
}

fn assert_cors(resp: &reqwest::blocking::Response) {
    let h = resp.headers();
    assert_eq!(
        h.get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap()),
        Some("*"),
        "{h:?}"
    );
    assert_eq!(
        h.get("access-control-allow-methods")
            .map(|v| v.to_str().unwrap()),
        Some("GET, POST, OPTIONS, HEAD")
    );
    assert_eq!(
        h.get("access-control-allow-headers")
            .map(|v| v.to_str().unwrap()),
        Some(CORS_HEADERS)
    );
    assert_eq!(
        h.get_all("access-control-allow-origin").iter().count(),
        1,
        "CORS header duplicated"
    );
}

#[test]
fn clone_and_fetch_over_http() {
    let f = fixture("my repo");
    let url = f.server.repo_url(&test_owner(0), "my repo");
    assert!(url.contains("my%20repo.git"), "{url}");
    git(f.tmp.path(), &["clone", "-q", &url, "clone"]);
    let clone = f.tmp.path().join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("README")).unwrap(),
        "hello\n"
    );
    assert_eq!(git(&clone, &["rev-parse", "HEAD"]), f.tip);

    let newer = f.work.commit("later", "later\n");
    f.work.push_to(&f.bare, &["main:refs/heads/main"]);
    git(&clone, &["fetch", "-q", "origin"]);
    assert_eq!(git(&clone, &["rev-parse", "origin/main"]), newer);
}

#[test]
fn protocol_v2_clone_and_advertisement() {
    let f = fixture("v2");
    let url = f.server.repo_url(&test_owner(0), "v2");
    let out = Command::new("git")
        .args(["-c", "protocol.version=2", "clone", "-q", &url, "clone"])
        .current_dir(f.tmp.path())
        .env("GIT_TRACE_PACKET", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = String::from_utf8_lossy(&out.stderr);
    assert!(
        trace.contains("version 2"),
        "protocol v2 was not negotiated"
    );
    assert!(trace.contains("ls-refs"), "no v2 command seen");
    assert_eq!(
        git(&f.tmp.path().join("clone"), &["rev-parse", "HEAD"]),
        f.tip
    );

    let resp = Client::new()
        .get(format!("{url}/info/refs?service=git-upload-pack"))
        .header("Git-Protocol", "version=2")
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_cors(&resp);
    let body = resp.text().unwrap();
    assert!(
        body.contains("version 2") && body.contains("fetch=") && body.contains("filter"),
        "{body}"
    );
}

#[test]
fn partial_clone_and_fetch_by_sha() {
    let f = fixture("partial");
    let url = f.server.repo_url(&test_owner(0), "partial");
    git(
        f.tmp.path(),
        &[
            "clone",
            "-q",
            "--filter=blob:none",
            "--no-checkout",
            &url,
            "clone",
        ],
    );
    let clone = f.tmp.path().join("clone");
    assert_eq!(git(&clone, &["config", "remote.origin.promisor"]), "true");
    let missing = git(
        &clone,
        &["rev-list", "--objects", "--all", "--missing=print"],
    );
    assert!(
        missing.lines().any(|l| l.starts_with('?')),
        "blobs were not filtered:\n{missing}"
    );
    // Lazy fetch of the blobs through the same server works.
    git(&clone, &["checkout", "-q", "main"]);
    assert_eq!(
        std::fs::read_to_string(clone.join("README")).unwrap(),
        "hello\n"
    );

    // Non-tip but reachable commit by id (allowReachableSHA1InWant), v0 so the config matters.
    git(f.tmp.path(), &["init", "-q", "bysha"]);
    let bysha = f.tmp.path().join("bysha");
    git(
        &bysha,
        &["-c", "protocol.version=0", "fetch", "-q", &url, &f.first],
    );
    assert_eq!(git(&bysha, &["rev-parse", "FETCH_HEAD"]), f.first);

    let adv = Client::new()
        .get(format!("{url}/info/refs?service=git-upload-pack"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for cap in [
        "allow-tip-sha1-in-want",
        "allow-reachable-sha1-in-want",
        "filter",
    ] {
        assert!(adv.contains(cap), "{cap} not advertised:\n{adv}");
    }
}

#[test]
fn head_on_info_refs() {
    let f = fixture("head");
    let url = f.server.repo_url(&test_owner(0), "head");
    let resp = Client::new()
        .head(format!("{url}/info/refs?service=git-upload-pack"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_cors(&resp);
    assert_eq!(
        resp.headers()["content-type"],
        "application/x-git-upload-pack-advertisement"
    );
    assert!(resp.bytes().unwrap().is_empty());
}

#[test]
fn cors_everywhere_and_options_is_204() {
    let f = fixture("cors");
    let url = f.server.repo_url(&test_owner(0), "cors");
    let client = Client::new();
    for path in [
        format!("{url}/info/refs?service=git-upload-pack"),
        format!("{}/nothing/here", f.server.base_url()),
        url.clone(),
    ] {
        let resp = client
            .request(reqwest::Method::OPTIONS, &path)
            .send()
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NO_CONTENT, "{path}");
        assert_cors(&resp);
        // Browsers keep the preflight's answer (else 5 s: one before nearly every request).
        let max_age: Vec<_> = resp.headers().get_all("access-control-max-age").iter().collect();
        assert_eq!(max_age, [grasp_state::contract::cors::MAX_AGE], "{path}");
    }
    let ok = client
        .get(format!("{url}/info/refs?service=git-upload-pack"))
        .send()
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_cors(&ok);
    assert!(ok.headers().get("access-control-max-age").is_none(), "only preflights carry it");
    let missing = client
        .get(format!(
            "{}/info/refs",
            f.server.repo_url(&test_owner(1), "cors")
        ))
        .send()
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_cors(&missing);
    // A git path http-backend itself refuses still gets CORS.
    let refused = client.get(format!("{url}/no/such/file")).send().unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    assert_cors(&refused);
}

#[test]
fn not_found_pages_and_hostile_paths() {
    let f = fixture("real");
    let base = f.server.base_url();
    let npub = npub_of(&test_owner(0));
    let client = Client::new();

    let unknown = format!("{base}/{npub}/unknown.git");
    let html = client
        .get(&unknown)
        .header("Accept", "text/html,application/xhtml+xml")
        .send()
        .unwrap();
    assert_eq!(html.status(), StatusCode::NOT_FOUND);
    assert!(html.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(html.text().unwrap().contains("<h1>Not found</h1>"));
    let plain = client
        .get(format!("{unknown}/info/refs?service=git-upload-pack"))
        .send()
        .unwrap();
    assert_eq!(plain.status(), StatusCode::NOT_FOUND);
    assert!(plain.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));

    // Traversal and malformed paths: all 404, none escapes the git root. The secret lies next to
    // the git root, where `..` would lead.
    std::fs::write(f.tmp.path().join("secret"), "do not serve").unwrap();
    for path in [
        format!("/{npub}/..%2F..%2Fsecret.git/info/refs"),
        format!("/{npub}/%2e%2e.git/info/refs"),
        format!("/{npub}/real.git/..%2F..%2F..%2Fsecret"),
        format!("/{npub}/real.git/%2e%2e/%2e%2e/%2e%2e/secret"),
        format!("/{npub}/real%00.git/info/refs"),
        format!("/{npub}/re%ZZal.git/info/refs"),
        format!("/{npub}/%FF.git/info/refs"),
        format!("/{}/real.git/info/refs", npub.to_uppercase()),
        "/npub1nope/real.git/info/refs".to_string(),
        "/..%2Fsecret".to_string(),
        "/favicon.ico".to_string(),
    ] {
        let resp = client.get(format!("{base}{path}")).send().unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        assert_cors(&resp);
        assert!(!resp.text().unwrap().contains("do not serve"), "{path}");
    }
    // Sanity: the real repository is served.
    let ok = client
        .get(format!(
            "{base}/{npub}/real.git/info/refs?service=git-upload-pack"
        ))
        .send()
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

/// The repository page takes its data (and every URL) from the relay's hook API, never from the
/// request's `Host` header: without a relay to ask (this fixture runs grasp-cgi alone) it says the
/// details are unavailable and shows no URL built from the forged host. The full page is tested
/// end to end in tests/tests/pages.rs.
#[test]
fn repo_page_never_builds_urls_from_the_host_header() {
    let f = fixture("my repo");
    let url = f.server.repo_url(&test_owner(0), "my repo");
    let npub = npub_of(&test_owner(0));
    for u in [url.clone(), format!("{url}/")] {
        let resp = Client::new()
            .get(&u)
            .header("Host", "git.example.com")
            .send()
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{u}");
        assert_cors(&resp);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let body = resp.text().unwrap();
        assert!(body.contains("my repo") && body.contains(&npub), "{body}");
        assert!(!body.contains("git.example.com"), "{body}");
    }
}

/// A protocol v0 upload-pack request wanting `oid`, as git sends it.
fn upload_pack_request(oid: &str) -> Vec<u8> {
    let want = format!("want {oid} ofs-delta\n");
    format!("{:04x}{want}00000009done\n", want.len() + 4).into_bytes()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn gzipped_upload_pack_request() {
    let f = fixture("gz");
    let url = format!(
        "{}/git-upload-pack",
        f.server.repo_url(&test_owner(0), "gz")
    );
    let client = Client::new();
    let post = |body: Vec<u8>, gzip_header: bool| {
        let mut req = client
            .post(&url)
            .header("Content-Type", "application/x-git-upload-pack-request")
            .body(body);
        if gzip_header {
            req = req.header("Content-Encoding", "gzip");
        }
        req.send().unwrap()
    };
    let body = gzip(&upload_pack_request(&f.tip));
    let resp = post(body.clone(), true);
    assert_eq!(resp.status(), StatusCode::OK);
    assert_cors(&resp);
    assert_eq!(
        resp.headers()["content-type"],
        "application/x-git-upload-pack-result"
    );
    let bytes = resp.bytes().unwrap();
    assert!(
        bytes.windows(4).any(|w| w == b"PACK"),
        "no pack in gzip'd fetch response"
    );
    // Control: the same bytes without Content-Encoding are garbage to upload-pack.
    let bytes = post(body, false).bytes().unwrap();
    assert!(
        !bytes.windows(4).any(|w| w == b"PACK"),
        "gzip body accepted without Content-Encoding?"
    );
    // And plain works.
    let bytes = post(upload_pack_request(&f.tip), false).bytes().unwrap();
    assert!(bytes.windows(4).any(|w| w == b"PACK"));
}

#[test]
fn push_over_http_uses_per_request_config_and_hooks() {
    let (tmp, root, hooks) = git_root_with_hooks();
    let owner = test_owner(0);
    // A plain bare repo without GRASP config: grasp-cgi must supply http.receivepack etc.
    let bare = root.join(npub_of(&owner)).join("plain.git");
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare"]);

    let work = WorkTree::new(tmp.path().join("work"));
    let tip = work.commit("a", "a\n");
    let open = GitHttpServer::start(&root, None);
    git(
        &work.dir,
        &["push", "-q", &open.repo_url(&owner, "plain"), "main"],
    );
    assert_eq!(read_refs(&bare).unwrap()["refs/heads/main"], tip);
    assert!(
        bare.join(grasp_state::contract::layout::PUSH_LOCK_FILE).is_file(),
        "receive-pack did not take the push lock"
    );

    // With a hooks dir, core.hooksPath is set per request: a rejecting pre-receive hook wins.
    write_hook(
        &hooks.join("pre-receive"),
        "echo 'rejected by the test hook: publish a state event first' >&2\nexit 1\n",
    );
    let guarded = GitHttpServer::start(&root, Some(&hooks));
    let newer = work.commit("b", "b\n");
    let out = git_output(
        &work.dir,
        &["push", &guarded.repo_url(&owner, "plain"), "main"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("remote: rejected by the test hook"),
        "{stderr}"
    );
    assert_eq!(read_refs(&bare).unwrap()["refs/heads/main"], tip);
    assert_ne!(tip, newer);
}

fn write_hook(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn pushes_to_one_repo_wait_for_the_push_lock() {
    let f = fixture("locked");
    let url = f.server.repo_url(&test_owner(0), "locked");
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(f.bare.join(grasp_state::contract::layout::PUSH_LOCK_FILE))
        .unwrap();
    lock.lock().unwrap();

    let newer = f.work.commit("c", "c\n");
    let dir = f.work.dir.clone();
    let push = std::thread::spawn(move || git(&dir, &["push", "-q", &url, "main"]));
    // While we hold the lock the push must not land (checked over a window, not a sleep-sync).
    let window = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < window {
        assert_eq!(
            read_refs(&f.bare).unwrap()["refs/heads/main"],
            f.tip,
            "push bypassed the lock"
        );
        std::thread::yield_now();
    }
    lock.unlock().unwrap();
    push.join().unwrap();
    assert_eq!(read_refs(&f.bare).unwrap()["refs/heads/main"], newer);
}

#[test]
fn created_repos_are_configured_for_grasp() {
    let f = fixture("cfg");
    for (key, value) in grasp_state::names::identifier::GRASP_GIT_CONFIG {
        assert_eq!(git(&f.bare, &["config", "--get", key]), *value, "{key}");
    }
    assert_eq!(
        git(&f.bare, &["config", "--get", "core.hooksPath"]),
        f.tmp.path().join("hooks").to_str().unwrap()
    );
    let owner_dir = f.server.layout.owner_dir(&test_owner(0));
    let names: Vec<_> = std::fs::read_dir(owner_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["cfg.git"], "temporary directories left behind");
}

#[test]
fn large_push_with_chunked_body_and_large_fetch() {
    let f = fixture("large");
    let url = f.server.repo_url(&test_owner(0), "large");
    // ~3 MiB of incompressible data: more than http.postBuffer, so git streams it chunked
    // (no Content-Length reaches the CGI).
    let data: String = grasp_tests::git::xorshift().take(3 * 1024 * 1024 / 16).map(|x| format!("{x:016x}")).collect();
    let big = f.work.commit("random.txt", &data);
    git(&f.work.dir, &["push", "-q", &url, "main"]);
    assert_eq!(read_refs(&f.bare).unwrap()["refs/heads/main"], big);
    git(f.tmp.path(), &["clone", "-q", &url, "clone"]);
    assert_eq!(
        std::fs::read_to_string(f.tmp.path().join("clone/random.txt")).unwrap(),
        data
    );
}

/// grasp-cgi on its own, as nginx + fcgiwrap runs it: CGI environment in, CGI response out.
#[test]
fn cgi_binary_standalone() {
    let f = fixture("standalone");
    let npub = npub_of(&test_owner(0));
    let run = |envs: &[(&str, &str)]| {
        let out = Command::new(grasp_tests::git::bin("grasp-cgi"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let root = f.server.layout.git_root().to_str().unwrap().to_string();
    let refs_path = format!("/{npub}/standalone.git/info/refs");
    let ok = run(&[
        (grasp_state::contract::env_names::GIT_ROOT, &root),
        ("REQUEST_METHOD", "GET"),
        ("PATH_INFO", &refs_path),
        ("QUERY_STRING", "service=git-upload-pack"),
    ]);
    assert!(
        ok.contains("Content-Type: application/x-git-upload-pack-advertisement\r\n"),
        "{ok}"
    );
    assert!(
        ok.contains("Access-Control-Allow-Origin: *\r\n") && ok.contains(&f.tip),
        "{ok}"
    );
    let options = run(&[
        (grasp_state::contract::env_names::GIT_ROOT, &root),
        ("REQUEST_METHOD", "OPTIONS"),
        ("PATH_INFO", "/anything"),
    ]);
    assert!(
        options.starts_with("Status: 204 No Content\r\n")
            && options.contains("Access-Control-Allow-Origin: *")
            && options.contains(&format!("Access-Control-Max-Age: {}\r\n", grasp_state::contract::cors::MAX_AGE)),
        "{options}"
    );
    let missing = run(&[
        (grasp_state::contract::env_names::GIT_ROOT, &root),
        ("REQUEST_METHOD", "GET"),
        ("PATH_INFO", &format!("/{npub}/../standalone.git/info/refs")),
    ]);
    assert!(
        missing.starts_with("Status: 404 Not Found\r\n")
            && missing.contains("Access-Control-Allow-Origin: *"),
        "{missing}"
    );
    // git's git-http-backend run directly (as the relay asks, one process start less): the
    // same answer; the program named is the one that runs.
    let exec_path = Command::new("git").arg("--exec-path").output().unwrap();
    let backend = std::path::Path::new(String::from_utf8_lossy(&exec_path.stdout).trim()).join("git-http-backend");
    let direct = run(&[
        (grasp_state::contract::env_names::GIT_ROOT, &root),
        (grasp_state::contract::env_names::GIT_HTTP_BACKEND, backend.to_str().unwrap()),
        ("REQUEST_METHOD", "GET"),
        ("PATH_INFO", &refs_path),
        ("QUERY_STRING", "service=git-upload-pack"),
    ]);
    assert!(direct.contains("application/x-git-upload-pack-advertisement") && direct.contains(&f.tip), "{direct}");
    let fake = f.tmp.path().join("fake-http-backend");
    write_hook(&fake, "printf 'Status: 200 OK\\nContent-Type: text/plain\\n\\nran %s' \"$GIT_PROJECT_ROOT\"");
    let faked = run(&[
        (grasp_state::contract::env_names::GIT_ROOT, &root),
        (grasp_state::contract::env_names::GIT_HTTP_BACKEND, fake.to_str().unwrap()),
        ("REQUEST_METHOD", "GET"),
        ("PATH_INFO", &refs_path),
    ]);
    assert!(faked.ends_with(&format!("ran {root}")) && faked.contains("Access-Control-Allow-Origin: *"), "{faked}");
    let misconfigured = run(&[("REQUEST_METHOD", "GET"), ("PATH_INFO", &refs_path)]);
    assert!(
        misconfigured.starts_with("Status: 500") && misconfigured.contains(grasp_state::contract::env_names::GIT_ROOT),
        "{misconfigured}"
    );
}

fn fake_cgi_server(tmp: &Path, script: &str) -> GitHttpServer {
    let cgi = tmp.join("fake-cgi");
    write_hook(&cgi, script);
    GitHttpServer::start_with(grasp_relay::git::http::GitHttpConfig {
        idle_timeout: grasp_relay::git::http::DEFAULT_IDLE_TIMEOUT,
        min_rate: grasp_state::contract::transfer::DEFAULT_MIN_RATE,
        prs: false,
        cgi_path: cgi,
        backend: grasp_state::contract::git_backend::BackendSetup { git_root: tmp.to_path_buf(), ..Default::default() },
        data_dir: tmp.to_path_buf(),
        env: vec![("FAKE_CGI_DIR".into(), tmp.to_str().unwrap().into())],
        direct: false,
        ref_cache: None,
        supervised_pushes: None,
    })
}

/// The CGI child is killed when the client goes away mid-response.
#[test]
fn cgi_child_dies_with_the_client() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let server = fake_cgi_server(
        tmp.path(),
        "echo $$ > \"$FAKE_CGI_DIR/pid\"\nprintf 'Status: 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nstarted\\n'\nexec sleep 60\n",
    );
    let mut conn = std::net::TcpStream::connect(server.addr).unwrap();
    conn.set_nodelay(true).unwrap();
    write!(conn, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    while !line.contains("started") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "connection closed before the body started"
        );
    }
    let pid: u32 = std::fs::read_to_string(tmp.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    };
    assert!(alive());
    drop(reader);
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    drop(conn);
    if wait_until("the CGI child to exit", Duration::from_secs(10), || (!alive()).then_some(())).is_err() {
        let _ = Command::new("kill").arg(pid.to_string()).status(); // don't leak it
        panic!("CGI child {pid} still running after the client left");
    }
}

#[test]
fn broken_cgi_gives_502_with_cors() {
    let tmp = tempfile::tempdir().unwrap();
    let client = Client::new();
    let no_headers = fake_cgi_server(tmp.path(), "exit 1\n");
    let resp = client
        .get(format!("{}/a/b.git/info/refs", no_headers.base_url()))
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_cors(&resp);
    assert!(resp.text().unwrap().contains("before sending its headers"));

    let missing = GitHttpServer::start_with(grasp_relay::git::http::GitHttpConfig {
        idle_timeout: grasp_relay::git::http::DEFAULT_IDLE_TIMEOUT,
        min_rate: grasp_state::contract::transfer::DEFAULT_MIN_RATE,
        prs: false,
        cgi_path: tmp.path().join("does-not-exist"),
        backend: grasp_state::contract::git_backend::BackendSetup { git_root: tmp.path().to_path_buf(), ..Default::default() },
        data_dir: tmp.path().to_path_buf(),
        env: vec![],
        direct: true,
        ref_cache: None,
        supervised_pushes: None,
    });
    let resp = client
        .get(format!("{}/a/b.git/info/refs", missing.base_url()))
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_cors(&resp);
    assert!(resp.text().unwrap().contains("cannot run"));
}
