//! The relay's own git operations on bare repositories, as `git` subprocesses.
//!
//! Every git process is started by the one runner, [`runner::GitCommand`] (one environment
//! policy, one error type). Everything here is blocking; async callers go through
//! `tokio::task::spawn_blocking`. The relay
//! serialises its own mutations of one repository with [`crate::grasp::RepoLocks`]; ref updates
//! are compare-and-swap transactions (`git update-ref --stdin` with old values), so a push racing
//! with an alignment makes one of them fail instead of mixing their results.

pub mod build;
pub mod cgi_child;
pub mod http;
pub mod objects;
pub mod pools;
pub mod ref_cache;
pub mod ref_files;
pub mod ref_fingerprint;
pub mod ref_generation;
pub mod repos;
pub mod runner;
pub mod supervised_push;

use std::path::Path;

use grasp_state::names::refs::{is_valid_oid, RefMap};

pub use runner::{GitCommand, GitError};

/// The `git-http-backend` program of the `git` the relay runs (`git --exec-path`), if it is
/// there: grasp-cgi runs it directly (`GRASP_GIT_HTTP_BACKEND`), as fcgiwrap would, instead of
/// through `git http-backend`, which costs every git request one more process start.
pub fn http_backend_program() -> Option<std::path::PathBuf> {
    let out = GitCommand::without_repo().arg("--exec-path").run().ok()?;
    let dir = String::from_utf8(out).ok()?;
    let program = Path::new(dir.trim()).join("git-http-backend");
    program.is_file().then_some(program)
}

/// All refs of the repository (`refs/...` -> oid), HEAD excluded: from its files where that is
/// safe ([`ref_files`]), otherwise from `git for-each-ref`.
pub fn read_refs(repo: &Path) -> Result<RefMap, GitError> {
    if let Some((refs, _)) = ref_files::read(repo) {
        return Ok(refs);
    }
    for_each_ref(repo)
}

/// All refs of the repository, from `git for-each-ref`.
fn for_each_ref(repo: &Path) -> Result<RefMap, GitError> {
    let out = GitCommand::in_repo(repo).args(["for-each-ref", "--format=%(objectname) %(refname)"]).run()?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(oid, name)| (name.to_string(), oid.to_string()))
        .collect())
}

/// All refs (as [`read_refs`]) and what HEAD points at (as [`head`]): a push's post-receive
/// reads both, and every process spawn costs milliseconds. From the repository's files where
/// that is safe ([`ref_files`]), otherwise from one `git for-each-ref --include-root-refs`. An
/// unborn HEAD (pointing at a branch that does not exist) is not listed by that command and is
/// read with `symbolic-ref`; a git older than 2.46 (no `--include-root-refs`) gets the two
/// separate commands.
pub fn read_refs_and_head(repo: &Path) -> Result<(RefMap, Option<String>), GitError> {
    if let Some(read) = ref_files::read(repo) {
        return Ok(read);
    }
    let out = match GitCommand::in_repo(repo)
        .args(["for-each-ref", "--include-root-refs", "--format=%(objectname) %(refname) %(symref)"])
        .run()
    {
        Ok(out) => out,
        Err(GitError::Failed { .. }) => return Ok((for_each_ref(repo)?, head(repo)?)),
        Err(e) => return Err(e),
    };
    let mut refs = RefMap::new();
    let mut head_line = None;
    for line in String::from_utf8_lossy(&out).lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(oid), Some(name)) = (parts.next(), parts.next()) else { continue };
        let symref = parts.next().unwrap_or("").trim();
        if name == "HEAD" {
            // Detached: no symref, as `symbolic-ref -q` answers.
            head_line = Some((!symref.is_empty()).then(|| symref.to_string()));
        } else if name.starts_with("refs/") {
            refs.insert(name.to_string(), oid.to_string());
        }
    }
    let head = match head_line {
        Some(head) => head,
        None => match unborn_head(repo) {
            Some(target) => Some(target),
            None => head(repo)?,
        },
    };
    Ok((refs, head))
}

