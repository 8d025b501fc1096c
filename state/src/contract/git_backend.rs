//! How stock `git http-backend` runs for one request to a GRASP repository, and whether a service
//! is private: the one definition `grasp-cgi` (under nginx + fcgiwrap, and under the relay for
//! what the relay leaves to it) and the relay's own listener share. The relay starts the backend
//! itself for a plain git request to a public service's repository, so it never pays for a
//! `grasp-cgi` process there (docs/architecture.md, "Git over HTTP").
//!
//! [`BackendSetup::command`] builds the backend's command and spawns nothing. [`service`] looks
//! for a private service's markers ([`PRIVATE_MARKER_FILE`]).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::contract::git_env;
use super::layout::PRIVATE_MARKER_FILE;
use crate::names::identifier::{RepoSpace, RepoUrlPath, GRASP_GIT_CONFIG};

/// What every backend run needs besides the request: where the repositories are, the hooks, the
/// programs, the push limit.
#[derive(Debug, Clone, Default)]
pub struct BackendSetup {
    /// Root of `<npub>/<identifier>.git` (`GIT_PROJECT_ROOT`).
    pub git_root: PathBuf,
    /// The GRASP hooks' directory, set as `core.hooksPath`.
    pub hooks_dir: Option<PathBuf>,
    /// The git executable (`<git> http-backend` when `http_backend` is `None`).
    pub git: PathBuf,
    /// git's `git-http-backend` program, run directly: one process start less per request.
    pub http_backend: Option<PathBuf>,
    /// Bytes of a push's pack git reads at most (`receive.maxInputSize`).
    pub max_push_bytes: Option<u64>,
    /// The same for a push to a contributor repository (`/prs/`, `--max-pr-push-bytes`); `None`:
    /// `max_push_bytes` holds there too.
    pub max_pr_push_bytes: Option<u64>,
}

impl BackendSetup {
    /// The git config every request runs with, whatever the repository's own config says.
    pub fn per_request_config(&self) -> Vec<(String, OsString)> {
        self.per_request_config_in(RepoSpace::Hosted)
    }

    /// [`BackendSetup::per_request_config`] for a repository of `space`: a contributor
    /// repository reads at most the pull request push limit.
    pub fn per_request_config_in(&self, space: RepoSpace) -> Vec<(String, OsString)> {
        let mut cfg: Vec<(String, OsString)> =
            GRASP_GIT_CONFIG.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        if let Some(dir) = &self.hooks_dir {
            cfg.push(("core.hooksPath".to_string(), dir.as_os_str().to_owned()));
        }
        // git stops reading a pack beyond the push limit (the relay passes --max-push-bytes, and
        // --max-pr-push-bytes for contributor repositories).
        let limit = match (space, self.max_pr_push_bytes) {
            (RepoSpace::Prs, Some(pr)) => Some(self.max_push_bytes.map_or(pr, |max| max.min(pr))),
            _ => self.max_push_bytes,
        };
        if let Some(max) = limit {
            cfg.push(("receive.maxInputSize".to_string(), max.to_string().into()));
        }
        cfg
    }

    /// What starting the backend is called in error messages.
    pub fn running(&self) -> String {
        match &self.http_backend {
            Some(program) => format!("running {}", program.display()),
            None => format!("running {} http-backend", self.git.display()),
        }
    }

    /// `git http-backend` for `repo` (at `repo_dir`): the git environment policy
    /// ([`git_env::apply`]), then `cgi_vars` (the request's CGI variables, for a caller whose own
    /// environment does not hold them), then `GIT_PROJECT_ROOT`, `PATH_INFO` and the GRASP
    /// per-request config, which no request variable can override. In a process group of its own,
    /// stdout piped, stderr inherited; the caller chooses stdin.
    pub fn command<K, V>(&self, repo: &RepoUrlPath, repo_dir: &Path, cgi_vars: impl IntoIterator<Item = (K, V)>) -> Command
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut cmd = match &self.http_backend {
            Some(program) => Command::new(program),
            None => Command::new(&self.git),
        };
        git_env::apply(&mut cmd);
        if self.http_backend.is_none() {
            cmd.arg("http-backend");
        }
        for (k, v) in cgi_vars {
            let (k, v): (OsString, OsString) = (k.into(), v.into());
            // The policy holds for the request's variables too.
            if !git_env::is_cleared(&k) {
                cmd.env(k, v);
            }
        }
        cmd.env("GIT_PROJECT_ROOT", &self.git_root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("PATH_INFO", format!("{}{}", repo.repo_root(), repo.rest))
            .env("PATH_TRANSLATED", format!("{}{}", repo_dir.display(), repo.rest))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        self.put_request_config(&mut cmd, repo.space);
        cmd
    }

