//! Write limits shared by all connections (docs/protocol.md#trust): events per client address,
//! new repositories per author per hour and in total. The per-connection bucket lives in the
//! connection ([`WriteLimits::connection_bucket`]). Buckets are [`grasp_state::trust::rate`] data; the
//! time comes from an injected [`Clock`].
//!
//! The total (`--max-repos`) is a [`RepoCount`]: an atomic count taken with check-and-increment
//! when admission is about to create a repository, lowered when the relay deletes one, and
//! reconciled with the disk every [`REPO_COUNT_RECONCILE`] by a walk on the blocking pool
//! ([`run_repo_count`]); admission never walks the disk.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grasp_state::purgatory::{Clock, SystemClock};
use grasp_state::trust::rate::{KeyedBuckets, Limited, Rate, TokenBucket};
use nostr::prelude::PublicKey;
use crate::config::LimitsConfig;

/// Most client addresses / authors remembered with a partly used bucket.
const MAX_TRACKED_KEYS: usize = 100_000;

/// How often the count of repositories is reconciled with the disk.
pub const REPO_COUNT_RECONCILE: Duration = Duration::from_secs(60);

/// `--negentropy-opens-per-minute`'s default.
pub const DEFAULT_NEGENTROPY_OPENS_PER_MINUTE: u32 = crate::config::DEFAULT_NEGENTROPY_OPENS_PER_MINUTE;

/// The configured limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteLimitConfig {
    pub per_connection: Rate,
    pub per_address: Rate,
    /// New repositories one author may create per hour.
    pub repos_per_author_per_hour: u32,
    /// Most repositories on disk; 0 = no limit.
    pub max_repos: usize,
    /// IPv6 client addresses count by this many leading bits (`--ipv6-prefix-len`).
    pub ipv6_prefix_len: u8,
    /// NIP-77 `NEG-OPEN`s all connections of one client address may send per minute, all of
    /// them at once after a quiet minute (`--negentropy-opens-per-minute`).
    pub negentropy_opens_per_minute: u32,
}

impl WriteLimitConfig {
    /// The write limits (docs/protocol.md#trust).
    pub fn from_config(limits: &LimitsConfig) -> WriteLimitConfig {
        use grasp_state::trust::rate::Rate;
        WriteLimitConfig {
            per_connection: Rate { burst: limits.write_burst, per_second: limits.write_rate.max(0.0) },
            per_address: Rate { burst: limits.write_burst_per_ip, per_second: limits.write_rate_per_ip.max(0.0) },
            repos_per_author_per_hour: limits.new_repos_per_author_per_hour,
            max_repos: limits.max_repos,
            ipv6_prefix_len: limits.ipv6_prefix_len,
            negentropy_opens_per_minute: limits.negentropy_opens_per_minute,
        }
    }
}

impl Default for WriteLimitConfig {
    fn default() -> Self {
        WriteLimitConfig {
            per_connection: Rate { burst: 500, per_second: 50.0 },
            per_address: Rate { burst: 2000, per_second: 200.0 },
            repos_per_author_per_hour: 60,
            max_repos: 100_000,
            ipv6_prefix_len: grasp_state::names::client_key::DEFAULT_IPV6_PREFIX_LEN,
            negentropy_opens_per_minute: DEFAULT_NEGENTROPY_OPENS_PER_MINUTE,
        }
    }
}

/// Shared write-limit state.
pub struct WriteLimits {
    pub config: WriteLimitConfig,
    clock: Arc<dyn Clock>,
    per_address: Mutex<KeyedBuckets<IpAddr>>,
    negentropy_opens: Mutex<KeyedBuckets<IpAddr>>,
    repos_per_author: Mutex<KeyedBuckets<PublicKey>>,
    git_root: Option<PathBuf>,
    repos: RepoCount,
}

/// Repositories on disk, as far as the relay knows between two walks.
#[derive(Debug, Default)]
pub struct RepoCount {
    count: AtomicUsize,
    /// Net creations minus removals since the current walk started.
    changes: AtomicIsize,
}

impl RepoCount {
    /// Counts one more repository if fewer than `max` are counted; false (nothing counted)
    /// when the total is reached.
    pub fn try_reserve(&self, max: usize) -> bool {
        let reserved = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_ok();
        if reserved {
            self.changes.fetch_add(1, Ordering::AcqRel);
        }
        reserved
    }