/// The branch an unborn HEAD points at, read from the `HEAD` file of a repository whose refs
/// are files (no `reftable/`): the first push to a repository meets it, and `symbolic-ref`
/// would cost a process. `None` when it cannot be read that way.
fn unborn_head(repo: &Path) -> Option<String> {
    if repo.join("reftable").exists() {
        return None;
    }
    let text = std::fs::read_to_string(repo.join("HEAD")).ok()?;
    let target = text.strip_prefix("ref: ")?.trim();
    grasp_state::names::refs::is_valid_ref_name(target).then(|| target.to_string())
}

/// Which of `oids` the repository does not have, in input order (one `git cat-file
/// --batch-check` for all). Anything that is not a full hex object id counts as missing and is
/// never passed to git.
pub fn missing_objects(repo: &Path, oids: &[String]) -> Result<Vec<String>, GitError> {
    let valid: Vec<&String> = oids.iter().filter(|o| is_valid_oid(o)).collect();
    let mut present = std::collections::HashSet::new();
    if !valid.is_empty() {
        let input: String = valid.iter().map(|o| format!("{o}\n")).collect();
        let out = GitCommand::in_repo(repo).args(["cat-file", "--batch-check=%(objectname)"]).stdin(input).run()?;
        let text = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() != valid.len() {
            return Err(GitError::Failed {
                command: "cat-file --batch-check".into(),
                repo: repo.display().to_string(),
                stderr: format!("{} answers for {} object ids", lines.len(), valid.len()),
            });
        }
        present.extend(valid.iter().zip(&lines).filter(|(_, l)| !l.ends_with(" missing")).map(|(o, _)| o.as_str()));
    }
    Ok(oids.iter().filter(|o| !present.contains(o.as_str())).cloned().collect())
}

/// Bytes on disk of the objects `tip` reaches that neither a branch or tag of `repo` nor any of
/// `also_not` (commits) reaches: what a pull request's data adds beside the maintainers' history
/// and the pull requests counted before it (0 once merged).
pub fn exclusive_disk_usage(repo: &Path, tip: &str, also_not: &[String]) -> Result<u64, GitError> {
    if !is_valid_oid(tip) {
        return Ok(0);
    }
    let mut input = format!("{tip}\n");
    for oid in also_not.iter().filter(|o| is_valid_oid(o)) {
        input.push('^');
        input.push_str(oid);
        input.push('\n');
    }
    let out = GitCommand::in_repo(repo)
        .args(["rev-list", "--objects", "--disk-usage", "--stdin", "--not", "--branches", "--tags"])
        .stdin(input)
        .run()?;
    Ok(String::from_utf8_lossy(&out).trim().parse().unwrap_or(0))
}

pub use grasp_state::names::refs::RefChange;

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
    let result = GitCommand::in_repo(repo).args(["update-ref", "--stdin"]).stdin(input).run().map(|_| ());
    // Even a failed transaction may have taken locks: the ref cache checks again either way.
    ref_generation::bump(repo);
    result
}

/// Points HEAD at `branch` (e.g. `refs/heads/main`). In a repository whose refs are files (no
/// `reftable/`) and that keeps no reflog of HEAD, this is what `git symbolic-ref` does, done
/// here without a process (a first push's alignment sets HEAD): `HEAD.lock` created
/// exclusively, written, renamed over `HEAD`. Otherwise, or if the lock is taken, git does it.
pub fn set_head(repo: &Path, branch: &str) -> Result<(), GitError> {
    let result = match write_head_file(repo, branch) {
        Some(()) => Ok(()),
        None => GitCommand::in_repo(repo).args(["symbolic-ref", "HEAD", branch]).run().map(|_| ()),
    };
    ref_generation::bump(repo);
    result
}

