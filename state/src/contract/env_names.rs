//! Every `GRASP_*` environment variable name, spelled once: the ones the processes pass to each
//! other (the relay to grasp-cgi and the hooks' configuration, nginx to grasp-cgi), the variable
//! of every flag of `grasp-relay` (its `--help` shows them), and those of the project's own tests
//! and tools. The constant is the name without `GRASP_`.
//!
//! Nothing here reads the environment; the processes read it (clap, `std::env`) by these names.

// What the processes pass to each other.
/// `GRASP_DATA_DIR`: the relay's data directory: `--data-dir` of grasp-relay and grasp-cgi, and
/// the line of the hooks' configuration (`hook_config`) that names it.
pub const DATA_DIR: &str = "GRASP_DATA_DIR";
/// `GRASP_GIT_ROOT`: the root of the bare repositories, as the relay passes it to grasp-cgi
/// (`--git-root`).
pub const GIT_ROOT: &str = "GRASP_GIT_ROOT";
/// `GRASP_HOOKS_DIR`: the hooks directory, as the relay passes it to grasp-cgi (`--hooks-dir`).
pub const HOOKS_DIR: &str = "GRASP_HOOKS_DIR";
/// `GRASP_GIT`: the git executable (grasp-cgi `--git`).
pub const GIT: &str = "GRASP_GIT";
/// `GRASP_GIT_HTTP_BACKEND`: git's `git-http-backend` program, run directly instead of `git
/// http-backend`; the relay sets it for grasp-cgi (`--http-backend`).
pub const GIT_HTTP_BACKEND: &str = "GRASP_GIT_HTTP_BACKEND";
/// `GRASP_GIT_IDLE_TIMEOUT`: seconds a request body may send nothing (`--git-idle-timeout` of
/// grasp-relay, `--idle-timeout` of grasp-cgi).
pub const GIT_IDLE_TIMEOUT: &str = "GRASP_GIT_IDLE_TIMEOUT";
/// `GRASP_PUSH_LOCK_WAIT`: seconds a push waits for the push lock (`--push-lock-wait` of
/// grasp-relay and grasp-cgi).
pub const PUSH_LOCK_WAIT: &str = "GRASP_PUSH_LOCK_WAIT";
/// `GRASP_GIT_MIN_RATE`: the minimum rate of a git request body (`--git-min-rate` of
/// grasp-relay, `--min-rate` of grasp-cgi; `transfer`).
pub const GIT_MIN_RATE: &str = "GRASP_GIT_MIN_RATE";
/// `GRASP_MAX_PUSH_BYTES`: `--max-push-bytes`, carried to the hooks (in their configuration)
/// and to grasp-cgi.
pub const MAX_PUSH_BYTES: &str = "GRASP_MAX_PUSH_BYTES";
/// `GRASP_MAX_PR_PUSH_BYTES`: `--max-pr-push-bytes`, carried to the hooks and to grasp-cgi
/// (git's `receive.maxInputSize` for a contributor repository).
pub const MAX_PR_PUSH_BYTES: &str = "GRASP_MAX_PR_PUSH_BYTES";
/// `GRASP_GRASP06`: GRASP-06 contributor repositories on (`--grasp06` of grasp-relay and
/// grasp-cgi).
pub const GRASP06: &str = "GRASP_GRASP06";
/// `GRASP_CGI_SUPERVISED`: set by grasp-relay's listener to tell grasp-cgi that it supervises the
/// request itself (CORS headers, the body's idle and rate bounds, the process group's end), so a
/// git request may become `git http-backend` by exec instead of being relayed
/// (docs/architecture.md; grasp-cgi `--supervised`).
pub const CGI_SUPERVISED: &str = "GRASP_CGI_SUPERVISED";

