//! Helpers for git smart-HTTP tests: run `git`, build fixture repositories, and serve a git root
//! over HTTP with the relay's own [`grasp_relay::git::http::serve`] (which runs the real
//! `grasp-cgi` binary around stock `git http-backend`) without starting the whole relay.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use grasp_relay::git::http::{serve, GitHttpConfig};
use grasp_state::contract::git_backend::BackendSetup;
use grasp_state::names::identifier::{npub_of, percent_encode_segment, RepoLayout};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use nostr::key::PublicKey;

/// `target/<profile>/` of this build, found from the test executable (`target/debug/deps/x`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A workspace binary, e.g. `grasp-cgi`. Panics with the fix if it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = target_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found: run `cargo build --workspace` before the tests",
        path.display()
    );
    path
}

/// A temporary directory holding a git root `git/` (not created: the server makes it) and an
/// empty hooks directory `hooks/` for the repositories created there: (the directory, the root,
/// the hooks).
pub fn git_root_with_hooks() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let hooks = tmp.path().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let root = tmp.path().join("git");
    (tmp, root, hooks)
}

/// The xorshift64 sequence from one fixed seed: content no compressor can shrink, the same on
/// every run (for pushes and packs that must be as large as their data).
pub fn xorshift() -> impl Iterator<Item = u64> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// A fixed, valid public key (`n` picks one of a few).
pub fn test_owner(n: usize) -> PublicKey {
    const KEYS: [&str; 2] = [
        "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798",
        "c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5",
    ];
    PublicKey::from_hex(KEYS[n % KEYS.len()]).expect("valid test key")
}

/// Runs `git` in `dir` with a fixed identity and no user/system config; returns the output.
pub fn git_output(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .output()
        .expect("running git")
}

/// Runs `git`, panicking with its stderr on failure; returns trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A work tree with commits, used to fill bare repositories through the file system.
pub struct WorkTree {
    pub dir: PathBuf,
}

impl WorkTree {
    pub fn new(dir: PathBuf) -> WorkTree {
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        WorkTree { dir }
    }

    /// Writes `file` and commits it; returns the commit id.
    pub fn commit(&self, file: &str, content: &str) -> String {
        std::fs::write(self.dir.join(file), content).unwrap();
        git(&self.dir, &["add", file]);
        git(&self.dir, &["commit", "-q", "-m", &format!("write {file}")]);
        git(&self.dir, &["rev-parse", "HEAD"])
    }

    /// Pushes `refspecs` straight into the bare repository at `bare`.
    pub fn push_to(&self, bare: &Path, refspecs: &[&str]) {
        let mut args = vec!["push", "-q", bare.to_str().unwrap()];
        args.extend_from_slice(refspecs);
        git(&self.dir, &args);
    }
}

/// A git root served over HTTP on 127.0.0.1 by `grasp_relay::git::http::serve`.
pub struct GitHttpServer {
    pub addr: SocketAddr,
    pub layout: RepoLayout,
    _runtime: tokio::runtime::Runtime,
    /// Ends the git children when the server is dropped.
    _shutdown: grasp_relay::shutdown::ShutdownController,
}

impl GitHttpServer {
    pub fn start(git_root: &Path, hooks_dir: Option<&Path>) -> GitHttpServer {
        GitHttpServer::start_with(GitHttpConfig {
            cgi_path: bin("grasp-cgi"),
            backend: BackendSetup { git_root: git_root.to_path_buf(), hooks_dir: hooks_dir.map(Path::to_path_buf), git: "git".into(), ..BackendSetup::default() },
            data_dir: git_root.parent().unwrap_or(git_root).to_path_buf(),
            env: vec![],
            direct: true,
            idle_timeout: grasp_relay::git::http::DEFAULT_IDLE_TIMEOUT,
            min_rate: grasp_state::contract::transfer::DEFAULT_MIN_RATE,
            prs: false,
            ref_cache: Some(std::sync::Arc::new(grasp_relay::git::ref_cache::RefCache::new(
                grasp_relay::git::ref_cache::DEFAULT_BUDGET,
                Default::default(),
            ))),
            supervised_pushes: None,
        })
    }

    /// Serves with an explicit config (e.g. a fake CGI program).
    pub fn start_with(cfg: GitHttpConfig) -> GitHttpServer {
        let git_root = cfg.backend.git_root.clone();
        let cfg = Arc::new(cfg);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = grasp_relay::shutdown::ShutdownController::new();
        let handle = shutdown.subscribe();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, remote)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                let (cfg, handle) = (cfg.clone(), handle.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let (cfg, handle) = (cfg.clone(), handle.clone());
                        async move { Ok::<_, std::convert::Infallible>(serve(req, remote, &cfg, handle).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        GitHttpServer {
            addr,
            layout: RepoLayout::new(git_root),
            _runtime: runtime,
            _shutdown: shutdown,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/<npub>/<identifier>.git`
    pub fn repo_url(&self, owner: &PublicKey, identifier: &str) -> String {
        format!(
            "{}/{}/{}.git",
            self.base_url(),
            npub_of(owner),
            percent_encode_segment(identifier)
        )
    }
}
