//! grasp-relay: a GRASP server daemon.
//!
//! One public listener serves the Nostr relay (WebSocket at `/`), the NIP-11 document, small web
//! pages, and git smart HTTP (by running the `grasp-cgi` wrapper around stock `git http-backend`).
//! A second listener, on loopback only and token-protected, answers the git hooks.
//!
//! Decisions are pure functions in `grasp_state` (verdicts and plans such as
//! `grasp_state::git::release::ReleasePlan`); this crate gathers their inputs and carries out
//! their results. Layout, from the top layer down: a module imports only what stands below it
//! (the configuration at the bottom, transport above the domain, the domain above storage; no
//! import circles). Folders show the architecture, one file per concept:
//!
//! - [`doctor`]: `grasp-relay doctor`, facts about an installation and pure verdicts on them.
//! - [`server`]: the daemon and the public listener. Startup and shutdown, routing of the one
//!   public port (`server/mod.rs`), the home page (`pages`), the metrics listener (`metrics`),
//!   SIGHUP (`reload`), the open file limit raised at startup (`fd_limit`), freed heap pages
//!   handed back every 30 s (`heap_trim`).
//! - [`api`]: the loopback, token-protected API the git hooks call, served on a tokio runtime of
//!   its own so pushes are decided however busy the WebSocket side is; one handler per endpoint,
//!   routed by one table per method (`routes`); repository page data and
//!   `grasp-relay repos` (`repos`), the private service's git check (`git_auth`), the
//!   `/healthz` / `/readyz` probes (`health`), the operator's views of background work (`views`).
//! - [`peers`]: relay-to-relay event sync (GRASP-02): follows the relays accepted repositories
//!   list, by NIP-77 negentropy or REQ paging, then live; a replica set's other members asked
//!   and recognised (`replica_reads`) and their confirmations (`acks`).
//! - [`nostr`]: the relay's WebSocket side. One NIP-01 connection (`connection`), its
//!   subscriptions (`subscriptions`), NIP-42 (`auth`), the NIP-11 document (`nip11`), the NIP-05
//!   answer at `/.well-known/nostr.json` naming the relay's key (`nip05`), NIP-77
//!   negentropy reconciliation over the store (`negentropy`), the pipelining of one connection's
//!   `EVENT`s (`pipeline`: verified on a bounded pool, independent ones admitted side by side,
//!   `OK`s in order).
//! - [`sync`]: background git-data sync (queue, per-domain throttle, fetch by id), and URL safety
//!   for clone URLs (`urls`) and relay URLs (`relay_url`).
//! - [`grasp`]: the domain. [`grasp::Grasp`] joins store, purgatory and repositories
//!   (`grasp/mod.rs`: its parts are the module's own, asked for through the hub's methods, but
//!   the store, the purgatory and the repository locks, public for the tests and tools); which events are stored, held or refused (`acceptance`, `policy`); who
//!   the confirmed maintainers are, computed once per version of an identifier's announcements
//!   (`authority`), and the authorization-integrity pass over every repository (`integrity`); push
//!   authorisation for pre-receive (`authorize`, held states parsed once and indexed by declared
//!   refs in `held_index`); git data arrival, release and alignment (`release`); the lock order
//!   and `RepoGuards`, every wait bounded (`locks`); work on repositories busy past the bound,
//!   retried later (`deferred`); released data carried to the identifier's other repositories,
//!   in the background (`copies`), through the family's object pool: joins, promotion of what
//!   signed events released, the locked shrink, the startup migration (`pools`); background
//!   repository maintenance (`maintenance`); GRASP-06 contributor repositories
//!   (`contributions`); the byte budgets of pull request data no maintainer signed, measured,
//!   pruned and persisted (`budgets`), and owners' quotas (`quotas`); who a private service
//!   lets in (`membership`); what the hub asks of a replica set's other members, as ports the
//!   peers fill (`replica_set`); purgatory restore, expiry sweeps and checkpoints (`lifecycle`); the
//!   purgatory journal, synced before an event is answered (`journal`); `purge-author` and the
//!   curation watch (`purge`).
//! - [`trust`]: who may write what and how fast: the checks at the entry of admission (NIP-70,
//!   curation, private repositories, repository caps), write limits (`limits`), the free-disk
//!   watermark (`disk`), client addresses behind trusted proxies (`proxy`), files re-read on
//!   change (`reload`); the other way round, who this server is to other servers: the `AUTH`
//!   events and git proofs it presents (`credentials`). NIP-42 connection state is
//!   `nostr::auth`.
//! - [`store`]: the nostr-lmdb event store (`store/mod.rs`, with the lookups admission repeats
//!   cached under a write generation in `lookups`, and its writes grouped into shared commits in
//!   `group_commit`; regular events answered once in the synced log `ack_log` and read from
//!   `acknowledged` until committed), store + live broadcast shared by all connections (`relay`), signature
//!   checks (`signature`), the items all negentropy sessions hold (`item_budget`).
//! - [`git`]: storage on disk. The one git runner (`runner`), git operations (`git/mod.rs`),
//!   refs and HEAD read from a files-backend repository without a process (`ref_files`), bare
//!   repositories built aside (`build`, `repos`), the fast "surely missing" object check
//!   (`objects`), object pools on disk (`pools`), git smart HTTP through `grasp-cgi` (`http`),
//!   each child in its own process group, ended with its request (`cgi_child`), a push run with
//!   `pre-receive` alone and released by the relay itself (`supervised_push`); the ref cache
//!   (`ref_cache`: git's own ref advertisements and v2 `ls-refs` answers served again while
//!   the repository's `ref_fingerprint` is unchanged; `ref_generation`: the counters every ref
//!   change the relay makes or hears of bumps).
//! - [`metrics`]: the Prometheus families ([`metrics::Metrics`], kept on `Grasp`).
//! - [`net`]: the HTTP plumbing every listener shares: response bodies and CORS (`http`),
//!   accepting sockets with `TCP_NODELAY` and a pause after a failed accept (`tcp`), connection
//!   caps (`connection_limits`), the write deadline on every public connection
//!   (`write_deadline`).
//! - [`config`], [`logging`], [`datadir`], [`shutdown`]: command line, environment and the TOML
//!   configuration file: [`config::Config`] is one typed struct per section of the file
//!   (`config/server`, `storage`, `limits`, `purgatory`, `git_sync`, `relay_sync`, `trust`,
//!   `services`, `pages`: [`config::LimitsConfig`], ...), flattened into it; a part is handed
//!   the section it reads (`nostr::negentropy::NegentropyLimits::from_config(&LimitsConfig)`),
//!   one spanning sections exactly those it reads (`sync::SyncConfig::from_sections(&GitSyncConfig,
//!   &LimitsConfig, ...)`), only startup (`server::start_background`) and what describes the whole
//!   relay (the NIP-11 document, the home page) the whole configuration; re-read on SIGHUP by
//!   `server::reload`, which puts a section's live settings in force together. Also the log
//!   filter, the data directory layout and its exclusive lock, the shutdown signal every task is
//!   handed.
//! - [`identity`]: the relay's own key (`--relay-key-file`), read at startup or made on first
//!   start; NIP-11 `self` and the NIP-05 name `_` (`nostr::nip05`).

pub mod api;
pub mod config;
pub mod datadir;
pub mod doctor;
pub mod git;
pub mod grasp;
pub mod identity;
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
