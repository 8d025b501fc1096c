//! The doctor's verdicts: pure functions from facts gathered about an installation
//! ([`super::gather`]) to [`Finding`]s that say what to fix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Finding;

/// The oldest git this server works with: `http.curloptResolve` (2.37) pins the addresses
/// background sync checked; `GIT_CONFIG_GLOBAL` (2.32) keeps the user's git configuration out;
/// `git maintenance run --auto` (2.29) follows pushes.
pub const MIN_GIT: (u32, u32) = (2, 37);

/// From this git on, refs and HEAD are read with one `for-each-ref --include-root-refs`.
pub const ONE_PROCESS_REFS_GIT: (u32, u32) = (2, 46);

/// `git --version` output (or why it could not run) and the `git-http-backend` program found.
pub fn git(version: Result<&str, &str>, http_backend: Option<&Path>) -> Finding {
    let text = match version {
        Ok(text) => text.trim(),
        Err(e) => {
            return Finding::fail("git", format!("git cannot be run: {e}"), "install git (`apt-get install git`); the relay runs it from PATH");
        }
    };
    let Some((major, minor)) = parse_git_version(text) else {
        return Finding::fail("git", format!("cannot read the version in {text:?}"), "install git from your distribution (`apt-get install git`)");
    };
    if (major, minor) < MIN_GIT {
        return Finding::fail(
            "git",
            format!("{text}: too old; the server needs git {}.{} or later (http.curloptResolve pins the addresses background sync checked)", MIN_GIT.0, MIN_GIT.1),
            "upgrade git (Debian 12 and Ubuntu 22.04 ship a recent enough one)",
        );
    }
    let Some(backend) = http_backend else {
        return Finding::fail(
            "git",
            format!("{text}, but git's `git-http-backend` program is not in `git --exec-path`"),
            "install the full git package (`apt-get install git`); it serves every clone and push",
        );
    };
    let mut note = format!("{text}; git-http-backend at {}", backend.display());
    if (major, minor) < ONE_PROCESS_REFS_GIT {
        note.push_str(&format!(
            " (from git {}.{} on, refs are read with one process instead of two)",
            ONE_PROCESS_REFS_GIT.0, ONE_PROCESS_REFS_GIT.1
        ));
    }
    Finding::ok("git", note)
}

/// `git version 2.39.5` (or `git version 2.39.5.windows.1`, `... (Apple Git-143)`) as (2, 39).
pub fn parse_git_version(text: &str) -> Option<(u32, u32)> {
    let version = text.trim().strip_prefix("git version ")?;
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// What is at the path of a helper binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryState {
    Missing,
    NotAFile,
    NotExecutable,
    Executable,
}

/// grasp-cgi and the hooks beside it.
pub fn binaries(found: &[(PathBuf, BinaryState)]) -> Finding {
    let bad: Vec<String> = found
        .iter()
        .filter(|(_, state)| *state != BinaryState::Executable)
        .map(|(path, state)| {
            let what = match state {
                BinaryState::Missing => "missing",
                BinaryState::NotAFile => "not a file",
                BinaryState::NotExecutable => "not executable",
                BinaryState::Executable => unreachable!(),
            };
            format!("{} ({what})", path.display())
        })
        .collect();
    if bad.is_empty() {
        let all: Vec<String> = found.iter().map(|(p, _)| p.display().to_string()).collect();
        return Finding::ok("binaries", all.join(", "));
    }
    Finding::fail(
        "binaries",
        format!("the relay runs grasp-cgi and installs the hooks from beside it: {}", bad.join(", ")),
        "install all four binaries side by side (the Debian package puts them in /usr/bin; from source: \
         `cargo build --release --workspace` and copy grasp-relay, grasp-cgi, grasp-pre-receive, grasp-post-receive), \
         or point `cgi-path` in [server] at an installed grasp-cgi with the hooks beside it",
    )
}

