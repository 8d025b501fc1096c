//! The configuration file (`--config FILE`): TOML, one section per group of settings
//! ([`super::sections`]), each key a flag's long name (`max-connections = 2048` in `[limits]`).
//! docs/grasp-relay.toml is the commented example, with every key.
//!
//! The file's values become the flags' defaults ([`FileValues::as_defaults`]), so a flag wins
//! over its environment variable, which wins over the file, which wins over the built-in
//! default. Every value is first checked by the flag's own clap value parser (the same ranges
//! and units as on the command line); an unknown section or key, a value of the wrong TOML type
//! or one its parser refuses is reported with the file, the line and what is allowed, every
//! problem of the file at once.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Arg, ArgAction, Command};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::sections::{self, section_of, Section};

/// What a setting's values are: the TOML type the file gives them in, and how `config show`
/// prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A flag without a value (`--private`): `true` or `false`.
    Switch,
    /// A whole number.
    Integer,
    /// A number, possibly fractional (rates).
    Number,
    /// Whole seconds, or a string with a unit (`"500ms"`, `"30m"`).
    Duration,
    /// Anything else: addresses, paths, keys, URLs, patterns.
    Text,
}

impl Kind {
    /// The kind of the values `arg` takes, from its action and its value parser's type.
    pub fn of(arg: &Arg) -> Kind {
        if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
            return Kind::Switch;
        }
        let ty = arg.get_value_parser().type_id();
        let integers = [
            TypeId::of::<u8>(),
            TypeId::of::<u16>(),
            TypeId::of::<u32>(),
            TypeId::of::<u64>(),
            TypeId::of::<usize>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
        ];
        if integers.iter().any(|t| ty == *t) {
            Kind::Integer
        } else if ty == TypeId::of::<f64>() || ty == TypeId::of::<f32>() {
            Kind::Number
        } else if ty == TypeId::of::<Duration>() {
            Kind::Duration
        } else {
            Kind::Text
        }
    }

    /// What the file may give, in words.
    fn allowed(self, arg: &Arg) -> String {
        let one = match self {
            Kind::Switch => "true or false".to_string(),
            Kind::Integer => "a whole number (no quotes)".to_string(),
            Kind::Number => "a number (no quotes)".to_string(),
            Kind::Duration => "whole seconds (90) or a string with a unit (\"500ms\", \"90s\", \"30m\", \"24h\")".to_string(),
            // A value name of its own (`CIDR`, `PUBKEY`), not the one derived from the field.
            Kind::Text => match arg.get_value_names().and_then(|n| n.first()).filter(|n| n.as_str() != arg.get_id().as_str().to_uppercase()) {
                Some(name) => format!("a string ({name})"),
                None => "a string".to_string(),
            },
        };
        if is_list(arg) {
            format!("an array, each item {one}")
        } else {
            one
        }
    }
}

/// Does `arg` take a list (a repeatable flag)?
pub fn is_list(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append)
}

/// One problem of a configuration file, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: PathBuf,
    /// 1-based; 0 when the file could not be read at all.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.path.display(), self.line, self.column, self.message)
        }
    }
}

/// Every problem of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileErrors(pub Vec<FileError>);

impl std::fmt::Display for FileErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FileErrors {}

/// What the file sets for one flag: the text its parser takes (one per item of a list) and the
/// line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileValue {
    pub raw: Vec<String>,
    pub line: usize,
}

/// The settings of one configuration file, by clap argument id, every value already accepted
/// by its flag's parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileValues {
    pub path: PathBuf,
    pub values: BTreeMap<String, FileValue>,
}

