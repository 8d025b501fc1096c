//! The real GRASP client in a per-user sandbox: `ngit` 3.0.4 and git's `nostr://` remote helper
//! `git-remote-nostr`, from the project's shared tools (`../shared/tools/bin`, or
//! `GRASP_TOOLS_BIN`). A missing tool fails the test with what to do; it never skips.
//!
//! Each [`NgitUser`] has a home of its own (git config with name, email, `init.defaultBranch =
//! main` and the user's key as ngit keeps it: `nostr.nsec` / `nostr.npub`), XDG and cache
//! directories, and reaches nothing but loopback: its own relays (`NGIT_RELAY_*_SET`, a plain
//! relay apart from the GRASP server, as real users keep them) and the GRASP servers it is given
//! (`NGIT_GRASP_DEFAULT_SET`). Every command runs with stdin closed (ngit asks questions on a
//! terminal) and is killed past [`COMMAND_TIMEOUT`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nostr::prelude::*;

/// Longest any one ngit or git command may run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The directory holding `ngit`, `git-remote-nostr` and `grasp-audit`.
pub fn tools_bin() -> PathBuf {
    let dir = match std::env::var_os(grasp_state::contract::env_names::TOOLS_BIN) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/bin"),
    };
    for tool in ["ngit", "git-remote-nostr"] {
        assert!(
            dir.join(tool).is_file(),
            "{} not found: the ngit suite needs the shared tools (../shared/tools/bin beside the project, see its README), \
             or GRASP_TOOLS_BIN naming the directory that holds ngit and git-remote-nostr",
            dir.join(tool).display()
        );
    }
    dir.canonicalize().expect("tools directory")
}

/// What a command printed and how it ended.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout and stderr together, for messages and searches.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Panics with everything printed unless the command succeeded; returns the text.
    #[track_caller]
    pub fn expect_ok(&self, what: &str) -> String {
        assert!(self.ok, "{what} failed:\n{}", self.text());
        self.text()
    }

    /// Panics unless the command failed; returns the text.
    #[track_caller]
    pub fn expect_refused(&self, what: &str) -> String {
        assert!(!self.ok, "{what} should have failed:\n{}", self.text());
        self.text()
    }
}

/// One person with ngit: a key and a sandboxed home under `root`.
pub struct NgitUser {
    pub keys: Keys,
    pub home: PathBuf,
    tools: PathBuf,
    env: Vec<(String, String)>,
}

impl NgitUser {
    /// A user named `name` with a new key, whose own relay is `user_relay` (a `ws://` URL) and
    /// whose default GRASP servers are `grasp_servers` (`http://host:port`).
    pub fn new(root: &Path, name: &str, user_relay: &str, grasp_servers: &[String]) -> NgitUser {
        NgitUser::with_keys(root, name, Keys::generate(), user_relay, grasp_servers)
    }

    /// Like [`NgitUser::new`] with a given key.
    pub fn with_keys(root: &Path, name: &str, keys: Keys, user_relay: &str, grasp_servers: &[String]) -> NgitUser {
        let tools = tools_bin();
        let home = root.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let nsec = keys.secret_key().to_bech32().unwrap();
        let npub = keys.public_key().to_bech32().unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            format!(
                "[user]\n\tname = {name}\n\temail = {name}@example.com\n[init]\n\tdefaultBranch = main\n\
                 [nostr]\n\tnsec = {nsec}\n\tnpub = {npub}\n\trepo-relay-only = true\n"
            ),
        )
        .unwrap();
        let h = home.to_str().unwrap().to_string();
        let path = format!("{}:{}", tools.display(), std::env::var("PATH").unwrap_or_default());
        let env = [
            ("HOME", h.clone()),
            ("XDG_CONFIG_HOME", format!("{h}/config")),
            ("XDG_DATA_HOME", format!("{h}/data")),
            ("XDG_STATE_HOME", format!("{h}/state")),
            ("XDG_CACHE_HOME", format!("{h}/cache")),
            ("GIT_CONFIG_GLOBAL", format!("{h}/.gitconfig")),
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("NGIT_SECRET_STORAGE", "git-config".into()),
            ("NGIT_CACHE_DIR", format!("{h}/cache/ngit")),
            ("GIT_TERMINAL_PROMPT", "0".into()),
            ("NGIT_RELAY_DEFAULT_SET", user_relay.into()),
            ("NGIT_RELAY_ANNOUNCEMENT_INDEXER_SET", user_relay.into()),
            ("NGIT_RELAY_BLASTER_SET", user_relay.into()),
            ("NGIT_RELAY_SIGNER_FALLBACK_SET", user_relay.into()),
            ("NGIT_GRASP_DEFAULT_SET", grasp_servers.join(",")),
            ("NGIT_REPO_RELAY_ONLY", "1".into()),
            ("PATH", path),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        NgitUser { keys, home, tools, env }
    }