/// The data directory as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataDir {
    /// Not there: the relay creates it if its parent is writable.
    Missing { parent: PathBuf, parent_writable: bool },
    NotADirectory,
    Unreadable(String),
    Present {
        owner: u32,
        /// Permission bits (`0o750`).
        mode: u32,
        writable: bool,
        /// Entries of the data directory owned by another user (a relay once run as root).
        foreign: Vec<(String, u32)>,
        /// Mode of `api-token`, if it exists.
        token_mode: Option<u32>,
    },
}

/// Owner and permissions of the data directory, for the user running the doctor (`me`).
/// `name` turns a uid into a user name for the messages.
pub fn data_dir(path: &Path, found: &DataDir, me: u32, private: bool, name: &dyn Fn(u32) -> String) -> Finding {
    let check = "data directory";
    let shown = path.display();
    let create = format!("install -d -o {} -g {} -m 0750 {shown}", name(me), name(me));
    match found {
        DataDir::Missing { parent, parent_writable: true } => {
            Finding::ok(check, format!("{shown} does not exist yet; the relay creates it in {} at its first start", parent.display()))
        }
        DataDir::Missing { parent, parent_writable: false } => Finding::fail(
            check,
            format!("{shown} does not exist and {} is not writable by {}", parent.display(), name(me)),
            format!("create it for the service's user: `{create}`"),
        ),
        DataDir::NotADirectory => Finding::fail(check, format!("{shown} is not a directory"), "point `data-dir` in [storage] at a directory"),
        DataDir::Unreadable(e) => Finding::fail(check, format!("{shown}: {e}"), format!("run the doctor as the service's user, or `{create}`")),
        DataDir::Present { owner, mode, writable, foreign, token_mode } => {
            if *owner != me {
                let hint = if me == 0 {
                    format!("run the doctor as the service's user: `sudo -u {} grasp-relay doctor --config ...`", name(*owner))
                } else {
                    format!("run the relay (and fcgiwrap) as {}, or `chown -R {} {shown}`", name(*owner), name(me))
                };
                return Finding::fail(
                    check,
                    format!("{shown} belongs to {}, but the doctor runs as {}: the relay, its hooks and grasp-cgi must run as the directory's owner", name(*owner), name(me)),
                    hint,
                );
            }
            if !writable {
                return Finding::fail(check, format!("{shown} is not writable by its owner {} (mode {mode:04o})", name(me)), format!("`chmod 0750 {shown}`"));
            }
            if !foreign.is_empty() {
                let list: Vec<String> = foreign.iter().map(|(entry, uid)| format!("{entry} ({})", name(*uid))).collect();
                return Finding::fail(
                    check,
                    format!("entries of {shown} belong to other users: {}; the relay cannot replace them", list.join(", ")),
                    format!("`chown -R {}: {shown}` (was the relay once started as root?)", name(me)),
                );
            }
            if let Some(token) = token_mode.filter(|m| m & 0o077 != 0) {
                return Finding::fail(
                    check,
                    format!("{shown}/api-token has mode {token:04o}: others can use the hook API"),
                    format!("`chmod 0600 {shown}/api-token` (the relay writes it 0600 at every start)"),
                );
            }
            if mode & 0o002 != 0 {
                return Finding::fail(check, format!("{shown} is writable by every user (mode {mode:04o})"), format!("`chmod 0750 {shown}`"));
            }
            if mode & 0o007 != 0 && private {
                return Finding::fail(
                    check,
                    format!("{shown} is readable by every user (mode {mode:04o}) and holds a private service's events and repositories"),
                    format!("`chmod 0750 {shown}`"),
                );
            }
            if mode & 0o027 != 0 {
                return Finding::warn(
                    check,
                    format!("{shown} (owner {}, mode {mode:04o}) is open to more users than needed", name(*owner)),
                    format!("`chmod 0750 {shown}`: nginx never reads it, only the relay's user (and fcgiwrap running as it) does"),
                );
            }
            Finding::ok(check, format!("{shown}, owner {}, mode {mode:04o}", name(*owner)))
        }
    }
}

