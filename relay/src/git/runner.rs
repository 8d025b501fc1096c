//! The one way the relay runs git: a [`GitCommand`] builder and one error type, [`GitError`].
//!
//! Every git child gets the environment policy of [`grasp_state::contract::git_env`] (the same one
//! `grasp-cgi` applies to `git http-backend`): every inherited `GIT_*` variable removed, no
//! system or global configuration, no terminal prompt. What one call needs beyond that is said
//! explicitly on the command: `--git-dir`, `-c` options, and for fetches from other servers
//! [`GitCommand::network_safety`].
//!
//! [`GitCommand::run`] blocks (async callers use `tokio::task::spawn_blocking`);
//! [`GitCommand::run_async`] runs under tokio with a deadline and kills git when it expires or
//! when the future is dropped; [`GitCommand::run_async_watched`] also runs git in a process
//! group of its own and kills the whole group (git's helpers, `index-pack`, ...) when the
//! deadline passes, a watchdog says so, or the future is dropped.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use grasp_state::contract::git_env;
use tokio::io::AsyncReadExt;

/// Most bytes of git's stderr kept for an error message ([`GitCommand::run_async`]).
const MAX_ASYNC_STDERR: u64 = 64 * 1024;

/// Kills a process group (`SIGKILL`) when dropped: that of a git child spawned with
/// `process_group(0)` that may still run.
struct KillGroupOnDrop(Option<u32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: plain syscall; ESRCH (the group is already gone) is fine.
            unsafe {
                libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
            }
        }
    }
}

/// A failed git command, with what git said.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("could not run git: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("git {command} failed in {repo}: {stderr}")]
    Failed { command: String, repo: String, stderr: String },
    #[error("git {command} timed out after {} s", after.as_secs())]
    TimedOut { command: String, after: Duration },
    /// Ended by its caller's watchdog ([`GitCommand::run_async_watched`]), with why.
    #[error("git {command} stopped: {reason}")]
    Stopped { command: String, reason: String },
}

/// One git invocation, built up and then run once.
#[derive(Debug, Clone)]
pub struct GitCommand {
    /// `--git-dir`, if the command works on a repository.
    repo: Option<PathBuf>,
    /// `-c key=value` options, before the subcommand.
    config: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
}

impl GitCommand {
    /// `git --git-dir <repo> ...`.
    pub fn in_repo(repo: &Path) -> GitCommand {
        GitCommand { repo: Some(repo.to_path_buf()), ..GitCommand::without_repo() }
    }

    /// `git ...` without a repository (e.g. `git init`).
    pub fn without_repo() -> GitCommand {
        GitCommand { repo: None, config: Vec::new(), args: Vec::new(), env: Vec::new(), current_dir: None, stdin: None }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> GitCommand {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> GitCommand {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `-c key=value` for this call only.
    pub fn config(mut self, key: &str, value: impl std::fmt::Display) -> GitCommand {
        self.config.push(format!("{key}={value}").into());
        self
    }

    /// `key=value` for this call only, given in the environment (`GIT_CONFIG_COUNT`, git 2.31)
    /// rather than on the command line, where every local user can read it: for credentials.
    pub fn secret_config(mut self, key: &str, value: impl AsRef<OsStr>) -> GitCommand {
        let n = self.env.iter().filter(|(k, _)| k.to_string_lossy().starts_with("GIT_CONFIG_KEY_")).count();
        self.env.retain(|(k, _)| k != "GIT_CONFIG_COUNT");
        self.env.push((format!("GIT_CONFIG_KEY_{n}").into(), key.into()));
        self.env.push((format!("GIT_CONFIG_VALUE_{n}").into(), value.as_ref().to_owned()));
        self.env.push(("GIT_CONFIG_COUNT".into(), (n + 1).to_string().into()));
        self
    }

    /// What a fetch from another server (hostile input) needs: http(s) only, no redirects, no
    /// credential helper, objects checked, protocol v2.
    pub fn network_safety(mut self) -> GitCommand {
        self.env.push(("GIT_ALLOW_PROTOCOL".into(), "http:https".into()));
        self.config("protocol.version", 2)
            .config("http.followRedirects", false)
            .config("transfer.fsckObjects", true)
            .config("credential.helper", "")
    }

    /// An environment variable for this call, set after the policy (e.g. a test identity).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> GitCommand {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> GitCommand {
        self.current_dir = Some(dir.to_path_buf());
        self
    }

    /// Bytes written to git's stdin (otherwise stdin is empty).
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> GitCommand {
        self.stdin = Some(input.into());
        self
    }

    /// The subcommand, for messages (`fetch`, `cat-file`, ...).
    fn name(&self) -> String {
        self.args
            .iter()
            .find(|a| !a.as_encoded_bytes().starts_with(b"-"))
            .map_or_else(|| "git".to_string(), |a| a.to_string_lossy().into_owned())
    }

    fn location(&self) -> String {
        match (&self.repo, &self.current_dir) {
            (Some(repo), _) => repo.display().to_string(),
            (None, Some(dir)) => dir.display().to_string(),
            (None, None) => ".".to_string(),
        }
    }

    /// The process to spawn: policy first, then this call's environment and arguments.
    fn command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new("git");
        git_env::apply(&mut cmd);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(repo) = &self.repo {
            cmd.arg("--git-dir").arg(repo);
        }
        for c in &self.config {
            cmd.arg("-c").arg(c);
        }
        cmd.args(&self.args);
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn failed(&self, stderr: &[u8]) -> GitError {
        GitError::Failed {
            command: self.name(),
            repo: self.location(),
            stderr: String::from_utf8_lossy(stderr).trim().to_string(),
        }
    }

    /// Runs git to the end (blocking) and returns its stdout; a non-zero exit is
    /// [`GitError::Failed`] with its stderr.
    pub fn run(self) -> Result<Vec<u8>, GitError> {
        let mut child = self.command().spawn()?;
        if let Some(input) = &self.stdin {
            // Write from a thread so a child that fills its stdout pipe cannot deadlock us.
            let mut pipe = child.stdin.take().expect("stdin piped");
            let input = input.clone();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            });
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(self.failed(&out.stderr));
        }
        Ok(out.stdout)
    }

