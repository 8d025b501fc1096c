//! grasp-hooks: the git `pre-receive` and `post-receive` hooks of a GRASP server.
//!
//! Both hooks are thin: they find out which repository they run in, read the ref updates git gives
//! them on stdin, and ask the relay daemon over its loopback-only, token-protected hook API
//! (wire types in [`grasp_state::contract::hook_api`]). The relay holds every decision.
//!
//! - `pre-receive` prints the relay's verdict on stderr (git shows it to the pusher as `remote:`
//!   lines) and exits non-zero to reject. It fails closed: if the relay cannot be reached in a few
//!   seconds, or answers something it does not understand, the push is rejected with a message
//!   saying so.
//! - `post-receive` reports the applied updates, waits (bounded) for the relay to release the
//!   events that the new git data satisfies, and prints what was released.
//!
//! The relay installs these binaries themselves as `<data>/hooks/pre-receive` and
//! `post-receive` (hard links, or copies), so git starts them without a shell, and writes
//! `<data>/hooks/grasp-hooks.conf` beside them ([`grasp_state::contract::hook_config`]): the data
//! directory and the push limits. A hook reads that file from the directory it was started from
//! ([`settings`]); `--data-dir` (hook scripts written by older versions) and `GRASP_DATA_DIR`
//! still work. The repository is identified from the real path of `GIT_DIR` under `<data>/git`
//! (never from `argv[0]`).
//!
//! Every line the hooks print goes out whole, in one `write` ([`say`]). [`client`] is the one
//! client of the hook API; `grasp-relay`'s one-shot commands use it too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use grasp_state::contract::env_names;
use grasp_state::contract::hook_config::HookConfig;
use grasp_state::contract::layout;
use grasp_state::names::identifier::{npub_of, RepoLayout, RepoSpace};
use grasp_state::contract::push_limits::PushLimits;
use grasp_state::names::refs::{parse_ref_updates, RefUpdate};
use serde::{de::DeserializeOwned, Serialize};

pub mod client;
pub use client::ApiClient;

/// What a hook knows about the push it runs for.
pub struct HookContext {
    pub data_dir: PathBuf,
    /// Owner npub of the repository (of a contributor repository: the contributor's).
    pub owner: String,
    pub identifier: String,
    /// A repository announced here, or a GRASP-06 contributor repository (`<git>/prs/...`).
    pub space: RepoSpace,
    pub updates: Vec<RefUpdate>,
    /// The pusher's address: `REMOTE_ADDR`, which the web server set for git http-backend and
    /// git passes on to its hooks (`None` outside a smart-HTTP push).
    pub client: Option<String>,
}

impl HookContext {
    /// What both hooks send the relay about this push.
    pub fn request(self) -> grasp_state::contract::hook_api::HookRequest {
        grasp_state::contract::hook_api::HookRequest::new(self.owner, self.identifier, self.updates).in_space(self.space).from_client(self.client)
    }
}

/// What a hook is configured with: the data directory and the push limits. Prints help on
/// `--help`. In order: `--data-dir` on the command line (hook scripts of older versions pass
/// it), the configuration file beside the running executable (the installed hook,
/// [`grasp_state::contract::hook_config`]), `GRASP_DATA_DIR`. The limits come from that file, else from
/// the environment (older scripts set them there), else their defaults.
pub fn settings(hook: &str) -> Result<HookConfig> {
    let mut args = std::env::args().skip(1);
    let mut data_dir = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => {
                data_dir = Some(PathBuf::from(args.next().context("--data-dir needs a value")?))
            }
            "-h" | "--help" => {
                println!(
                    "{hook}: git {kind} hook of grasp-relay.\n\n\
                     Usage: {hook} [--data-dir <DIR>]   (ref updates on stdin, as git gives them)\n\n\
                     Options:\n  --data-dir <DIR>  the relay's data directory [env: GRASP_DATA_DIR]\n\n\
                     Installed by grasp-relay as <DIR>/hooks/{kind}, beside <DIR>/hooks/{file}, which\n\
                     names the data directory and the push limits; not meant to be run by hand.",
                    kind = hook.trim_start_matches("grasp-"),
                    file = layout::HOOK_CONFIG_FILE,
                );
                std::process::exit(0);
            }
            other => bail!("unexpected argument {other:?}; usage: {hook} [--data-dir <DIR>]"),
        }
    }
    let installed = installed_config()?;
    let data_dir = data_dir
        .or_else(|| installed.as_ref().map(|c| c.data_dir.clone()))
        .or_else(|| std::env::var_os(env_names::DATA_DIR).map(PathBuf::from))
        .with_context(|| {
            format!("no data directory: {} is not beside this hook; restart grasp-relay to reinstall the hooks", layout::HOOK_CONFIG_FILE)
        })?;
    let limits = match installed {
        Some(config) => config.limits,
        None => PushLimits::from_vars(|k| std::env::var(k).ok()),
    };
    Ok(HookConfig { data_dir, limits })
}

/// The configuration beside the running executable (`/proc/self/exe`, else `argv[0]`): the
/// installed hook's `<data>/hooks/grasp-hooks.conf`. `None` when there is none.
fn installed_config() -> Result<Option<HookConfig>> {
    let candidates = [std::env::current_exe().ok(), std::env::args_os().next().map(PathBuf::from)];
    for exe in candidates.into_iter().flatten() {
        let Some(path) = HookConfig::path_beside(&exe) else { continue };
        match std::fs::read(&path) {
            Ok(bytes) => return HookConfig::parse(&bytes).map(Some).with_context(|| format!("reading {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
    Ok(None)
}

/// Builds the hook's context: repository from `GIT_DIR`, updates from stdin.
pub fn context(data_dir: PathBuf) -> Result<HookContext> {
    let git_dir = std::env::var_os("GIT_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let git_dir = std::fs::canonicalize(&git_dir)
        .with_context(|| format!("cannot resolve GIT_DIR {}", git_dir.display()))?;
    let git_root = std::fs::canonicalize(data_dir.join(layout::GIT_DIR))
        .with_context(|| format!("cannot resolve the git root {}", data_dir.join(layout::GIT_DIR).display()))?;
    let layout = RepoLayout::new(git_root);
    let (space, owner, identifier) = layout
        .locate_in(&git_dir)
        .map_err(|e| anyhow!("{} is not a GRASP repository: {e}", git_dir.display()))?;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).context("cannot read ref updates from stdin")?;
    let updates = parse_ref_updates(&input).map_err(|e| anyhow!("{e}"))?;
    let client = std::env::var("REMOTE_ADDR").ok().filter(|a| !a.is_empty());
    Ok(HookContext { data_dir, owner: npub_of(&owner), identifier, space, updates, client })
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
