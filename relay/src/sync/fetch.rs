//! Fetching specific objects by id from a remote clone URL.
//!
//! `git fetch <url> <oid>...` with protocol v2 asks the remote for exactly those objects (and what
//! they need) and writes no refs at all (`--no-write-fetch-head`, no refspec destination). The
//! objects land in the repository's object store; making them visible under refs is left to the
//! normal release/alignment path.
//!
//! If the remote lacks one of the oids, git fails the whole fetch. The error names the culprit
//! ("not our ref <oid>"), so it is dropped and the rest retried; if the culprit is not named, the
//! oids are fetched one at a time. Transport errors (refused, timeout, 404) stop at once.
//!
//! git runs through the relay's one runner ([`crate::git::runner`]): without user or system
//! configuration or inherited `GIT_*` variables, without prompts; with
//! [`GitCommand::network_safety`] (no redirects, only http(s), object checking), and its whole
//! process group is killed when its timeout expires.
//!
//! What one fetch may bring is capped ([`FetchOptions::max_bytes`], `--sync-max-fetch-bytes`):
//! git has no such limit for fetches (`receive.maxInputSize` is for pushes only), so every
//! object arrives as one pack that `index-pack` writes as it reads (`fetch.unpackLimit=1`), and a
//! watchdog measures the repository's received files every [`WATCH_INTERVAL`] and kills the
//! fetch's process group once they pass the cap; a fetch that finished between two looks is
//! measured once more. Either way the outcome keeps nothing (the caller drops the quarantine).

use std::path::Path;
use std::time::Duration;

use crate::git::{GitCommand, GitError};
use crate::trust::credentials::GitCredential;

/// How to run one fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// Bound on each git invocation; git is killed when it expires.
    pub timeout: Duration,
    /// Abort when slower than `low_speed_limit` bytes/s for `low_speed_time` (git's
    /// `http.lowSpeedLimit` / `http.lowSpeedTime`).
    pub low_speed_limit: u32,
    pub low_speed_time: Duration,
    /// `http.curloptResolve` value pinning the host to already-checked addresses.
    pub curl_resolve: Option<String>,
    /// Most bytes the repository fetched into may receive (a quarantine: all of one
    /// [`fetch_oids`] call); beyond, the fetch is killed and nothing it brought is kept.
    pub max_bytes: u64,
    /// A private service's proof for this URL (GRASP-08 `Authorization: Nostr`), signed anew
    /// for every git run and given to git in its environment, never on its command line.
    pub credential: Option<GitCredential>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            timeout: Duration::from_secs(300),
            low_speed_limit: 1000,
            low_speed_time: Duration::from_secs(30),
            curl_resolve: None,
            max_bytes: grasp_state::contract::push_limits::DEFAULT_MAX_PUSH_BYTES,
            credential: None,
        }
    }
}

/// What one `fetch_oids` call achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchOutcome {
    /// Requested oids now present in the repository.
    pub fetched: Vec<String>,
    /// Requested oids the remote said it does not have (or that are not valid object ids).
    pub missing_on_remote: Vec<String>,
    /// The last error, if any oid is neither fetched nor known missing, or git misbehaved.
    pub error: Option<String>,
}

pub use grasp_state::names::refs::is_valid_oid;

/// How often the watchdog measures what a fetch received.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(50);

/// The error of a fetch that brought more than `max` bytes.
fn over_cap(max: u64, received: u64) -> String {
    format!("the peer sent more than {max} bytes ({received} received; --sync-max-fetch-bytes); fetch cut off, nothing it sent is kept")
}

/// Bytes received so far in `repo`, off the async runtime.
async fn received(repo: &Path) -> u64 {
    let repo = repo.to_path_buf();
    tokio::task::spawn_blocking(move || super::quarantine::received_bytes(&repo)).await.unwrap_or(0)
}

/// Resolves (with the error) once `repo` received more than `max` bytes.
async fn watch_received(repo: &Path, max: u64) -> String {
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        let now = received(repo).await;
        if now > max {
            return over_cap(max, now);
        }
    }
}

