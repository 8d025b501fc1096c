//! The production front end to end: nginx + fcgiwrap + grasp-cgi in front of grasp-relay, run
//! with the example configuration shipped in docs/nginx/grasp.conf (docs/deployment.md#testing).
//!
//! Needs `nginx` and `fcgiwrap` (Debian packages of the same names), so the tests are ignored by
//! the plain `cargo test`; `.ci/run` installs both and runs them with
//! `cargo test -p grasp-tests --test nginx -- --ignored`.
//!
//! [`Front`] starts the relay on a random loopback port with `--public-host` set to nginx's
//! address, fcgiwrap on a unix socket in a temp dir, and nginx (`daemon off`, everything under a
//! temp prefix) with docs/nginx/grasp.conf, its site-specific values replaced. Every client
//! (Nostr WebSocket, git, HTTP) then talks to nginx only.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use grasp_state::names::identifier::{npub_of, percent_encode_segment};
use grasp_tests::git::{git_output, WorkTree};
use grasp_tests::grasp::*;
use grasp_tests::{binary_path, wait_until, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

/// The example configuration, read at test time so the test runs exactly what the docs ship.
const TEMPLATE: &str = include_str!("../../docs/nginx/grasp.conf");

/// A process started in its own process group (nginx and fcgiwrap fork workers), stopped with
/// SIGTERM to that group on drop, SIGKILL if it does not exit in time.
struct Daemon {
    name: &'static str,
    child: Child,
}

impl Daemon {
    fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Daemon {
        let log = std::fs::File::create(log).unwrap();
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Daemon { name, child }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args(["-s", signal, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited().is_some() {
            // The group may still hold workers of an exited master.
            self.signal_group("KILL");
            return;
        }
        self.signal_group("TERM");
        let stopped = wait_until(self.name, Duration::from_secs(10), || self.child.try_wait().ok().flatten());
        if stopped.is_err() {
            eprintln!("{} did not stop on SIGTERM; killing it", self.name);
        }
        self.signal_group("KILL");
        let _ = self.child.wait();
    }
}

/// grasp-relay behind nginx + fcgiwrap, all on loopback. Dropping it stops everything.
struct Front {
    // Dropped in this order: nginx first, then fcgiwrap, then the relay.
    nginx: Option<Daemon>,
    fcgiwrap: Option<Daemon>,
    relay: TestServer,
    addr: SocketAddr,
    prefix: tempfile::TempDir,
}

/// `name` on PATH or in the sbin directories (not on a normal user's PATH).
fn find_program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: apt-get install nginx fcgiwrap (or run .ci/run)"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// docs/nginx/grasp.conf with its site-specific values replaced. Panics if one of them is gone
/// from the template (the docs and this test must stay in step).
fn site_config(listen: SocketAddr, relay: SocketAddr, socket: &Path, data_dir: &Path) -> String {
    let begin = TEMPLATE.find("    # BEGIN listen\n").expect("template has a `# BEGIN listen` block");
    let end_marker = "    # END listen\n";
    let end = TEMPLATE.find(end_marker).expect("template has an `# END listen` line") + end_marker.len();
    let mut conf = format!("{}    listen {listen};\n{}", &TEMPLATE[..begin], &TEMPLATE[end..]);
    let replacements = [
        ("git.example.com", listen.ip().to_string()),
        ("127.0.0.1:8080", relay.to_string()),
        ("unix:/run/grasp-relay/fcgiwrap.sock", format!("unix:{}", socket.display())),
        ("/usr/bin/grasp-cgi", binary_path("grasp-cgi").display().to_string()),
        ("/var/lib/grasp-relay", data_dir.display().to_string()),
    ];
    for (from, to) in replacements {
        assert!(conf.contains(from), "docs/nginx/grasp.conf no longer contains {from:?}");
        conf = conf.replace(from, &to);
    }
    conf
}

/// The main nginx.conf around the site: everything under `prefix`, in the foreground.
fn main_config(prefix: &Path) -> String {
    let p = prefix.display();
    // As root, nginx's workers would run as `nobody` and could not reach the socket in a 0700
    // temp dir; production uses www-data + a group-writable socket (docs/deployment.md).
    let user = if running_as_root() { "user root;\n" } else { "" };
    format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\n{user}pid {p}/nginx.pid;\nerror_log {p}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log {p}/access.log;\n  client_body_temp_path {p}/temp/body;\n  proxy_temp_path {p}/temp/proxy;\n  \
         fastcgi_temp_path {p}/temp/fastcgi;\n  uwsgi_temp_path {p}/temp/uwsgi;\n  scgi_temp_path {p}/temp/scgi;\n  \
         include {p}/grasp.conf;\n}}\n"
    )
}

impl Front {
    fn start() -> Front {
        Front::start_with(&[])
    }