impl FileValues {
    /// Reads and checks the file at `path` against the flags of `cmd`.
    pub fn read(path: &Path, cmd: &Command) -> Result<FileValues, FileErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            FileErrors(vec![FileError { path: path.to_path_buf(), line: 0, column: 0, message: format!("cannot read the configuration file: {e}") }])
        })?;
        Self::parse(path, &text, cmd)
    }

    /// Checks `text` (the contents of `path`) against the flags of `cmd`.
    pub fn parse(path: &Path, text: &str, cmd: &Command) -> Result<FileValues, FileErrors> {
        let mut file = Parse { path, text, errors: Vec::new(), checker: checker(cmd) };
        let doc = match DeTable::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                let span = e.span().unwrap_or(0..0);
                file.error(&span, format!("not valid TOML: {}", e.message().trim_end()));
                return Err(FileErrors(file.errors));
            }
        };
        let mut values = BTreeMap::new();
        for (name, value) in doc.get_ref() {
            let name_span = name.span();
            let name = name.get_ref().as_ref();
            let Some(section) = Section::named(name) else {
                let message = match arg_by_key(cmd, name) {
                    Some((_, s)) => format!("`{name}` must be in a section: put it under `[{}]`", s.name()),
                    None => format!("unknown section `[{name}]`; the sections are {}", section_list()),
                };
                file.error(&name_span, message);
                continue;
            };
            let DeValue::Table(table) = value.get_ref() else {
                file.error(&name_span, format!("`{name}` must be a section: a `[{name}]` line, then `key = value` lines"));
                continue;
            };
            for (key, value) in table {
                let key_span = key.span();
                let key = key.get_ref().as_ref();
                match arg_by_key(cmd, key) {
                    Some((arg, s)) if s == section => {
                        if let Some(raw) = file.value(arg, section, key, value) {
                            let line = position(text, value.span().start).0;
                            values.insert(arg.get_id().to_string(), FileValue { raw, line });
                        }
                    }
                    Some((_, s)) => file.error(&key_span, format!("`{key}` belongs in `[{}]`, not `[{}]`", s.name(), section.name())),
                    None => file.error(&key_span, unknown_key(cmd, section, key)),
                }
            }
        }
        if file.errors.is_empty() {
            Ok(FileValues { path: path.to_path_buf(), values })
        } else {
            // In the order of the file (the parsed tables are sorted by key).
            file.errors.sort_by_key(|e| (e.line, e.column));
            Err(FileErrors(file.errors))
        }
    }

    /// `cmd` with the file's values as its flags' defaults: a flag or an environment variable
    /// still wins over them.
    pub fn as_defaults(&self, mut cmd: Command) -> Command {
        for (id, value) in &self.values {
            let raw = value.raw.clone();
            cmd = cmd.mut_arg(id, |arg| arg.default_values(raw));
        }
        cmd
    }
}

/// The argument whose long name is `key`, with its section (none for flags not in the file).
fn arg_by_key<'c>(cmd: &'c Command, key: &str) -> Option<(&'c Arg, Section)> {
    cmd.get_arguments()
        .filter(|a| a.get_long() == Some(key))
        .find_map(|a| section_of(a.get_id().as_str()).map(|s| (a, s)))
}

fn section_list() -> String {
    Section::ALL.iter().map(|s| format!("`[{}]`", s.name())).collect::<Vec<_>>().join(", ")
}

/// The message for a key `[section]` does not have, with the likely intended one.
fn unknown_key(cmd: &Command, section: Section, key: &str) -> String {
    let dashed = key.replace('_', "-");
    if dashed != key {
        if let Some((_, s)) = arg_by_key(cmd, &dashed) {
            return format!("unknown key `{key}`: keys are written with dashes, `{dashed}` (in `[{}]`)", s.name());
        }
    }
    let keys: Vec<&str> = sections::settings()
        .iter()
        .filter(|(_, s)| *s == section)
        .filter_map(|(id, _)| cmd.get_arguments().find(|a| a.get_id() == id).and_then(Arg::get_long))
        .collect();
    format!("unknown key `{key}` in `[{}]`; its keys are {} (docs/grasp-relay.toml describes each)", section.name(), keys.join(", "))
}

/// The command that checks one value with its flag's own parser: the real one without
/// environment variables, so only the value under test is parsed.
fn checker(cmd: &Command) -> Command {
    cmd.clone().mut_args(|a| a.env(None::<&'static str>))
}

struct Parse<'a> {
    path: &'a Path,
    text: &'a str,
    errors: Vec<FileError>,
    checker: Command,
}

impl Parse<'_> {
    fn error(&mut self, span: &Range<usize>, message: String) {
        let (line, column) = position(self.text, span.start);
        self.errors.push(FileError { path: self.path.to_path_buf(), line, column, message });
    }

    /// The flag texts of one value of the file, or `None` (with the error recorded).
    fn value(&mut self, arg: &Arg, section: Section, key: &str, value: &Spanned<DeValue<'_>>) -> Option<Vec<String>> {
        let kind = Kind::of(arg);
        let wrong_type = |v: &DeValue<'_>| {
            format!("`{key}` in `[{}]` takes {}, not {} {}", section.name(), kind.allowed(arg), article(v.type_str()), v.type_str())
        };
        let items: Vec<&Spanned<DeValue<'_>>> = match (value.get_ref(), is_list(arg)) {
            (DeValue::Array(items), true) => items.iter().collect(),
            (_, true) => {
                let message = wrong_type(value.get_ref());
                self.error(&value.span(), message);
                return None;
            }
            (_, false) => vec![value],
        };
        let mut raw = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            let Some(text) = scalar_text(kind, item.get_ref()) else {
                let message = wrong_type(item.get_ref());
                self.error(&item.span(), message);
                ok = false;
                continue;
            };
            if kind != Kind::Switch {
                if let Err(reason) = self.check(arg, &text) {
                    let help = first_sentence(arg);
                    let long = arg.get_long().unwrap_or_default();
                    let message = format!("`{key}` in `[{}]`: {reason}; it takes {} (--{long}: {help})", section.name(), kind.allowed(arg));
                    self.error(&item.span(), message);
                    ok = false;
                    continue;
                }
            }
            raw.push(text);
        }
        ok.then_some(raw)
    }

    /// Runs the flag's own parser on `text`.
    fn check(&self, arg: &Arg, text: &str) -> Result<(), String> {
        let long = arg.get_long().unwrap_or_default();
        let argv = [OsString::from("grasp-relay"), OsString::from(format!("--{long}={text}"))];
        match self.checker.clone().try_get_matches_from(argv) {
            Ok(_) => Ok(()),
            Err(e) => Err(match std::error::Error::source(&e) {
                Some(source) => source.to_string(),
                None => clap_reason(&e),
            }),
        }
    }
}