    /// This user's ngit publishes to their own relays too, not only to the repositories'
    /// (`repo-relay-only` off), as ngit does by default.
    pub fn publishing_to_own_relays(mut self) -> NgitUser {
        self.env.retain(|(k, _)| k != "NGIT_REPO_RELAY_ONLY");
        let config = self.home.join(".gitconfig");
        let text = std::fs::read_to_string(&config).unwrap().replace("repo-relay-only = true", "repo-relay-only = false");
        std::fs::write(config, text).unwrap();
        self
    }

    pub fn npub(&self) -> String {
        self.keys.public_key().to_bech32().unwrap()
    }

    /// A directory in the user's home (created).
    pub fn dir(&self, name: &str) -> PathBuf {
        let d = self.home.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Runs `ngit <args>` in `dir`.
    pub fn ngit(&self, dir: &Path, args: &[&str]) -> Run {
        self.run(dir, &self.tools.join("ngit"), args)
    }

    /// Runs `git <args>` in `dir` as this user (its config, its PATH with git-remote-nostr).
    pub fn git(&self, dir: &Path, args: &[&str]) -> Run {
        self.run(dir, Path::new("git"), args)
    }

    /// `git <args>` that must succeed; its trimmed stdout.
    #[track_caller]
    pub fn git_ok(&self, dir: &Path, args: &[&str]) -> String {
        let run = self.git(dir, args);
        run.expect_ok(&format!("git {args:?}"));
        run.stdout.trim().to_string()
    }

    /// A new work tree `name` in the user's home with one commit of `file`.
    pub fn new_work_tree(&self, name: &str, file: &str, content: &str) -> PathBuf {
        let dir = self.dir(name);
        self.git(&dir, &["init", "-q"]).expect_ok("git init");
        self.commit(&dir, file, content);
        dir
    }

    /// Writes `file` in `dir` and commits it; returns the commit id.
    #[track_caller]
    pub fn commit(&self, dir: &Path, file: &str, content: &str) -> String {
        std::fs::write(dir.join(file), content).unwrap();
        self.git(dir, &["add", file]).expect_ok("git add");
        self.git(dir, &["commit", "-q", "-m", &format!("{file}: {content}")]).expect_ok("git commit");
        self.git(dir, &["rev-parse", "HEAD"]).stdout.trim().to_string()
    }

    fn run(&self, dir: &Path, program: &Path, args: &[&str]) -> Run {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        // Read both pipes on threads so a chatty child never blocks on a full pipe.
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let read = |mut r: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let (out, err) = (read(Box::new(out)), read(Box::new(err)));
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (stdout, mut stderr) = (out.join().unwrap(), err.join().unwrap());
        if status.is_none() {
            stderr.push_str(&format!("\n[killed after {COMMAND_TIMEOUT:?}: {} {args:?}]", program.display()));
        }
        Run { ok: status.is_some_and(|s| s.success()), stdout, stderr }
    }
}