    /// [`start`](Self::start) with extra relay arguments (e.g. `--private`).
    fn start_with(relay_args: &[&str]) -> Front {
        let prefix = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(prefix.path().join("temp")).unwrap();
        // nginx's port is chosen first so the relay can be told its public host.
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let public_host = addr.to_string();
            let mut args = vec!["--public-host", public_host.as_str()];
            args.extend_from_slice(relay_args);
            let relay = TestServer::start_with(&args);
            let socket = prefix.path().join("fcgiwrap.sock");
            let _ = std::fs::remove_file(&socket);
            let mut fcgiwrap = Daemon::spawn(
                "fcgiwrap",
                // As docs/deployment.md runs it: stderr to nginx, only grasp-cgi may run.
                Command::new(find_program("fcgiwrap"))
                    .args(["-f", "-c", "2", "-p"])
                    .arg(binary_path("grasp-cgi"))
                    .arg("-s")
                    .arg(format!("unix:{}", socket.display())),
                &prefix.path().join("fcgiwrap.log"),
            );
            wait_until("fcgiwrap to listen", TIMEOUT, || {
                if let Some(status) = fcgiwrap.exited() {
                    panic!("fcgiwrap exited with {status}: {}", read(&prefix.path().join("fcgiwrap.log")));
                }
                UnixStream::connect(&socket).ok()
            })
            .unwrap();

            let mut site = site_config(addr, relay.addr(), &socket, relay.data_dir());
            if relay_args.contains(&"--grasp06") {
                // What docs/nginx/grasp.conf says to set for a relay with --grasp06.
                let off = "fastcgi_param GRASP_GRASP06 0;";
                assert!(site.contains(off), "docs/nginx/grasp.conf no longer contains {off:?}");
                site = site.replace(off, "fastcgi_param GRASP_GRASP06 1;");
            }
            std::fs::write(prefix.path().join("grasp.conf"), site).unwrap();
            std::fs::write(prefix.path().join("nginx.conf"), main_config(prefix.path())).unwrap();
            let mut nginx = Daemon::spawn(
                "nginx",
                Command::new(find_program("nginx"))
                    .arg("-p")
                    .arg(prefix.path())
                    .arg("-c")
                    .arg(prefix.path().join("nginx.conf"))
                    .arg("-e")
                    .arg(prefix.path().join("error.log")),
                &prefix.path().join("nginx.out"),
            );
            let up = wait_until("nginx to listen", TIMEOUT, || {
                if nginx.exited().is_some() {
                    return Some(false);
                }
                TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok().map(|_| true)
            })
            .unwrap();
            if up {
                return Front { nginx: Some(nginx), fcgiwrap: Some(fcgiwrap), relay, addr, prefix };
            }
            last_error = format!("{}{}", read(&prefix.path().join("nginx.out")), read(&prefix.path().join("error.log")));
            if !last_error.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start:\n{last_error}");
    }

    fn ws_url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The git URL of a repository, through nginx.
    fn repo_url(&self, owner: &PublicKey, identifier: &str) -> String {
        format!("http://{}/{}/{}.git", self.addr, npub_of(owner), percent_encode_segment(identifier))
    }

    /// An announcement listing this front (clone URL and relay) as the service.
    fn announcement(&self, keys: &Keys, identifier: &str) -> Event {
        announcement_with_urls(keys, identifier, &self.repo_url(&keys.public_key(), identifier), &format!("ws://{}", self.addr))
    }

