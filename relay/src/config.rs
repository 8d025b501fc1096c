//! Configuration of the daemon: flags, `GRASP_*` environment variables and a TOML file.
//!
//! Every flag can also be set through a `GRASP_*` environment variable; `--help` lists them all.
//! `--config FILE` reads a TOML file with every setting in sections (`file`; the section of
//! each flag is in `sections`, the one table a new flag gets a line in); flags win over
//! environment variables, which win over the file, which wins over the defaults
//! (`load`: [`Config::load`], and where each value came from, for `config show`). `reload`
//! says which settings a SIGHUP can change while the relay runs.

mod file;
mod load;
pub mod reload;
pub mod reference;
pub mod sections;

pub use file::{FileError, FileErrors, Kind};
pub use load::{render, LoadError, Loaded, Setting, Source};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use nostr::prelude::*;

use grasp_state::contract::env_names;
use grasp_state::trust::curation::{Curation, RepoPattern};

use grasp_state::trust::cidr::Cidr;

// Defaults the parts that use them also need for their own `Default`s: defined here, at the
// bottom of the crate, so the configuration imports nothing above it.

/// `--negentropy-max-items`'s default: most events one NIP-77 session reconciles.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS: usize = 500_000;
/// `--negentropy-max-items-per-connection`'s default: the items all sessions of one connection
/// hold together.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS_PER_CONNECTION: usize = 1_000_000;
/// `--negentropy-max-items-total`'s default: the items the sessions of every connection hold
/// together.
pub const DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL: usize = 5_000_000;
/// `--negentropy-opens-per-minute`'s default.
pub const DEFAULT_NEGENTROPY_OPENS_PER_MINUTE: u32 = 60;
/// `--max-answer-bytes`'s default: 32 MiB of `EVENT` messages per REQ. A REQ of ordinary
/// events stays well under it (a full `--max-limit` of 500 events averaging 64 KiB, far larger
/// than the patches, issues and repository events clients ask for); only answers made of many
/// large events are cut. What one answer holds in memory does not depend on it (one chunk).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 << 20;
/// `--relay-sync-rate`'s default (events per second from one relay).
/// Default `--index-relay`s: well-known public indexers of profiles and relay lists
/// (docs/protocol.md, "GRASP-03").
pub const DEFAULT_INDEX_RELAYS: [&str; 3] = ["wss://purplepag.es", "wss://relay.nostr.band", "wss://indexer.coracle.social"];
pub const DEFAULT_RELAY_SYNC_RATE: f64 = 2_000.0;
/// `--relay-sync-burst`'s default.
pub const DEFAULT_RELAY_SYNC_BURST: u32 = 20_000;

/// Runtime configuration of `grasp-relay`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "grasp-relay",
    version,
    about = "GRASP server: a Nostr relay and git smart-HTTP service on one port"
)]
pub struct Config {
    /// Public host[:port] of this service, as it appears in repository announcements
    /// (`clone`/`relays` tags); decides whether an announcement lists this server, and is never
    /// synced from. A leading `https://` or `http://` (the pages' links) and a trailing `/` are
    /// allowed. Defaults to the bound address.
    #[arg(long, env = env_names::PUBLIC_HOST)]
    pub public_host: Option<String>,

    /// Address of the public listener (WebSocket relay, NIP-11, git smart HTTP).
    #[arg(long, env = env_names::BIND, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Data directory: `events/` (event store), `git/` (bare repositories), `hooks/`, the
    /// purgatory checkpoint, the hook API files and the relay's key (`relay-key`).
    #[arg(long, env = env_names::DATA_DIR, default_value = "./data", global = true)]
    pub data_dir: PathBuf,

    /// The relay's own key (its identity: NIP-11 `self`, the NIP-05 name `_` at
    /// `/.well-known/nostr.json`): a file holding the secret key, hex or nsec, one line, readable
    /// by its owner only (mode 0600). A configured file must exist: missing, unreadable, not a
    /// key or readable by others, it stops startup. Default: `<data-dir>/relay-key`, made with a
    /// new key (mode 0600) on first start. A private service may point `--service-key-file` at
    /// the same file to use one key for both (docs/protocol.md, "Relay identity").
    #[arg(long, env = env_names::RELAY_KEY_FILE, value_name = "PATH")]
    pub relay_key_file: Option<PathBuf>,

    /// A TOML configuration file with any of these settings, in sections
    /// (docs/grasp-relay.toml is the commented example); flags and environment variables win
    /// over it. Re-read on SIGHUP for the settings that can change while the relay runs.
    #[arg(long, env = env_names::CONFIG, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    /// Instead of running the daemon: ask the relay running on `--data-dir` something, check
    /// the configuration or the installation.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Log filter in `tracing` syntax, e.g. `info` or `grasp_relay=debug,info`.
    #[arg(long, env = env_names::LOG, default_value = "info")]
    pub log: String,

    /// Largest accepted WebSocket message in bytes; bigger messages are answered with an error.
    #[arg(long, env = env_names::MAX_MESSAGE_BYTES, default_value_t = 512 * 1024)]
    pub max_message_bytes: usize,

    /// Maximum number of open subscriptions per connection.
    #[arg(long, env = env_names::MAX_SUBSCRIPTIONS, default_value_t = 32)]
    pub max_subscriptions: usize,

    /// Maximum number of filters in one REQ.
    #[arg(long, env = env_names::MAX_FILTERS, default_value_t = 16)]
    pub max_filters: usize,

    /// Cap on a filter's `limit`, and the number of stored events returned when no limit is given.
    #[arg(long, env = env_names::MAX_LIMIT, default_value_t = 500)]
    pub max_limit: usize,

    /// Most bytes of EVENT messages one REQ's stored answer sends; the events past it are left
    /// out and EOSE follows, as for a smaller limit (clients page back with `until`); default
    /// 32 MiB. The answer is streamed: what it holds in memory does not depend on this.
    #[arg(long, env = env_names::MAX_ANSWER_BYTES, default_value_t = DEFAULT_MAX_ANSWER_BYTES)]
    pub max_answer_bytes: usize,

    /// Do not serve NIP-77 negentropy reconciliation: NEG-OPEN is answered with a NOTICE, as by a
    /// relay without NIP-77, and 77 is not listed in the NIP-11 document.
    #[arg(long, env = env_names::NO_NEGENTROPY)]
    pub no_negentropy: bool,

    /// Most stored events one NIP-77 negentropy session may reconcile; a NEG-OPEN whose filter
    /// matches more is answered `NEG-ERR "blocked: ..."`.
    #[arg(long, env = env_names::NEGENTROPY_MAX_ITEMS, default_value_t = DEFAULT_NEGENTROPY_MAX_ITEMS)]
    pub negentropy_max_items: usize,

    /// Most stored events all NIP-77 sessions of one connection may hold at once; a NEG-OPEN
    /// beyond it is answered `NEG-ERR "blocked: ..."` until the client closes sessions.
    #[arg(long, env = env_names::NEGENTROPY_MAX_ITEMS_PER_CONNECTION, default_value_t = DEFAULT_NEGENTROPY_MAX_ITEMS_PER_CONNECTION)]
    pub negentropy_max_items_per_connection: usize,