    /// `git upload-pack --stateless-rpc` in `repo_dir`, as `git http-backend` starts it for a
    /// `POST git-upload-pack` (same environment policy, per-request config and `GIT_PROTOCOL`),
    /// for the relay to start without the backend when it already knows the backend's header
    /// block (docs/architecture.md, "The ref cache"). In a process group of its own, stdout
    /// piped, stderr inherited; the caller chooses stdin.
    pub fn upload_pack_command(&self, repo: &RepoUrlPath, repo_dir: &Path, git_protocol: Option<&[u8]>) -> Command {
        use std::os::unix::ffi::OsStrExt;
        let mut cmd = Command::new(&self.git);
        git_env::apply(&mut cmd);
        cmd.args(["upload-pack", "--stateless-rpc", "."])
            .current_dir(repo_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        if let Some(protocol) = git_protocol {
            cmd.env("GIT_PROTOCOL", std::ffi::OsStr::from_bytes(protocol));
        }
        self.put_request_config(&mut cmd, repo.space);
        cmd
    }

    /// The per-request config as `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_<n>` / `GIT_CONFIG_VALUE_<n>`.
    fn put_request_config(&self, cmd: &mut Command, space: RepoSpace) {
        let config = self.per_request_config_in(space);
        cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (k, v)) in config.into_iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), k).env(format!("GIT_CONFIG_VALUE_{i}"), v);
        }
    }
}

/// A request that belongs to a push: its ref advertisement or its receive-pack `POST`.
/// `method` upper case, `rest` what follows `.git` ([`RepoUrlPath::rest`]).
pub fn is_push(method: &str, rest: &str, query: &str) -> bool {
    (method == "POST" && rest == "/git-receive-pack")
        || (rest == "/info/refs" && query.split('&').any(|p| p == "service=git-receive-pack"))
}

/// A request for the repository's page (`/<npub>/<id>.git` or `.git/`), not for git.
pub fn is_page(rest: &str) -> bool {
    rest.is_empty() || rest == "/"
}

/// Whether the repositories under a git root belong to a private service.
#[derive(Debug, PartialEq, Eq)]
pub enum Service {
    Public,
    /// `data_dir`: where to find the relay to ask (the data directory holding a marker, else the
    /// one configured, else the parent of the git root).
    Private { data_dir: Option<PathBuf> },
}