    fn logs(&self) -> String {
        let p = self.prefix.path();
        format!(
            "---- nginx error.log ----\n{}\n---- nginx access.log ----\n{}\n---- fcgiwrap ----\n{}",
            read(&p.join("error.log")),
            read(&p.join("access.log")),
            read(&p.join("fcgiwrap.log"))
        )
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.nginx.take();
        self.fcgiwrap.take();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Incompressible text of `len` bytes, so a push carrying it is larger than git's 1 MiB
/// `http.postBuffer` and goes out with a chunked request body.
fn noise(len: usize) -> String {
    grasp_tests::git::xorshift().take(len.div_ceil(16)).map(|x| format!("{x:016x}")).collect()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(TIMEOUT).build().unwrap()
}

/// The values of `name` in `resp` (to catch headers sent twice).
fn header_values(resp: &reqwest::Response, name: &str) -> Vec<String> {
    resp.headers().get_all(name).iter().map(|v| v.to_str().unwrap_or("?").to_string()).collect()
}

fn assert_cors(resp: &reqwest::Response, what: &str) {
    assert_eq!(header_values(resp, "access-control-allow-origin"), ["*"], "{what}: {:?}", resp.headers());
    assert_eq!(header_values(resp, "access-control-allow-methods"), ["GET, POST, OPTIONS, HEAD"], "{what}");
    assert_eq!(header_values(resp, "access-control-allow-headers").len(), 1, "{what}");
}

#[tokio::test]
#[ignore = "needs nginx and fcgiwrap; run by .ci/run with --ignored"]
async fn announce_state_push_clone_and_pr_through_nginx() {
    let front = Front::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = NostrClient::connect(&front.ws_url()).await.expect("WebSocket through nginx");
    let (owner, second_owner) = (Keys::generate(), Keys::generate());

    // Announce through the proxied WebSocket: held until the git data arrives. The owner lists a
    // second owner of the identifier as co-maintainer (who lists the owner back, below).
    let ann = event(
        &owner,
        30617,
        &[
            &["d", "hello"],
            &["clone", &front.repo_url(&owner.public_key(), "hello")],
            &["relays", &format!("ws://{}", front.addr)],
            &["maintainers", &second_owner.public_key().to_hex()],
        ],
    );
    let (ok, msg) = c.send_event(&ann).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    let url = front.repo_url(&owner.public_key(), "hello");
    let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url: url.clone() };
    repo.commit("a.txt", "one");
    let tip = repo.commit("big.txt", &noise(3 << 20));

    let st = state(&owner, "hello", &[("refs/heads/main", &tip)], Some("main"));
    let (ok, msg) = c.send_event(&st).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    // The second owner, confirmed both ways (docs/protocol.md#maintainer-authority): its
    // repository follows the owner's state and borrows the objects from the identifier's object
    // pool (docs/architecture.md, "Object pools").
    let url2 = front.repo_url(&second_owner.public_key(), "hello");
    let ann2 = event(&second_owner, 30617, &[&["d", "hello"], &["clone", &url2], &["relays", &format!("ws://{}", front.addr)], &["maintainers", &owner.public_key().to_hex()]]);
    let (ok, msg) = c.send_event(&ann2).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");

    // The push runs grasp-cgi under fcgiwrap; its hooks reach the relay's hook API.
    let out = repo.push(&["main"]).unwrap_or_else(|e| panic!("push through nginx failed:\n{e}\n{}", front.logs()));
    assert!(out.contains("released"), "{out}");
    let access = read(&front.prefix.path().join("access.log"));
    assert!(access.contains("hello.git/git-receive-pack HTTP/1.1\" 200"), "push did not go through nginx:\n{access}");
    assert!(stored(&mut c, st.id).await, "state released");
    assert!(stored(&mut c, ann.id).await, "announcement released");
    let bare = repo_dir(&front.relay, &owner.public_key(), "hello");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&tip));

    // Clone through nginx.
    let clone_dir = tmp.path().join("clone");
    clone(&url, &clone_dir, &[]).unwrap();
    let cloned = WorkTree { dir: clone_dir };
    assert_eq!(grasp_tests::git::git(&cloned.dir, &["rev-parse", "HEAD"]), tip);
    // The second owner's repository, whose objects are the pool's, serves through git
    // http-backend under fcgiwrap too.
    let bare2 = repo_dir(&front.relay, &second_owner.public_key(), "hello");
    grasp_tests::eventually!("the second owner's repository on the state", (bare_refs(&bare2).get("refs/heads/main") == Some(&tip)).then_some(()));
    let alternates = std::fs::read_to_string(bare2.join("objects/info/alternates")).unwrap_or_default();
    assert_eq!(alternates.trim(), "../../../.pools/hello.git/objects");
    let clone2 = tmp.path().join("clone2");
    clone(&url2, &clone2, &[]).unwrap_or_else(|e| panic!("clone of a pool member through nginx failed:\n{e}\n{}", front.logs()));
    assert_eq!(grasp_tests::git::git(&clone2, &["rev-parse", "HEAD"]), tip);

    // A contributor's pull request: event first (held), then its commit to refs/nostr/<id>.
    let contributor = Keys::generate();
    let pr_tip = cloned.commit("fix.txt", "a fix");
    let pr = pull_request(&contributor, &owner.public_key(), "hello", &pr_tip, &[&url]);
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok, "{msg}");
    let pr_ref = format!("refs/nostr/{}", pr.id.to_hex());
    let pr_push = Repo { work: cloned, url: url.clone() };
    pr_push.push(&[&format!("HEAD:{pr_ref}")]).unwrap_or_else(|e| panic!("PR push failed:\n{e}"));
    assert_eq!(bare_refs(&bare).get(&pr_ref), Some(&pr_tip));
    assert!(stored(&mut c, pr.id).await, "pull request released by its push");

    // A push the state does not allow is refused, and git shows the reason.
    let second = repo.commit("b.txt", "two");
    let err = repo.push(&["main"]).unwrap_err();
    assert!(err.contains("refs/heads/main") && err.contains(&second[..7]) && err.contains(&tip[..7]), "{err}");
    assert_eq!(bare_refs(&bare).get("refs/heads/main"), Some(&tip), "rejected push changed nothing");
}