    /// Runs git under tokio and returns its stdout. git is killed when `timeout` expires
    /// ([`GitError::TimedOut`]) or when the future is dropped. At most 64 KiB of stderr is kept.
    pub async fn run_async(self, timeout: Duration) -> Result<Vec<u8>, GitError> {
        let mut child = tokio::process::Command::from(self.command()).kill_on_drop(true).spawn()?;
        // On timeout the child is dropped unreaped, which kills git.
        self.wait_async(&mut child, timeout).await
    }

    /// [`GitCommand::run_async`] in a process group of its own, watched: when `watchdog`
    /// resolves first (with the reason) the run ends with [`GitError::Stopped`]. On a stop, at
    /// the deadline or when the future is dropped, the whole group is killed (`SIGKILL`), so
    /// none of git's own children (remote helpers, `index-pack`) goes on writing.
    pub async fn run_async_watched(self, timeout: Duration, watchdog: impl std::future::Future<Output = String>) -> Result<Vec<u8>, GitError> {
        let mut command = tokio::process::Command::from(self.command());
        command.process_group(0).kill_on_drop(true);
        let mut child = command.spawn()?;
        // Declared after the child, so dropped before it: the group is killed while its leader
        // is not yet reaped (its id cannot have been reused).
        let mut group = KillGroupOnDrop(child.id());
        let result = tokio::select! {
            result = self.wait_async(&mut child, timeout) => result,
            reason = watchdog => Err(GitError::Stopped { command: self.name(), reason }),
        };
        if matches!(result, Ok(_) | Err(GitError::Failed { .. })) {
            // git exited by itself and was reaped (so its group id may be reused): nothing to
            // kill.
            group.0 = None;
        }
        result
    }