    /// One repository fewer (a reservation given back, or a repository deleted).
    pub fn release(&self) {
        let _ = self.count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(1)));
        self.changes.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn get(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Starts a walk of the disk: changes from now on are added to its result.
    pub fn walk_started(&self) {
        self.changes.store(0, Ordering::Release);
    }

    /// A walk started by [`RepoCount::walk_started`] found `walked` repositories. Creations
    /// during the walk are added (the walk may have missed them; counting one twice until the
    /// next walk only errs on the side of the cap); removals during it are not subtracted.
    pub fn walk_finished(&self, walked: usize) {
        let during = self.changes.load(Ordering::Acquire).max(0).unsigned_abs();
        self.count.store(walked.saturating_add(during), Ordering::Release);
    }
}

fn seconds(d: Duration) -> String {
    if d == Duration::MAX {
        "a while".into()
    } else {
        format!("{:.1} s", d.as_secs_f64().max(0.1))
    }
}

impl WriteLimits {
    /// Limits counting the repositories under `git_root` (none: never counted). The first count
    /// walks the disk now (at startup, before any connection).
    pub fn new(config: WriteLimitConfig, git_root: Option<PathBuf>, clock: Arc<dyn Clock>) -> Self {
        let repos = RepoCount::default();
        repos.walk_finished(git_root.as_deref().map(count_repos).unwrap_or(0));
        WriteLimits {
            config,
            per_address: Mutex::new(KeyedBuckets::new(config.per_address, MAX_TRACKED_KEYS)),
            negentropy_opens: Mutex::new(KeyedBuckets::new(
                Rate::per(config.negentropy_opens_per_minute, Duration::from_secs(60)),
                MAX_TRACKED_KEYS,
            )),
            repos_per_author: Mutex::new(KeyedBuckets::new(
                Rate::per(config.repos_per_author_per_hour, Duration::from_secs(3600)),
                MAX_TRACKED_KEYS,
            )),
            clock,
            git_root,
            repos,
        }
    }

    /// A fresh bucket for a new connection.
    pub fn connection_bucket(&self) -> TokenBucket {
        TokenBucket::new(self.config.per_connection, self.clock.now())
    }

    /// The key `address` is counted under by every per-address limit of this service
    /// ([`grasp_state::names::client_key::limit_key`] with `--ipv6-prefix-len`).
    pub fn address_key(&self, address: IpAddr) -> IpAddr {
        grasp_state::names::client_key::limit_key(address, self.config.ipv6_prefix_len)
    }

    /// One event written on a connection from `address`: takes a token from the connection's
    /// bucket and the address's; the refusal is a complete `rate-limited:` message.
    pub fn take_write(&self, connection: &mut TokenBucket, address: IpAddr) -> Result<(), String> {
        let now = self.clock.now();
        if let Err(wait) = connection.try_take(now) {
            return Err(format!(
                "rate-limited: this connection sends events faster than {} per second (burst {}); slow down and retry in {}",
                self.config.per_connection.per_second,
                self.config.per_connection.burst,
                seconds(wait)
            ));
        }
        let key = self.address_key(address);
        match self.per_address.lock().unwrap().try_take(&key, now) {
            Ok(()) => Ok(()),
            Err(Limited::Empty(wait)) => Err(format!(
                "rate-limited: your address sends events faster than {} per second (burst {}); slow down and retry in {}",
                self.config.per_address.per_second,
                self.config.per_address.burst,
                seconds(wait)
            )),
        }
    }

    /// One NIP-77 `NEG-OPEN` (a store scan and a sort of up to `--negentropy-max-items`) from
    /// `address`: takes a token from the address's negentropy bucket; the refusal is a complete
    /// `rate-limited:` message.
    pub fn take_negentropy_open(&self, address: IpAddr) -> Result<(), String> {
        let key = self.address_key(address);
        match self.negentropy_opens.lock().unwrap().try_take(&key, self.clock.now()) {
            Ok(()) => Ok(()),
            Err(Limited::Empty(wait)) => Err(format!(
                "rate-limited: your address opens negentropy sessions faster than {} per minute; reuse an open session (NEG-MSG) or retry NEG-OPEN in {}",
                self.config.negentropy_opens_per_minute,
                seconds(wait)
            )),
        }
    }

