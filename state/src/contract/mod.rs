//! What the four processes (the relay, `grasp-cgi`, `grasp-pre-receive`, `grasp-post-receive`)
//! share, and the crate's only I/O.
//!
//! The processes agree on wire types and files, not on code paths: the hook API's requests and
//! responses, the hooks' configuration file, the environment of a CGI request and of every git
//! process, the CGI header block, the CORS answer and page markup of every public response, the
//! push limits and minimum transfer rate both git fronts apply, and the files they all touch. The
//! I/O of the crate lives here and nowhere else in it: [`atomic_file`] (crash-safe
//! replacement), [`push_lock`] (`flock` on a repository's lock file), [`checkpoint_file`] (the
//! purgatory checkpoint read, written and set aside), [`git_backend`] (builds the
//! `git http-backend` command, looks for a private service's marker files) and [`git_env`]
//! (reads the inherited environment for a git child). Every other room of the crate is pure.
//!
//! - [`hook_api`]: the versioned JSON request/response types the hooks (and `grasp-cgi`) send
//!   to the relay's internal API.
//! - [`hook_config`]: the file beside the installed hooks that tells them the data directory
//!   and the push limits (the hooks are the binaries themselves, started without a shell).
//! - [`push_limits`]: how many bytes one push may bring (`--max-push-bytes`,
//!   `--max-pr-push-bytes`), checked on the quarantine in `pre-receive`.
//! - [`transfer`]: the minimum rate a git request body must keep (`--git-min-rate`).
//! - [`cgi`]: the CGI response header block (what `grasp-cgi` and `git http-backend` print).
//! - [`cors`]: the CORS headers and preflight answer of every public response.
//! - [`html`]: the one HTML escaping function, style sheet and dates of every page.
//! - [`git_env`]: the environment policy of every git process (no system/global config, no
//!   inherited `GIT_*`).
//! - [`git_backend`]: how `git http-backend` runs for one request (for `grasp-cgi` and the
//!   relay's listener alike) and whether a service is private.
//! - [`atomic_file`]: the one crash-safe file replacement (tmp, fsync, rename, dir fsync).
//! - [`push_lock`]: a repository's push lock (`<repo>/grasp.lock`), only ever tried, waited
//!   for within a bound ([`push_lock::PushLock`]); shared by `grasp-cgi` and the relay.
//! - [`checkpoint_file`]: the purgatory checkpoint on disk.
//! - [`key_file`]: a secret key kept in a file (the relay's identity): hex or nsec on one line,
//!   readable by its owner only (the relay reads the file; this says what it may hold).

pub mod atomic_file;
pub mod cgi;
pub mod checkpoint_file;
pub mod cors;
pub mod env_names;
pub mod git_backend;
pub mod git_env;
pub mod hook_api;
pub mod hook_config;
pub mod html;
pub mod key_file;
pub mod layout;
pub mod push_limits;
pub mod push_lock;
pub mod transfer;