    /// Most stored events the NIP-77 sessions of all connections may hold at once (about 40
    /// bytes each); a NEG-OPEN beyond it is answered `NEG-ERR "rate-limited: ..."`.
    #[arg(long, env = env_names::NEGENTROPY_MAX_ITEMS_TOTAL, default_value_t = DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL)]
    pub negentropy_max_items_total: usize,

    /// NIP-77 `NEG-OPEN`s all connections of one client address may send per minute (each
    /// scans and sorts the events its filter matches); beyond it `NEG-ERR "rate-limited: ..."`.
    #[arg(long, env = env_names::NEGENTROPY_OPENS_PER_MINUTE, default_value_t = DEFAULT_NEGENTROPY_OPENS_PER_MINUTE)]
    pub negentropy_opens_per_minute: u32,

    /// A NIP-77 session that receives no NEG-MSG for this long is closed with
    /// `NEG-ERR "closed: ..."`, freeing the events it held.
    #[arg(long, env = env_names::NEGENTROPY_IDLE_TIMEOUT, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub negentropy_idle_timeout: Duration,

    /// Most connections (HTTP and WebSocket) the public listener keeps open at once; new ones
    /// beyond it get a `503` and are closed. The open file limit must allow it: at startup the
    /// soft limit is raised to the hard one, and below --max-connections + 2 x
    /// --git-max-requests + 256 the relay refuses to start.
    #[arg(long, env = env_names::MAX_CONNECTIONS, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Most open connections from one client address (0: no per-address limit, e.g. behind a
    /// reverse proxy, where every client has the proxy's address).
    #[arg(long, env = env_names::MAX_CONNECTIONS_PER_IP, default_value_t = 64)]
    pub max_connections_per_ip: u32,

