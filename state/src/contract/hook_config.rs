//! What the git hooks need to know, in a small file beside them: [`HOOK_CONFIG_FILE`] in
//! `<data>/hooks/`.
//!
//! The relay installs the hooks as the hook binaries themselves (hard links, or copies where a
//! link cannot be made), so git starts them without a shell. At every start it writes this
//! file next to them (atomically); a hook finds it in the directory it was started from, which
//! works the same behind the relay's own listener and behind nginx + fcgiwrap. The format is
//! `NAME=value` lines with the names of the matching environment variables (`#` starts a
//! comment line); the value is the rest of the line, bytes as they are (paths need not be
//! UTF-8), so only a newline cannot be written.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::layout::HOOK_CONFIG_FILE;
use super::env_names::{DATA_DIR, MAX_PR_PUSH_BYTES, MAX_PUSH_BYTES};
use crate::contract::push_limits::PushLimits;

/// The hooks' configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// The relay's data directory (API address and token, the git root).
    pub data_dir: PathBuf,
    /// `--max-push-bytes` and `--max-pr-push-bytes`, checked by `pre-receive`.
    pub limits: PushLimits,
}

/// Why a configuration could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookConfigError {
    #[error("the data directory path {0:?} contains a newline; use a path without one")]
    NewlineInPath(PathBuf),
    #[error("line {0} of the hooks' configuration is not NAME=value; restart grasp-relay to rewrite it")]
    BadLine(usize),
    #[error("the hooks' configuration names no {DATA_DIR}; restart grasp-relay to rewrite it")]
    NoDataDir,
}

impl HookConfig {
    /// The file's content.
    pub fn render(&self) -> Result<Vec<u8>, HookConfigError> {
        let dir = self.data_dir.as_os_str().as_bytes();
        if dir.contains(&b'\n') {
            return Err(HookConfigError::NewlineInPath(self.data_dir.clone()));
        }
        let mut out = b"# Written by grasp-relay at every start; do not edit. Read by the hooks beside it.\n".to_vec();
        out.extend_from_slice(DATA_DIR.as_bytes());
        out.push(b'=');
        out.extend_from_slice(dir);
        out.extend_from_slice(
            format!(
                "\n{MAX_PUSH_BYTES}={}\n{MAX_PR_PUSH_BYTES}={}\n",
                self.limits.max_push_bytes, self.limits.max_pr_push_bytes
            )
            .as_bytes(),
        );
        Ok(out)
    }

    /// Reads the file's content. Unknown names are ignored (a newer relay may add some); a
    /// missing or unreadable limit keeps its default, as [`PushLimits::from_vars`] does.
    pub fn parse(content: &[u8]) -> Result<HookConfig, HookConfigError> {
        let mut vars: Vec<(&[u8], &[u8])> = Vec::new();
        for (i, line) in content.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let eq = line.iter().position(|b| *b == b'=').ok_or(HookConfigError::BadLine(i + 1))?;
            vars.push((&line[..eq], &line[eq + 1..]));
        }
        let var = |name: &str| vars.iter().rev().find(|(k, _)| *k == name.as_bytes()).map(|(_, v)| *v);
        let data_dir = var(DATA_DIR).filter(|v| !v.is_empty()).ok_or(HookConfigError::NoDataDir)?;
        let limits = PushLimits::from_vars(|name| var(name).map(|v| String::from_utf8_lossy(v).into_owned()));
        Ok(HookConfig { data_dir: PathBuf::from(OsString::from_vec(data_dir.to_vec())), limits })
    }

    /// The configuration file beside an executable at `exe` (a hook in `<data>/hooks/`).
    pub fn path_beside(exe: &Path) -> Option<PathBuf> {
        Some(exe.parent()?.join(HOOK_CONFIG_FILE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_written_configuration_reads_back() {
        let config = HookConfig { data_dir: "/var/lib/grasp".into(), limits: PushLimits { max_push_bytes: 10, max_pr_push_bytes: 5 } };
        let text = config.render().unwrap();
        assert!(String::from_utf8_lossy(&text).contains("GRASP_DATA_DIR=/var/lib/grasp\n"));
        assert_eq!(HookConfig::parse(&text).unwrap(), config);
    }

    #[test]
    fn odd_files_are_refused_with_advice() {
        let newline = HookConfig { data_dir: "/a\nb".into(), limits: PushLimits::default() };
        assert!(matches!(newline.render(), Err(HookConfigError::NewlineInPath(_))));
        assert_eq!(HookConfig::parse(b"# only a comment\n"), Err(HookConfigError::NoDataDir));
        let err = HookConfig::parse(b"GRASP_DATA_DIR=/d\nnonsense\n").unwrap_err();
        assert!(err.to_string().contains("restart grasp-relay"), "{err}");
        // Unknown names and unreadable limits: ignored, defaults kept.
        let read = HookConfig::parse(b"GRASP_DATA_DIR=/d\nGRASP_NEW=1\nGRASP_MAX_PUSH_BYTES=lots\n").unwrap();
        assert_eq!(read, HookConfig { data_dir: "/d".into(), limits: PushLimits::default() });
    }

    proptest! {
        #[test]
        fn any_path_without_a_newline_and_any_limits_read_back(
            dir in proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 1..200),
            max in any::<u64>(),
            pr_max in any::<u64>(),
        ) {
            let config = HookConfig {
                data_dir: PathBuf::from(OsString::from_vec(dir)),
                limits: PushLimits { max_push_bytes: max, max_pr_push_bytes: pr_max },
            };
            prop_assert_eq!(HookConfig::parse(&config.render().unwrap()).unwrap(), config);
        }

        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = HookConfig::parse(&bytes);
        }
    }
}