    /// A new repository is about to be created for `owner`: within the author's hourly
    /// allowance and the total? Counts it in the total when it is (check-and-increment, no
    /// disk access).
    pub fn take_new_repo(&self, owner: &PublicKey) -> Result<(), String> {
        let capped = self.config.max_repos > 0;
        if capped && !self.repos.try_reserve(self.config.max_repos) {
            tracing::info!(owner = %owner, max_repos = self.config.max_repos, reason = "max-repos", "new repository refused");
            return Err(format!(
                "blocked: this server already hosts its maximum of {} repositories; use another GRASP server",
                self.config.max_repos
            ));
        }
        let now = self.clock.now();
        match self.repos_per_author.lock().unwrap().try_take(owner, now) {
            Ok(()) => {
                if !capped {
                    self.repos.try_reserve(usize::MAX);
                }
                Ok(())
            }
            Err(Limited::Empty(wait)) => {
                if capped {
                    self.repos.release();
                }
                Err(format!(
                "rate-limited: an author may create at most {} new repositories per hour here; retry in {}",
                self.config.repos_per_author_per_hour,
                seconds(wait)
            ))
            }
        }
    }

    /// A repository no author's hourly allowance pays for is about to be created (a GRASP-06
    /// contributor repository, whose URL's npub anyone may use): within the total? Counts it when
    /// it is.
    pub fn take_repo_slot(&self) -> Result<(), String> {
        let max = match self.config.max_repos {
            0 => usize::MAX,
            max => max,
        };
        if self.repos.try_reserve(max) {
            return Ok(());
        }
        tracing::info!(max_repos = self.config.max_repos, reason = "max-repos", "new contributor repository refused");
        Err(format!("this server already hosts its maximum of {} repositories; push to another GRASP server", self.config.max_repos))
    }

    /// The relay deleted a repository.
    pub fn repo_removed(&self) {
        self.repos.release();
    }

    /// Repositories counted now (`--max-repos` compares with this).
    pub fn repo_count(&self) -> usize {
        self.repos.get()
    }

    /// Walks `<git>/<npub>/<id>.git` and `<git>/prs/<npub>/<id>.git` on the blocking pool and makes the count agree with it
    /// (repositories created or removed outside the relay, reservations whose repository was
    /// never created).
    pub async fn reconcile_repo_count(&self) {
        let Some(root) = self.git_root.clone() else { return };
        self.repos.walk_started();
        match tokio::task::spawn_blocking(move || count_repos(&root)).await {
            Ok(walked) => {
                let before = self.repos.get();
                self.repos.walk_finished(walked);
                if before != self.repos.get() {
                    tracing::debug!(before, after = self.repos.get(), "repository count reconciled with the disk");
                }
            }
            Err(error) => tracing::warn!(%error, "repository count walk failed"),
        }
    }
}

/// Reconciles `limits`' repository count with the disk every [`REPO_COUNT_RECONCILE`] until
/// shutdown.
pub async fn run_repo_count(trust: Arc<crate::trust::Trust>, mut shutdown: crate::shutdown::Shutdown) {
    loop {
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = tokio::time::sleep(REPO_COUNT_RECONCILE) => {}
        }
        trust.limits.reconcile_repo_count().await;
    }
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits::new(WriteLimitConfig::default(), None, Arc::new(SystemClock))
    }
}