    /// Every per-address limit (connections, git requests, write rate) counts an IPv6 client by
    /// this many leading bits of its address (one /64 is one client); IPv4 addresses count as
    /// they are.
    #[arg(long, env = env_names::IPV6_PREFIX_LEN, default_value_t = grasp_state::names::client_key::DEFAULT_IPV6_PREFIX_LEN,
          value_parser = clap::value_parser!(u8).range(1..=128))]
    pub ipv6_prefix_len: u8,

    /// Most bytes of a repository announcement (30617) or state event (30618): they grow with
    /// the repository (maintainers, branches, tags); default 256 KiB, about 3,000 refs. Never above
    /// `--max-message-bytes`.
    #[arg(long, env = env_names::MAX_REPO_EVENT_BYTES, default_value_t = grasp_state::nostr::event_size::DEFAULT_MAX_REPO_EVENT_BYTES)]
    pub max_repo_event_bytes: usize,

    /// Free bytes the data directory's file system keeps: below it, events are refused
    /// (`blocked:`) and pushes rejected, checked at most every 2 s (0: never refuse); default 1 GiB.
    #[arg(long, env = env_names::MIN_FREE_DISK, default_value_t = grasp_state::trust::free_disk::DEFAULT_MIN_FREE_DISK)]
    pub min_free_disk: u64,

    /// Most git requests (clones, fetches, pushes, repository pages) served at once; more get a
    /// `503`. A request holds its place until its answer has streamed.
    #[arg(long, env = env_names::GIT_MAX_REQUESTS, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub git_max_requests: u32,

    /// Most git requests one client address runs at once, stalled ones included (0: no
    /// per-address limit, e.g. behind a reverse proxy).
    #[arg(long, env = env_names::GIT_MAX_REQUESTS_PER_IP, default_value_t = 8)]
    pub git_max_requests_per_ip: u32,

    /// Most bytes of objects one push may bring (git's `receive.maxInputSize`, and checked on the
    /// push's quarantine before anything lands); default 1 GiB.
    #[arg(long, env = env_names::MAX_PUSH_BYTES, default_value_t = grasp_state::contract::push_limits::DEFAULT_MAX_PUSH_BYTES)]
    pub max_push_bytes: u64,

    /// Most bytes of objects one push to `refs/nostr/*` (a pull request's commits, which anyone
    /// may push) may bring, checked on the quarantine; default 100 MiB.
    #[arg(long, env = env_names::MAX_PR_PUSH_BYTES, default_value_t = grasp_state::contract::push_limits::DEFAULT_MAX_PR_PUSH_BYTES)]
    pub max_pr_push_bytes: u64,

    /// Address of the internal hook API (loopback only; token protected).
    #[arg(long, env = env_names::API_BIND, default_value = "127.0.0.1:0")]
    pub api_bind: SocketAddr,

    /// Address of the metrics listener: Prometheus `/metrics`, `/healthz` and `/readyz` (off when
    /// not given; never the public port; no authentication, so keep it on loopback or a private
    /// network).
    #[arg(long, env = env_names::METRICS_BIND, value_name = "ADDR")]
    pub metrics_bind: Option<SocketAddr>,

    /// A git request whose client sends nothing for this long (or closes before the end of its
    /// body) is ended and its git processes killed, releasing the repository's push lock. Push
    /// quarantines idle this long are removed (left by a crash), and unreachable objects older
    /// than this are pruned after an expired placeholder's ref is removed.
    #[arg(long, env = env_names::GIT_IDLE_TIMEOUT, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub git_idle_timeout: Duration,

    /// How long a push waits for another push to the same repository (anyone's, however slow)
    /// to end before it is answered 503 with Retry-After ("another push to this repository is
    /// in progress; retry later"). Passed to grasp-cgi as GRASP_PUSH_LOCK_WAIT (whole seconds).
    #[arg(long, env = env_names::PUSH_LOCK_WAIT, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub push_lock_wait: Duration,

    /// After the first --git-idle-timeout of a git request, its body must have arrived at this
    /// average rate (bytes per second since the request began) or the request is ended and its
    /// git processes killed, so a push trickling bytes cannot hold its slot and lock for long
    /// (0: no minimum). grasp-cgi reads the same variable behind nginx.
    #[arg(long, env = env_names::GIT_MIN_RATE, default_value_t = grasp_state::contract::transfer::DEFAULT_MIN_RATE)]
    pub git_min_rate: u64,

    /// Bytes of git's ref advertisements and v2 ls-refs answers the relay keeps in memory and
    /// serves again without starting git while the repository's refs are unchanged (the ref
    /// cache, docs/architecture.md); with it, a small v2 fetch runs git upload-pack without git
    /// http-backend. 0 turns both off (git http-backend answers every request).
    #[arg(long, env = env_names::REF_CACHE_BYTES, default_value_t = crate::git::ref_cache::DEFAULT_BUDGET)]
    pub ref_cache_bytes: usize,

    /// A client of the public listener that reads nothing of what it is sent (a WebSocket
    /// message, a git response, a page) for this long is disconnected; a git response's
    /// processes are then killed and its git request slot freed.
    #[arg(long, env = env_names::WRITE_TIMEOUT, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub write_timeout: Duration,

    /// A WebSocket connection that sends nothing for this long is closed when it has no open
    /// subscription; with subscriptions it is pinged and closed if no answer comes within
    /// this time (at most 30s).
    #[arg(long, env = env_names::WS_IDLE_TIMEOUT, default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub ws_idle_timeout: Duration,

    /// How long processing a client's event waits for a repository it governs (a push may hold
    /// it) before that repository's work is deferred and retried later while the rest proceeds.
    #[arg(long, env = env_names::EVENT_LOCK_WAIT, default_value = "3s", value_name = "DURATION", value_parser = parse_duration)]
    pub event_lock_wait: Duration,

    /// How many tasks may wait for one repository's locks at a time; one more is told at once
    /// that the repository is busy (a state event then gets `rate-limited:`).
    #[arg(long, env = env_names::REPO_LOCK_QUEUE, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub repo_lock_queue: u32,

    /// Most entries of deferred repository work (a repository busy past --event-lock-wait,
    /// retried later); beyond it new work takes the place of an entry of the author holding
    /// the most when that author holds at least two more, else it is not recorded (the next
    /// event, push or background sync does it).
    #[arg(long, env = env_names::DEFERRED_TOTAL, default_value_t = grasp_state::git::deferred::MAX_ENTRIES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub deferred_total: u32,

    /// Most entries of deferred repository work one author may hold (its events' work beyond
    /// it is not recorded), so throwaway keys cannot crowd others out.
    #[arg(long, env = env_names::DEFERRED_PER_AUTHOR, default_value_t = grasp_state::git::deferred::MAX_PER_AUTHOR as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub deferred_per_author: u32,

    /// Most entries of deferred repository work naming a repository of one owner, however many
    /// keys' events govern it (work beyond it is not recorded).
    #[arg(long, env = env_names::DEFERRED_PER_OWNER, default_value_t = grasp_state::git::deferred::MAX_PER_OWNER as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub deferred_per_owner: u32,

    /// Path of the `grasp-cgi` wrapper: it serves repository pages, 404s, a private service's
    /// requests and a push waiting for another (a plain git request to a public repository runs
    /// git http-backend directly). The hook binaries must sit beside it. Defaults to `grasp-cgi`
    /// next to this executable.
    #[arg(long, env = env_names::CGI_PATH)]
    pub cgi_path: Option<PathBuf>,

    /// How long an event or placeholder waits in the purgatory for its git data: seconds, or a
    /// number with a unit (`500ms`, `90s`, `30m`, `24h`).
    #[arg(long, env = env_names::PURGATORY_TTL, default_value = "1800", value_name = "DURATION", value_parser = parse_duration)]
    pub purgatory_ttl: Duration,

    /// How long a soft-expired announcement is kept for revival after its repository was
    /// deleted (seconds, or a number with a unit).
    #[arg(long, env = env_names::SOFT_EXPIRY_TTL, default_value = "86400", value_name = "DURATION", value_parser = parse_duration)]
    pub soft_expiry_ttl: Duration,

    /// How often the purgatory is checkpointed to <data>/purgatory-state.json (seconds, or a
    /// number with a unit; at least 10ms). Changes since are in the journal
    /// (<data>/purgatory-journal.<n>), synced before an event is answered; each checkpoint
    /// truncates it.
    #[arg(long, env = env_names::CHECKPOINT_INTERVAL, default_value = "60", value_name = "DURATION", value_parser = parse_duration)]
    pub checkpoint_interval: Duration,

    /// Most purgatory entries one author may hold (answered `rate-limited:` beyond).
    #[arg(long, env = env_names::PURGATORY_PER_AUTHOR, default_value_t = 100)]
    pub purgatory_per_author: usize,

    /// Most purgatory entries in total (answered `blocked:` beyond).
    #[arg(long, env = env_names::PURGATORY_TOTAL, default_value_t = 10_000)]
    pub purgatory_total: usize,

    /// Most purgatory entries sent from one client address (IPv6: by --ipv6-prefix-len), whatever
    /// keys sign them (answered `rate-limited:` beyond), so throwaway keys from one place cannot
    /// fill --purgatory-total. Behind a reverse proxy, list it in --trusted-proxy so clients count
    /// by their own addresses.
    #[arg(long, env = env_names::PURGATORY_PER_ADDRESS, default_value_t = grasp_state::purgatory::caps::DEFAULT_PER_ADDRESS)]
    pub purgatory_per_address: usize,

    /// Most bytes of held events in the purgatory (each counted at its serialised size,
    /// soft-expired announcements included; answered `blocked:` beyond); default 256 MiB.
    #[arg(long, env = env_names::PURGATORY_TOTAL_BYTES, default_value_t = grasp_state::purgatory::DEFAULT_TOTAL_BYTES)]
    pub purgatory_total_bytes: usize,

    /// Soft-expired announcements kept for revival (they cost no repository and do not count
    /// against the caps above); beyond it the oldest expires for good.
    #[arg(long, env = env_names::PURGATORY_SOFT_EXPIRED, default_value_t = 10_000)]
    pub purgatory_soft_expired: usize,

    /// Most git-first refs/nostr placeholders per repository.
    #[arg(long, env = env_names::PLACEHOLDERS_PER_REPO, default_value_t = 100)]
    pub placeholders_per_repo: usize,

    /// Most git-first refs/nostr placeholders in total.
    #[arg(long, env = env_names::PLACEHOLDERS_TOTAL, default_value_t = 2_000)]
    pub placeholders_total: usize,

    /// Most git-first refs/nostr placeholders pushed from one client address (IPv6: by
    /// --ipv6-prefix-len; answered `rate-limited:` beyond).
    #[arg(long, env = env_names::PLACEHOLDERS_PER_ADDRESS, default_value_t = grasp_state::purgatory::caps::DEFAULT_PLACEHOLDERS_PER_ADDRESS)]
    pub placeholders_per_address: usize,

    /// Most bytes of unsigned data (objects of git-first refs/nostr pushes, waiting for their
    /// pull request events) held from one client address (IPv6: by --ipv6-prefix-len); a push
    /// past it is refused in pre-receive. Default 256 MiB.
    #[arg(long, env = env_names::UNSIGNED_BYTES_PER_ADDRESS, default_value_t = grasp_state::purgatory::unsigned::DEFAULT_UNSIGNED_PER_ADDRESS)]
    pub unsigned_bytes_per_address: u64,

    /// Most bytes of unsigned data held from everyone; a push past it is refused in
    /// pre-receive (maintainers' pushes are never counted). Default 4 GiB.
    #[arg(long, env = env_names::UNSIGNED_BYTES_TOTAL, default_value_t = grasp_state::purgatory::unsigned::DEFAULT_UNSIGNED_TOTAL)]
    pub unsigned_bytes_total: u64,

    /// Most bytes of pull request data (commits pushed for pull request events of keys that are
    /// not maintainers of the repository, GRASP-06 uploads included) kept for one author; a push
    /// or pull request event past it is refused. Default 512 MiB.
    #[arg(long, env = env_names::CONTRIBUTOR_BYTES_PER_AUTHOR, default_value_t = grasp_state::trust::contributor_data::DEFAULT_PER_AUTHOR)]
    pub contributor_bytes_per_author: u64,

    /// Most bytes of pull request data pushed from one client address (IPv6: by
    /// --ipv6-prefix-len). Default 1 GiB.
    #[arg(long, env = env_names::CONTRIBUTOR_BYTES_PER_ADDRESS, default_value_t = grasp_state::trust::contributor_data::DEFAULT_PER_ADDRESS)]
    pub contributor_bytes_per_address: u64,

    /// Most bytes of pull request data kept for everyone who is no maintainer (maintainers'
    /// data is never counted). Default 16 GiB. Unsigned and pull request data is also refused
    /// while the free disk is below twice --min-free-disk.
    #[arg(long, env = env_names::CONTRIBUTOR_BYTES_TOTAL, default_value_t = grasp_state::trust::contributor_data::DEFAULT_TOTAL)]
    pub contributor_bytes_total: u64,

    /// The data (refs/nostr/<id>) of a pull request closed or merged (status by its author or
    /// a maintainer) and not reachable from the maintainers' branches and tags is pruned this
    /// long after the status; the event stays.
    #[arg(long, env = env_names::PR_DATA_GRACE, default_value = "30d", value_name = "DURATION", value_parser = parse_duration)]
    pub pr_data_grace: Duration,

    /// How often pull request data is measured on disk (merged data leaves the budgets),
    /// statuses followed and closed pull requests' data pruned.
    #[arg(long, env = env_names::CONTRIBUTOR_RECONCILE_INTERVAL, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub contributor_reconcile_interval: Duration,

    /// Most bytes all of one owner's repositories may hold (their objects and their object
    /// pools); a push of their own history past it is refused (0: no quota). Default 20 GiB.
    #[arg(long, env = env_names::OWNER_QUOTA, default_value_t = grasp_state::trust::owner_quota::DEFAULT_OWNER_QUOTA)]
    pub owner_quota: u64,

    /// Most bytes one client address may push in a day into the repositories of owners that are
    /// new here (none of their repositories with data is a day old); 0: no budget. Default 2 GiB.
    #[arg(long, env = env_names::NEW_OWNER_BYTES_PER_ADDRESS_PER_DAY, default_value_t = grasp_state::trust::owner_quota::DEFAULT_NEW_OWNER_PER_ADDRESS_PER_DAY)]
    pub new_owner_bytes_per_address_per_day: u64,

    /// An owner (npub or hex; repeatable or comma separated) exempt from --owner-quota and
    /// --new-owner-bytes-per-address-per-day.
    #[arg(long = "quota-exempt-owner", env = env_names::QUOTA_EXEMPT_OWNERS, value_name = "PUBKEY", value_delimiter = ',', value_parser = parse_pubkey)]
    pub quota_exempt_owner: Vec<PublicKey>,

    /// Background sync: wait this long after a user-submitted event before fetching its missing
    /// git data from other servers (gives the user's `git push` time to arrive). Seconds, or a
    /// number with a unit.
    #[arg(long, env = env_names::SYNC_USER_DELAY, default_value = "3m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_user_delay: Duration,

    /// Background sync: delay after an event that arrived through relay sync (seconds, or a
    /// number with a unit).
    #[arg(long, env = env_names::SYNC_DELAY, default_value = "500ms", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_delay: Duration,

    /// Background sync: first retry delay after an incomplete attempt; the second is twice this
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_BACKOFF, default_value = "20s", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_backoff: Duration,

    /// Background sync: retry delay from the third retry on, and upper bound of every retry
    /// delay (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_BACKOFF_CAP, default_value = "2m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_backoff_cap: Duration,

    /// Former name of --sync-user-delay, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_USER_DELAY_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_user_delay")]
    pub sync_user_delay_ms: Option<u64>,

    /// Former name of --sync-delay, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_DELAY_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_delay")]
    pub sync_delay_ms: Option<u64>,

    /// Former name of --sync-backoff, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_BACKOFF_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_backoff")]
    pub sync_backoff_ms: Option<u64>,

    /// Former name of --sync-backoff-cap, in milliseconds (kept for old command lines).
    #[arg(long, env = env_names::SYNC_BACKOFF_CAP_MS, hide = true, hide_env = true, value_name = "MS", conflicts_with = "sync_backoff_cap")]
    pub sync_backoff_cap_ms: Option<u64>,

    /// Background sync: most concurrent fetches from one domain.
    #[arg(long, env = env_names::SYNC_DOMAIN_CONCURRENCY, default_value_t = 5)]
    pub sync_domain_concurrency: usize,

    /// Background sync: most fetches started per minute from one domain.
    #[arg(long, env = env_names::SYNC_DOMAIN_PER_MINUTE, default_value_t = 30)]
    pub sync_domain_per_minute: usize,

    /// Background sync: most identifiers synced at once.
    #[arg(long, env = env_names::SYNC_MAX_PARALLEL, default_value_t = 16)]
    pub sync_max_parallel: usize,

    /// Background sync: kill a `git fetch` that runs longer than this (seconds, or a number with
    /// a unit; at least 1s).
    #[arg(long, env = env_names::SYNC_FETCH_TIMEOUT, default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_fetch_timeout: Duration,

    /// Background sync: one attempt for an identifier (every clone URL it tries) ends after
    /// this long; its purgatory entries are not kept past their expiry for longer than this
    /// while it runs (seconds, or a number with a unit; at least 1s).
    #[arg(long, env = env_names::SYNC_ATTEMPT_TIMEOUT, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_attempt_timeout: Duration,

    /// Most bytes one background sync fetch may bring from another server (the pack as
    /// received); beyond, the fetch's git processes are killed and nothing it brought is kept.
    /// Default: --max-push-bytes.
    #[arg(long, env = env_names::SYNC_MAX_FETCH_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub sync_max_fetch_bytes: Option<u64>,

    /// Background sync: also fetch from loopback and private address ranges (denied by default;
    /// for tests and private deployments).
    #[arg(long, env = env_names::SYNC_ALLOW_PRIVATE)]
    pub sync_allow_private: bool,

    /// Background sync: never fetch from these address ranges (ADDRESS/PREFIX, repeatable or
    /// comma separated), in addition to the defaults.
    #[arg(long = "sync-deny", env = env_names::SYNC_DENY, value_name = "CIDR", value_delimiter = ',')]
    pub sync_deny: Vec<Cidr>,

    /// Relay sync (GRASP-02): do not follow other relays for events of accepted repositories.
    #[arg(long, env = env_names::NO_RELAY_SYNC)]
    pub no_relay_sync: bool,

    /// Relay sync: a relay always followed for repository announcements, so announcements
    /// listing this server published only there are found (ws:// or wss:// URL; repeatable or
    /// comma separated).
    #[arg(long = "sync-bootstrap-relay", env = env_names::SYNC_BOOTSTRAP_RELAY, value_name = "URL", value_delimiter = ',')]
    pub sync_bootstrap_relays: Vec<String>,

    /// Replica set: another grasp-relay serving the same public domain (its own listener,
    /// `http://host:port`; repeatable or comma separated). Followed for every event and every
    /// repository's git data, trusted on private addresses (docs/scaling.md).
    #[arg(long = "replica", env = env_names::REPLICAS, value_name = "URL", value_delimiter = ',', value_parser = parse_replica)]
    pub replica: Vec<grasp_state::trust::replica::Replica>,

    /// Replica set: how many other replicas must hold a client's event before it is answered
    /// `OK true`, and serve a push before its post-receive ends (0: none; at most the number
    /// of --replica). Bounded by --replica-ack-timeout (docs/scaling.md).
    #[arg(long, env = env_names::REPLICA_ACKS, default_value_t = 0)]
    pub replica_acks: usize,

    /// Replica set: the longest an event or a push waits for --replica-acks confirmations.
    #[arg(long, env = env_names::REPLICA_ACK_TIMEOUT, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub replica_ack_timeout: Duration,

    /// Relay sync: extra trusted root certificates (a PEM file) for `wss://` relays, besides the
    /// Mozilla roots (a private CA; tests).
    #[arg(long, env = env_names::SYNC_TLS_CA, value_name = "FILE")]
    pub sync_tls_ca: Option<PathBuf>,

    /// Relay sync: most relays followed at once (bootstraps first, then those listed by the
    /// most distinct owners of served repositories, then of held ones; each announcement counts
    /// for at most 10 relays, at most 2 URLs per host:port).
    #[arg(long, env = env_names::SYNC_MAX_RELAYS, default_value_t = 50)]
    pub sync_max_relays: usize,

    /// Relay sync: first retry delay after a relay failed; doubled after each further failure
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_BACKOFF, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_backoff: Duration,

    /// Relay sync: longest retry delay (seconds, or a number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_BACKOFF_CAP, default_value = "15m", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_backoff_cap: Duration,

    /// Relay sync: pause after a relay answered `rate-limited:` (seconds, or a number with a
    /// unit).
    #[arg(long, env = env_names::RELAY_SYNC_COOLDOWN, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_cooldown: Duration,

    /// Relay sync: connect deadline and longest wait for each answer; a live connection quiet
    /// this long is pinged, and one that answers nothing to two pings (quiet three times this
    /// long) is dropped and retried with backoff (seconds, or a number with a unit; at least
    /// 100ms).
    #[arg(long, env = env_names::RELAY_SYNC_TIMEOUT, default_value = "15s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_timeout: Duration,

    /// Relay sync: a synced event waiting for what it tags makes the missing event be asked
    /// for by id after this long (one such request open per relay at a time; seconds, or a
    /// number with a unit).
    #[arg(long, env = env_names::RELAY_SYNC_PARENT_REQUEST, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub relay_sync_parent_request: Duration,

    /// Relay sync: events per second taken from one relay (its write bucket; reading from a
    /// relay that sends faster pauses). Every event counts, asked for or not.
    #[arg(long, env = env_names::RELAY_SYNC_RATE, default_value_t = DEFAULT_RELAY_SYNC_RATE)]
    pub relay_sync_rate: f64,

    /// Relay sync: events one relay may send at once before `--relay-sync-rate` applies.
    #[arg(long, env = env_names::RELAY_SYNC_BURST, default_value_t = DEFAULT_RELAY_SYNC_BURST)]
    pub relay_sync_burst: u32,

    /// GRASP-03 Sync+: do not fetch the conversations of served repositories from the relays
    /// of their participants (their NIP-65 write relays and GRASP lists). Never runs on a
    /// private service, nor without relay sync.
    #[arg(long, env = env_names::NO_SYNC_PLUS)]
    pub no_sync_plus: bool,

    /// Index relays: where the relay lists (kinds 10002, 10317) of participants are looked up
    /// besides a repository's own relays, and where this relay's profile and relay list are
    /// published when absent (ws:// or wss:// URL; repeatable or comma separated). Default:
    /// wss://purplepag.es, wss://relay.nostr.band, wss://indexer.coracle.social.
    #[arg(long = "index-relay", env = env_names::INDEX_RELAYS, value_name = "URL", value_delimiter = ',', conflicts_with = "no_index_relays")]
    pub index_relays: Vec<String>,

    /// Use no index relay at all (nothing looked up there, nothing published there).
    #[arg(long, env = env_names::NO_INDEX_RELAYS)]
    pub no_index_relays: bool,

    /// Sync+: time between two passes over the served repositories (seconds, or a number with
    /// a unit; at least 100ms).
    #[arg(long, env = env_names::SYNC_PLUS_INTERVAL, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_plus_interval: Duration,

    /// Sync+: a participant's cached relay lists are looked up again after this long
    /// (seconds, or a number with a unit).
    #[arg(long, env = env_names::SYNC_PLUS_LIST_REFRESH, default_value = "1h", value_name = "DURATION", value_parser = parse_duration)]
    pub sync_plus_list_refresh: Duration,

    /// Sync+: most discovered relays (participants' relays no announcement lists) followed at
    /// once; with more, each pass continues after the last one taken.
    #[arg(long, env = env_names::SYNC_PLUS_MAX_RELAYS, default_value_t = 32)]
    pub sync_plus_max_relays: usize,

    /// GRASP-06: serve contributor repositories at `/prs/<npub>/<identifier>.git`, where anyone
    /// pushes the commits of their own pull requests (`refs/nostr/<event-id>` only, each bound to
    /// a pull request signed by that npub), and hold pull requests for repositories not announced
    /// here when their `clone` tag names such a URL on this server (docs/protocol.md). Listed in
    /// NIP-11 `supported_grasps`; off, `/prs/` answers 404. Not with --private.
    #[arg(long, env = env_names::GRASP06, conflicts_with = "private")]
    pub grasp06: bool,

    /// GRASP-05 archive: also accept announcements that do not list this server when they match
    /// one of these patterns (npub: all its repositories; npub/identifier; identifier: whoever
    /// owns it; repeatable or comma separated). Their repositories are made, their events and
    /// git data come by relay sync and background sync from the servers they list, and they
    /// refuse pushes unless --archive-writable (docs/protocol.md#archive-mode).
    #[arg(long = "archive", env = env_names::ARCHIVE, value_name = "PATTERN", value_delimiter = ',')]
    pub archive: Vec<RepoPattern>,

    /// GRASP-05 archive: accept every announcement (read-only unless --archive-writable). The
    /// storage risk: --max-repos, the purgatory budgets, --min-free-disk and the sync byte caps
    /// bound it.
    #[arg(long, env = env_names::ARCHIVE_ALL)]
    pub archive_all: bool,

    /// GRASP-05 archive: accept the announcements with a `clone` URL on this GRASP service
    /// (host[:port], compared as an announcement's URLs are with --public-host; repeatable or
    /// comma separated).
    #[arg(long = "archive-grasp-service", env = env_names::ARCHIVE_GRASP_SERVICES, value_name = "HOST", value_delimiter = ',')]
    pub archive_grasp_service: Vec<String>,

    /// GRASP-05 archive: archived repositories take pushes authorised by state events, as the
    /// hosted ones do (default: refused, naming where the repository is hosted).
    #[arg(long, env = env_names::ARCHIVE_WRITABLE)]
    pub archive_writable: bool,

    /// Public key (hex or npub) of the operator, NIP-11 `pubkey` (the administrative contact;
    /// without it, the relay's own key).
    #[arg(long, env = env_names::ADMIN_PUBKEY, value_parser = parse_pubkey)]
    pub admin_pubkey: Option<PublicKey>,

    /// Trust: run a GRASP-08 private service. Every REQ and EVENT needs NIP-42 AUTH as a member,
    /// git over HTTP needs a member's `Authorization: Nostr` proof (docs/protocol.md#trust).
    #[arg(long, env = env_names::PRIVATE)]
    pub private: bool,

    /// Trust: a member of the private service (npub or hex; repeatable or comma separated). The
    /// admin pubkey is always a member.
    #[arg(long = "member", env = env_names::MEMBERS, value_name = "PUBKEY", value_delimiter = ',', value_parser = parse_pubkey)]
    pub member: Vec<PublicKey>,

    /// Trust: a file of members (one npub or hex key per line, `#` comments), re-read when it
    /// changes.
    #[arg(long, env = env_names::MEMBERS_FILE, value_name = "PATH")]
    pub members_file: Option<PathBuf>,

    /// Trust: a private service's peers (repeatable or comma separated): a `ws://` / `wss://`
    /// relay URL is the only kind of relay its relay sync follows (authenticating with the
    /// service key when asked) and its host a git sync source; a plain `host` or `host:port` is
    /// a git sync source only. Default: none, a private service syncs with nobody.
    #[arg(long = "private-sync-peer", env = env_names::PRIVATE_SYNC_PEERS, value_name = "URL|HOST", value_delimiter = ',')]
    pub private_sync_peer: Vec<String>,

    /// Trust: the private service's own key, answering the NIP-42 challenges of its
    /// `--private-sync-peer` relays (a hex or nsec secret key in a file; created, mode 0600, if
    /// missing; its npub is logged at start). Default: `<data-dir>/service-key`. May be the
    /// `--relay-key-file`, to use one key for both.
    #[arg(long, env = env_names::SERVICE_KEY_FILE, value_name = "PATH")]
    pub service_key_file: Option<PathBuf>,

    /// Trust: events one connection may send at once before the rate applies.
    #[arg(long, env = env_names::WRITE_BURST, default_value_t = 500)]
    pub write_burst: u32,

    /// Trust: events per second one connection may send after its burst.
    #[arg(long, env = env_names::WRITE_RATE, default_value_t = 50.0)]
    pub write_rate: f64,

    /// Trust: events all connections from one client address may send at once.
    #[arg(long, env = env_names::WRITE_BURST_PER_IP, default_value_t = 2000)]
    pub write_burst_per_ip: u32,

    /// Trust: events per second all connections from one client address may send after the burst.
    #[arg(long, env = env_names::WRITE_RATE_PER_IP, default_value_t = 200.0)]
    pub write_rate_per_ip: f64,

    /// Trust: new repositories one author may create per hour.
    #[arg(long, env = env_names::NEW_REPOS_PER_AUTHOR_PER_HOUR, default_value_t = 60)]
    pub new_repos_per_author_per_hour: u32,

    /// Trust: most repositories on disk; announcements that would create more are refused
    /// (0: no limit).
    #[arg(long, env = env_names::MAX_REPOS, default_value_t = 100_000)]
    pub max_repos: usize,

    /// Trust: a reverse proxy (ADDRESS/PREFIX; repeatable or comma separated) whose
    /// `X-Forwarded-For` / `X-Real-IP` give the client address for connection and write limits.
    #[arg(long = "trusted-proxy", env = env_names::TRUSTED_PROXIES, value_name = "CIDR", value_delimiter = ',', value_parser = parse_ipnet)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// Curation: refuse every event by this author (npub or hex; repeatable or comma separated).
    #[arg(long = "block-author", env = env_names::BLOCK_AUTHORS, value_name = "PUBKEY", value_delimiter = ',', value_parser = parse_pubkey)]
    pub block_author: Vec<PublicKey>,

    /// Curation: refuse this event id (hex; repeatable or comma separated).
    #[arg(long = "block-event", env = env_names::BLOCK_EVENTS, value_name = "ID", value_delimiter = ',', value_parser = parse_event_id)]
    pub block_event: Vec<EventId>,

    /// Curation: only host repositories matching these patterns (npub, npub/identifier or
    /// identifier; repeatable or comma separated).
    #[arg(long = "allow-repo", env = env_names::ALLOW_REPOS, value_name = "PATTERN", value_delimiter = ',')]
    pub allow_repo: Vec<RepoPattern>,

    /// Curation: never host repositories matching these patterns.
    #[arg(long = "deny-repo", env = env_names::DENY_REPOS, value_name = "PATTERN", value_delimiter = ',')]
    pub deny_repo: Vec<RepoPattern>,

    /// Curation: a file of rules (`block-author`, `block-event`, `allow-repo`, `deny-repo`, one
    /// per line), re-read when it changes.
    #[arg(long, env = env_names::CURATION_FILE, value_name = "PATH")]
    pub curation_file: Option<PathBuf>,

    /// Relay name published in the NIP-11 document.
    #[arg(long, env = env_names::NAME, default_value = "grasp-relay")]
    pub name: String,

    /// Relay description published in the NIP-11 document.
    #[arg(
        long,
        env = env_names::DESCRIPTION,
        default_value = "A GRASP server: Nostr relay and git hosting for NIP-34 repositories."
    )]
    pub description: String,

    /// URL of the software this server runs, published as NIP-11 `software` (clients and the
    /// GRASP conformance suite expect it); an `http://` or `https://` URL. Default: grasp-relay's
    /// project (the workspace's `repository`); set it to the repository a modified build came from.
    #[arg(long, env = env_names::SOFTWARE_URL, value_name = "URL", default_value = DEFAULT_SOFTWARE_URL, value_parser = parse_software_url)]
    pub software_url: String,
}

