//! grasp-relay: a GRASP server daemon.
//!
//! One public listener serves the Nostr relay (WebSocket at `/`), the NIP-11 document, small web
//! pages, and git smart HTTP (by running the `grasp-cgi` wrapper around stock `git http-backend`).
//! A second listener, on loopback only and token-protected, answers the git hooks.
//!
//! Decisions are pure functions in `grasp_state` (verdicts and plans such as
//! `grasp_state::release::ReleasePlan`); this crate gathers their inputs and carries out
//! their results. Layout (folders show the architecture, one file per concept):
//!
//! - [`server`]: transport. The public HTTP listener, routing and daemon lifecycle
//!   (`server/mod.rs`), response bodies and CORS (`http`), connection caps
//!   (`connection_limits`), accepting sockets with `TCP_NODELAY` and a pause after a failed
//!   accept for every listener (`tcp`), the write deadline on every public connection
//!   (`write_deadline`), the open file limit raised at startup (`fd_limit`).
//! - [`nostr`]: the Nostr relay. One NIP-01 WebSocket connection (`connection`), its
//!   subscriptions (`subscriptions`), the nostr-lmdb event store (`store`, with the lookups
//!   admission repeats cached under a write generation in `lookups`, and its writes grouped
//!   into shared commits in `group_commit`), signature checks (`signature`), store + live
//!   broadcast shared by all connections (`relay`), the NIP-11 document (`nip11`), NIP-77
//!   negentropy reconciliation over the store (`negentropy`), the pipelining of one connection's
//!   `EVENT`s (`pipeline`: verified on a bounded pool, independent ones admitted side by side,
//!   `OK`s in order).
//! - [`grasp`]: the domain. [`grasp::Grasp`] joins store, purgatory and repositories
//!   (`grasp/mod.rs`); which events are stored, held or refused (`acceptance`, `policy`); push
//!   authorisation for pre-receive (`authorize`, held states parsed once and indexed by declared
//!   refs in `held_index`); git data arrival, release and alignment
//!   (`release`); the lock order and `RepoGuards`, every wait bounded (`locks`); work on
//!   repositories busy past the bound, retried later (`deferred`); released data carried to the
//!   identifier's other repositories, in the background (`copies`), through the family's object
//!   pool: joins, promotion of what signed events released, the locked shrink, the startup
//!   migration (`pools`); purgatory restore, expiry
//!   sweeps and checkpoints (`lifecycle`); the purgatory journal, synced before an event is
//!   answered (`journal`).
//! - [`git`]: storage on disk. The one git runner (`runner`), git operations (`git/mod.rs`), refs and HEAD read from
//!   a files-backend repository without a process (`ref_files`), bare repositories
//!   (`repos`), the fast "surely missing" object check (`objects`), object pools on disk
//!   (`pools`), background maintenance (`maintenance`), git smart HTTP through
//!   `grasp-cgi` (`http`), each child in its own process group, ended with its request
//!   (`cgi_child`).
//! - [`api`]: the loopback, token-protected API the git hooks call, served on a tokio runtime of
//!   its own so pushes are decided however busy the WebSocket side is.
//! - [`sync`]: background git-data sync (queue, per-domain throttle, URL safety, fetch by id).
//! - [`peers`]: relay-to-relay event sync (GRASP-02): follows the relays accepted repositories
//!   list, by NIP-77 negentropy or REQ paging, then live.
//! - [`metrics`]: the Prometheus families ([`metrics::Metrics`], kept on `Grasp`), the separate
//!   metrics listener (`server`) and the `/healthz` / `/readyz` probes (`health`).
//! - [`trust`]: who may write what and how fast: the checks at the entry of admission (NIP-70,
//!   curation, private repositories, repository caps), write limits (`limits`), client addresses
//!   behind trusted proxies (`proxy`), files re-read on change (`reload`), the private service's
//!   git check (`git_auth`), `purge-author` (`purge`). NIP-42 connection state is
//!   `nostr::auth`.
//! - [`doctor`]: `grasp-relay doctor`, facts about an installation and pure verdicts on them.
//! - [`config`], [`logging`], [`datadir`], [`shutdown`]: command line, environment and the TOML
//!   configuration file (re-read on SIGHUP by `server::reload`), the log filter, the data
//!   directory layout and its exclusive lock, the shutdown signal every task is handed.

pub mod api;
pub mod config;
pub mod datadir;
pub mod doctor;
pub mod git;
pub mod grasp;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod nostr;
pub mod peers;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod sync;
pub mod trust;