/// Free bytes on the data directory's file system against `--min-free-disk`.
pub fn free_disk(free: Result<u64, &str>, min_free: u64) -> Finding {
    let check = "free disk";
    let free = match free {
        Ok(free) => free,
        Err(e) => return Finding::warn(check, format!("cannot measure the free space: {e}"), "check the data directory's file system by hand (`df -h`)"),
    };
    if min_free == 0 {
        return Finding::warn(
            check,
            format!("{} free; `min-free-disk` is 0, so a full disk is never refused", human(free)),
            "set `min-free-disk` in [storage] (default 1 GiB): a full disk fails pushes and checkpoints halfway",
        );
    }
    if free < min_free {
        return Finding::fail(
            check,
            format!("{} free, below `min-free-disk` ({}): every event and push would be refused", human(free), human(min_free)),
            "free space on the data directory's file system, or lower `min-free-disk` in [storage]",
        );
    }
    if free / 2 < min_free {
        return Finding::warn(
            check,
            format!("{} free, less than twice `min-free-disk` ({})", human(free), human(min_free)),
            "free space soon: below the watermark every event and push is refused",
        );
    }
    Finding::ok(check, format!("{} free, `min-free-disk` {}", human(free), human(min_free)))
}

/// The open file limit (soft, hard) of this process against what the limits need.
pub fn open_files(limit: Result<(u64, u64), &str>, max_connections: u64, git_max_requests: u64) -> Finding {
    let check = "open files";
    let needed = grasp_state::trust::fd_budget::required(max_connections, git_max_requests);
    let (soft, hard) = match limit {
        Ok(l) => l,
        Err(e) => return Finding::warn(check, format!("cannot read the open file limit: {e}"), "check `ulimit -n -H`"),
    };
    match grasp_state::trust::fd_budget::plan(soft, hard, needed) {
        Ok(_) => Finding::ok(check, format!("hard limit {hard}, the limits need {needed}")),
        Err(refusal) => Finding::fail(
            check,
            format!("{refusal} (this is the limit the doctor runs under: the packaged systemd unit sets LimitNOFILE=65536)"),
            "raise the limit of the service (systemd `LimitNOFILE=`, `ulimit -n`), or lower `max-connections` / `git-max-requests` in [limits]",
        ),
    }
}

/// The public host: what announcements must list, and what every URL on the pages is built
/// from.
pub fn public_host(configured: Option<&str>, bind: SocketAddr) -> Finding {
    let check = "public host";
    let Some(configured) = configured else {
        return Finding::warn(
            check,
            format!("`public-host` is not set: the server calls itself {bind}, so only announcements listing {bind} are served"),
            "set `public-host` in [server] to the host clients use, e.g. \"git.example.com\"",
        );
    };
    let trimmed = configured.trim();
    let lower = trimmed.to_ascii_lowercase();
    let scheme = lower.find("://").map(|i| &lower[..i]);
    if let Some(s) = scheme.filter(|s| *s != "http" && *s != "https") {
        return Finding::fail(check, format!("{configured:?} has the scheme {s}://"), "give `host[:port]`, or an https:// (or http://) URL of it");
    }
    let authority = grasp_state::names::host::public_authority(trimmed);
    let Some(host) = grasp_state::names::host::HostPort::parse(authority) else {
        return Finding::fail(
            check,
            format!("{configured:?} is not a host[:port] (no path, user or query)"),
            "set `public-host` in [server] to the bare host clients use, e.g. \"git.example.com\"",
        );
    };
    if host.host == "localhost" || host.ip().is_some_and(|ip| ip.is_loopback()) {
        return Finding::warn(check, format!("{configured:?} is this machine only: no other computer can clone or connect"), "set the host clients use, e.g. \"git.example.com\"");
    }
    if host.ip().is_some() {
        return Finding::warn(
            check,
            format!("{configured:?} is an address: repositories announced with it move when the address does, and TLS certificates name hosts"),
            "use a host name, e.g. \"git.example.com\"",
        );
    }
    if scheme == Some("http") {
        return Finding::warn(check, format!("{configured:?}: the pages link with http:// and ws://"), "serve TLS (nginx, docs/deployment.md) and write the host without a scheme or with https://");
    }
    if !host.host.contains('.') {
        return Finding::warn(check, format!("{configured:?} has no domain"), "give the full name clients use, e.g. \"git.example.com\"");
    }
    Finding::ok(check, format!("{authority} (announcements must list this host in their `clone` and `relays` tags)"))
}