/// Exit status of a refused configuration (the flags, the environment or the file), as clap's
/// for a bad flag; the systemd unit does not restart into it (`RestartPreventExitStatus`).
pub const EXIT_BAD_CONFIGURATION: u8 = 2;

/// One-shot commands: against a running relay (through its loopback API), or checks of the
/// configuration and the installation.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Command {
    /// Print what waits in the purgatory of the relay running on --data-dir.
    Purgatory {
        /// Print the JSON of `GET /v1/purgatory` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the background sync of the relay running on --data-dir: each relay followed by
    /// relay-to-relay sync (state, repositories, events received/accepted/refused, last error;
    /// `+` marks a participant's relay followed for GRASP-03 Sync+), the git-data sync queue,
    /// and Sync+'s figures (participants, lists cached, passes, events gained, failing look-ups).
    Sync {
        /// Print the JSON of `GET /v1/sync` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the repositories of the relay running on --data-dir: owner, identifier,
    /// served/held/orphaned, size; directories left by crashes ("leftovers").
    Repos {
        /// Print the JSON of `GET /v1/repos` (or of the purge) instead of a table.
        #[arg(long)]
        json: bool,
        /// Only orphaned repositories (no stored or held announcement justifies them) and
        /// leftovers.
        #[arg(long)]
        orphans: bool,
        /// Remove orphans and leftovers. Without --yes, only prints what would be removed.
        #[arg(long)]
        purge: bool,
        /// With --purge: really remove (orphans younger than 10 minutes and repositories being
        /// pushed to are kept).
        #[arg(long, requires = "purge")]
        yes: bool,
    },
    /// Check every repository of the relay running on --data-dir against its confirmed
    /// maintainers (NIP-34 roles, reciprocal): report those whose refs another key's state moved
    /// (the authorization-integrity pass; it also runs at every start). A dry run unless --apply.
    Authority {
        /// Print the JSON report instead of lines.
        #[arg(long)]
        json: bool,
        /// Realign the repositories found to their confirmed maintainers' newest state.
        #[arg(long)]
        apply: bool,
    },
    /// Remove everything of one author from the relay running on --data-dir: stored events,
    /// held events and repositories (blocking an author keeps what is stored; this removes it).
    PurgeAuthor {
        /// The author's npub or hex public key.
        author: String,
    },
    /// Check a configuration file, or print the configuration in force and where each value
    /// came from.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Check this installation and print what to fix: git and the features the server needs,
    /// the helper binaries beside the relay, the data directory's owner and permissions, free
    /// disk against --min-free-disk, the open file limit against the connection limits, the
    /// public host and, with --nginx, the nginx site. Run it as the service's user with the
    /// service's configuration (`--config`). Exit status 0: fit to serve.
    Doctor {
        /// An nginx site configuration to check: git routed to grasp-cgi through FastCGI with
        /// request buffering off (docs/nginx/grasp.conf is the example).
        #[arg(long, value_name = "FILE")]
        nginx: Option<PathBuf>,
    },
}

/// `grasp-relay config ...`
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum ConfigCommand {
    /// Check a configuration file without starting: every key known and in its section, every
    /// value of the right type and accepted (the file alone; flags and environment variables
    /// are not read). Exit status 0 when the relay would start with it.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
    /// Print the configuration in force (flags, environment, --config file, defaults) as a
    /// configuration file, each value's source in its comment.
    Show,
}

/// A duration: whole seconds (`90`), or a number with a unit `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: give seconds (90) or a number with ms, s, m, h or d (500ms, 30m, 30d)"))?;
    let secs = |mul: u64| n.checked_mul(mul).map(Duration::from_secs);
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => None,
    }
    .ok_or_else(|| format!("invalid duration {s:?}: give seconds (90) or a number with ms, s, m, h or d (500ms, 30m, 30d)"))
}