/// GRASP-06 behind nginx + fcgiwrap + grasp-cgi (docs/nginx/grasp.conf with GRASP_GRASP06 1): a
/// path with no contributor repository clones empty and creates nothing, a contributor's push
/// makes its repository (grasp-cgi asks the relay) and releases the held pull request, which is
/// copied into the owner's repository; a refused push leaves no repository behind.
#[tokio::test]
#[ignore = "needs nginx and fcgiwrap; run by .ci/run with --ignored"]
async fn contributor_repositories_through_nginx() {
    let front = Front::start_with(&["--grasp06", "--git-idle-timeout", "2s"]);
    let tmp = tempfile::tempdir().unwrap();
    let mut c = NostrClient::connect(&front.ws_url()).await.expect("WebSocket through nginx");
    let (owner, contributor) = (Keys::generate(), Keys::generate());
    let prs = |identifier: &str| format!("http://{}/prs/{}/{identifier}.git", front.addr, npub_of(&contributor.public_key()));
    let prs_root = front.relay.data_dir().join(grasp_state::contract::layout::GIT_DIR).join(grasp_state::names::identifier::PRS_DIR);

    clone(&prs("nothing"), &tmp.path().join("empty"), &[]).unwrap_or_else(|e| panic!("{e}\n{}", front.logs()));
    assert!(!prs_root.exists(), "a fetch creates nothing");

    let ann = front.announcement(&owner, "proj");
    assert!(c.send_event(&ann).await.unwrap().0);
    let url = front.repo_url(&owner.public_key(), "proj");
    let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url: url.clone() };
    let tip = repo.commit("a.txt", "one");
    assert!(c.send_event(&state(&owner, "proj", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap().0);
    repo.push(&["main"]).unwrap();

    let fix = repo.commit("fix.txt", "a fix");
    let pr = pull_request(&contributor, &owner.public_key(), "proj", &fix, &[&prs("proj")]);
    let (ok, msg) = c.send_event(&pr).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    let pr_ref = format!("refs/nostr/{}", pr.id.to_hex());
    let contribution = Repo { work: WorkTree { dir: repo.work.dir.clone() }, url: prs("proj") };
    let out = contribution.push(&[&format!("HEAD:{pr_ref}")]).unwrap_or_else(|e| panic!("contributor push failed:\n{e}\n{}", front.logs()));
    assert!(out.contains("released"), "{out}");
    assert!(stored(&mut c, pr.id).await, "pull request released by the contributor's push");
    assert_eq!(bare_refs(&repo_dir(&front.relay, &owner.public_key(), "proj")).get(&pr_ref), Some(&fix), "copied into the owner's repository");

    let refused = Repo { work: WorkTree { dir: repo.work.dir.clone() }, url: prs("refused") };
    let err = refused.push(&["HEAD:refs/heads/main"]).unwrap_err();
    assert!(err.contains("only refs/nostr/"), "{err}");
    let gone = prs_root.join(npub_of(&contributor.public_key())).join("refused.git");
    wait_until("the refused push's repository to be removed", TIMEOUT, || (!gone.exists()).then_some(())).unwrap();
}

#[tokio::test]
#[ignore = "needs nginx and fcgiwrap; run by .ci/run with --ignored"]
async fn nip11_cors_limits_and_client_addresses_through_nginx() {
    let mut front = Front::start();
    let client = http();

    // NIP-11 from the relay, CORS once (nginx's; the relay's are hidden).
    let resp = client.get(front.http_url("/")).header("Accept", "application/nostr+json").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_cors(&resp, "NIP-11");
    assert!(header_values(&resp, "access-control-max-age").is_empty(), "only preflights carry it");
    assert_eq!(resp.headers()["content-type"], "application/nostr+json");
    let doc: serde_json::Value = resp.json().await.unwrap();
    assert!(doc.get("name").is_some() && doc.get("supported_nips").is_some(), "{doc}");

    // The relay's NIP-05 reaches the relay (docs/nginx/grasp.conf routes it), CORS once.
    let relay_key = doc["self"].as_str().expect("NIP-11 names the relay's key").to_string();
    for query in ["", "?name=_"] {
        let resp = client.get(front.http_url(&format!("/.well-known/nostr.json{query}"))).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{query}");
        assert_cors(&resp, "NIP-05");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let names: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(names, serde_json::json!({ "names": { "_": relay_key } }), "{query}");
    }

    // nginx's own 404.
    let resp = client.get(front.http_url("/favicon.ico")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_cors(&resp, "nginx 404");
    assert!(resp.text().await.unwrap().contains("git repositories at /<npub>/<identifier>.git"));

    // grasp-cgi's 404 for a repository that does not exist, through fcgiwrap.
    let nobody = Keys::generate().public_key();
    let resp = client
        .get(format!("{}/info/refs?service=git-upload-pack", front.repo_url(&nobody, "none")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_cors(&resp, "grasp-cgi 404");

    // Preflight anywhere.
    for path in ["/", "/anything", &format!("/{}/x.git/git-receive-pack", npub_of(&nobody))] {
        let resp = client.request(reqwest::Method::OPTIONS, front.http_url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 204, "OPTIONS {path}");
        assert_cors(&resp, "OPTIONS");
        // docs/nginx/grasp.conf keeps preflights as long as the relay (grasp_state::contract::cors).
        assert_eq!(header_values(&resp, "access-control-max-age"), [grasp_state::contract::cors::MAX_AGE], "OPTIONS {path}");
    }

    // A body over the limit outside the git paths: nginx's 413, with CORS.
    let resp = client.post(front.http_url("/")).body(vec![b'x'; 2 << 20]).send().await;
    match resp {
        Ok(resp) => {
            assert_eq!(resp.status(), 413);
            assert_cors(&resp, "nginx 413");
        }
        // nginx may close the connection before reading the whole body; the status line is what
        // matters and reqwest cannot always read it then. Check nginx's log instead.
        Err(_) => assert!(read(&front.prefix.path().join("error.log")).contains("client intended to send too large body")),
    }

    // X-Forwarded-For from a client that is not the configured proxy is ignored.
    let resp = client.get(front.http_url("/")).header("X-Forwarded-For", "203.0.113.7").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let access = read(&front.prefix.path().join("access.log"));
    let last = access.lines().last().unwrap_or_default();
    assert!(last.starts_with("127.0.0.1 "), "client address taken from X-Forwarded-For: {last}");
    assert!(!access.contains("203.0.113.7"), "{access}");

    // The relay down: nginx's 502, with CORS.
    front.relay.kill();
    let resp = client.get(front.http_url("/")).header("Accept", "application/nostr+json").send().await.unwrap();
    assert_eq!(resp.status(), 502);
    assert_cors(&resp, "nginx 502");
}

/// A private GRASP-08 service behind nginx + fcgiwrap: grasp-cgi, run by fcgiwrap with the
/// example configuration, asks the relay before serving, so git needs a member's proof there too.
#[tokio::test]
#[ignore = "needs nginx and fcgiwrap; run by .ci/run with --ignored"]
async fn private_service_git_needs_a_members_proof_through_nginx() {
    let member = Keys::generate();
    let front = Front::start_with(&["--private", "--member", &member.public_key().to_hex()]);
    let mut c = NostrClient::connect(&front.ws_url()).await.expect("WebSocket through nginx");
    assert!(c.auth(&member).await.unwrap().0, "AUTH through nginx");
    let (ok, msg) = c.send_event(&front.announcement(&member, "secret")).await.unwrap();
    assert!(ok, "{msg}");
    let url = front.repo_url(&member.public_key(), "secret");
    let proof = |keys: &Keys| grasp_tests::grasp::git_proof(keys, &url);
    let refs = format!("{url}/info/refs?service=git-upload-pack");
    let resp = http().get(&refs).send().await.unwrap();
    assert_eq!(resp.status(), 401, "no proof through nginx\n{}", front.logs());
    assert_eq!(header_values(&resp, "www-authenticate"), ["Nostr"]);
    let resp = http().get(&refs).header("Authorization", proof(&Keys::generate())).send().await.unwrap();
    assert_eq!(resp.status(), 401, "non-member through nginx");
    let resp = http().get(&refs).header("Authorization", proof(&member)).send().await.unwrap();
    assert_eq!(resp.status(), 200, "member through nginx\n{}", front.logs());
}

/// `grasp-relay doctor --nginx` on the site nginx is serving: fit to serve, git going to
/// grasp-cgi with request buffering off; the same site with request buffering on is not.
#[test]
#[ignore = "needs nginx and fcgiwrap; run by .ci/run with --ignored"]
fn the_doctor_reads_the_front_as_fit_to_serve() {
    let front = Front::start();
    let site = front.prefix.path().join("grasp.conf");
    let doctor = |site: &Path| {
        Command::new(binary_path("grasp-relay"))
            .arg("doctor")
            .arg("--nginx")
            .arg(site)
            .arg("--data-dir")
            .arg(front.relay.data_dir())
            // The test machine's free space is not this test's subject.
            .env(grasp_state::contract::env_names::MIN_FREE_DISK, "0")
            .output()
            .unwrap()
    };
    let out = doctor(&site);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("git goes to grasp-cgi, request buffering off"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("ok    nginx:")), "{text}");

    let buffered = front.prefix.path().join("buffered.conf");
    std::fs::write(&buffered, read(&site).replace("fastcgi_request_buffering off;", "fastcgi_request_buffering on;")).unwrap();
    let out = doctor(&buffered);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAIL  nginx:") && text.contains("request buffering is on"), "{text}");
}

/// docs/nginx/replicas.conf with its site-specific values replaced: nginx listening on `listen`,
/// the `replicas` in both upstreams.
fn replicas_config(listen: SocketAddr, replicas: &[SocketAddr]) -> String {
    let template = include_str!("../../docs/nginx/replicas.conf");
    let block = |text: &str, begin: &str, end: &str, with: &str| -> String {
        let b = text.find(begin).unwrap_or_else(|| panic!("docs/nginx/replicas.conf has no {begin:?}"));
        let e = text[b..].find(end).unwrap_or_else(|| panic!("docs/nginx/replicas.conf has no {end:?}")) + b + end.len();
        format!("{}{with}{}", &text[..b], &text[e..])
    };
    let mut conf = block(template, "    # BEGIN listen\n", "    # END listen\n", &format!("    listen {listen};\n"));
    let servers: String = replicas.iter().map(|r| format!("    server {r} max_fails=1 fail_timeout=10s;\n")).collect();
    while conf.contains("    # BEGIN replicas\n") {
        conf = block(&conf, "    # BEGIN replicas\n", "    # END replicas\n", &servers);
    }
    assert!(conf.contains("git.example.com"), "docs/nginx/replicas.conf no longer names git.example.com");
    conf.replace("git.example.com", &listen.ip().to_string())
}

/// Has `server` caught up with the other replicas (`/readyz` on its hook API says `ok replicas`)?
fn caught_up(server: &TestServer) -> bool {
    use std::io::{Read, Write};
    let (api, _) = hook_api(server);
    let Ok(mut stream) = TcpStream::connect(&api) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(format!("GET /readyz HTTP/1.0\r\nHost: {api}\r\n\r\n").as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("ok replicas")
}

/// A replica set behind nginx running docs/nginx/replicas.conf: `n` replicas on loopback, each
/// naming the others, with `extra` arguments each. Dropping it stops nginx, then the replicas.
struct ReplicaFront {
    nginx: Option<Daemon>,
    set: Vec<TestServer>,
    addr: SocketAddr,
    prefix: tempfile::TempDir,
}

impl ReplicaFront {
    fn start(n: usize, extra: &[&str]) -> ReplicaFront {
        let prefix = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(prefix.path().join("temp")).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let public = addr.to_string();
        let mut base = vec!["--public-host", public.as_str(), "--trusted-proxy", "127.0.0.1/32", "--relay-sync-backoff", "300ms", "--relay-sync-backoff-cap", "2s", "--sync-delay", "200ms"];
        // Started first to learn their ports, then again naming each other (with `extra`).
        let mut set: Vec<TestServer> = (0..n).map(|_| TestServer::start_with(&base)).collect();
        base.extend_from_slice(extra);
        let listeners: Vec<SocketAddr> = set.iter().map(|s| s.addr()).collect();
        for (i, server) in set.iter_mut().enumerate() {
            let others: Vec<String> = listeners.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, a)| format!("http://{a}")).collect();
            let mut args: Vec<&str> = base.clone();
            for other in &others {
                args.extend(["--replica", other.as_str()]);
            }
            server.restart_with(&args);
        }
        // Each answers what nginx forwards once caught up with the others (before, `503`).
        for server in &set {
            wait_until("every replica to catch up with the others", TIMEOUT, || caught_up(server).then_some(())).unwrap();
        }
        std::fs::write(prefix.path().join("grasp.conf"), replicas_config(addr, &listeners)).unwrap();
        std::fs::write(prefix.path().join("nginx.conf"), main_config(prefix.path())).unwrap();
        let mut nginx = Daemon::spawn(
            "nginx",
            Command::new(find_program("nginx")).arg("-p").arg(prefix.path()).arg("-c").arg(prefix.path().join("nginx.conf")).arg("-e").arg(prefix.path().join("error.log")),
            &prefix.path().join("nginx.out"),
        );
        wait_until("nginx to listen", TIMEOUT, || {
            if let Some(status) = nginx.exited() {
                panic!("nginx exited with {status}: {}{}", read(&prefix.path().join("nginx.out")), read(&prefix.path().join("error.log")));
            }
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()
        })
        .unwrap();
        ReplicaFront { nginx: Some(nginx), set, addr, prefix }
    }

    fn errors(&self) -> String {
        read(&self.prefix.path().join("error.log"))
    }

    /// The replica this client's requests are routed to: the one that authorised its push.
    fn routed(&self) -> usize {
        self.set.iter().position(|s| s.logs().contains("push authorised")).expect("one replica took the push")
    }
}

impl Drop for ReplicaFront {
    fn drop(&mut self) {
        self.nginx.take();
    }
}

/// A replica set of three behind nginx (docs/scaling.md): a push and events through nginx are
/// served by every replica; with one replica killed, clients keep working through nginx; the
/// killed one catches up when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run with --ignored"]
async fn a_replica_set_behind_nginx_converges_and_fails_over() {
    let mut front = ReplicaFront::start(3, &[]);
    let addr = front.addr;
    let owner = Keys::generate();
    let identifier = "replicated";
    let url = format!("http://{addr}/{}/{}.git", npub_of(&owner.public_key()), identifier);
    let ann = announcement_with_urls(&owner, identifier, &url, &format!("ws://{addr}"));
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url };
    let main_on = |server: &TestServer| {
        let dir = repo_dir(server, &owner.public_key(), identifier);
        dir.join("HEAD").exists().then(|| bare_refs(&dir).get("refs/heads/main").cloned()).flatten()
    };
    let send = |event: Event| async move {
        let mut c = NostrClient::connect(&format!("ws://{addr}/")).await.expect("WebSocket through nginx");
        let (ok, msg) = c.send_event(&event).await.unwrap();
        assert!(ok, "{msg}");
    };
    send(ann.clone()).await;
    let tip = repo.commit("a.txt", "one");
    send(state(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"))).await;
    repo.push(&["main"]).unwrap_or_else(|e| panic!("push through nginx: {e}\n{}", front.errors()));
    for server in &front.set {
        wait_until("every replica to serve the push", TIMEOUT, || (main_on(server).as_deref() == Some(tip.as_str())).then_some(())).unwrap();
    }

    // The replica this client is routed to (the one that authorised the push) dies: nginx goes
    // to another.
    let routed = front.routed();
    front.set.swap(0, routed);
    front.set[0].kill();
    let next = repo.commit("a.txt", "two");
    send(state_at(&owner, identifier, &[("refs/heads/main", &next)], Some("main"), now() + 1)).await;
    repo.push(&["main"]).unwrap_or_else(|e| panic!("push through nginx with a replica down: {e}\n{}", front.errors()));
    let bug = issue(&Keys::generate(), &owner.public_key(), identifier);
    send(bug.clone()).await;
    for server in &front.set[1..] {
        wait_until("the live replicas to serve the push", TIMEOUT, || (main_on(server).as_deref() == Some(next.as_str())).then_some(())).unwrap();
    }

    // It comes back and catches up from the others.
    front.set[0].restart();
    wait_until("the returning replica to catch up", TIMEOUT, || (main_on(&front.set[0]).as_deref() == Some(next.as_str())).then_some(())).unwrap();
    let mut c = NostrClient::connect(&front.set[0].ws_url()).await.unwrap();
    grasp_tests::eventually!("the issue on the returning replica", TIMEOUT, {
        let got = c.req(vec![Filter::new().id(bug.id)]).await.unwrap();
        (!got.is_empty()).then_some(())
    });
}

/// docs/nginx/replicas.conf routes git by repository and WebSocket by client address: a client's
/// announcement and state reach one replica, its push another one (for most repositories), which
/// asks the others for them before deciding (docs/scaling.md, "Pushes routed by repository").
/// New repositories are pushed until one's push went to a replica that had to ask; every push
/// goes in, and is served through nginx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run with --ignored"]
async fn a_push_routed_by_repository_meets_the_state_sent_to_another_replica() {
    let front = ReplicaFront::start(3, &[]);
    let addr = front.addr;
    let owner = Keys::generate();
    let mut c = NostrClient::connect(&format!("ws://{addr}/")).await.expect("WebSocket through nginx");
    let mut asked = None;
    for n in 0..12 {
        let identifier = format!("routed-{n}");
        let url = format!("http://{addr}/{}/{identifier}.git", npub_of(&owner.public_key()));
        let (ok, msg) = c.send_event(&announcement_with_urls(&owner, &identifier, &url, &format!("ws://{addr}"))).await.unwrap();
        assert!(ok, "{msg}");
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url: url.clone() };
        let tip = repo.commit("a.txt", &identifier);
        let (ok, msg) = c.send_event(&state(&owner, &identifier, &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
        assert!(ok, "{msg}");
        repo.push(&["main"]).unwrap_or_else(|e| panic!("push of {identifier} through nginx: {e}\n{}", front.errors()));
        let out = git_output(tmp.path(), &["ls-remote", &url]);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{tip}\trefs/heads/main")), "{identifier} served through nginx");
        let marker = format!("/{identifier} replica=");
        if let Some(i) = front.set.iter().position(|s| s.logs().lines().any(|l| l.contains("event from a replica admitted before deciding a push") && l.contains(&marker))) {
            asked = Some((identifier, i));
            break;
        }
    }
    let (identifier, replica) = asked.expect("in twelve repositories, one's push went to a replica other than the WebSocket's");
    eprintln!("{identifier}: pushed to replica {replica}, which asked the others for its events");
}

/// Kill -9 the replica a client is routed to in the middle of a stream of events and pushes
/// through nginx, its data directory deleted before it comes back: the client retries what failed
/// (at most what was in flight), and with `--replica-acks 1` nothing acknowledged is lost, on the
/// replicas that stayed nor on the one that came back empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run with --ignored"]
async fn a_replica_killed_mid_stream_loses_nothing_acknowledged() {
    let mut front = ReplicaFront::start(3, &["--replica-acks", "1", "--replica-ack-timeout", "3s"]);
    let addr = front.addr;
    let owner = Keys::generate();
    let identifier = "stream";
    let url = format!("http://{addr}/{}/{}.git", npub_of(&owner.public_key()), identifier);
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url: url.clone() };
    let ws = format!("ws://{addr}/");
    // One connection, replaced when the replica behind it dies; every event sent until acknowledged.
    let mut c = NostrClient::connect(&ws).await.unwrap();
    let mut failures = 0;
    let mut send = async |c: &mut NostrClient, event: &Event| {
        for _ in 0..5 {
            match c.send_event(event).await {
                Ok((true, _)) => return,
                Ok((false, msg)) => {
                    eprintln!("refused: {msg}");
                    assert!(msg.starts_with("error:"), "refused: {msg}")
                }
                Err(_) => *c = NostrClient::connect(&ws).await.unwrap(),
            }
            failures += 1;
        }
        panic!("event {} never acknowledged", event.id);
    };
    send(&mut c, &announcement_with_urls(&owner, identifier, &url, &format!("ws://{addr}"))).await;
    let mut acknowledged = Vec::new();
    let mut tip = String::new();
    let mut killed = None;
    for n in 0..45u64 {
        if n % 15 == 0 {
            tip = repo.commit("a.txt", &format!("round {n}"));
            send(&mut c, &state_at(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"), now() + n)).await;
            let pushed = (0..3).any(|_| repo.push(&["main"]).is_ok());
            assert!(pushed, "the push never went in through nginx:\n{}", front.errors());
        }
        if n == 20 {
            let routed = front.routed();
            front.set[routed].kill();
            std::fs::remove_dir_all(front.set[routed].data_dir()).unwrap();
            killed = Some(routed);
        }
        let bug = issue(&Keys::generate(), &owner.public_key(), identifier);
        send(&mut c, &bug).await;
        acknowledged.push(bug.id);
    }
    assert!(failures <= 3, "{failures} sends failed: at most those in flight when the replica died should");
    let killed = killed.unwrap();
    let served = |server: &TestServer| {
        let dir = repo_dir(server, &owner.public_key(), identifier);
        dir.join("HEAD").exists().then(|| bare_refs(&dir).get("refs/heads/main").cloned()).flatten()
    };
    front.set[killed].restart();
    for (i, server) in front.set.iter().enumerate() {
        let caught = wait_until("every replica to serve the last push", TIMEOUT, || (served(server).as_deref() == Some(tip.as_str())).then_some(()));
        if caught.is_err() {
            let logs = server.logs();
            let tail: Vec<&str> = logs.lines().filter(|l| l.contains("grasp_relay::sync") || l.contains("fetch")).collect();
            panic!("replica {i} (killed: {killed}) does not serve {tip}: serves {:?}\n{}", served(server), tail[tail.len().saturating_sub(60)..].join("\n"));
        }
        let mut rc = NostrClient::connect(&server.ws_url()).await.unwrap();
        grasp_tests::eventually!("every acknowledged event on every replica", TIMEOUT, {
            let got = rc.req(vec![Filter::new().ids(acknowledged.iter().copied()).limit(acknowledged.len())]).await.unwrap();
            (got.len() == acknowledged.len()).then_some(())
        });
    }
}

/// A rolling upgrade under load (docs/scaling.md, "Upgrades"): each replica stopped and started in
/// turn while a client keeps sending events and pushing through nginx; every acknowledged event
/// and the last push end up on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; run by .ci/run with --ignored"]
async fn a_rolling_restart_under_load_loses_nothing() {
    let mut front = ReplicaFront::start(3, &["--replica-acks", "1", "--replica-ack-timeout", "3s"]);
    let addr = front.addr;
    let owner = Keys::generate();
    let identifier = "rolling";
    let url = format!("http://{addr}/{}/{}.git", npub_of(&owner.public_key()), identifier);
    let tmp = tempfile::tempdir().unwrap();
    let repo = Repo { work: WorkTree::new(tmp.path().join("w")), url: url.clone() };
    let ws = format!("ws://{addr}/");
    let mut c = NostrClient::connect(&ws).await.unwrap();
    let send = async |c: &mut NostrClient, event: &Event| {
        for _ in 0..8 {
            match c.send_event(event).await {
                Ok((true, _)) => return,
                Ok((false, msg)) => assert!(msg.starts_with("error:"), "refused: {msg}"),
                Err(_) => {
                    if let Ok(fresh) = NostrClient::connect(&ws).await {
                        *c = fresh;
                    }
                }
            }
        }
        panic!("event {} never acknowledged", event.id);
    };
    send(&mut c, &announcement_with_urls(&owner, identifier, &url, &format!("ws://{addr}"))).await;
    let mut acknowledged = Vec::new();
    let mut tip = String::new();
    for round in 0..3usize {
        tip = repo.commit("a.txt", &format!("round {round}"));
        send(&mut c, &state_at(&owner, identifier, &[("refs/heads/main", &tip)], Some("main"), now() + round as u64)).await;
        assert!((0..3).any(|_| repo.push(&["main"]).is_ok()), "the push never went in:\n{}", front.errors());
        for _ in 0..5 {
            let bug = issue(&Keys::generate(), &owner.public_key(), identifier);
            send(&mut c, &bug).await;
            acknowledged.push(bug.id);
        }
        // The next replica is upgraded: stopped (SIGTERM) and started again.
        front.set[round].restart();
    }
    for server in &front.set {
        let dir = repo_dir(server, &owner.public_key(), identifier);
        wait_until("every replica to serve the last push", TIMEOUT, || {
            (dir.join("HEAD").exists() && bare_refs(&dir).get("refs/heads/main") == Some(&tip)).then_some(())
        })
        .unwrap();
        let mut rc = NostrClient::connect(&server.ws_url()).await.unwrap();
        grasp_tests::eventually!("every acknowledged event on every replica", TIMEOUT, {
            let got = rc.req(vec![Filter::new().ids(acknowledged.iter().copied()).limit(acknowledged.len())]).await.unwrap();
            (got.len() == acknowledged.len()).then_some(())
        });
    }
}
