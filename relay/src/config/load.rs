//! The effective configuration: the command line, the environment and the configuration file
//! merged by clap ([`Config::load_from`]), and where each value came from ([`Setting`],
//! printed by `grasp-relay config show`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

use super::file::{is_list, FileErrors, FileValues, Kind};
use super::sections::{self, Section};
use super::Config;

/// A configuration and where each of its settings came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Every setting of the file's sections, in [`sections::settings`] order.
    pub settings: Vec<Setting>,
}

/// Why no configuration could be made.
#[derive(Debug)]
pub enum LoadError {
    /// The command line or an environment variable (also `--help` and `--version`, which clap
    /// prints on exit).
    Cli(clap::Error),
    /// The configuration file.
    File(FileErrors),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Cli(e) => write!(f, "{}", e.to_string().trim_end()),
            LoadError::File(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File { path: PathBuf, line: usize },
    Environment(String),
    CommandLine,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Environment(name) => write!(f, "environment {name}"),
            Source::CommandLine => write!(f, "command line"),
        }
    }
}

/// One setting as it is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The clap argument id (the `Config` field).
    pub id: &'static str,
    pub section: Section,
    /// The key in the file: the flag's long name.
    pub key: String,
    pub kind: Kind,
    pub list: bool,
    /// The values as text (empty: not set, or an empty list).
    pub values: Vec<String>,
    pub source: Source,
}

impl Setting {
    /// The `key = value` line of the file for this setting (`None`: not set, no value to write).
    pub fn toml_line(&self) -> Option<String> {
        if self.values.is_empty() && !self.list {
            return None;
        }
        let value = if self.list {
            let items: Vec<String> = self.values.iter().map(|v| toml_scalar(self.kind, v)).collect();
            format!("[{}]", items.join(", "))
        } else {
            toml_scalar(self.kind, &self.values[0])
        };
        Some(format!("{} = {value}", self.key))
    }
}

/// A value's text as TOML: numbers and switches bare, everything else quoted.
fn toml_scalar(kind: Kind, text: &str) -> String {
    match kind {
        Kind::Switch if text == "true" || text == "false" => text.to_string(),
        Kind::Integer => match text.trim().parse::<i128>() {
            Ok(n) => n.to_string(),
            Err(_) => quote(text),
        },
        Kind::Number => match text.trim().parse::<f64>() {
            Ok(n) if n.is_nan() => "nan".to_string(),
            Ok(n) if n.is_infinite() => if n > 0.0 { "inf" } else { "-inf" }.to_string(),
            Ok(n) => format!("{n:?}").trim_end_matches(".0").to_string(),
            Err(_) => quote(text),
        },
        Kind::Duration => match text.parse::<u64>() {
            Ok(seconds) => seconds.to_string(),
            Err(_) => quote(text),
        },
        _ => quote(text),
    }
}

/// A TOML basic string.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Config {
    /// The configuration of this process: its command line, its environment and the file
    /// named by `--config` (or `GRASP_CONFIG`).
    pub fn load() -> Result<Loaded, LoadError> {
        Self::load_from(std::env::args_os())
    }

    /// The configuration from `args` (the first is the program name), the environment and the
    /// file they name. Precedence: flags, environment variables, the file, the built-in
    /// defaults.
    pub fn load_from<I, T>(args: I) -> Result<Loaded, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        Self::load_with(Config::command(), &args)
    }

    /// `grasp-relay config check FILE`: the configuration from the file alone (no other flag,
    /// no environment variable), as the relay would start with it.
    pub fn check_file(path: &Path) -> Result<Loaded, LoadError> {
        let cmd = Config::command().mut_args(|a| a.env(None::<&'static str>));
        let args = [OsString::from("grasp-relay"), OsString::from("--config"), path.as_os_str().to_owned()];
        Self::load_with(cmd, &args)
    }

    /// The file of `grasp-relay config check FILE` when `args` ask for it: read before the
    /// rest of the configuration, so that neither the environment nor another file stands in
    /// the way of checking this one.
    pub fn check_requested<I, T>(args: I) -> Option<PathBuf>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cmd = Config::command().mut_args(|a| a.env(None::<&'static str>));
        let matches = cmd.try_get_matches_from(args).ok()?;
        match Config::from_arg_matches(&matches).ok()?.command? {
            super::Command::Config { action: super::ConfigCommand::Check { file } } => Some(file),
            _ => None,
        }
    }

    fn load_with(cmd: Command, args: &[OsString]) -> Result<Loaded, LoadError> {
        let first = cmd.clone().try_get_matches_from(args).map_err(LoadError::Cli)?;
        let (cmd, matches, file) = match first.get_one::<PathBuf>("config") {
            None => (cmd, first, None),
            Some(path) => {
                let file = FileValues::read(path, &cmd).map_err(LoadError::File)?;
                let cmd = file.as_defaults(cmd);
                let matches = cmd.clone().try_get_matches_from(args).map_err(LoadError::Cli)?;
                (cmd, matches, Some(file))
            }
        };
        let config = Config::from_arg_matches(&matches).map_err(LoadError::Cli)?;
        let settings = settings(&cmd, &matches, file.as_ref());
        Ok(Loaded { config, settings })
    }
}

/// Every setting of the file's sections as `matches` has it.
fn settings(cmd: &Command, matches: &ArgMatches, file: Option<&FileValues>) -> Vec<Setting> {
    sections::settings()
        .iter()
        .filter_map(|(id, section)| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id)?;
            let values: Vec<String> = matches
                .get_raw(id)
                .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let in_file = file.and_then(|f| f.values.get(*id).map(|v| (f.path.clone(), v.line)));
            let source = match (matches.value_source(id), in_file) {
                (Some(ValueSource::CommandLine), _) => Source::CommandLine,
                (Some(ValueSource::EnvVariable), _) => {
                    Source::Environment(arg.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default())
                }
                (_, Some((path, line))) => Source::File { path, line },
                _ => Source::Default,
            };
            Some(Setting {
                id,
                section: *section,
                key: arg.get_long().unwrap_or(id).to_string(),
                kind: Kind::of(arg),
                list: is_list(arg),
                values,
                source,
            })
        })
        .collect()
}