/// What a failed fetch's stderr says about the requested oids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// The remote lacks this oid.
    Lacks(String),
    /// The remote lacks some oid but did not say which.
    LacksUnnamed,
    /// Anything else: connection, HTTP status, timeout, corrupt data.
    Transport,
}

fn classify(stderr: &str, oids: &[String]) -> Failure {
    const LACKING: [&str; 4] = [
        "not our ref",
        "couldn't find remote ref",
        "no such remote ref",
        "unadvertised object",
    ];
    let lower = stderr.to_ascii_lowercase();
    if !LACKING.iter().any(|pattern| lower.contains(pattern)) {
        return Failure::Transport;
    }
    for line in lower
        .lines()
        .filter(|line| LACKING.iter().any(|p| line.contains(p)))
    {
        if let Some(oid) = oids.iter().find(|oid| line.contains(oid.as_str())) {
            return Failure::Lacks(oid.clone());
        }
    }
    Failure::LacksUnnamed
}

/// Printable, bounded version of git's stderr (it may carry text from a hostile remote).
fn clean_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let mut cleaned: String = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(500)
        .collect();
    if cleaned.is_empty() {
        cleaned = "git fetch failed without a message".to_string();
    }
    cleaned
}

/// Run one `git fetch` for `oids`; Ok on success, Err(cleaned stderr) on failure or timeout.
async fn run_fetch(
    repo: &Path,
    url: &str,
    oids: &[String],
    options: &FetchOptions,
) -> Result<(), String> {
    let mut command = GitCommand::in_repo(repo)
        .network_safety()
        // Every object in one pack written as it arrives, so the watchdog sees its size grow.
        .config("fetch.unpackLimit", 1)
        .config("transfer.unpackLimit", 1)
        .config("http.lowSpeedLimit", options.low_speed_limit)
        .config("http.lowSpeedTime", options.low_speed_time.as_secs().max(1));
    if let Some(resolve) = &options.curl_resolve {
        command = command.config("http.curloptResolve", resolve);
    }
    if let Some(credential) = &options.credential {
        command = command.secret_config("http.extraHeader", format!("Authorization: {}", credential.header()?));
    }
    let command = command
        .args([
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-gc",
            "--quiet",
        ])
        .arg(url)
        .args(oids);
    match command
        .run_async_watched(options.timeout, watch_received(repo, options.max_bytes))
        .await
    {
        Ok(_) => Ok(()),
        Err(GitError::TimedOut { after, .. }) => {
            Err(format!("git fetch timed out after {} s", after.as_secs()))
        }
        Err(GitError::Stopped { reason, .. }) => Err(reason),
        Err(GitError::Spawn(error)) => Err(format!("git fetch failed to run: {error}")),
        Err(GitError::Failed { stderr, .. }) => Err(clean_error(stderr.as_bytes())),
    }
}

/// Which of `oids` are absent from `repo` (one `git cat-file --batch-check`).
pub async fn missing_objects(repo: &Path, oids: &[String]) -> Result<Vec<String>, String> {
    let (repo, oids) = (repo.to_path_buf(), oids.to_vec());
    tokio::task::spawn_blocking(move || crate::git::missing_objects(&repo, &oids))
        .await
        .map_err(|error| format!("git cat-file task failed: {error}"))?
        .map_err(|error| error.to_string())
}

