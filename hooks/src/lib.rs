//! grasp-hooks: the git `pre-receive` and `post-receive` hooks of a GRASP server.
//!
//! Both hooks are thin: they find out which repository they run in, read the ref updates git gives
//! them on stdin, and ask the relay daemon over its loopback-only, token-protected hook API
//! (wire types in [`grasp_state::hook_api`]). The relay holds every decision.
//!
//! - `pre-receive` prints the relay's verdict on stderr (git shows it to the pusher as `remote:`
//!   lines) and exits non-zero to reject. It fails closed: if the relay cannot be reached in a few
//!   seconds, or answers something it does not understand, the push is rejected with a message
//!   saying so.
//! - `post-receive` reports the applied updates, waits (bounded) for the relay to release the
//!   events that the new git data satisfies, and prints what was released.
//!
//! The hooks are installed by the relay as small scripts in `<data>/hooks/` that `exec` these
//! binaries with `--data-dir <data>`. The repository is identified from the real path of
//! `GIT_DIR` under `<data>/git` (never from `argv[0]`).
//!
//! Every line the hooks print goes out whole, in one `write` ([`say`]). [`client`] is the one
//! client of the hook API; `grasp-relay`'s one-shot commands use it too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use grasp_state::identifier::{npub_of, RepoLayout};
use grasp_state::refs::{parse_ref_updates, RefUpdate};
use serde::{de::DeserializeOwned, Serialize};

pub mod client;
pub use client::ApiClient;

/// What a hook knows about the push it runs for.
pub struct HookContext {
    pub data_dir: PathBuf,
    /// Owner npub of the repository.
    pub owner: String,
    pub identifier: String,
    pub updates: Vec<RefUpdate>,
}

/// Reads `--data-dir` (or `GRASP_DATA_DIR`) from the command line. Prints help on `--help`.
pub fn data_dir_from_args(hook: &str) -> Result<PathBuf> {
    let mut args = std::env::args().skip(1);
    let mut data_dir = std::env::var_os("GRASP_DATA_DIR").map(PathBuf::from);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => {
                data_dir = Some(PathBuf::from(args.next().context("--data-dir needs a value")?))
            }
            "-h" | "--help" => {
                println!(
                    "{hook}: git {kind} hook of grasp-relay.\n\n\
                     Usage: {hook} --data-dir <DIR>   (ref updates on stdin, as git gives them)\n\n\
                     Options:\n  --data-dir <DIR>  the relay's data directory [env: GRASP_DATA_DIR]\n\n\
                     Installed by grasp-relay as <DIR>/hooks/{kind}; not meant to be run by hand.",
                    kind = hook.trim_start_matches("grasp-")
                );
                std::process::exit(0);
            }
            other => bail!("unexpected argument {other:?}; usage: {hook} --data-dir <DIR>"),
        }
    }
    data_dir.context("no data directory: pass --data-dir <DIR> or set GRASP_DATA_DIR")
}

/// Builds the hook's context: repository from `GIT_DIR`, updates from stdin.
pub fn context(data_dir: PathBuf) -> Result<HookContext> {
    let git_dir = std::env::var_os("GIT_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let git_dir = std::fs::canonicalize(&git_dir)
        .with_context(|| format!("cannot resolve GIT_DIR {}", git_dir.display()))?;
    let git_root = std::fs::canonicalize(data_dir.join("git"))
        .with_context(|| format!("cannot resolve the git root {}", data_dir.join("git").display()))?;
    let layout = RepoLayout::new(git_root);
    let (owner, identifier) = layout
        .locate(&git_dir)
        .map_err(|e| anyhow!("{} is not a GRASP repository: {e}", git_dir.display()))?;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).context("cannot read ref updates from stdin")?;
    let updates = parse_ref_updates(&input).map_err(|e| anyhow!("{e}"))?;
    Ok(HookContext { data_dir, owner: npub_of(&owner), identifier, updates })
}

/// Calls the relay's hook API at `path` with `request`, waiting at most `timeout` in total.
pub fn call<Req: Serialize, Resp: DeserializeOwned>(
    data_dir: &Path,
    path: &str,
    request: &Req,
    timeout: Duration,
) -> Result<Resp> {
    ApiClient::from_data_dir(data_dir, timeout)?.post(path, request)
}

/// Writes `line` and its newline to stderr with one `write`, so that git relays it as one
/// `remote:` line (clients that show sideband packets as they come, such as libgit2's, would
/// otherwise split a line written in pieces).
pub fn say(line: &str) {
    let mut whole = String::with_capacity(line.len() + 1);
    whole.push_str(line);
    whole.push('\n');
    // Nothing sensible is left to do if stderr is gone.
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}