    /// Feeds stdin, collects stdout and (bounded) stderr and waits for `child`, at most
    /// `timeout`; the child is left to its owner (unreaped after a timeout).
    async fn wait_async(&self, child: &mut tokio::process::Child, timeout: Duration) -> Result<Vec<u8>, GitError> {
        if let Some(input) = self.stdin.clone() {
            let mut pipe = child.stdin.take().expect("stdin piped");
            tokio::spawn(async move {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut pipe, &input).await;
            });
        }
        let (mut stdout, mut stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let run = async {
            let read_out = async {
                let mut out = Vec::new();
                let _ = stdout.read_to_end(&mut out).await;
                out
            };
            let read_err = async {
                let mut captured = Vec::new();
                let _ = (&mut stderr).take(MAX_ASYNC_STDERR).read_to_end(&mut captured).await;
                let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
                captured
            };
            let (out, err) = tokio::join!(read_out, read_err);
            (child.wait().await, out, err)
        };
        match tokio::time::timeout(timeout, run).await {
            Err(_) => Err(GitError::TimedOut { command: self.name(), after: timeout }),
            Ok((Err(e), _, _)) => Err(GitError::Spawn(e)),
            Ok((Ok(status), out, _)) if status.success() => Ok(out),
            Ok((Ok(_), _, err)) => Err(self.failed(&err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherited_git_variables_never_reach_git() {
        // The policy applies to every spawn, whatever the parent's environment says.
        let cmd = GitCommand::without_repo().env("GIT_EXTRA", "x").command();
        let envs: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned))).collect();
        for (k, v) in git_env::GIT_ENV {
            assert!(envs.contains(&(OsString::from(k), Some(OsString::from(v)))), "{k}");
        }
        assert!(envs.contains(&(OsString::from("GIT_EXTRA"), Some(OsString::from("x")))));
        for (name, _) in std::env::vars_os().filter(|(k, _)| git_env::is_cleared(k)) {
            let set_by_policy = git_env::GIT_ENV.iter().any(|(k, _)| OsStr::new(k) == name);
            assert!(set_by_policy || envs.contains(&(name.clone(), None)), "{name:?} is not cleared");
        }
    }

    #[test]
    fn config_and_safety_options_come_before_the_subcommand() {
        let cmd = GitCommand::in_repo(Path::new("/r.git")).network_safety().config("http.lowSpeedLimit", 1000).args(["fetch", "--quiet"]).command();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "--git-dir", "/r.git", "-c", "protocol.version=2", "-c", "http.followRedirects=false", "-c",
                "transfer.fsckObjects=true", "-c", "credential.helper=", "-c", "http.lowSpeedLimit=1000", "fetch",
                "--quiet",
            ]
        );
        assert!(cmd.get_envs().any(|(k, v)| k == "GIT_ALLOW_PROTOCOL" && v == Some(OsStr::new("http:https"))));
    }

    #[test]
    fn secret_configuration_reaches_git_off_its_command_line() {
        let cmd = GitCommand::without_repo().secret_config("http.extraHeader", "Authorization: Nostr x").secret_config("a.b", "c");
        assert!(!cmd.command().get_args().any(|a| a.to_string_lossy().contains("Nostr")), "not on the command line");
        let out = cmd.args(["config", "--get-all", "http.extraHeader"]).run().unwrap();
        assert_eq!(String::from_utf8_lossy(&out).trim(), "Authorization: Nostr x");
        let out = GitCommand::without_repo().secret_config("x.y", "1").secret_config("a.b", "c").args(["config", "a.b"]).run().unwrap();
        assert_eq!(String::from_utf8_lossy(&out).trim(), "c", "both entries counted");
    }

    #[test]
    fn failures_carry_the_subcommand_and_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let err = GitCommand::in_repo(&tmp.path().join("none.git")).args(["for-each-ref"]).run().unwrap_err();
        match err {
            GitError::Failed { command, repo, stderr } => {
                assert_eq!(command, "for-each-ref");
                assert!(repo.ends_with("none.git"));
                assert!(!stderr.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let out = GitCommand::without_repo().arg("hash-object").arg("--stdin").stdin(&b"x"[..]).run().unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim(), "c1b0730e0133447badcfd47fd144e254807b06e1");
    }

    #[tokio::test]
    async fn async_runs_time_out_and_kill_git() {
        let out = GitCommand::without_repo().arg("hash-object").arg("--stdin").stdin(&b"x"[..]).run_async(Duration::from_secs(30)).await.unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim(), "c1b0730e0133447badcfd47fd144e254807b06e1");
        let slow = GitCommand::without_repo().config("alias.slow", "!sleep 5").arg("slow");
        let started = std::time::Instant::now();
        let err = slow.run_async(Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err, GitError::TimedOut { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_watchdog_stops_git_and_kills_its_whole_group() {
        let tmp = tempfile::tempdir().unwrap();
        let pid_file = tmp.path().join("grandchild");
        // git runs a shell that starts a long sleep (a grandchild, like fetch's index-pack).
        let script = format!("!sleep 600 & echo $! > '{}'; wait", pid_file.display());
        let slow = GitCommand::without_repo().config("alias.slow", script).arg("slow");
        let watched = pid_file.clone();
        let watchdog = async move {
            while !watched.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            "enough".to_string()
        };
        let started = std::time::Instant::now();
        let err = slow.run_async_watched(Duration::from_secs(60), watchdog).await.unwrap_err();
        assert!(matches!(&err, GitError::Stopped { reason, .. } if reason == "enough"), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(30));
        let grandchild: libc::pid_t = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // SAFETY: signal 0 only checks that the process exists.
        let alive = || unsafe { libc::kill(grandchild, 0) == 0 } && !std::fs::read_to_string(format!("/proc/{grandchild}/stat")).is_ok_and(|s| s.contains(") Z "));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive() {
            assert!(std::time::Instant::now() < deadline, "git's grandchild {grandchild} survived the stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A run that ends by itself is untouched by its watchdog.
        let out = GitCommand::without_repo().arg("hash-object").arg("--stdin").stdin(&b"x"[..]).run_async_watched(Duration::from_secs(30), std::future::pending()).await.unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim(), "c1b0730e0133447badcfd47fd144e254807b06e1");
    }
}
