//! The relay's own git operations on bare repositories, as `git` subprocesses.
//!
//! Everything here is blocking; async callers go through `tokio::task::spawn_blocking`. The relay
//! serialises its own mutations of one repository with [`crate::grasp::RepoLocks`]; ref updates
//! are compare-and-swap transactions (`git update-ref --stdin` with old values), so a push racing
//! with an alignment makes one of them fail instead of mixing their results.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use grasp_state::refs::{RefMap, ZERO_OID};

/// A failed git command, with what git said.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("could not run git: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("git {command} failed in {repo}: {stderr}")]
    Failed { command: String, repo: String, stderr: String },
}

fn git(repo: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(repo);
    // The relay never wants a user's or the system's git config to change what it does.
    cmd.env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null");
    cmd.env_remove("GIT_DIR").env_remove("GIT_QUARANTINE_PATH").env_remove("GIT_OBJECT_DIRECTORY");
    cmd.env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES");
    cmd
}

fn run(repo: &Path, mut cmd: Command, name: &str, stdin: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let Some(input) = stdin {
        // Write from a thread so a child that fills its stdout pipe cannot deadlock us.
        let mut pipe = child.stdin.take().expect("stdin piped");
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(GitError::Failed {
            command: name.to_string(),
            repo: repo.display().to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// All refs of the repository (`refs/...` -> oid), HEAD excluded.
pub fn read_refs(repo: &Path) -> Result<RefMap, GitError> {
    let mut cmd = git(repo);
    cmd.args(["for-each-ref", "--format=%(objectname) %(refname)"]);
    let out = run(repo, cmd, "for-each-ref", None)?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(oid, name)| (name.to_string(), oid.to_string()))
        .collect())
}

/// Which of `oids` the repository does not have (one `cat-file --batch-check` for all).
pub fn missing_objects(repo: &Path, oids: &[String]) -> Result<Vec<String>, GitError> {
    if oids.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = String::new();
    for oid in oids {
        input.push_str(oid);
        input.push('\n');
    }
    let mut cmd = git(repo);
    cmd.args(["cat-file", "--batch-check=%(objectname)"]);
    let out = run(repo, cmd, "cat-file", Some(input.as_bytes()))?;
    let text = String::from_utf8_lossy(&out);
    Ok(oids
        .iter()
        .zip(text.lines())
        .filter(|(_, line)| line.ends_with(" missing"))
        .map(|(oid, _)| oid.clone())
        .collect())
}

/// One compare-and-swap ref change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefChange {
    /// Set `name` to `new`, provided it currently is `old` (`ZERO_OID`: must not exist).
    Set { name: String, old: String, new: String },
    /// Delete `name`, provided it currently is `old`.
    Delete { name: String, old: String },
}

/// Applies `changes` atomically (all or nothing).
pub fn update_refs(repo: &Path, changes: &[RefChange]) -> Result<(), GitError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut input = String::from("start\n");
    for c in changes {
        match c {
            RefChange::Set { name, old, new } => input.push_str(&format!("update {name} {new} {old}\n")),
            RefChange::Delete { name, old } => input.push_str(&format!("delete {name} {old}\n")),
        }
    }
    input.push_str("prepare\ncommit\n");
    let mut cmd = git(repo);
    cmd.args(["update-ref", "--stdin"]);
    run(repo, cmd, "update-ref", Some(input.as_bytes())).map(|_| ())
}

/// The changes that make `current`'s branches and tags equal `target` exactly
/// (refs outside refs/heads and refs/tags are left alone).
pub fn alignment(current: &RefMap, target: &RefMap) -> Vec<RefChange> {
    let served = |n: &str| n.starts_with("refs/heads/") || n.starts_with("refs/tags/");
    let mut changes = Vec::new();
    for (name, old) in current.iter().filter(|(n, _)| served(n)) {
        if !target.contains_key(name) {
            changes.push(RefChange::Delete { name: name.clone(), old: old.clone() });
        }
    }
    for (name, new) in target {
        let old = current.get(name).cloned().unwrap_or_else(|| ZERO_OID.to_string());
        if &old != new {
            changes.push(RefChange::Set { name: name.clone(), old, new: new.clone() });
        }
    }
    changes
}

/// Points HEAD at `branch` (e.g. `refs/heads/main`).
pub fn set_head(repo: &Path, branch: &str) -> Result<(), GitError> {
    let mut cmd = git(repo);
    cmd.args(["symbolic-ref", "HEAD", branch]);
    run(repo, cmd, "symbolic-ref", None).map(|_| ())
}

/// What HEAD points at, if it is symbolic.
pub fn head(repo: &Path) -> Result<Option<String>, GitError> {
    let mut cmd = git(repo);
    cmd.args(["symbolic-ref", "-q", "HEAD"]);
    match run(repo, cmd, "symbolic-ref", None) {
        Ok(out) => Ok(Some(String::from_utf8_lossy(&out).trim().to_string()).filter(|s| !s.is_empty())),
        Err(GitError::Failed { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Copies the objects reachable from `oids` from the local repository `from` into `repo`,
/// without touching any ref of `repo`.
pub fn fetch_objects_local(repo: &Path, from: &Path, oids: &[String]) -> Result<(), GitError> {
    if oids.is_empty() {
        return Ok(());
    }
    let mut cmd = git(repo);
    cmd.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--upload-pack",
        "git -c uploadpack.allowAnySHA1InWant=true upload-pack",
    ]);
    cmd.arg(from);
    cmd.args(oids);
    run(repo, cmd, "fetch", None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> RefMap {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn alignment_deletes_undeclared_and_sets_declared() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let current = map(&[("refs/heads/main", &a), ("refs/heads/old", &a), ("refs/nostr/x", &a)]);
        let target = map(&[("refs/heads/main", &b), ("refs/tags/v1", &a)]);
        let changes = alignment(&current, &target);
        assert_eq!(
            changes,
            vec![
                RefChange::Delete { name: "refs/heads/old".into(), old: a.clone() },
                RefChange::Set { name: "refs/heads/main".into(), old: a.clone(), new: b.clone() },
                RefChange::Set { name: "refs/tags/v1".into(), old: ZERO_OID.into(), new: a.clone() },
            ]
        );
        assert!(alignment(&target, &target).is_empty());
    }
}
