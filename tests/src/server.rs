//! [`TestServer`]: a `grasp-relay` process on a temp data dir and a random loopback port.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::wait::{wait_until, TIMEOUT};

/// Spawns a relay `command` outside [`TestServer`] (an installed binary, a configuration file)
/// with no stdin and its output in the new file `log`; it never reaches the internet: no public
/// index relay.
pub fn spawn_logged(command: &mut Command, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    command
        .env(grasp_state::contract::env_names::NO_INDEX_RELAYS, "true")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Path of a workspace binary (`grasp-relay`, `grasp-cgi`, ...) next to the test executable:
/// `target/debug/deps/<test>` -> `target/debug/<name>`.
pub fn binary_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found; run `cargo build --workspace` first",
        path.display()
    );
    path
}

/// The processes (pid, command line) whose environment names `data_dir`: every grasp-cgi,
/// git http-backend, receive-pack and hook the relay started for a request (they inherit
/// `GRASP_GIT_ROOT` / `GIT_PROJECT_ROOT`), wherever they were reparented.
pub fn children_of(data_dir: &Path) -> Vec<(u32, String)> {
    let needle = data_dir.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
        if env.windows(needle.len()).any(|w| w == needle) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            found.push((pid, cmd));
        }
    }
    found
}

/// A running `grasp-relay`. Killed on drop.
pub struct TestServer {
    child: Option<Child>,
    _tmp: tempfile::TempDir,
    data_dir: PathBuf,
    log_path: PathBuf,
    addr: SocketAddr,
    extra_args: Vec<String>,
}

impl TestServer {
    /// Starts a relay with default settings.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a relay with extra command line arguments (e.g. `["--max-subscriptions", "2"]`).
    pub fn start_with(extra_args: &[&str]) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().join("data");
        let log_path = tmp.path().join("relay.log");
        let mut server = Self {
            child: None,
            _tmp: tmp,
            data_dir,
            log_path,
            addr: "127.0.0.1:0".parse().unwrap(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        };
        server
            .spawn()
            .unwrap_or_else(|e| panic!("starting grasp-relay: {e:#}\n{}", server.logs()));
        server
    }

    fn command(&self, bind: SocketAddr) -> Command {
        let mut cmd = Command::new(binary_path("grasp-relay"));
        cmd.arg("--bind")
            .arg(bind.to_string())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--log")
            .arg("debug,nostr_lmdb=info")
            .args(&self.extra_args);
        // Tests never reach the internet: no default (public) index relay, unless the test
        // names its own loopback ones.
        if !self.extra_args.iter().any(|a| a == "--index-relay" || a == "--no-index-relays") {
            cmd.arg("--no-index-relays");
        }
        cmd
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let addr_file = self.data_dir.join(grasp_state::contract::layout::RELAY_ADDR_FILE);
        let _ = std::fs::remove_file(&addr_file);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        writeln!(&log, "==== starting grasp-relay (bind {}) ====", self.addr)?;
        let child = self
            .command(self.addr)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawning grasp-relay")?;
        self.child = Some(child);
        let child = self.child.as_mut().unwrap();
        let addr = wait_until("grasp-relay to listen", TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(anyhow::anyhow!(
                    "grasp-relay exited early with {status}"
                )));
            }
            let text = std::fs::read_to_string(&addr_file).ok()?;
            let addr: SocketAddr = text.trim().parse().ok()?;
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
            Some(Ok(addr))
        })??;
        self.addr = addr;
        Ok(())
    }

    /// The bound public address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://ADDR/`
    pub fn ws_url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    /// `http://ADDR`
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Everything the relay logged so far (all runs).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The OS process id, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server not running");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -TERM failed");
        wait_until("grasp-relay to exit after SIGTERM", TIMEOUT, || {
            child.try_wait().ok().flatten()
        })
        .unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("{e:#}\n{}", self.logs())
        })
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops (SIGTERM, if running) and starts again on the same data dir and port.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            let status = self.stop();
            assert!(
                status.success(),
                "relay exited with {status}\n{}",
                self.logs()
            );
        }
        self.spawn()
            .unwrap_or_else(|e| panic!("restarting grasp-relay: {e:#}\n{}", self.logs()));
    }

    /// [`restart`](Self::restart) with new extra command line arguments (same data dir).
    pub fn restart_with(&mut self, extra_args: &[&str]) {
        self.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    /// Runs another `grasp-relay` on the same data dir to completion (e.g. to see the lock
    /// refuse it), with a deadline.
    pub fn run_second_instance(&self) -> Output {
        let mut child = self
            .command("127.0.0.1:0".parse().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning second grasp-relay");
        let exited = wait_until("second grasp-relay to exit", TIMEOUT, || {
            child.try_wait().ok().flatten()
        });
        if exited.is_err() {
            let _ = child.kill();
        }
        child.wait_with_output().expect("collecting output")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- grasp-relay log ({}) ----\n{}",
                self.log_path.display(),
                self.logs()
            );
        }
    }
}