/// `set_head` by git's lock-file protocol; `None` when it must be left to git.
fn write_head_file(repo: &Path, branch: &str) -> Option<()> {
    use std::io::Write;
    if !branch.starts_with("refs/") || !grasp_state::names::refs::is_valid_ref_name(branch) {
        return None;
    }
    if repo.join("reftable").exists() || repo.join("logs").join("HEAD").exists() || !repo.join("HEAD").is_file() {
        return None;
    }
    let lock = repo.join("HEAD.lock");
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&lock).ok()?;
    let written = file.write_all(format!("ref: {branch}\n").as_bytes()).and_then(|()| file.flush());
    drop(file);
    match written.and_then(|()| std::fs::rename(&lock, repo.join("HEAD"))) {
        Ok(()) => Some(()),
        Err(_) => {
            let _ = std::fs::remove_file(&lock);
            None
        }
    }
}

/// What HEAD points at, if it is symbolic.
pub fn head(repo: &Path) -> Result<Option<String>, GitError> {
    match GitCommand::in_repo(repo).args(["symbolic-ref", "-q", "HEAD"]).run() {
        Ok(out) => Ok(Some(String::from_utf8_lossy(&out).trim().to_string()).filter(|s| !s.is_empty())),
        Err(GitError::Failed { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Copies the objects reachable from `oids` from the local repository `from` into `repo`,
/// without touching any ref of `repo` (a GRASP-06 pull request copied from a contributor
/// repository into the repositories it names; the copies within a family go through its object
/// pool instead).
pub fn fetch_objects_local(repo: &Path, from: &Path, oids: &[String]) -> Result<(), GitError> {
    if oids.is_empty() {
        return Ok(());
    }
    // Object ids only: anything else could be read by `git fetch` as an option or a refspec.
    if let Some(bad) = oids.iter().find(|o| !is_valid_oid(o)) {
        return Err(GitError::Failed {
            command: "fetch".into(),
            repo: repo.display().to_string(),
            stderr: format!("refusing to fetch {bad:?}: not an object id"),
        });
    }
    GitCommand::in_repo(repo)
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--upload-pack",
            "git -c uploadpack.allowAnySHA1InWant=true upload-pack",
        ])
        .arg(from)
        .args(oids)
        .run()
        .map(|_| ())
}

/// Runs `git` in `dir` for unit tests (fixed identity, the runner's policy); returns its output.
#[cfg(test)]
pub(crate) fn test_git(dir: &Path, args: &[&str]) -> String {
    let out = GitCommand::without_repo()
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .run()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    String::from_utf8(out).unwrap().trim().to_string()
}

/// A bare repository `r.git` and a work tree `w` beside it in a new temp dir, for unit tests:
/// (tmp, repo, work).
#[cfg(test)]
pub(crate) fn test_repo_and_work() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, work) = (tmp.path().join("r.git"), tmp.path().join("w"));
    test_git(tmp.path(), &["init", "-q", "--bare", repo.to_str().unwrap()]);
    test_git(tmp.path(), &["init", "-q", work.to_str().unwrap()]);
    (tmp, repo, work)
}

