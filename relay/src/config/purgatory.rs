//! `[purgatory]`: events and placeholders waiting for their git data.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::time::Duration;

use clap::Args;
use grasp_state::contract::env_names;

use super::{parse_duration};

/// The `[purgatory]` section: events and placeholders waiting for their git data.
#[derive(Debug, Clone, Args)]
pub struct PurgatoryConfig {
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
}

impl PurgatoryConfig {
    /// The budgets of pull request data no maintainer signed.
    pub fn contributor_budget(&self) -> grasp_state::trust::contributor_data::ContributorBudget {
        grasp_state::trust::contributor_data::ContributorBudget {
            per_author: self.contributor_bytes_per_author,
            per_address: self.contributor_bytes_per_address,
            total: self.contributor_bytes_total,
        }
    }

    /// How often to checkpoint the purgatory (never more often than every 10 ms).
    pub fn checkpoint_interval(&self) -> Duration {
        self.checkpoint_interval.max(Duration::from_millis(10))
    }

    /// The bounds of deferred repository work.
    pub fn deferred_limits(&self) -> grasp_state::git::deferred::DeferredLimits {
        grasp_state::git::deferred::DeferredLimits {
            total: self.deferred_total as usize,
            per_author: self.deferred_per_author as usize,
            per_owner: self.deferred_per_owner as usize,
        }
    }
}

impl Default for PurgatoryConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().purgatory
    }
}
