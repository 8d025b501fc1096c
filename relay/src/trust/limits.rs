//! Write limits shared by all connections (docs/protocol.md#trust): events per client address,
//! new repositories per author per hour and in total. The per-connection bucket lives in the
//! connection ([`WriteLimits::connection_bucket`]). Buckets are [`grasp_state::rate`] data; the
//! time comes from an injected [`Clock`].

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grasp_state::purgatory::{Clock, SystemClock};
use grasp_state::rate::{KeyedBuckets, Limited, Rate, TokenBucket};
use nostr::prelude::PublicKey;

/// Most client addresses / authors remembered with a partly used bucket.
const MAX_TRACKED_KEYS: usize = 100_000;

/// How long a count of the repositories on disk is reused.
const REPO_COUNT_TTL: Duration = Duration::from_secs(10);

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
}

impl Default for WriteLimitConfig {
    fn default() -> Self {
        WriteLimitConfig {
            per_connection: Rate { burst: 500, per_second: 50.0 },
            per_address: Rate { burst: 2000, per_second: 200.0 },
            repos_per_author_per_hour: 60,
            max_repos: 100_000,
            ipv6_prefix_len: grasp_state::client_key::DEFAULT_IPV6_PREFIX_LEN,
        }
    }
}

/// Shared write-limit state.
pub struct WriteLimits {
    pub config: WriteLimitConfig,
    clock: Arc<dyn Clock>,
    per_address: Mutex<KeyedBuckets<IpAddr>>,
    repos_per_author: Mutex<KeyedBuckets<PublicKey>>,
    git_root: Option<PathBuf>,
    repo_count: Mutex<Option<(Instant, usize)>>,
}

fn seconds(d: Duration) -> String {
    if d == Duration::MAX {
        "a while".into()
    } else {
        format!("{:.1} s", d.as_secs_f64().max(0.1))
    }
}

impl WriteLimits {
    /// Limits counting the repositories under `git_root` (none: never counted).
    pub fn new(config: WriteLimitConfig, git_root: Option<PathBuf>, clock: Arc<dyn Clock>) -> Self {
        WriteLimits {
            config,
            per_address: Mutex::new(KeyedBuckets::new(config.per_address, MAX_TRACKED_KEYS)),
            repos_per_author: Mutex::new(KeyedBuckets::new(
                Rate::per(config.repos_per_author_per_hour, Duration::from_secs(3600)),
                MAX_TRACKED_KEYS,
            )),
            clock,
            git_root,
            repo_count: Mutex::new(None),
        }
    }

    /// A fresh bucket for a new connection.
    pub fn connection_bucket(&self) -> TokenBucket {
        TokenBucket::new(self.config.per_connection, self.clock.now())
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
        let key = grasp_state::client_key::limit_key(address, self.config.ipv6_prefix_len);
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

    /// A new repository is about to be created for `owner`: within the author's hourly
    /// allowance and the total?
    pub fn take_new_repo(&self, owner: &PublicKey) -> Result<(), String> {
        if self.config.max_repos > 0 {
            let count = self.repo_count();
            if count >= self.config.max_repos {
                return Err(format!(
                    "blocked: this server already hosts its maximum of {} repositories; use another GRASP server",
                    self.config.max_repos
                ));
            }
        }
        let now = self.clock.now();
        match self.repos_per_author.lock().unwrap().try_take(owner, now) {
            Ok(()) => {
                if let Some((_, n)) = self.repo_count.lock().unwrap().as_mut() {
                    *n += 1;
                }
                Ok(())
            }
            Err(Limited::Empty(wait)) => Err(format!(
                "rate-limited: an author may create at most {} new repositories per hour here; retry in {}",
                self.config.repos_per_author_per_hour,
                seconds(wait)
            )),
        }
    }

    /// Repositories on disk (`<git>/<npub>/<id>.git`), counted at most every few seconds.
    fn repo_count(&self) -> usize {
        let now = self.clock.now();
        let mut cached = self.repo_count.lock().unwrap();
        if let Some((at, n)) = *cached {
            if now.saturating_duration_since(at) < REPO_COUNT_TTL {
                return n;
            }
        }
        let n = self.git_root.as_deref().map(count_repos).unwrap_or(0);
        *cached = Some((now, n));
        n
    }
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits::new(WriteLimitConfig::default(), None, Arc::new(SystemClock))
    }
}

fn count_repos(root: &std::path::Path) -> usize {
    let Ok(owners) = std::fs::read_dir(root) else { return 0 };
    owners
        .flatten()
        .filter_map(|o| std::fs::read_dir(o.path()).ok())
        .map(|repos| repos.flatten().filter(|r| r.file_name().to_string_lossy().ends_with(".git")).count())
        .sum()
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
        assert!(limits.take_new_repo(&a).is_ok());
    }
}