/// Fetch `oids` from `url` into `repo` without touching any ref. Never fails as a whole: the
/// outcome says what arrived, what the remote lacks, and the last error. `repo` is a fresh
/// repository (the sync's [`super::Quarantine`]): everything in its object store counts against
/// [`FetchOptions::max_bytes`], and past it the outcome has nothing fetched.
pub async fn fetch_oids(
    repo: &Path,
    url: &str,
    oids: &[String],
    options: &FetchOptions,
) -> FetchOutcome {
    let mut outcome = FetchOutcome::default();
    let mut wanted: Vec<String> = Vec::new();
    for oid in oids {
        if !is_valid_oid(oid) {
            outcome.missing_on_remote.push(oid.clone());
        } else if !wanted.contains(oid) {
            wanted.push(oid.clone());
        }
    }
    let mut remaining = wanted.clone();
    let mut one_by_one = false;
    while !remaining.is_empty() && !one_by_one {
        match run_fetch(repo, url, &remaining, options).await {
            Ok(()) => {
                remaining.clear();
            }
            Err(stderr) => match classify(&stderr, &remaining) {
                Failure::Lacks(oid) => {
                    remaining.retain(|other| *other != oid);
                    outcome.missing_on_remote.push(oid);
                }
                Failure::LacksUnnamed if remaining.len() > 1 => one_by_one = true,
                Failure::LacksUnnamed => {
                    outcome.missing_on_remote.append(&mut remaining);
                }
                Failure::Transport => {
                    outcome.error = Some(stderr);
                    break;
                }
            },
        }
    }
    if one_by_one {
        for oid in std::mem::take(&mut remaining) {
            match run_fetch(repo, url, std::slice::from_ref(&oid), options).await {
                Ok(()) => {}
                Err(stderr) => match classify(&stderr, std::slice::from_ref(&oid)) {
                    Failure::Transport => {
                        outcome.error = Some(stderr);
                        break;
                    }
                    _ => outcome.missing_on_remote.push(oid),
                },
            }
        }
    }
    // A fetch may have finished past the cap between two looks of the watchdog: nothing it
    // brought is kept.
    let got = received(repo).await;
    if got > options.max_bytes {
        tracing::warn!(repo = %repo.display(), peer = url, received = got, max_bytes = options.max_bytes, "sync fetch over --sync-max-fetch-bytes; cut off, its objects discarded");
        outcome.error = Some(over_cap(options.max_bytes, got));
        outcome.missing_on_remote.clear();
        return outcome;
    }
    // The object store is the truth about what arrived.
    match missing_objects(repo, &wanted).await {
        Ok(absent) => {
            outcome.fetched = wanted
                .into_iter()
                .filter(|oid| !absent.contains(oid))
                .collect();
            outcome
                .missing_on_remote
                .retain(|oid| !outcome.fetched.contains(oid));
        }
        Err(error) => outcome.error = Some(error),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "2a6c0444229f81cc252e679ed36980ef5711430f";
    const B: &str = "e279de5f4a1134c06562e2c043986c3ccd2280a5";

    fn oids() -> Vec<String> {
        vec![A.to_string(), B.to_string()]
    }

    #[test]
    fn oid_validation() {
        assert!(is_valid_oid(A));
        assert!(is_valid_oid(&"ab".repeat(32)));
        assert!(!is_valid_oid(&A.to_uppercase()));
        assert!(!is_valid_oid(&A[..39]));
        assert!(!is_valid_oid("--upload-pack=touch /tmp/x"));
        assert!(!is_valid_oid(""));
    }

    #[test]
    fn classifies_git_errors() {
        let not_ours = format!("fatal: remote error: upload-pack: not our ref {B}");
        assert_eq!(classify(&not_ours, &oids()), Failure::Lacks(B.to_string()));
        let unadvertised =
            format!("error: Server does not allow request for unadvertised object {A}");
        assert_eq!(
            classify(&unadvertised, &oids()),
            Failure::Lacks(A.to_string())
        );
        assert_eq!(
            classify("fatal: couldn't find remote ref something", &oids()),
            Failure::LacksUnnamed
        );
        assert_eq!(
            classify(
                "fatal: unable to access 'http://x/': Failed to connect",
                &oids()
            ),
            Failure::Transport
        );
        assert_eq!(classify("", &oids()), Failure::Transport);
    }

    #[test]
    fn errors_are_cleaned_and_bounded() {
        assert_eq!(
            clean_error(b"fatal: a\n\nremote: b\x1b[31m\n"),
            "fatal: a; remote: b [31m"
        );
        assert_eq!(clean_error(b""), "git fetch failed without a message");
        assert_eq!(clean_error(&[b'x'; 10_000]).len(), 500);
    }
}