/// Repositories on disk, GRASP-06 contributor repositories (`prs/`) included, object pools not
/// (no one created them).
fn count_repos(root: &std::path::Path) -> usize {
    crate::git::repos::repo_dirs(root).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::purgatory::ManualClock;
    use nostr::prelude::Keys;

    #[test]
    fn connection_then_address_limits() {
        let clock = Arc::new(ManualClock::default());
        let cfg = WriteLimitConfig {
            per_connection: Rate { burst: 2, per_second: 1.0 },
            per_address: Rate { burst: 3, per_second: 1.0 },
            ..WriteLimitConfig::default()
        };
        let limits = WriteLimits::new(cfg, None, clock.clone());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let (mut c1, mut c2) = (limits.connection_bucket(), limits.connection_bucket());
        assert!(limits.take_write(&mut c1, ip).is_ok());
        assert!(limits.take_write(&mut c1, ip).is_ok());
        assert!(limits.take_write(&mut c1, ip).unwrap_err().contains("this connection"));
        assert!(limits.take_write(&mut c2, ip).is_ok());
        assert!(limits.take_write(&mut c2, ip).unwrap_err().contains("your address"));
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(limits.take_write(&mut limits.connection_bucket(), other).is_ok());
        clock.advance(Duration::from_secs(1));
        assert!(limits.take_write(&mut c1, ip).is_ok());
    }

    #[test]
    fn one_ipv6_prefix_shares_one_address_bucket_and_new_addresses_are_never_refused() {
        let clock = Arc::new(ManualClock::default());
        let cfg = WriteLimitConfig {
            per_connection: Rate { burst: 1000, per_second: 1.0 },
            per_address: Rate { burst: 2, per_second: 1.0 },
            ..WriteLimitConfig::default()
        };
        let limits = WriteLimits::new(cfg, None, clock.clone());
        let mut c = limits.connection_bucket();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(limits.take_write(&mut c, ip("2001:db8:7:7::1")).is_ok());
        assert!(limits.take_write(&mut c, ip("2001:db8:7:7::2")).is_ok());
        assert!(limits.take_write(&mut c, ip("2001:db8:7:7:abcd::3")).unwrap_err().contains("your address"));
        assert!(limits.take_write(&mut c, ip("2001:db8:7:8::1")).is_ok());
        // More distinct prefixes than the table remembers: nobody is told the server is busy.
        for i in 0..(MAX_TRACKED_KEYS as u128 + 10) {
            let a = IpAddr::V6(std::net::Ipv6Addr::from((0x2001_0db9_u128 << 96) | (i << 64)));
            assert_eq!(limits.take_write(&mut limits.connection_bucket(), a), Ok(()));
        }
    }

    #[test]
    fn negentropy_opens_are_metered_per_address_apart_from_writes() {
        let clock = Arc::new(ManualClock::default());
        let cfg = WriteLimitConfig { negentropy_opens_per_minute: 2, ..WriteLimitConfig::default() };
        let limits = WriteLimits::new(cfg, None, clock.clone());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(limits.take_negentropy_open(ip("192.0.2.1")).is_ok());
        assert!(limits.take_negentropy_open(ip("192.0.2.1")).is_ok());
        let err = limits.take_negentropy_open(ip("192.0.2.1")).unwrap_err();
        assert!(err.starts_with("rate-limited:") && err.contains("2 per minute"), "{err}");
        // Other addresses, and writes from this one, are not affected.
        assert!(limits.take_negentropy_open(ip("192.0.2.2")).is_ok());
        assert!(limits.take_write(&mut limits.connection_bucket(), ip("192.0.2.1")).is_ok());
        clock.advance(Duration::from_secs(30));
        assert!(limits.take_negentropy_open(ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn repository_caps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("npub1x/a.git")).unwrap();
        let clock = Arc::new(ManualClock::default());
        let cfg = WriteLimitConfig { repos_per_author_per_hour: 2, max_repos: 4, ..WriteLimitConfig::default() };
        let limits = WriteLimits::new(cfg, Some(dir.path().to_path_buf()), clock.clone());
        let (a, b) = (Keys::generate().public_key(), Keys::generate().public_key());
        assert!(limits.take_new_repo(&a).is_ok());
        assert!(limits.take_new_repo(&a).is_ok());
        assert!(limits.take_new_repo(&a).unwrap_err().starts_with("rate-limited:"));
        // 1 on disk + 3 created = 4: the total is reached.
        assert!(limits.take_new_repo(&b).is_ok());
        assert!(limits.take_new_repo(&b).unwrap_err().starts_with("blocked:"));
        clock.advance(Duration::from_secs(3600));
        // An hour later the author may create again, and the total is recounted from disk (1).
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(limits.reconcile_repo_count());
        assert!(limits.take_new_repo(&a).is_ok());
    }

    #[tokio::test]
    async fn admission_counts_without_walking_the_disk_and_the_walk_reconciles() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("npub1x/a.git")).unwrap();
        let clock = Arc::new(ManualClock::default());
        let cfg = WriteLimitConfig { repos_per_author_per_hour: 100, max_repos: 4, ..WriteLimitConfig::default() };
        let limits = WriteLimits::new(cfg, Some(dir.path().to_path_buf()), clock.clone());
        assert_eq!(limits.repo_count(), 1, "counted at startup");
        std::fs::create_dir_all(dir.path().join(".pools/a.git")).unwrap();
        assert_eq!(count_repos(dir.path()), 1, "an object pool is no repository");
        // Repositories appear and vanish on disk behind the relay's back: admission does not
        // look, however much time passes, until the walk.
        for name in ["b", "c", "d"] {
            std::fs::create_dir_all(dir.path().join(format!("npub1y/{name}.git"))).unwrap();
        }
        clock.advance(Duration::from_secs(3600));
        let owner = Keys::generate().public_key();
        assert!(limits.take_new_repo(&owner).is_ok());
        assert_eq!(limits.repo_count(), 2);
        limits.reconcile_repo_count().await;
        assert_eq!(limits.repo_count(), 4);
        assert!(limits.take_new_repo(&owner).unwrap_err().starts_with("blocked:"));
        // A deletion by the relay frees a place at once.
        std::fs::remove_dir_all(dir.path().join("npub1y/b.git")).unwrap();
        limits.repo_removed();
        assert!(limits.take_new_repo(&owner).is_ok());
        assert!(limits.take_new_repo(&owner).is_err());
        // An author refused by the hourly allowance does not keep a place in the total.
        let hourly = WriteLimits::new(
            WriteLimitConfig { repos_per_author_per_hour: 1, max_repos: 3, ..WriteLimitConfig::default() },
            Some(dir.path().to_path_buf()),
            clock,
        );
        assert_eq!(hourly.repo_count(), 3);
        let one = Keys::generate().public_key();
        hourly.repo_removed();
        assert!(hourly.take_new_repo(&one).is_ok());
        hourly.repo_removed();
        assert!(hourly.take_new_repo(&one).unwrap_err().starts_with("rate-limited:"));
        assert_eq!(hourly.repo_count(), 2, "the refused reservation was given back");
    }

    #[test]
    fn concurrent_reservations_never_pass_the_total() {
        let count = Arc::new(RepoCount::default());
        let passed = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (count, passed) = (count.clone(), passed.clone());
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if count.try_reserve(100) {
                            passed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!((passed.load(Ordering::SeqCst), count.get()), (100, 100));
    }

    #[test]
    fn a_walk_keeps_the_creations_made_while_it_ran() {
        let count = RepoCount::default();
        count.walk_finished(5);
        count.walk_started();
        assert!(count.try_reserve(100));
        assert!(count.try_reserve(100));
        count.release();
        count.walk_finished(3);
        assert_eq!(count.get(), 4, "3 walked + 1 created during the walk");
        count.walk_started();
        count.release();
        count.walk_finished(3);
        assert_eq!(count.get(), 3, "a removal during the walk is not subtracted twice");
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::Config;
    use clap::Parser;

    #[test]
    fn trust_flags() {
        assert_eq!(WriteLimitConfig::from_config(&LimitsConfig::default()), WriteLimitConfig::default());
        let cfg = Config::parse_from(["grasp-relay"]);
        assert!(!cfg.trust.private && cfg.trust.member.is_empty() && !cfg.trust.curation().is_active());
        let hex = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
        let cfg = Config::parse_from([
            "grasp-relay",
            "--private",
            "--member", hex,
            "--trusted-proxy", "10.0.0.0/8,::1",
            "--block-author", hex,
            "--deny-repo", "spam",
            "--write-burst", "3",
            "--write-rate", "1.5",
        ]);
        assert!(cfg.trust.private);
        assert_eq!(cfg.trust.member.len(), 1);
        assert_eq!(cfg.trust.trusted_proxy.iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["10.0.0.0/8", "::1/128"]);
        assert!(cfg.trust.curation().is_active());
        assert_eq!(WriteLimitConfig::from_config(&cfg.limits).per_connection.burst, 3);
        assert!(Config::try_parse_from(["grasp-relay", "--allow-repo", "a/b/c"]).is_err());
        assert!(Config::try_parse_from(["grasp-relay", "--trusted-proxy", "nope"]).is_err());
    }
}
