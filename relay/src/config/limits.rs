//! `[limits]`: what one client, one connection and the whole server may take.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::time::Duration;

use clap::Args;
use grasp_state::contract::env_names;
use nostr::prelude::PublicKey;

use super::{DEFAULT_MAX_ANSWER_BYTES, DEFAULT_NEGENTROPY_MAX_ITEMS, DEFAULT_NEGENTROPY_MAX_ITEMS_PER_CONNECTION, DEFAULT_NEGENTROPY_MAX_ITEMS_TOTAL, DEFAULT_NEGENTROPY_OPENS_PER_MINUTE, parse_duration, parse_pubkey};

/// The `[limits]` section: what one client, one connection and the whole server may take.
#[derive(Debug, Clone, Args)]
pub struct LimitsConfig {
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

    /// Largest accepted WebSocket message in bytes; bigger messages are answered with an error.
    #[arg(long, env = env_names::MAX_MESSAGE_BYTES, default_value_t = 512 * 1024)]
    pub max_message_bytes: usize,

    /// Most bytes of a repository announcement (30617) or state event (30618): they grow with
    /// the repository (maintainers, branches, tags); default 256 KiB, about 3,000 refs. Never above
    /// `--max-message-bytes`.
    #[arg(long, env = env_names::MAX_REPO_EVENT_BYTES, default_value_t = grasp_state::nostr::event_size::DEFAULT_MAX_REPO_EVENT_BYTES)]
    pub max_repo_event_bytes: usize,

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

    /// Most git requests (clones, fetches, pushes, repository pages) served at once; more get a
    /// `503`. A request holds its place until its answer has streamed.
    #[arg(long, env = env_names::GIT_MAX_REQUESTS, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub git_max_requests: u32,

    /// Most git requests one client address runs at once, stalled ones included (0: no
    /// per-address limit, e.g. behind a reverse proxy).
    #[arg(long, env = env_names::GIT_MAX_REQUESTS_PER_IP, default_value_t = 8)]
    pub git_max_requests_per_ip: u32,

    /// A git request whose client sends nothing for this long (or closes before the end of its
    /// body) is ended and its git processes killed, releasing the repository's push lock. Push
    /// quarantines idle this long are removed (left by a crash), and unreachable objects older
    /// than this are pruned after an expired placeholder's ref is removed.
    #[arg(long, env = env_names::GIT_IDLE_TIMEOUT, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub git_idle_timeout: Duration,

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

    /// How long a push waits for another push to the same repository (anyone's, however slow)
    /// to end before it is answered 503 with Retry-After ("another push to this repository is
    /// in progress; retry later"). Passed to grasp-cgi as GRASP_PUSH_LOCK_WAIT (whole seconds).
    #[arg(long, env = env_names::PUSH_LOCK_WAIT, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub push_lock_wait: Duration,

    /// Most bytes of objects one push may bring (git's `receive.maxInputSize`, and checked on the
    /// push's quarantine before anything lands); default 1 GiB.
    #[arg(long, env = env_names::MAX_PUSH_BYTES, default_value_t = grasp_state::contract::push_limits::DEFAULT_MAX_PUSH_BYTES)]
    pub max_push_bytes: u64,

    /// Most bytes of objects one push to `refs/nostr/*` (a pull request's commits, which anyone
    /// may push) may bring, checked on the quarantine; default 100 MiB.
    #[arg(long, env = env_names::MAX_PR_PUSH_BYTES, default_value_t = grasp_state::contract::push_limits::DEFAULT_MAX_PR_PUSH_BYTES)]
    pub max_pr_push_bytes: u64,

    /// How long processing a client's event waits for a repository it governs (a push may hold
    /// it) before that repository's work is deferred and retried later while the rest proceeds.
    #[arg(long, env = env_names::EVENT_LOCK_WAIT, default_value = "3s", value_name = "DURATION", value_parser = parse_duration)]
    pub event_lock_wait: Duration,

    /// How many tasks may wait for one repository's locks at a time; one more is told at once
    /// that the repository is busy (a state event then gets `rate-limited:`).
    #[arg(long, env = env_names::REPO_LOCK_QUEUE, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub repo_lock_queue: u32,

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
}

impl LimitsConfig {
    /// Whether NIP-77 negentropy is served (not with `--no-negentropy`).
    pub fn negentropy_enabled(&self) -> bool {
        !self.no_negentropy
    }

    /// The quota per owner and the daily budget per address for new owners.
    pub fn owner_quotas(&self) -> grasp_state::trust::owner_quota::OwnerQuotas {
        grasp_state::trust::owner_quota::OwnerQuotas {
            per_owner: self.owner_quota,
            new_owner_per_address_per_day: self.new_owner_bytes_per_address_per_day,
        }
    }

    /// The event size limits: general, repository events, per kind.
    pub fn event_sizes(&self) -> grasp_state::nostr::event_size::EventSizes {
        grasp_state::nostr::event_size::EventSizes { general: self.max_message_bytes, repo_events: self.max_repo_event_bytes }
    }

    /// The size limits of one push (`--max-push-bytes`, `--max-pr-push-bytes`).
    pub fn push_limits(&self) -> grasp_state::contract::push_limits::PushLimits {
        grasp_state::contract::push_limits::PushLimits { max_push_bytes: self.max_push_bytes, max_pr_push_bytes: self.max_pr_push_bytes }
    }
}

impl Default for LimitsConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().limits
    }
}
