//! The configuration reference, docs/configuration.md, written from the flags' own definitions
//! (the same help texts, environment names and defaults `--help` prints) and grouped by the
//! sections of the configuration file ([`super::sections`]), each table in `--help`'s order
//! ([`super::help_order`]). The test
//! `the_configuration_reference_is_the_flags` fails when the file differs from what this renders;
//! `GRASP_WRITE_DOCS=1 cargo test -p grasp-relay the_configuration_reference` writes it again.

use clap::CommandFactory;

use super::sections::{section_of, Section};
use crate::config::Config;

/// What the reference says before the tables (hand-written here, rendered with them).
const INTRO: &str = "# Configuration reference

<!-- Generated from the flags' definitions (relay/src/config/*.rs: one file per section; relay/src/config/reference.rs):
     do not edit; `GRASP_WRITE_DOCS=1 cargo test -p grasp-relay the_configuration_reference`
     writes it again. -->

Every setting is a flag, an environment variable and a key of the configuration file
(`--config FILE`, TOML): the key is the flag's name without its dashes, in the section the tables
below are under (`[limits]` `max-connections = 2048`); [grasp-relay.toml](grasp-relay.toml) has
every key with its default. Flags win over environment variables, which win over the file, which
wins over the defaults. Durations take seconds or a unit (`500ms`, `90s`, `30m`, `24h`, `30d`);
sizes are bytes. A wrong key, type or value stops the relay at start with the file, line and
what is allowed; `grasp-relay config check FILE` checks a file without starting,
`grasp-relay --config FILE config show` prints the configuration in force and where each value
came from. SIGHUP (`systemctl reload grasp-relay`) reads it again: the log filter, the allow/deny
lists, the members and `min-free-disk` change at once, other changes wait for a restart (logged),
a broken file changes nothing. `grasp-relay doctor [--nginx SITE]` checks an installation and
says what to fix ([deployment.md](deployment.md)).
";

fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// docs/configuration.md as the flags define it.
pub fn render() -> String {
    let command = Config::command();
    let mut out = String::from(INTRO);
    let mut args: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|a| a.get_long().is_some() && !a.is_hide_set() && !["help", "version"].contains(&a.get_long().unwrap_or_default()))
        .collect();
    // Each table in the order `--help` lists the flags (`super::help_order`).
    args.sort_by_key(|a| a.get_display_order());
    let row = |a: &clap::Arg| {
        let long = a.get_long().unwrap_or_default();
        let env = a.get_env().and_then(|e| e.to_str()).map_or("-".to_string(), |e| format!("`{e}`"));
        let defaults: Vec<String> = a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = if defaults.is_empty() {
            if matches!(a.get_action(), clap::ArgAction::SetTrue) { "off".to_string() } else { "none".to_string() }
        } else {
            format!("`{}`", defaults.join(","))
        };
        let help = a.get_long_help().or(a.get_help()).map(|h| cell(&h.to_string())).unwrap_or_default();
        format!("| `--{long}` | {env} | {default} | {help} |\n")
    };
    let header = "| flag | environment | default | meaning |\n|---|---|---|---|\n";
    let unsectioned: Vec<&&clap::Arg> = args.iter().filter(|a| section_of(a.get_id().as_str()).is_none()).collect();
    if !unsectioned.is_empty() {
        out.push_str("\n## Command line and environment only\n\n");
        out.push_str(header);
        for a in unsectioned {
            out.push_str(&row(a));
        }
    }
    for section in Section::ALL {
        let mine: Vec<&&clap::Arg> = args.iter().filter(|a| section_of(a.get_id().as_str()) == Some(section)).collect();
        if mine.is_empty() {
            continue;
        }
        out.push_str(&format!("\n## `[{}]`: {}\n\n", section.name(), section.about()));
        out.push_str(header);
        for a in mine {
            out.push_str(&row(a));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_reference_is_the_flags() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
        let rendered = render();
        if std::env::var_os(grasp_state::contract::env_names::WRITE_DOCS).is_some() {
            std::fs::write(&path, &rendered).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered,
            "docs/configuration.md is not what the flags define; write it again with \
             `GRASP_WRITE_DOCS=1 cargo test -p grasp-relay the_configuration_reference`"
        );
    }

    #[test]
    fn every_flag_has_an_environment_variable() {
        for arg in Config::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || ["help", "version"].contains(&long) {
                continue;
            }
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_else(|| panic!("--{long} has no environment variable"));
            assert!(env.starts_with("GRASP_"), "--{long}: {env}");
        }
    }
}