/// `1.5 GiB`, `300 MiB`, `12 KiB`, `10 bytes`.
pub fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            let tenths = bytes as u128 * 10 / size as u128;
            return if tenths.is_multiple_of(10) { format!("{} {unit}", tenths / 10) } else { format!("{}.{} {unit}", tenths / 10, tenths % 10) };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Level;

    fn names(uid: u32) -> String {
        match uid {
            0 => "root".into(),
            998 => "grasp-relay".into(),
            other => other.to_string(),
        }
    }

    #[test]
    fn git_must_be_recent_and_complete() {
        let backend = Path::new("/usr/lib/git-core/git-http-backend");
        assert_eq!(git(Ok("git version 2.47.3\n"), Some(backend)).level, Level::Ok);
        let older = git(Ok("git version 2.39.5"), Some(backend));
        assert_eq!(older.level, Level::Ok);
        assert!(older.what.contains("one process instead of two"), "{older:?}");
        let old = git(Ok("git version 2.36.9"), Some(backend));
        assert_eq!(old.level, Level::Fail);
        assert!(old.what.contains("2.37 or later"), "{old:?}");
        assert_eq!(git(Ok("git version 2.47.3"), None).level, Level::Fail);
        assert_eq!(git(Err("No such file or directory"), Some(backend)).level, Level::Fail);
        assert_eq!(git(Ok("hg 6.0"), Some(backend)).level, Level::Fail);
        assert_eq!(parse_git_version("git version 2.39.5.windows.1"), Some((2, 39)));
        assert_eq!(parse_git_version("git version 2.40.0 (Apple Git-143)"), Some((2, 40)));
        assert_eq!(parse_git_version("git version 3"), None);
    }

    #[test]
    fn binaries_must_all_be_executable() {
        let ok = |p: &str| (PathBuf::from(p), BinaryState::Executable);
        assert_eq!(binaries(&[ok("/usr/bin/grasp-cgi"), ok("/usr/bin/grasp-pre-receive")]).level, Level::Ok);
        let missing = binaries(&[ok("/usr/bin/grasp-cgi"), (PathBuf::from("/usr/bin/grasp-pre-receive"), BinaryState::Missing), (PathBuf::from("/usr/bin/grasp-post-receive"), BinaryState::NotExecutable)]);
        assert_eq!(missing.level, Level::Fail);
        assert!(missing.what.contains("/usr/bin/grasp-pre-receive (missing), /usr/bin/grasp-post-receive (not executable)"), "{missing:?}");
    }

    #[test]
    fn the_data_directory_belongs_to_the_service_and_no_one_else() {
        let path = Path::new("/var/lib/grasp-relay");
        let present = |owner, mode| DataDir::Present { owner, mode, writable: true, foreign: vec![], token_mode: Some(0o600) };
        let verdict = |found: &DataDir, me: u32, private: bool| data_dir(path, found, me, private, &names);
        assert_eq!(verdict(&present(998, 0o750), 998, false).level, Level::Ok);
        assert_eq!(verdict(&present(998, 0o700), 998, true).level, Level::Ok);
        assert_eq!(verdict(&present(998, 0o755), 998, false).level, Level::Warn);
        assert_eq!(verdict(&present(998, 0o755), 998, true).level, Level::Fail);
        assert_eq!(verdict(&present(998, 0o777), 998, false).level, Level::Fail);
        let as_root = verdict(&present(998, 0o750), 0, false);
        assert_eq!(as_root.level, Level::Fail);
        assert!(as_root.fix.as_deref().unwrap().contains("sudo -u grasp-relay grasp-relay doctor"), "{as_root:?}");
        let other = verdict(&present(0, 0o750), 998, false);
        assert!(other.what.contains("belongs to root, but the doctor runs as grasp-relay"), "{other:?}");
        let leftovers = DataDir::Present { owner: 998, mode: 0o750, writable: true, foreign: vec![("events".into(), 0)], token_mode: None };
        let found = verdict(&leftovers, 998, false);
        assert_eq!(found.level, Level::Fail);
        assert!(found.what.contains("events (root)") && found.fix.as_deref().unwrap().contains("chown -R grasp-relay:"), "{found:?}");
        let token = DataDir::Present { owner: 998, mode: 0o750, writable: true, foreign: vec![], token_mode: Some(0o644) };
        assert_eq!(verdict(&token, 998, false).level, Level::Fail);
        let readonly = DataDir::Present { owner: 998, mode: 0o550, writable: false, foreign: vec![], token_mode: None };
        assert_eq!(verdict(&readonly, 998, false).level, Level::Fail);
        assert_eq!(verdict(&DataDir::Missing { parent: "/var/lib".into(), parent_writable: true }, 998, false).level, Level::Ok);
        let cannot = verdict(&DataDir::Missing { parent: "/var/lib".into(), parent_writable: false }, 998, false);
        assert_eq!(cannot.level, Level::Fail);
        assert!(cannot.fix.as_deref().unwrap().contains("install -d -o grasp-relay -g grasp-relay -m 0750 /var/lib/grasp-relay"), "{cannot:?}");
        assert_eq!(verdict(&DataDir::NotADirectory, 998, false).level, Level::Fail);
    }

    #[test]
    fn free_disk_against_the_watermark() {
        let gib = 1u64 << 30;
        assert_eq!(free_disk(Ok(10 * gib), gib).level, Level::Ok);
        assert_eq!(free_disk(Ok(gib + gib / 2), gib).level, Level::Warn);
        let low = free_disk(Ok(gib / 2), gib);
        assert_eq!(low.level, Level::Fail);
        assert!(low.what.contains("512 MiB free, below `min-free-disk` (1 GiB)"), "{low:?}");
        assert_eq!(free_disk(Ok(gib), 0).level, Level::Warn);
        assert_eq!(free_disk(Err("EIO"), gib).level, Level::Warn);
    }

    #[test]
    fn the_open_file_limit_must_hold_the_limits() {
        assert_eq!(open_files(Ok((1024, 65536)), 1024, 64).level, Level::Ok);
        let low = open_files(Ok((1024, 1024)), 1024, 64);
        assert_eq!(low.level, Level::Fail);
        assert!(low.what.contains("1408") && low.what.contains("LimitNOFILE=65536"), "{low:?}");
    }

    #[test]
    fn the_public_host_is_a_name_clients_use() {
        let bind: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(public_host(Some("git.example.com"), bind).level, Level::Ok);
        assert_eq!(public_host(Some("https://git.example.com/"), bind).level, Level::Ok);
        assert_eq!(public_host(Some("git.example.com:8443"), bind).level, Level::Ok);
        for warned in ["http://git.example.com", "203.0.113.7", "[2001:db8::1]:443", "localhost:8080", "127.0.0.1:8080", "gitserver"] {
            assert_eq!(public_host(Some(warned), bind).level, Level::Warn, "{warned}");
        }
        for refused in ["git.example.com/path", "ftp://git.example.com", "user@git.example.com", "git example.com"] {
            assert_eq!(public_host(Some(refused), bind).level, Level::Fail, "{refused}");
        }
        let unset = public_host(None, bind);
        assert_eq!(unset.level, Level::Warn);
        assert!(unset.what.contains("127.0.0.1:8080"), "{unset:?}");
    }

    #[test]
    fn sizes_read_like_the_readme() {
        assert_eq!(human(1 << 30), "1 GiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(512 << 20), "512 MiB");
        assert_eq!(human(10), "10 bytes");
    }
}
