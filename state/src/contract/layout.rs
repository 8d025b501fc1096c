//! The names of the files and directories the processes share on disk, each spelled once here.
//! Paths only: nothing is touched.
//!
//! ```text
//! <data>/grasp-relay.lock       LOCK_FILE: exclusive lock held while the daemon runs
//! <data>/relay-addr             RELAY_ADDR_FILE: public address once listening (scripts, tests)
//! <data>/metrics-addr           METRICS_ADDR_FILE: the metrics listener's address
//! <data>/events/                EVENTS_DIR: LMDB event store
//! <data>/git/                   GIT_DIR: bare repositories (paths built by RepoLayout only)
//! <data>/hooks/                 HOOKS_DIR: git hooks (core.hooksPath)
//! <data>/hooks/grasp-hooks.conf HOOK_CONFIG_FILE: what the hooks need to know
//! <data>/hooks/pre-receive-only/ PRE_RECEIVE_ONLY_DIR: the hooks of a push the listener runs
//! <data>/purgatory-state.json   CHECKPOINT_FILE: purgatory checkpoint
//! <data>/purgatory-journal.<n>  JOURNAL_PREFIX: purgatory changes since the checkpoint
//! <data>/contributor-data.json  CONTRIBUTOR_DATA_FILE: pull request data of non-maintainers
//! <data>/api-addr, api-token    API_ADDR_FILE, API_TOKEN_FILE: the hook API's address and token
//! <data>/relay-sync.json        RELAY_SYNC_FILE: relay sync's per-relay resume points
//! <data>/sync-plus.json         SYNC_PLUS_FILE: Sync+'s cached relay lists and pass position
//! <data>/relay-key              RELAY_KEY_FILE: the relay's own key (default of --relay-key-file)
//! <data>/service-key            SERVICE_KEY_FILE: a private service's own key
//! <data>/private-service        PRIVATE_MARKER_FILE: a private service's markers, also in the
//! <data>/git/private-service      git root (grasp-cgi may be given only the git root)
//! <repo>/grasp.lock             PUSH_LOCK_FILE: a repository's push lock
//! ```
//!
//! Inside the git root, the object pools (`.pools/`) and the contributor repositories (`prs/`)
//! are [`crate::names::identifier::RepoLayout`]'s (`POOLS_DIR`, `PRS_DIR` there).

/// `<data>/grasp-relay.lock`: the lock file held while a daemon runs on the data directory.
pub const LOCK_FILE: &str = "grasp-relay.lock";
/// `<data>/relay-addr`: the bound public address, written once the listener is up.
pub const RELAY_ADDR_FILE: &str = "relay-addr";
/// `<data>/metrics-addr`: the metrics listener's bound address.
pub const METRICS_ADDR_FILE: &str = "metrics-addr";
/// `<data>/events`: the LMDB event store.
pub const EVENTS_DIR: &str = "events";
/// `<data>/git`: root of the bare repositories.
pub const GIT_DIR: &str = "git";
/// `<data>/hooks`: the hooks directory used as `core.hooksPath`.
pub const HOOKS_DIR: &str = "hooks";
/// `<data>/hooks/grasp-hooks.conf`: the hooks' configuration
/// ([`super::hook_config::HookConfig`]), beside the hooks.
pub const HOOK_CONFIG_FILE: &str = "grasp-hooks.conf";
/// `<data>/hooks/pre-receive-only`: `pre-receive` alone (and its configuration), the hooks of a
/// push the relay's listener runs from end to end, doing what `post-receive` would itself
/// (docs/architecture.md, "A push under the relay's listener").
pub const PRE_RECEIVE_ONLY_DIR: &str = "pre-receive-only";
/// `<data>/purgatory-state.json`: the purgatory checkpoint ([`super::checkpoint_file`]).
pub const CHECKPOINT_FILE: &str = "purgatory-state.json";
/// `<data>/purgatory-journal.<n>`: the purgatory's changes since the checkpoint.
pub const JOURNAL_PREFIX: &str = "purgatory-journal.";
/// `<data>/contributor-data.json`: the ledger of contributor data
/// ([`crate::trust::contributor_data`]).
pub const CONTRIBUTOR_DATA_FILE: &str = "contributor-data.json";
/// `<data>/api-addr`: the hook API's address (`host:port`).
pub const API_ADDR_FILE: &str = "api-addr";
/// `<data>/api-token`: the hook API's token (mode 0600, new at every start).
pub const API_TOKEN_FILE: &str = "api-token";
/// `<data>/relay-sync.json`: relay sync's per-relay resume points.
pub const RELAY_SYNC_FILE: &str = "relay-sync.json";
/// `<data>/sync-plus.json`: Sync+'s cache of participants' relay lists and where its last pass
/// stopped.
pub const SYNC_PLUS_FILE: &str = "sync-plus.json";
/// `<data>/relay-key`: the relay's own key, unless `--relay-key-file` names another file.
pub const RELAY_KEY_FILE: &str = "relay-key";
/// `<data>/service-key`: a private service's own key (NIP-42 towards its sync peers).
pub const SERVICE_KEY_FILE: &str = "service-key";
/// `<data>/private-service`, and the same name in the git root (`<data>/git/private-service`):
/// present while the data directory belongs to a private GRASP-08 service; grasp-cgi then asks
/// [`super::hook_api::PATH_GIT_AUTH`] before serving any repository request.
pub const PRIVATE_MARKER_FILE: &str = "private-service";
/// `<repo>/grasp.lock`: the file inside each bare repository that a push locks exclusively
/// ([`super::push_lock::PushLock`], taken by the relay's listener or grasp-cgi) while its
/// receive-pack runs, serialising pushes to one repository across processes. Other writers may
/// take it too, but never from code a hook waits on (the push holding it would deadlock).
pub const PUSH_LOCK_FILE: &str = "grasp.lock";