/// The effective configuration as a configuration file, each value's source in its comment
/// (`grasp-relay config show`).
pub fn render(settings: &[Setting]) -> String {
    let mut out = String::from(
        "# The configuration in force: flags win over environment variables, which win over the\n\
         # configuration file (--config), which wins over the built-in defaults. Each line's comment\n\
         # says where its value came from. This text is itself a valid configuration file.\n",
    );
    for section in Section::ALL {
        out.push_str(&format!("\n[{}]  # {}\n", section.name(), section.about()));
        for s in settings.iter().filter(|s| s.section == section) {
            match s.toml_line() {
                Some(line) => out.push_str(&format!("{line}  # {}\n", s.source)),
                None => out.push_str(&format!("# {} is not set  # {}\n", s.key, s.source)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::sections::{section_of, settings, NOT_IN_FILE};
    use std::time::Duration;

    const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grasp-relay.toml");
    const PACKAGED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/config.toml");

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    fn setting<'a>(settings: &'a [Setting], id: &str) -> &'a Setting {
        settings.iter().find(|s| s.id == id).unwrap()
    }

    /// A flag of `Config` that is no field of a section's struct and not in `NOT_IN_FILE` fails
    /// here, as does a setting without a long name to be its key.
    #[test]
    fn every_flag_has_a_section() {
        let cmd = Config::command();
        let mut missing = Vec::new();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            let placed = settings().iter().filter(|(i, _)| *i == id).count() + NOT_IN_FILE.iter().filter(|i| **i == id).count();
            match placed {
                1 => {}
                0 => missing.push(format!(
                    "--{} has no section in the configuration file: make it a field of a section's struct in relay/src/config/ \
                     (and its key to docs/grasp-relay.toml), or add \"{id}\" to NOT_IN_FILE",
                    arg.get_long().unwrap_or(id)
                )),
                _ => missing.push(format!("{id} is both a setting of a section and in NOT_IN_FILE")),
            }
            if section_of(id).is_some() {
                assert!(arg.get_long().is_some(), "{id} has a section but no long flag name to be its key");
            }
        }
        for id in NOT_IN_FILE {
            if !cmd.get_arguments().any(|a| a.get_id() == *id) {
                missing.push(format!("{id} is in NOT_IN_FILE but is no flag of Config"));
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// Each section's struct holds the settings of that section of the file, and nothing else.
    #[test]
    fn the_sections_are_the_structs() {
        for section in Section::ALL {
            for arg in section.command().get_arguments() {
                let id = arg.get_id().as_str();
                assert!(section_of(id) == Some(section) || NOT_IN_FILE.contains(&id), "{id}");
            }
        }
        assert_eq!(section_of("max_connections"), Some(Section::Limits));
        assert_eq!(section_of("data_dir"), Some(Section::Storage));
        assert_eq!(section_of("sync_delay_ms"), None);
        assert_eq!(section_of("config"), None);
    }

    #[test]
    fn the_example_file_configures_the_defaults() {
        let mut example = Config::check_file(Path::new(EXAMPLE)).unwrap_or_else(|e| panic!("{e}")).config;
        assert_eq!(example.config.take(), Some(PathBuf::from(EXAMPLE)));
        assert_eq!(format!("{example:?}"), format!("{:?}", Config::defaults()));
    }

    /// docs/grasp-relay.toml has a line for every setting, in its section, set to its default or
    /// commented out with an example value that the relay accepts.
    #[test]
    fn the_example_file_names_every_setting_in_its_section() {
        let text = std::fs::read_to_string(EXAMPLE).unwrap();
        let cmd = Config::command();
        let mut section = None;
        let mut lines: Vec<(Section, String, String, bool)> = Vec::new();
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = Some(Section::named(name).unwrap_or_else(|| panic!("unknown section [{name}]")));
                continue;
            }
            let (commented, rest) = match line.strip_prefix("# ") {
                Some(rest) => (true, rest),
                None => (false, line),
            };
            if let Some((key, value)) = rest.split_once(" = ") {
                if !key.contains(' ') {
                    lines.push((section.expect("a key before the first section"), key.to_string(), value.to_string(), commented));
                }
            }
        }
        let mut missing = Vec::new();
        for (id, s) in settings() {
            let key = cmd.get_arguments().find(|a| a.get_id() == id).and_then(|a| a.get_long()).unwrap();
            match lines.iter().find(|(_, k, _, _)| k == key) {
                None => missing.push(format!("docs/grasp-relay.toml has no line `{key} = ...` (or `# {key} = ...`) in [{}]", s.name())),
                Some((found, ..)) if found != s => missing.push(format!("docs/grasp-relay.toml has `{key}` in [{}], not [{}]", found.name(), s.name())),
                Some((_, _, value, true)) => {
                    let one = format!("[{}]\n{key} = {value}\n", s.name());
                    if let Err(e) = FileValues::parse(Path::new(EXAMPLE), &one, &cmd) {
                        missing.push(format!("the commented example of `{key}` is refused: {e}"));
                    }
                }
                Some(_) => {}
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// The Debian package's /etc/grasp-relay/config.toml is the example with the package's data
    /// directory, behind nginx on the same host (its address trusted for client addresses, no
    /// per-address connection limit).
    #[test]
    fn the_packaged_file_is_the_example_set_up_for_the_package() {
        let example = std::fs::read_to_string(EXAMPLE).unwrap();
        let packaged = std::fs::read_to_string(PACKAGED).unwrap();
        let mut expected = example.clone();
        for (from, to) in [
            ("data-dir = \"./data\"\n", "data-dir = \"/var/lib/grasp-relay\"\n"),
            ("max-connections-per-ip = 64\n", "max-connections-per-ip = 0\n"),
            ("trusted-proxy = []\n", "trusted-proxy = [\"127.0.0.1/32\"]\n"),
        ] {
            assert!(expected.contains(from), "docs/grasp-relay.toml has no {from:?}");
            expected = expected.replacen(from, to, 1);
        }
        assert!(
            packaged == expected,
            "packaging/config.toml must be docs/grasp-relay.toml with the package's three changes; remake it with\n  \
             sed -e 's|^data-dir = \"./data\"$|data-dir = \"/var/lib/grasp-relay\"|' -e 's|^max-connections-per-ip = 64$|max-connections-per-ip = 0|' \
             -e 's|^trusted-proxy = \\[\\]$|trusted-proxy = [\"127.0.0.1/32\"]|' docs/grasp-relay.toml > packaging/config.toml"
        );
        let cfg = Config::check_file(Path::new(PACKAGED)).unwrap().config;
        assert_eq!(cfg.storage.data_dir, PathBuf::from("/var/lib/grasp-relay"));
        assert_eq!(cfg.limits.max_connections_per_ip, 0);
        assert!(cfg.trust.trusted_proxy.iter().any(|net| net.contains(&"127.0.0.1".parse::<std::net::IpAddr>().unwrap())));
    }

    #[test]
    fn the_file_is_below_flags_and_above_defaults() {
        let f = file("[limits]\nmax-connections = 7\nwrite-rate = 2.5\n[pages]\nname = \"from the file\"\n[trust]\ntrusted-proxy = [\"10.0.0.0/8\"]\n");
        let path = f.path().to_str().unwrap();
        let loaded = Config::load_from(["grasp-relay", "--config", path, "--max-connections", "9", "--trusted-proxy", "::1"]).unwrap();
        let cfg = &loaded.config;
        assert_eq!(cfg.limits.max_connections, 9);
        assert_eq!(cfg.limits.write_rate, 2.5);
        assert_eq!(cfg.pages.name, "from the file");
        assert_eq!(cfg.trust.trusted_proxy.iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["::1/128"], "a list on the command line replaces the file's");
        assert_eq!(cfg.limits.max_filters, 16);
        let s = &loaded.settings;
        assert_eq!(setting(s, "max_connections").source, Source::CommandLine);
        assert_eq!(setting(s, "write_rate").source, Source::File { path: f.path().into(), line: 3 });
        assert_eq!(setting(s, "name").source, Source::File { path: f.path().into(), line: 5 });
        assert_eq!(setting(s, "max_filters").source, Source::Default);
        assert_eq!(setting(s, "max_connections").values, ["9"]);
        // Without --config, nothing is read.
        assert_eq!(Config::load_from(["grasp-relay"]).unwrap().config.limits.max_connections, 1024);
    }

    #[test]
    fn subcommands_read_the_file_too() {
        let f = file("[storage]\ndata-dir = \"/srv/grasp\"\n");
        let path = f.path().to_str().unwrap();
        for argv in [vec!["grasp-relay", "purgatory", "--config", path], vec!["grasp-relay", "--config", path, "purgatory", "--json"]] {
            let cfg = Config::load_from(argv.clone()).unwrap().config;
            assert_eq!(cfg.storage.data_dir, PathBuf::from("/srv/grasp"), "{argv:?}");
            assert!(matches!(cfg.command, Some(crate::config::Command::Purgatory { .. })));
        }
        let cfg = Config::load_from(["grasp-relay", "purgatory", "--config", path, "--data-dir", "/x"]).unwrap().config;
        assert_eq!(cfg.storage.data_dir, PathBuf::from("/x"));
    }

    #[test]
    fn a_refused_file_names_itself() {
        let f = file("[limits]\nmax-connections = 0\n");
        let e = Config::load_from(["grasp-relay", "--config", f.path().to_str().unwrap()]).unwrap_err();
        let LoadError::File(errors) = &e else { panic!("{e}") };
        assert_eq!(errors.0.len(), 1);
        assert!(e.to_string().starts_with(&format!("{}:2:19: `max-connections`", f.path().display())), "{e}");
        assert!(matches!(Config::load_from(["grasp-relay", "--config", "/nonexistent.toml"]), Err(LoadError::File(_))));
        assert!(matches!(Config::load_from(["grasp-relay", "--max-connections", "0"]), Err(LoadError::Cli(_))));
    }

    #[test]
    fn config_check_is_found_before_the_rest() {
        let found = |argv: &[&str]| Config::check_requested(argv.iter().copied());
        assert_eq!(found(&["grasp-relay", "config", "check", "/x.toml"]), Some(PathBuf::from("/x.toml")));
        assert_eq!(found(&["grasp-relay", "--config", "/a.toml", "config", "check", "/b.toml"]), Some(PathBuf::from("/b.toml")));
        assert_eq!(found(&["grasp-relay", "config", "show"]), None);
        assert_eq!(found(&["grasp-relay", "doctor"]), None);
        assert_eq!(found(&["grasp-relay"]), None);
    }

    /// `config show` prints a configuration file that configures the same.
    #[test]
    fn the_shown_configuration_reads_back_the_same() {
        let f = file(
            "[server]\npublic-host = \"git.example.com\"\nlog = \"grasp_relay=debug,info\"\n[limits]\nwrite-rate = 0.25\nws-idle-timeout = \"90s\"\n\
             [trust]\ndeny-repo = [\"spam\", \"npub10xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqpkge6d\"]\n\
             [pages]\ndescription = \"quotes \\\" and \\\\ backslashes\\ttab\"\n",
        );
        let first = Config::check_file(f.path()).unwrap();
        let shown = render(&first.settings);
        let again = file(&shown);
        let second = Config::check_file(again.path()).unwrap_or_else(|e| panic!("{e}\n{shown}"));
        let (mut a, mut b) = (first.config, second.config);
        a.config = None;
        b.config = None;
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(b.limits.ws_idle_timeout, Duration::from_secs(90));
        assert!(shown.contains(&format!("write-rate = 0.25  # {}:5\n", f.path().display())), "{shown}");
        assert!(shown.contains("max-filters = 16  # default\n"), "{shown}");
        assert!(shown.contains("# metrics-bind is not set  # default\n"), "{shown}");
    }

    proptest::proptest! {
        #[test]
        fn quoted_strings_read_back(text in "\\PC*|[\"\\\\\\n\\t\\x00-\\x1f\\x7f]*") {
            let doc = format!("x = {}", quote(&text));
            let parsed = toml::de::DeTable::parse(&doc).unwrap();
            let value = parsed.get_ref().iter().next().unwrap().1.get_ref().as_str().unwrap().to_string();
            proptest::prop_assert_eq!(value, text);
        }
    }
}