fn parse_ipnet(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("invalid address range {s:?}: give ADDRESS/PREFIX, e.g. 10.0.0.0/8 or ::1/128"))
}

fn parse_event_id(s: &str) -> Result<EventId, String> {
    EventId::from_hex(s.trim()).map_err(|_| format!("invalid event id {s:?}: give 64 hex characters"))
}

/// A `--private-sync-peer` entry naming a relay (`ws://` / `wss://`), followed by relay sync.
pub fn is_relay_url(peer: &str) -> bool {
    let lower = peer.trim().to_ascii_lowercase();
    lower.starts_with("ws://") || lower.starts_with("wss://")
}


/// `--software-url`'s default: this software's project (`repository` in the workspace's Cargo.toml).
pub const DEFAULT_SOFTWARE_URL: &str = env!("CARGO_PKG_REPOSITORY");

fn parse_software_url(s: &str) -> Result<String, String> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !s.chars().any(char::is_whitespace) => Ok(s.to_string()),
        _ => Err(format!("invalid software URL {s:?}: give an http:// or https:// URL, e.g. https://git.example.com/grasp-relay")),
    }
}

fn parse_replica(s: &str) -> Result<grasp_state::trust::replica::Replica, String> {
    grasp_state::trust::replica::Replica::parse(s).map_err(|e| e.to_string())
}