/// Commits a file named `name` (holding its name) in the work tree `work` for unit tests;
/// returns the new commit's id.
#[cfg(test)]
pub(crate) fn test_commit(work: &Path, name: &str) -> String {
    std::fs::write(work.join(name), name).unwrap();
    test_git(work, &["add", name]);
    test_git(work, &["commit", "-q", "-m", name]);
    test_git(work, &["rev-parse", "HEAD"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::names::refs::ZERO_OID;

    /// A bare repository with `main` and tag `v1` at one commit; returns (tmp, repo, commit).
    fn fixture() -> (tempfile::TempDir, std::path::PathBuf, String) {
        let (tmp, repo, work) = test_repo_and_work();
        test_git(&work, &["commit", "-q", "--allow-empty", "-m", "one"]);
        test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main", "HEAD:refs/tags/v1"]);
        let tip = test_git(&work, &["rev-parse", "HEAD"]);
        (tmp, repo, tip)
    }

    #[test]
    fn reads_refs_and_finds_missing_objects() {
        let (_tmp, repo, tip) = fixture();
        let refs = read_refs(&repo).unwrap();
        assert_eq!(refs.keys().collect::<Vec<_>>(), ["refs/heads/main", "refs/tags/v1"]);
        assert_eq!(refs["refs/heads/main"], tip);
        let absent = "1".repeat(40);
        let asked = vec![absent.clone(), tip.clone(), "nonsense\nHEAD".to_string(), "--help".to_string()];
        assert_eq!(missing_objects(&repo, &asked).unwrap(), vec![absent, "nonsense\nHEAD".to_string(), "--help".to_string()]);
        assert!(missing_objects(&repo, &[]).unwrap().is_empty());
        assert!(missing_objects(&repo, std::slice::from_ref(&tip)).unwrap().is_empty());
    }

    #[test]
    fn refs_and_head_in_one_pass_equal_the_two_separate_reads() {
        let (_tmp, repo, tip) = fixture();
        test_git(&repo, &["update-ref", "refs/heads/dev", &tip]);
        for target in ["refs/heads/main", "refs/heads/dev", "refs/heads/unborn"] {
            set_head(&repo, target).unwrap();
            let (refs, head_now) = read_refs_and_head(&repo).unwrap();
            assert_eq!(refs, read_refs(&repo).unwrap());
            assert_eq!(head_now.as_deref(), Some(target), "HEAD -> {target}");
        }
        // Detached HEAD: not symbolic.
        test_git(&repo, &["update-ref", "--no-deref", "HEAD", &tip]);
        assert_eq!(read_refs_and_head(&repo).unwrap(), (read_refs(&repo).unwrap(), None));
    }

    #[test]
    fn an_unborn_head_is_read_from_its_file_without_git() {
        let (_tmp, repo, _) = fixture();
        set_head(&repo, "refs/heads/unborn").unwrap();
        assert_eq!(unborn_head(&repo).as_deref(), Some("refs/heads/unborn"));
        // Not a plain symbolic HEAD, or refs not in files: git is asked instead.
        std::fs::write(repo.join("HEAD"), "ref: refs/heads/..bad\n").unwrap();
        assert_eq!(unborn_head(&repo), None);
        std::fs::write(repo.join("HEAD"), "ref: refs/heads/unborn\n").unwrap();
        std::fs::create_dir(repo.join("reftable")).unwrap();
        assert_eq!(unborn_head(&repo), None);
    }

    #[test]
    fn head_is_set_like_symbolic_ref_does() {
        let (_tmp, repo, _) = fixture();
        set_head(&repo, "refs/heads/main").unwrap();
        assert_eq!(std::fs::read_to_string(repo.join("HEAD")).unwrap(), "ref: refs/heads/main\n");
        assert_eq!(head(&repo).unwrap().as_deref(), Some("refs/heads/main"));
        assert!(!repo.join("HEAD.lock").exists());
        // A lock held by someone else: left to git, which refuses like it would.
        std::fs::write(repo.join("HEAD.lock"), "").unwrap();
        assert!(set_head(&repo, "refs/heads/dev").is_err());
        assert_eq!(head(&repo).unwrap().as_deref(), Some("refs/heads/main"));
        std::fs::remove_file(repo.join("HEAD.lock")).unwrap();
        // Not a branch name: git says no, nothing is written.
        assert!(set_head(&repo, "nonsense").is_err());
        assert_eq!(head(&repo).unwrap().as_deref(), Some("refs/heads/main"));
    }

    #[test]
    fn ref_updates_are_compare_and_swap() {
        let (_tmp, repo, tip) = fixture();
        let stale = RefChange::Delete { name: "refs/heads/main".into(), old: "2".repeat(40) };
        let good = RefChange::Set { name: "refs/heads/dev".into(), old: ZERO_OID.into(), new: tip.clone() };
        // All or nothing: the stale delete fails the whole transaction.
        assert!(update_refs(&repo, &[good.clone(), stale]).is_err());
        assert!(!read_refs(&repo).unwrap().contains_key("refs/heads/dev"));
        update_refs(&repo, std::slice::from_ref(&good)).unwrap();
        assert_eq!(read_refs(&repo).unwrap()["refs/heads/dev"], tip);
        // Creating a ref that exists now fails.
        assert!(update_refs(&repo, &[good]).is_err());
        set_head(&repo, "refs/heads/dev").unwrap();
        assert_eq!(head(&repo).unwrap().as_deref(), Some("refs/heads/dev"));
    }
}
