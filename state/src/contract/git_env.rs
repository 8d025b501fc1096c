//! The one environment policy for every git process the relay and `grasp-cgi` start.
//!
//! git reads much of its behaviour from the environment and from configuration files that are
//! not the repository's: `/etc/gitconfig`, `~/.gitconfig`, and every inherited `GIT_*` variable
//! (`GIT_DIR`, `GIT_CONFIG_PARAMETERS`, `GIT_QUARANTINE_PATH` of a hook's caller, ...). None of
//! them may change what the relay does, so every git child:
//! - loses every inherited variable for which [`is_cleared`] holds (all `GIT_*`, plus
//!   `SSH_ASKPASS`),
//! - then gets [`GIT_ENV`]: no system or global configuration, never a terminal prompt.
//!
//! Callers then add what their one command needs (`grasp-cgi` the CGI variables,
//! `GIT_PROJECT_ROOT` and the per-request configuration; the relay's runner per-call `-c`
//! options). [`apply`] puts the policy on a `std::process::Command` (it spawns nothing); the
//! relay's `git::runner` and `grasp-cgi` call it.

use std::ffi::{OsStr, OsString};

/// Variables every git child gets, after the inherited ones are cleared.
pub const GIT_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Whether an inherited variable named `name` is removed from a git child's environment.
pub fn is_cleared(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.starts_with(b"GIT_") || bytes == b"SSH_ASKPASS"
}

/// Applies the policy to a git command about to be spawned: clears what this process would
/// pass on ([`cleared_vars`] of its environment), then sets [`GIT_ENV`]. Call it before adding
/// the command's own variables.
pub fn apply(cmd: &mut std::process::Command) {
    for name in cleared_vars(std::env::vars_os()) {
        cmd.env_remove(name);
    }
    cmd.envs(GIT_ENV.iter().copied());
}

/// The inherited variable names (from `vars`, e.g. `std::env::vars_os()`) a git child must not
/// see.
pub fn cleared_vars<I, K, V>(vars: I) -> Vec<OsString>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<OsString>,
{
    vars.into_iter()
        .map(|(k, _)| k.into())
        .filter(|k| is_cleared(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clears_every_git_variable_and_askpass_only() {
        let vars = [
            ("GIT_DIR", "x"),
            ("GIT_CONFIG_PARAMETERS", "'a.b'='c'"),
            ("GIT_QUARANTINE_PATH", "q"),
            ("SSH_ASKPASS", "p"),
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("GRASP_GIT_ROOT", "/g"),
            ("XGIT_DIR", "y"),
        ];
        assert_eq!(
            cleared_vars(vars),
            ["GIT_DIR", "GIT_CONFIG_PARAMETERS", "GIT_QUARANTINE_PATH", "SSH_ASKPASS"]
                .map(OsString::from)
        );
    }

    #[test]
    fn apply_clears_then_sets() {
        let mut cmd = std::process::Command::new("git");
        apply(&mut cmd);
        let envs: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned))).collect();
        for (k, v) in GIT_ENV {
            assert!(envs.contains(&(OsString::from(k), Some(OsString::from(v)))), "{k}");
        }
        for name in cleared_vars(std::env::vars_os()) {
            let set = GIT_ENV.iter().any(|(k, _)| OsStr::new(k) == name);
            assert!(set || envs.contains(&(name.clone(), None)), "{name:?} is not cleared");
        }
    }

    #[test]
    fn policy_disables_system_and_global_config() {
        let get = |k: &str| GIT_ENV.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        assert_eq!(get("GIT_CONFIG_NOSYSTEM"), Some("1"));
        assert_eq!(get("GIT_CONFIG_GLOBAL"), Some("/dev/null"));
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        // Inherited values of the variables the policy sets are cleared, never kept.
        assert!(GIT_ENV.iter().all(|(k, _)| is_cleared(OsStr::new(k))));
    }
}