// The other flags of grasp-relay, in the order `relay/src/config.rs` defines them.
/// `--public-host`.
pub const PUBLIC_HOST: &str = "GRASP_PUBLIC_HOST";
/// `--bind`.
pub const BIND: &str = "GRASP_BIND";
/// `--relay-key-file`.
pub const RELAY_KEY_FILE: &str = "GRASP_RELAY_KEY_FILE";
/// `--config`.
pub const CONFIG: &str = "GRASP_CONFIG";
/// `--log`.
pub const LOG: &str = "GRASP_LOG";
/// `--max-message-bytes`.
pub const MAX_MESSAGE_BYTES: &str = "GRASP_MAX_MESSAGE_BYTES";
/// `--max-subscriptions`.
pub const MAX_SUBSCRIPTIONS: &str = "GRASP_MAX_SUBSCRIPTIONS";
/// `--max-filters`.
pub const MAX_FILTERS: &str = "GRASP_MAX_FILTERS";
/// `--max-limit`.
pub const MAX_LIMIT: &str = "GRASP_MAX_LIMIT";
/// `--max-answer-bytes`.
pub const MAX_ANSWER_BYTES: &str = "GRASP_MAX_ANSWER_BYTES";
/// `--no-negentropy`.
pub const NO_NEGENTROPY: &str = "GRASP_NO_NEGENTROPY";
/// `--negentropy-max-items`.
pub const NEGENTROPY_MAX_ITEMS: &str = "GRASP_NEGENTROPY_MAX_ITEMS";
/// `--negentropy-max-items-per-connection`.
pub const NEGENTROPY_MAX_ITEMS_PER_CONNECTION: &str = "GRASP_NEGENTROPY_MAX_ITEMS_PER_CONNECTION";
/// `--negentropy-max-items-total`.
pub const NEGENTROPY_MAX_ITEMS_TOTAL: &str = "GRASP_NEGENTROPY_MAX_ITEMS_TOTAL";
/// `--negentropy-opens-per-minute`.
pub const NEGENTROPY_OPENS_PER_MINUTE: &str = "GRASP_NEGENTROPY_OPENS_PER_MINUTE";
/// `--negentropy-idle-timeout`.
pub const NEGENTROPY_IDLE_TIMEOUT: &str = "GRASP_NEGENTROPY_IDLE_TIMEOUT";
/// `--max-connections`.
pub const MAX_CONNECTIONS: &str = "GRASP_MAX_CONNECTIONS";
/// `--max-connections-per-ip`.
pub const MAX_CONNECTIONS_PER_IP: &str = "GRASP_MAX_CONNECTIONS_PER_IP";
/// `--ipv6-prefix-len`.
pub const IPV6_PREFIX_LEN: &str = "GRASP_IPV6_PREFIX_LEN";
/// `--max-repo-event-bytes`.
pub const MAX_REPO_EVENT_BYTES: &str = "GRASP_MAX_REPO_EVENT_BYTES";
/// `--min-free-disk`.
pub const MIN_FREE_DISK: &str = "GRASP_MIN_FREE_DISK";
/// `--git-max-requests`.
pub const GIT_MAX_REQUESTS: &str = "GRASP_GIT_MAX_REQUESTS";
/// `--git-max-requests-per-ip`.
pub const GIT_MAX_REQUESTS_PER_IP: &str = "GRASP_GIT_MAX_REQUESTS_PER_IP";
/// `--api-bind`.
pub const API_BIND: &str = "GRASP_API_BIND";
/// `--metrics-bind`.
pub const METRICS_BIND: &str = "GRASP_METRICS_BIND";
/// `--ref-cache-bytes`.
pub const REF_CACHE_BYTES: &str = "GRASP_REF_CACHE_BYTES";
/// `--write-timeout`.
pub const WRITE_TIMEOUT: &str = "GRASP_WRITE_TIMEOUT";
/// `--ws-idle-timeout`.
pub const WS_IDLE_TIMEOUT: &str = "GRASP_WS_IDLE_TIMEOUT";
/// `--event-lock-wait`.
pub const EVENT_LOCK_WAIT: &str = "GRASP_EVENT_LOCK_WAIT";
/// `--repo-lock-queue`.
pub const REPO_LOCK_QUEUE: &str = "GRASP_REPO_LOCK_QUEUE";
/// `--deferred-total`.
pub const DEFERRED_TOTAL: &str = "GRASP_DEFERRED_TOTAL";
/// `--deferred-per-author`.
pub const DEFERRED_PER_AUTHOR: &str = "GRASP_DEFERRED_PER_AUTHOR";
/// `--deferred-per-owner`.
pub const DEFERRED_PER_OWNER: &str = "GRASP_DEFERRED_PER_OWNER";
/// `--cgi-path`.
pub const CGI_PATH: &str = "GRASP_CGI_PATH";
/// `--purgatory-ttl`.
pub const PURGATORY_TTL: &str = "GRASP_PURGATORY_TTL";
/// `--soft-expiry-ttl`.
pub const SOFT_EXPIRY_TTL: &str = "GRASP_SOFT_EXPIRY_TTL";
/// `--checkpoint-interval`.
pub const CHECKPOINT_INTERVAL: &str = "GRASP_CHECKPOINT_INTERVAL";
/// `--purgatory-per-author`.
pub const PURGATORY_PER_AUTHOR: &str = "GRASP_PURGATORY_PER_AUTHOR";
/// `--purgatory-total`.
pub const PURGATORY_TOTAL: &str = "GRASP_PURGATORY_TOTAL";
/// `--purgatory-per-address`.
pub const PURGATORY_PER_ADDRESS: &str = "GRASP_PURGATORY_PER_ADDRESS";
/// `--purgatory-total-bytes`.
pub const PURGATORY_TOTAL_BYTES: &str = "GRASP_PURGATORY_TOTAL_BYTES";
/// `--purgatory-soft-expired`.
pub const PURGATORY_SOFT_EXPIRED: &str = "GRASP_PURGATORY_SOFT_EXPIRED";
/// `--placeholders-per-repo`.
pub const PLACEHOLDERS_PER_REPO: &str = "GRASP_PLACEHOLDERS_PER_REPO";
/// `--placeholders-total`.
pub const PLACEHOLDERS_TOTAL: &str = "GRASP_PLACEHOLDERS_TOTAL";
/// `--placeholders-per-address`.
pub const PLACEHOLDERS_PER_ADDRESS: &str = "GRASP_PLACEHOLDERS_PER_ADDRESS";
/// `--unsigned-bytes-per-address`.
pub const UNSIGNED_BYTES_PER_ADDRESS: &str = "GRASP_UNSIGNED_BYTES_PER_ADDRESS";
/// `--unsigned-bytes-total`.
pub const UNSIGNED_BYTES_TOTAL: &str = "GRASP_UNSIGNED_BYTES_TOTAL";
/// `--contributor-bytes-per-author`.
pub const CONTRIBUTOR_BYTES_PER_AUTHOR: &str = "GRASP_CONTRIBUTOR_BYTES_PER_AUTHOR";
/// `--contributor-bytes-per-address`.
pub const CONTRIBUTOR_BYTES_PER_ADDRESS: &str = "GRASP_CONTRIBUTOR_BYTES_PER_ADDRESS";
/// `--contributor-bytes-total`.
pub const CONTRIBUTOR_BYTES_TOTAL: &str = "GRASP_CONTRIBUTOR_BYTES_TOTAL";
/// `--pr-data-grace`.
pub const PR_DATA_GRACE: &str = "GRASP_PR_DATA_GRACE";
/// `--contributor-reconcile-interval`.
pub const CONTRIBUTOR_RECONCILE_INTERVAL: &str = "GRASP_CONTRIBUTOR_RECONCILE_INTERVAL";
/// `--owner-quota`.
pub const OWNER_QUOTA: &str = "GRASP_OWNER_QUOTA";
/// `--new-owner-bytes-per-address-per-day`.
pub const NEW_OWNER_BYTES_PER_ADDRESS_PER_DAY: &str = "GRASP_NEW_OWNER_BYTES_PER_ADDRESS_PER_DAY";
/// `--quota-exempt-owner`.
pub const QUOTA_EXEMPT_OWNERS: &str = "GRASP_QUOTA_EXEMPT_OWNERS";
/// `--sync-user-delay`.
pub const SYNC_USER_DELAY: &str = "GRASP_SYNC_USER_DELAY";
/// `--sync-delay`.
pub const SYNC_DELAY: &str = "GRASP_SYNC_DELAY";
/// `--sync-backoff`.
pub const SYNC_BACKOFF: &str = "GRASP_SYNC_BACKOFF";
/// `--sync-backoff-cap`.
pub const SYNC_BACKOFF_CAP: &str = "GRASP_SYNC_BACKOFF_CAP";
/// `--sync-user-delay-ms`.
pub const SYNC_USER_DELAY_MS: &str = "GRASP_SYNC_USER_DELAY_MS";
/// `--sync-delay-ms`.
pub const SYNC_DELAY_MS: &str = "GRASP_SYNC_DELAY_MS";
/// `--sync-backoff-ms`.
pub const SYNC_BACKOFF_MS: &str = "GRASP_SYNC_BACKOFF_MS";
/// `--sync-backoff-cap-ms`.
pub const SYNC_BACKOFF_CAP_MS: &str = "GRASP_SYNC_BACKOFF_CAP_MS";
/// `--sync-domain-concurrency`.
pub const SYNC_DOMAIN_CONCURRENCY: &str = "GRASP_SYNC_DOMAIN_CONCURRENCY";
/// `--sync-domain-per-minute`.
pub const SYNC_DOMAIN_PER_MINUTE: &str = "GRASP_SYNC_DOMAIN_PER_MINUTE";
/// `--sync-max-parallel`.
pub const SYNC_MAX_PARALLEL: &str = "GRASP_SYNC_MAX_PARALLEL";
/// `--sync-fetch-timeout`.
pub const SYNC_FETCH_TIMEOUT: &str = "GRASP_SYNC_FETCH_TIMEOUT";
/// `--sync-attempt-timeout`.
pub const SYNC_ATTEMPT_TIMEOUT: &str = "GRASP_SYNC_ATTEMPT_TIMEOUT";
/// `--sync-max-fetch-bytes`.
pub const SYNC_MAX_FETCH_BYTES: &str = "GRASP_SYNC_MAX_FETCH_BYTES";
/// `--sync-allow-private`.
pub const SYNC_ALLOW_PRIVATE: &str = "GRASP_SYNC_ALLOW_PRIVATE";
/// `--sync-deny`.
pub const SYNC_DENY: &str = "GRASP_SYNC_DENY";
/// `--no-relay-sync`.
pub const NO_RELAY_SYNC: &str = "GRASP_NO_RELAY_SYNC";
/// `--sync-bootstrap-relay`.
pub const SYNC_BOOTSTRAP_RELAY: &str = "GRASP_SYNC_BOOTSTRAP_RELAY";
/// `--replica`.
pub const REPLICAS: &str = "GRASP_REPLICAS";
/// `--replica-acks`.
pub const REPLICA_ACKS: &str = "GRASP_REPLICA_ACKS";
/// `--replica-ack-timeout`.
pub const REPLICA_ACK_TIMEOUT: &str = "GRASP_REPLICA_ACK_TIMEOUT";
/// `--sync-tls-ca`.
pub const SYNC_TLS_CA: &str = "GRASP_SYNC_TLS_CA";
/// `--sync-max-relays`.
pub const SYNC_MAX_RELAYS: &str = "GRASP_SYNC_MAX_RELAYS";
/// `--relay-sync-backoff`.
pub const RELAY_SYNC_BACKOFF: &str = "GRASP_RELAY_SYNC_BACKOFF";
/// `--relay-sync-backoff-cap`.
pub const RELAY_SYNC_BACKOFF_CAP: &str = "GRASP_RELAY_SYNC_BACKOFF_CAP";
/// `--relay-sync-cooldown`.
pub const RELAY_SYNC_COOLDOWN: &str = "GRASP_RELAY_SYNC_COOLDOWN";
/// `--relay-sync-timeout`.
pub const RELAY_SYNC_TIMEOUT: &str = "GRASP_RELAY_SYNC_TIMEOUT";
/// `--relay-sync-parent-request`.
pub const RELAY_SYNC_PARENT_REQUEST: &str = "GRASP_RELAY_SYNC_PARENT_REQUEST";
/// `--relay-sync-rate`.
pub const RELAY_SYNC_RATE: &str = "GRASP_RELAY_SYNC_RATE";
/// `--relay-sync-burst`.
pub const RELAY_SYNC_BURST: &str = "GRASP_RELAY_SYNC_BURST";
/// `--no-sync-plus`.
pub const NO_SYNC_PLUS: &str = "GRASP_NO_SYNC_PLUS";
/// `--index-relay`.
pub const INDEX_RELAYS: &str = "GRASP_INDEX_RELAYS";
/// `--no-index-relays`.
pub const NO_INDEX_RELAYS: &str = "GRASP_NO_INDEX_RELAYS";
/// `--sync-plus-interval`.
pub const SYNC_PLUS_INTERVAL: &str = "GRASP_SYNC_PLUS_INTERVAL";
/// `--sync-plus-list-refresh`.
pub const SYNC_PLUS_LIST_REFRESH: &str = "GRASP_SYNC_PLUS_LIST_REFRESH";
/// `--sync-plus-max-relays`.
pub const SYNC_PLUS_MAX_RELAYS: &str = "GRASP_SYNC_PLUS_MAX_RELAYS";
/// `--archive`.
pub const ARCHIVE: &str = "GRASP_ARCHIVE";
/// `--archive-all`.
pub const ARCHIVE_ALL: &str = "GRASP_ARCHIVE_ALL";
/// `--archive-grasp-service`.
pub const ARCHIVE_GRASP_SERVICES: &str = "GRASP_ARCHIVE_GRASP_SERVICES";
/// `--archive-writable`.
pub const ARCHIVE_WRITABLE: &str = "GRASP_ARCHIVE_WRITABLE";
/// `--admin-pubkey`.
pub const ADMIN_PUBKEY: &str = "GRASP_ADMIN_PUBKEY";
/// `--private`.
pub const PRIVATE: &str = "GRASP_PRIVATE";
/// `--member`.
pub const MEMBERS: &str = "GRASP_MEMBERS";
/// `--members-file`.
pub const MEMBERS_FILE: &str = "GRASP_MEMBERS_FILE";
/// `--private-sync-peer`.
pub const PRIVATE_SYNC_PEERS: &str = "GRASP_PRIVATE_SYNC_PEERS";
/// `--service-key-file`.
pub const SERVICE_KEY_FILE: &str = "GRASP_SERVICE_KEY_FILE";
/// `--write-burst`.
pub const WRITE_BURST: &str = "GRASP_WRITE_BURST";
/// `--write-rate`.
pub const WRITE_RATE: &str = "GRASP_WRITE_RATE";
/// `--write-burst-per-ip`.
pub const WRITE_BURST_PER_IP: &str = "GRASP_WRITE_BURST_PER_IP";
/// `--write-rate-per-ip`.
pub const WRITE_RATE_PER_IP: &str = "GRASP_WRITE_RATE_PER_IP";
/// `--new-repos-per-author-per-hour`.
pub const NEW_REPOS_PER_AUTHOR_PER_HOUR: &str = "GRASP_NEW_REPOS_PER_AUTHOR_PER_HOUR";
/// `--max-repos`.
pub const MAX_REPOS: &str = "GRASP_MAX_REPOS";
/// `--trusted-proxy`.
pub const TRUSTED_PROXIES: &str = "GRASP_TRUSTED_PROXIES";
/// `--block-author`.
pub const BLOCK_AUTHORS: &str = "GRASP_BLOCK_AUTHORS";
/// `--block-event`.
pub const BLOCK_EVENTS: &str = "GRASP_BLOCK_EVENTS";
/// `--allow-repo`.
pub const ALLOW_REPOS: &str = "GRASP_ALLOW_REPOS";
/// `--deny-repo`.
pub const DENY_REPOS: &str = "GRASP_DENY_REPOS";
/// `--curation-file`.
pub const CURATION_FILE: &str = "GRASP_CURATION_FILE";
/// `--name`.
pub const NAME: &str = "GRASP_NAME";
/// `--description`.
pub const DESCRIPTION: &str = "GRASP_DESCRIPTION";
/// `--software-url`.
pub const SOFTWARE_URL: &str = "GRASP_SOFTWARE_URL";

// The project's own tests and tools.
/// `GRASP_TOOLS_BIN`: where the end-to-end tests find ngit and git-remote-nostr
/// (`tests/src/ngit.rs`).
pub const TOOLS_BIN: &str = "GRASP_TOOLS_BIN";
/// `GRASP_BENCH_SYNC_TIMEOUT`: seconds grasp-bench's sync scenario waits at most.
pub const BENCH_SYNC_TIMEOUT: &str = "GRASP_BENCH_SYNC_TIMEOUT";
/// `GRASP_WRITE_DOCS`: when set, the configuration reference test writes docs/configuration.md
/// again.
pub const WRITE_DOCS: &str = "GRASP_WRITE_DOCS";