/// Private when the relay's marker ([`PRIVATE_MARKER_FILE`]) is in the data directory
/// (`data_dir` and the parent of `git_root` are both looked at) or in the git root itself, which
/// the relay marks too, so a git root configured alone (a volume mounted elsewhere) still finds
/// it. A marker location that cannot be read counts as marked; `unreadable` hears of it.
pub fn service(data_dir: Option<&Path>, git_root: &Path, mut unreadable: impl FnMut(&Path, &std::io::Error)) -> Service {
    let data_dirs: Vec<PathBuf> = data_dir.map(Path::to_path_buf).into_iter().chain(git_root.parent().map(Path::to_path_buf)).collect();
    let mut marked = |dir: &Path| {
        let marker = dir.join(PRIVATE_MARKER_FILE);
        marker.try_exists().unwrap_or_else(|e| {
            unreadable(&marker, &e);
            true
        })
    };
    if let Some(dir) = data_dirs.iter().find(|d| marked(d)) {
        return Service::Private { data_dir: Some(dir.clone()) };
    }
    if marked(git_root) {
        return Service::Private { data_dir: data_dirs.into_iter().next() };
    }
    Service::Public
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::identifier::parse_repo_path;

    fn env_of(cmd: &Command) -> Vec<(String, Option<String>)> {
        cmd.get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_string_lossy().into_owned())))
            .collect()
    }

    fn value(cmd: &Command, key: &str) -> Option<String> {
        env_of(cmd).into_iter().find(|(k, _)| k == key).and_then(|(_, v)| v)
    }

    fn repo() -> RepoUrlPath {
        let npub = crate::names::identifier::npub_of(&nostr::prelude::Keys::generate().public_key());
        parse_repo_path(&format!("/{npub}/r.git/info/refs")).expect("valid path")
    }

    #[test]
    fn the_request_cannot_override_the_repository_or_the_config() {
        let setup = BackendSetup {
            git_root: "/srv/git".into(),
            hooks_dir: Some("/srv/hooks".into()),
            git: "git".into(),
            http_backend: Some("/usr/lib/git-core/git-http-backend".into()),
            max_push_bytes: Some(1000),
            max_pr_push_bytes: Some(100),
        };
        let repo = repo();
        let cmd = setup.command(
            &repo,
            Path::new("/srv/git/x/r.git"),
            [
                ("PATH_INFO", "/elsewhere.git/info/refs"),
                ("GIT_PROJECT_ROOT", "/"),
                ("GIT_CONFIG_PARAMETERS", "'core.hookspath'='/tmp'"),
                ("REQUEST_METHOD", "GET"),
            ],
        );
        assert_eq!(cmd.get_program(), "/usr/lib/git-core/git-http-backend");
        assert_eq!(cmd.get_args().count(), 0);
        assert_eq!(value(&cmd, "PATH_INFO").unwrap(), format!("/{}/r.git/info/refs", repo.npub));
        assert_eq!(value(&cmd, "PATH_TRANSLATED").unwrap(), "/srv/git/x/r.git/info/refs");
        assert_eq!(value(&cmd, "GIT_PROJECT_ROOT").unwrap(), "/srv/git");
        assert_eq!(value(&cmd, "GIT_CONFIG_PARAMETERS"), None, "a request's GIT_* never reaches git");
        assert_eq!(value(&cmd, "REQUEST_METHOD").unwrap(), "GET");
        let count: usize = value(&cmd, "GIT_CONFIG_COUNT").unwrap().parse().unwrap();
        let config: Vec<(String, String)> =
            (0..count).map(|i| (value(&cmd, &format!("GIT_CONFIG_KEY_{i}")).unwrap(), value(&cmd, &format!("GIT_CONFIG_VALUE_{i}")).unwrap())).collect();
        assert!(config.contains(&("core.hooksPath".into(), "/srv/hooks".into())), "{config:?}");
        assert!(config.contains(&("receive.maxInputSize".into(), "1000".into())), "{config:?}");
        for (k, v) in GRASP_GIT_CONFIG {
            assert!(config.contains(&(k.to_string(), v.to_string())), "{k} missing: {config:?}");
        }
        for (k, v) in git_env::GIT_ENV {
            assert_eq!(value(&cmd, k).as_deref(), Some(*v));
        }
        // A contributor repository: its own path, and the pull request push limit.
        let prs = parse_repo_path(&format!("/prs/{}/r.git/git-receive-pack", repo.npub)).unwrap();
        let cmd = setup.command(&prs, Path::new("/srv/git/prs/x/r.git"), std::iter::empty::<(String, String)>());
        assert_eq!(value(&cmd, "PATH_INFO").unwrap(), format!("/prs/{}/r.git/git-receive-pack", repo.npub));
        assert!(setup.per_request_config_in(RepoSpace::Prs).contains(&("receive.maxInputSize".into(), "100".into())));
    }

    #[test]
    fn upload_pack_runs_as_the_backend_would_start_it() {
        let setup = BackendSetup { git: "/opt/git".into(), hooks_dir: Some("/srv/hooks".into()), ..BackendSetup::default() };
        let cmd = setup.upload_pack_command(&repo(), Path::new("/srv/git/x/r.git"), Some(b"version=2"));
        assert_eq!(cmd.get_program(), "/opt/git");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["upload-pack", "--stateless-rpc", "."]);
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/srv/git/x/r.git")));
        assert_eq!(value(&cmd, "GIT_PROTOCOL").as_deref(), Some("version=2"));
        let backend = setup.command(&repo(), Path::new("/srv/git/x/r.git"), std::iter::empty::<(&str, &str)>());
        let config = |cmd: &Command| env_of(cmd).into_iter().filter(|(k, _)| k.starts_with("GIT_CONFIG")).collect::<Vec<_>>();
        assert_eq!(config(&cmd), config(&backend), "the same config as under the backend");
        for (k, v) in git_env::GIT_ENV {
            assert_eq!(value(&cmd, k).as_deref(), Some(*v));
        }
    }

    #[test]
    fn without_the_backend_program_git_runs_it() {
        let setup = BackendSetup { git: "/opt/git".into(), ..BackendSetup::default() };
        let cmd = setup.command(&repo(), Path::new("/r.git"), std::iter::empty::<(&str, &str)>());
        assert_eq!(cmd.get_program(), "/opt/git");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["http-backend"]);
        assert_eq!(setup.running(), "running /opt/git http-backend");
    }

    #[test]
    fn pushes_and_pages_are_told_apart() {
        assert!(is_push("POST", "/git-receive-pack", ""));
        assert!(is_push("GET", "/info/refs", "service=git-receive-pack"));
        assert!(is_push("GET", "/info/refs", "x=1&service=git-receive-pack"));
        assert!(!is_push("GET", "/info/refs", "service=git-upload-pack"));
        assert!(!is_push("POST", "/git-upload-pack", ""));
        assert!(!is_push("GET", "/git-receive-pack", ""));
        assert!(is_page("") && is_page("/"));
        assert!(!is_page("/info/refs"));
    }

    #[test]
    fn a_marker_in_the_git_root_or_the_data_directory_makes_the_service_private() {
        let tmp = tempfile::tempdir().unwrap();
        let quiet = |_: &Path, _: &std::io::Error| {};
        let data = tmp.path().join("data");
        let git = data.join("git");
        std::fs::create_dir_all(&git).unwrap();
        assert_eq!(service(None, &git, quiet), Service::Public);

        // The git root alone, elsewhere (a volume): found through its own marker.
        let volume = tmp.path().join("volume");
        std::os::unix::fs::symlink(&git, &volume).unwrap();
        std::fs::write(git.join(PRIVATE_MARKER_FILE), "").unwrap();
        assert_eq!(service(None, &volume, quiet), Service::Private { data_dir: Some(tmp.path().to_path_buf()) });
        assert_eq!(service(Some(&data), &volume, quiet), Service::Private { data_dir: Some(data.clone()) });

        // The data directory's marker.
        std::fs::remove_file(git.join(PRIVATE_MARKER_FILE)).unwrap();
        std::fs::write(data.join(PRIVATE_MARKER_FILE), "").unwrap();
        assert_eq!(service(None, &git, quiet), Service::Private { data_dir: Some(data.clone()) });
        assert_eq!(service(Some(&data), &volume, quiet), Service::Private { data_dir: Some(data.clone()) });
        assert_eq!(service(None, &volume, quiet), Service::Public, "nothing says private: the relay marks the git root too");
    }

    #[test]
    fn a_marker_location_that_cannot_be_read_counts_as_private() {
        let tmp = tempfile::tempdir().unwrap();
        let git = tmp.path().join("git");
        std::fs::create_dir_all(&git).unwrap();
        // A data directory under a regular file: its marker's existence cannot be told.
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let data = file.join("data");
        let mut heard = Vec::new();
        let verdict = service(Some(&data), &git, |marker, _| heard.push(marker.to_path_buf()));
        assert_eq!(verdict, Service::Private { data_dir: Some(data.clone()) });
        assert_eq!(heard, [data.join(PRIVATE_MARKER_FILE)], "the unreadable location is reported");
    }
}
