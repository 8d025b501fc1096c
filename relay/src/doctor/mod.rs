//! `grasp-relay doctor`: checks an installation before the first user does, and says what to
//! fix. It gathers facts ([`gather`]: git, the helper binaries, the data directory, the file
//! system, the open file limit, an nginx site) and hands them to pure verdicts ([`checks`],
//! [`nginx`]). A [`Report`] is fit to serve when no finding is a failure; warnings are things
//! an operator should know (a public host that is an address, a world-readable data directory).

pub mod checks;
pub mod nginx;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::Config;
use checks::{BinaryState, DataDir};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One check's verdict: what was found and, unless it is fine, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub check: &'static str,
    pub what: String,
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(check: &'static str, what: impl Into<String>) -> Finding {
        Finding { level: Level::Ok, check, what: what.into(), fix: None }
    }

    pub fn warn(check: &'static str, what: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { level: Level::Warn, check, what: what.into(), fix: Some(fix.into()) }
    }

    pub fn fail(check: &'static str, what: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { level: Level::Fail, check, what: what.into(), fix: Some(fix.into()) }
    }
}

/// Every finding about one installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// What was checked: the configuration file and the data directory.
    pub subject: String,
    pub findings: Vec<Finding>,
}

impl Report {
    /// No finding is a failure.
    pub fn fit_to_serve(&self) -> bool {
        self.findings.iter().all(|f| f.level != Level::Fail)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "grasp-relay doctor: {}", self.subject)?;
        for finding in &self.findings {
            let tag = match finding.level {
                Level::Ok => "ok  ",
                Level::Warn => "WARN",
                Level::Fail => "FAIL",
            };
            writeln!(f, "{tag}  {}: {}", finding.check, finding.what)?;
            if let Some(fix) = &finding.fix {
                writeln!(f, "      fix: {fix}")?;
            }
        }
        let fails = self.findings.iter().filter(|f| f.level == Level::Fail).count();
        let warns = self.findings.iter().filter(|f| f.level == Level::Warn).count();
        if fails == 0 {
            writeln!(f, "fit to serve ({warns} warning{})", if warns == 1 { "" } else { "s" })
        } else {
            writeln!(f, "not fit to serve: {fails} problem{} to fix, {warns} warning{}", if fails == 1 { "" } else { "s" }, if warns == 1 { "" } else { "s" })
        }
    }
}

/// Checks the installation `cfg` describes (and the nginx site at `nginx`, if given).
pub fn run(cfg: &Config, nginx: Option<&Path>) -> Report {
    let subject = format!(
        "configuration {}, data directory {}",
        cfg.config.as_ref().map_or_else(|| "from flags and defaults".to_string(), |p| p.display().to_string()),
        cfg.storage.data_dir.display()
    );
    let me = effective_uid();
    let mut findings = vec![
        checks::git(git_version().as_deref().map_err(String::as_str), crate::git::http_backend_program().as_deref()),
        checks::binaries(&cfg.server.helper_binaries().into_iter().map(|p| { let s = binary_state(&p); (p, s) }).collect::<Vec<_>>()),
        checks::data_dir(&cfg.storage.data_dir, &data_dir(&cfg.storage.data_dir), me, cfg.trust.private, &user_name),
        checks::free_disk(
            crate::trust::disk::available_bytes(&existing_ancestor(&cfg.storage.data_dir)).map_err(|e| e.to_string()).as_ref().map(|b| *b).map_err(String::as_str),
            cfg.storage.min_free_disk,
        ),
        checks::open_files(
            crate::server::fd_limit::current().map_err(|e| e.to_string()).as_ref().map(|l| *l).map_err(String::as_str),
            cfg.limits.max_connections.into(),
            cfg.limits.git_max_requests.into(),
        ),
        checks::public_host(cfg.server.public_host.as_deref(), cfg.server.bind),
    ];
    if let Some(path) = nginx {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let expected = nginx::Expected {
                    cgi_path: cfg.server.cgi_path(),
                    data_dir: absolute(&cfg.storage.data_dir),
                    max_push_bytes: cfg.limits.max_push_bytes,
                    git_idle_timeout_secs: cfg.limits.git_idle_timeout.as_secs(),
                    push_lock_wait_secs: cfg.limits.push_lock_wait.as_secs(),
                    git_min_rate: cfg.limits.git_min_rate,
                };
                findings.extend(nginx::check(path, &text, &expected));
            }
            Err(e) => findings.push(Finding::fail("nginx", format!("cannot read {}: {e}", path.display()), "give the site's file, or the output of `nginx -T`")),
        }
    }
    Report { subject, findings }
}

/// `git --version`, run as the relay runs git.
fn git_version() -> Result<String, String> {
    crate::git::runner::GitCommand::without_repo()
        .arg("--version")
        .run()
        .map(|out| String::from_utf8_lossy(&out).into_owned())
        .map_err(|e| e.to_string())
}

fn binary_state(path: &Path) -> BinaryState {
    match std::fs::metadata(path) {
        Err(_) => BinaryState::Missing,
        Ok(m) if !m.is_file() => BinaryState::NotAFile,
        Ok(m) if m.permissions().mode() & 0o111 == 0 => BinaryState::NotExecutable,
        Ok(_) => BinaryState::Executable,
    }
}

/// The data directory as found on disk.
fn data_dir(path: &Path) -> DataDir {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = existing_ancestor(path);
            let parent_writable = writable(&parent);
            return DataDir::Missing { parent, parent_writable };
        }
        Err(e) => return DataDir::Unreadable(e.to_string()),
    };
    if !meta.is_dir() {
        return DataDir::NotADirectory;
    }
    let mut foreign = Vec::new();
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                if let Ok(m) = entry.path().symlink_metadata() {
                    if m.uid() != meta.uid() {
                        foreign.push((entry.file_name().to_string_lossy().into_owned(), m.uid()));
                    }
                }
            }
        }
        Err(e) => return DataDir::Unreadable(e.to_string()),
    }
    foreign.sort();
    let token_mode = std::fs::metadata(path.join(grasp_state::contract::layout::API_TOKEN_FILE)).ok().map(|m| m.permissions().mode() & 0o7777);
    DataDir::Present { owner: meta.uid(), mode: meta.permissions().mode() & 0o7777, writable: writable(path), foreign, token_mode }
}

/// `path`, or the nearest of its ancestors that exists.
fn existing_ancestor(path: &Path) -> PathBuf {
    let absolute = absolute(path);
    absolute.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/")).to_path_buf()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// May this process create files in `dir`?
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user name of `uid`, else the number.
fn user_name(uid: u32) -> String {
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to memory we own, of the sizes given.
    let rc = unsafe { libc::getpwuid_r(uid, pwd.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() {
        return uid.to_string();
    }
    // SAFETY: getpwuid_r succeeded, so `pwd` is filled and `pw_name` points into `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.assume_init().pw_name) };
    name.to_string_lossy().into_owned()
}