fn parse_pubkey(s: &str) -> Result<PublicKey, String> {
    if s.starts_with("npub1") {
        PublicKey::from_bech32(s).map_err(|e| format!("invalid npub: {e}"))
    } else {
        PublicKey::from_str(s).map_err(|e| format!("invalid public key (give hex or npub): {e}"))
    }
}

impl Config {
    /// The public host[:port]: the configured one, else the bind address.
    pub fn public_host(&self) -> String {
        self.public_host
            .clone()
            .unwrap_or_else(|| self.bind.to_string())
    }

    /// `--sync-attempt-timeout`, at least one second.
    pub fn sync_attempt_timeout(&self) -> Duration {
        self.sync_attempt_timeout.max(Duration::from_secs(1))
    }

    /// The public host as bare `host[:port]` (scheme and trailing `/` dropped): what this
    /// server's own URLs are recognised by (git sync, relay sync).
    pub fn public_authority(&self) -> String {
        grasp_state::names::host::public_authority(&self.public_host()).to_string()
    }

    /// Path of the CGI wrapper binary.
    pub fn cgi_path(&self) -> PathBuf {
        if let Some(p) = &self.cgi_path {
            return p.clone();
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("grasp-cgi")))
            .unwrap_or_else(|| PathBuf::from("grasp-cgi"))
    }

    /// The helper binaries the relay runs and installs: grasp-cgi (`--cgi-path`) and the hook
    /// binaries beside it.
    pub fn helper_binaries(&self) -> Vec<PathBuf> {
        let cgi = self.cgi_path();
        let dir = cgi.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        vec![cgi, dir.join("grasp-pre-receive"), dir.join("grasp-post-receive")]
    }

    /// The `--private-sync-peer` entries that name relays (`ws://` / `wss://`).
    pub fn private_sync_relays(&self) -> Vec<String> {
        self.private_sync_peer.iter().filter(|p| is_relay_url(p)).cloned().collect()
    }

    /// Whether relay sync runs: not with `--no-relay-sync`, nor on a private service without a
    /// relay among its `--private-sync-peer`s (it then follows those relays only).
    pub fn relay_sync_enabled(&self) -> bool {
        !(self.no_relay_sync || (self.private && self.private_sync_relays().is_empty() && self.replica.is_empty()))
    }

    /// Whether GRASP-03 Sync+ runs: with relay sync, on a public service, not with
    /// `--no-sync-plus`.
    pub fn sync_plus_enabled(&self) -> bool {
        self.relay_sync_enabled() && !self.private && !self.no_sync_plus
    }

    /// The index relays: `--index-relay`, else [`DEFAULT_INDEX_RELAYS`]; none with
    /// `--no-index-relays` or on a private service (it uses no discovered relay).
    pub fn index_relays(&self) -> Vec<String> {
        if self.no_index_relays || self.private {
            return Vec::new();
        }
        if self.index_relays.is_empty() {
            return DEFAULT_INDEX_RELAYS.iter().map(|s| s.to_string()).collect();
        }
        self.index_relays.clone()
    }

    /// Whether NIP-77 negentropy is served (not with `--no-negentropy`).
    pub fn negentropy_enabled(&self) -> bool {
        !self.no_negentropy
    }

    /// The layout under `--data-dir` (described once, in [`crate::datadir`]).
    pub fn layout(&self) -> crate::datadir::DataLayout {
        crate::datadir::DataLayout::new(&self.data_dir)
    }

    /// The purgatory's durations and caps.
    pub fn purgatory(&self) -> grasp_state::purgatory::PurgatoryConfig {
        let mut c = grasp_state::purgatory::PurgatoryConfig {
            entry_ttl: self.purgatory_ttl,
            soft_expiry_ttl: self.soft_expiry_ttl,
            sync_defer_limit: self.sync_attempt_timeout(),
            ..Default::default()
        };
        c.caps.per_author = self.purgatory_per_author;
        c.caps.total = self.purgatory_total;
        c.caps.per_address = self.purgatory_per_address;
        c.caps.total_bytes = self.purgatory_total_bytes;
        c.caps.soft_expired = self.purgatory_soft_expired;
        c.caps.placeholders_per_repo = self.placeholders_per_repo;
        c.caps.placeholders_total = self.placeholders_total;
        c.caps.placeholders_per_address = self.placeholders_per_address;
        c.unsigned.per_address = self.unsigned_bytes_per_address;
        c.unsigned.total = self.unsigned_bytes_total;
        c
    }



    /// The quota per owner and the daily budget per address for new owners.
    pub fn owner_quotas(&self) -> grasp_state::trust::owner_quota::OwnerQuotas {
        grasp_state::trust::owner_quota::OwnerQuotas {
            per_owner: self.owner_quota,
            new_owner_per_address_per_day: self.new_owner_bytes_per_address_per_day,
        }
    }

    /// The budgets of pull request data no maintainer signed.
    pub fn contributor_budget(&self) -> grasp_state::trust::contributor_data::ContributorBudget {
        grasp_state::trust::contributor_data::ContributorBudget {
            per_author: self.contributor_bytes_per_author,
            per_address: self.contributor_bytes_per_address,
            total: self.contributor_bytes_total,
        }
    }

    /// Where the private service's key is kept (`--service-key-file`, else in the data
    /// directory).
    pub fn service_key_file(&self) -> PathBuf {
        self.service_key_file.clone().unwrap_or_else(|| self.layout().service_key_file())
    }


    /// The event size limits: general, repository events, per kind.
    pub fn event_sizes(&self) -> grasp_state::nostr::event_size::EventSizes {
        grasp_state::nostr::event_size::EventSizes { general: self.max_message_bytes, repo_events: self.max_repo_event_bytes }
    }


    /// The allow/deny lists given on the command line.
    pub fn curation(&self) -> Curation {
        Curation {
            blocked_authors: self.block_author.iter().copied().collect(),
            blocked_events: self.block_event.iter().copied().collect(),
            repo_allow: self.allow_repo.iter().cloned().collect(),
            repo_deny: self.deny_repo.iter().cloned().collect(),
        }
    }

    /// How often to checkpoint the purgatory (never more often than every 10 ms).
    pub fn checkpoint_interval(&self) -> Duration {
        self.checkpoint_interval.max(Duration::from_millis(10))
    }

    /// A configuration with all defaults, for tests.
    /// The size limits of one push (`--max-push-bytes`, `--max-pr-push-bytes`).
    pub fn push_limits(&self) -> grasp_state::contract::push_limits::PushLimits {
        grasp_state::contract::push_limits::PushLimits { max_push_bytes: self.max_push_bytes, max_pr_push_bytes: self.max_pr_push_bytes }
    }


    /// The GRASP-05 archive configuration (`--archive*`).
    pub fn archive(&self) -> grasp_state::trust::archive::Archive {
        grasp_state::trust::archive::Archive {
            all: self.archive_all,
            patterns: self.archive.clone(),
            services: self.archive_grasp_service.iter().map(|h| grasp_state::names::host::public_authority(h).to_string()).collect(),
            writable: self.archive_writable,
        }
    }

    /// The bounds of deferred repository work.
    pub fn deferred_limits(&self) -> grasp_state::git::deferred::DeferredLimits {
        grasp_state::git::deferred::DeferredLimits {
            total: self.deferred_total as usize,
            per_author: self.deferred_per_author as usize,
            per_owner: self.deferred_per_owner as usize,
        }
    }

    pub fn for_tests(data_dir: PathBuf) -> Self {
        let mut cfg = Self::parse_from(["grasp-relay"]);
        cfg.data_dir = data_dir;
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Config::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let cfg = Config::parse_from(["grasp-relay"]);
        assert_eq!(cfg.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(cfg.public_host(), "127.0.0.1:8080");
        assert_eq!(cfg.max_message_bytes, 512 * 1024);
        assert_eq!(cfg.max_subscriptions, 32);
        assert_eq!(cfg.max_filters, 16);
        assert_eq!(cfg.max_limit, 500);
        assert_eq!(cfg.max_answer_bytes, 32 << 20);
        assert_eq!((cfg.max_connections, cfg.max_connections_per_ip), (1024, 64));
        assert!(Config::try_parse_from(["grasp-relay", "--max-connections", "0"]).is_err());
        assert_eq!((cfg.ipv6_prefix_len, cfg.min_free_disk), (64, 1 << 30));
        assert_eq!(cfg.purgatory().caps.total_bytes, 256 << 20);
        assert!(Config::try_parse_from(["grasp-relay", "--ipv6-prefix-len", "129"]).is_err());
        assert!(Config::try_parse_from(["grasp-relay", "--ipv6-prefix-len", "0"]).is_err());
        assert_eq!(cfg.layout().events(), PathBuf::from("./data/events"));
        assert!(cfg.cgi_path().ends_with("grasp-cgi"));
    }


    #[test]
    fn metrics_listener_is_off_unless_asked() {
        assert_eq!(Config::parse_from(["grasp-relay"]).metrics_bind, None);
        let cfg = Config::parse_from(["grasp-relay", "--metrics-bind", "127.0.0.1:9187"]);
        assert_eq!(cfg.metrics_bind, Some("127.0.0.1:9187".parse().unwrap()));
    }

    #[test]
    fn purgatory_durations_take_seconds_or_units() {
        let cfg = Config::parse_from(["grasp-relay"]);
        assert_eq!(cfg.purgatory().entry_ttl, Duration::from_secs(1800));
        assert_eq!(cfg.purgatory().soft_expiry_ttl, Duration::from_secs(86400));
        assert_eq!(cfg.checkpoint_interval(), Duration::from_secs(60));
        let cfg = Config::parse_from([
            "grasp-relay",
            "--purgatory-ttl",
            "2",
            "--soft-expiry-ttl",
            "3m",
            "--checkpoint-interval",
            "1ms",
        ]);
        assert_eq!(cfg.purgatory().entry_ttl, Duration::from_secs(2));
        assert_eq!(cfg.purgatory().soft_expiry_ttl, Duration::from_secs(180));
        assert_eq!(cfg.checkpoint_interval(), Duration::from_millis(10));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        for bad in ["", "ms", "1.5", "-1", "10w", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn purgatory_subcommand_takes_the_data_dir_after_it() {
        let cfg = Config::parse_from(["grasp-relay", "purgatory", "--data-dir", "/srv/grasp"]);
        assert_eq!(cfg.command, Some(Command::Purgatory { json: false }));
        assert_eq!(cfg.data_dir, PathBuf::from("/srv/grasp"));
        let cfg = Config::parse_from(["grasp-relay", "--data-dir", "d", "purgatory", "--json"]);
        assert_eq!(cfg.command, Some(Command::Purgatory { json: true }));
        assert_eq!(Config::parse_from(["grasp-relay"]).command, None);
    }



    #[test]
    fn public_host_overrides_bind() {
        let cfg = Config::parse_from(["grasp-relay", "--public-host", "git.example.com"]);
        assert_eq!(cfg.public_host(), "git.example.com");
    }


    #[test]
    fn admin_pubkey_accepts_hex_and_npub() {
        let hex = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let a = Config::parse_from(["grasp-relay", "--admin-pubkey", hex]);
        let npub = a.admin_pubkey.unwrap().to_bech32().unwrap();
        let b = Config::parse_from(["grasp-relay", "--admin-pubkey", &npub]);
        assert_eq!(a.admin_pubkey, b.admin_pubkey);
        assert!(Config::try_parse_from(["grasp-relay", "--admin-pubkey", "nope"]).is_err());
    }
}