/// clap's one-line reason, without its `error: ` prefix and usage hints.
fn clap_reason(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").trim().to_string()
}

/// The flag's short help up to its first full stop.
fn first_sentence(arg: &Arg) -> String {
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let end = help.find(". ").map(|i| i + 1).unwrap_or(help.len());
    help[..end].trim_end_matches('.').to_string()
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// The text a flag would be given for a scalar TOML value of the right type, else `None`.
fn scalar_text(kind: Kind, value: &DeValue<'_>) -> Option<String> {
    match (kind, value) {
        (Kind::Switch, DeValue::Boolean(b)) => Some(b.to_string()),
        (Kind::Integer | Kind::Number | Kind::Duration, DeValue::Integer(i)) => {
            // TOML integers may be hexadecimal, octal or binary; flags take decimal.
            i128::from_str_radix(i.as_str(), i.radix()).ok().map(|n| n.to_string())
        }
        (Kind::Number, DeValue::Float(f)) => Some(f.as_str().replace('_', "")),
        (Kind::Duration | Kind::Text, DeValue::String(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use clap::CommandFactory;

    fn parse(text: &str) -> Result<FileValues, FileErrors> {
        FileValues::parse(Path::new("/etc/grasp-relay/config.toml"), text, &Config::command())
    }

    fn errors(text: &str) -> Vec<String> {
        parse(text).unwrap_err().0.iter().map(|e| e.to_string()).collect()
    }

    /// `text` is refused with exactly these errors, in order (each given by a part of it).
    fn refused(text: &str, expected: &[&str]) {
        let found = errors(text);
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (e, want) in found.iter().zip(expected) {
            assert!(e.contains(want), "{e}\nwanted: {want}");
        }
    }

    #[test]
    fn values_become_flag_texts_with_their_lines() {
        let file = parse(
            "[server]\nbind = \"0.0.0.0:80\"\n\n[limits]\nmax-connections = 0x10\nwrite-rate = 1.5\nwrite-burst = 1_000\ngit-idle-timeout = \"2m\"\nws-idle-timeout = 90\n\
             [trust]\nprivate = true\ntrusted-proxy = [\"10.0.0.0/8\", \"::1\"]\n",
        )
        .unwrap();
        let get = |id: &str| file.values.get(id).map(|v| (v.raw.iter().map(String::as_str).collect::<Vec<_>>(), v.line));
        assert_eq!(get("bind"), Some((vec!["0.0.0.0:80"], 2)));
        assert_eq!(get("max_connections"), Some((vec!["16"], 5)));
        assert_eq!(get("write_rate"), Some((vec!["1.5"], 6)));
        assert_eq!(get("write_burst"), Some((vec!["1000"], 7)));
        assert_eq!(get("git_idle_timeout"), Some((vec!["2m"], 8)));
        assert_eq!(get("ws_idle_timeout"), Some((vec!["90"], 9)));
        assert_eq!(get("private"), Some((vec!["true"], 11)));
        assert_eq!(get("trusted_proxy"), Some((vec!["10.0.0.0/8", "::1"], 12)));
        assert_eq!(file.values.len(), 8);
    }

    #[test]
    fn unknown_sections_and_keys_are_refused_with_what_exists() {
        let found = errors("[server]\nbindd = \"x\"\nmax_connections = 3\n[limits]\nbind = \"127.0.0.1:1\"\n[nope]\nx = 1\n");
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[0].starts_with("/etc/grasp-relay/config.toml:2:1: unknown key `bindd` in `[server]`; its keys are bind, public-host"), "{}", found[0]);
        assert!(found[1].contains(":3:1: unknown key `max_connections`: keys are written with dashes, `max-connections` (in `[limits]`)"), "{}", found[1]);
        assert!(found[2].contains(":5:1: `bind` belongs in `[server]`, not `[limits]`"), "{}", found[2]);
        assert!(found[3].contains(":6:2: unknown section `[nope]`; the sections are `[server]`, `[storage]`"), "{}", found[3]);
        let found = errors("bind = \"127.0.0.1:1\"\nserver = 3\n");
        assert!(found[0].contains(":1:1: `bind` must be in a section: put it under `[server]`"), "{found:?}");
        assert!(found[1].contains(":2:1: `server` must be a section"), "{found:?}");
        // Former flag names and the file's own path are not keys.
        assert!(errors("[git-sync]\nsync-delay-ms = 5\n")[0].contains("unknown key `sync-delay-ms`"));
        assert!(errors("[server]\nconfig = \"/x\"\n")[0].contains("unknown key `config`"));
    }

    #[test]
    fn wrong_types_are_refused_with_the_type_allowed() {
        refused(
            "[limits]\nmax-connections = \"1024\"\nwrite-rate = true\ngit-idle-timeout = 1.5\n[trust]\nprivate = \"yes\"\ntrusted-proxy = \"10.0.0.0/8\"\nblock-author = [1]\n[server]\nbind = 8080\n",
            &[
                ":2:19: `max-connections` in `[limits]` takes a whole number (no quotes), not a string",
                ":3:14: `write-rate` in `[limits]` takes a number (no quotes), not a boolean",
                ":4:20: `git-idle-timeout` in `[limits]` takes whole seconds (90) or a string with a unit",
                ":6:11: `private` in `[trust]` takes true or false, not a string",
                ":7:17: `trusted-proxy` in `[trust]` takes an array, each item a string (CIDR), not a string",
                ":8:17: `block-author` in `[trust]` takes an array, each item a string (PUBKEY), not an integer",
                ":10:8: `bind` in `[server]` takes a string, not an integer",
            ],
        );
    }

    #[test]
    fn values_go_through_the_flags_own_parsers() {
        refused(
            "[limits]\nmax-connections = 0\nipv6-prefix-len = 129\ngit-idle-timeout = \"5 parsecs\"\nmax-push-bytes = -1\n[trust]\ntrusted-proxy = [\"10.0.0.0/8\", \"nope\"]\n[server]\nbind = \"localhost\"\n",
            &[
                ":2:19: `max-connections` in `[limits]`: 0 is not in 1..=4294967295; it takes a whole number (no quotes) (--max-connections: Most connections",
                ":3:19: `ipv6-prefix-len` in `[limits]`: 129 is not in 1..=128",
                ":4:20: `git-idle-timeout` in `[limits]`: invalid duration \"5 parsecs\": give seconds (90) or a number with ms, s, m, h or d",
                ":5:18: `max-push-bytes` in `[limits]`: ",
                ":7:32: `trusted-proxy` in `[trust]`: invalid address range \"nope\"",
                ":9:8: `bind` in `[server]`: invalid socket address syntax",
            ],
        );
    }

    #[test]
    fn broken_toml_is_refused_with_its_line() {
        let found = errors("[server]\nbind = \"127.0.0.1:1\"\nlog = \n");
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("/etc/grasp-relay/config.toml:3:"), "{found:?}");
        assert!(found[0].contains("not valid TOML"), "{found:?}");
        let found = errors("[server]\nlog = \"a\"\nlog = \"b\"\n");
        assert!(found[0].starts_with("/etc/grasp-relay/config.toml:3:") && found[0].contains("duplicate"), "{found:?}");
        let missing = FileValues::read(Path::new("/nonexistent/grasp.toml"), &Config::command()).unwrap_err();
        assert!(missing.to_string().starts_with("/nonexistent/grasp.toml: cannot read the configuration file"), "{missing}");
    }

    #[test]
    fn positions_count_lines_and_characters() {
        assert_eq!(position("ab\ncdé\nf", 0), (1, 1));
        assert_eq!(position("ab\ncdé\nf", 3), (2, 1));
        assert_eq!(position("ab\ncdé\nf", 8), (3, 1));
        assert_eq!(position("ab\ncdé\nf", 7), (2, 4));
        assert_eq!(position("ab", 99), (1, 3));
    }
}
