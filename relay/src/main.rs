//! `grasp-relay` binary: read the configuration (flags, environment, `--config` file), then run
//! a one-shot command or set up logging and run the server.

use std::process::ExitCode;

use grasp_relay::config::{Command, Config, ConfigCommand, LoadError, EXIT_BAD_CONFIGURATION};

#[tokio::main]
async fn main() -> ExitCode {
    // `config check FILE` reads that file alone (no environment, no other --config).
    if let Some(file) = Config::check_requested(std::env::args_os()) {
        return check(&file);
    }
    let loaded = match Config::load() {
        Ok(loaded) => loaded,
        Err(LoadError::Cli(e)) => e.exit(),
        Err(LoadError::File(e)) => {
            eprintln!("grasp-relay: error: the configuration file is refused:\n{e}");
            return ExitCode::from(EXIT_BAD_CONFIGURATION);
        }
    };
    let cfg = &loaded.config;
    match &cfg.command {
        None => {}
        Some(Command::Config { action: ConfigCommand::Show }) => {
            print!("{}", grasp_relay::config::render(&loaded.settings));
            return ExitCode::SUCCESS;
        }
        Some(Command::Config { action: ConfigCommand::Check { file } }) => return check(file),
        Some(Command::Doctor { nginx }) => {
            let report = grasp_relay::doctor::run(cfg, nginx.as_deref());
            print!("{report}");
            return if report.fit_to_serve() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        Some(command) => {
            return match grasp_relay::api::run_command(&cfg.storage.data_dir, command) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("grasp-relay: error: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    grasp_relay::logging::init(&cfg.server.log);
    match grasp_relay::server::run(loaded).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grasp-relay: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `grasp-relay config check FILE`.
fn check(file: &std::path::Path) -> ExitCode {
    match Config::check_file(file) {
        Ok(checked) => {
            let set = checked.settings.iter().filter(|s| s.source != grasp_relay::config::Source::Default).count();
            println!("{}: ok ({set} settings; `grasp-relay --config {} config show` prints them all)", file.display(), file.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_BAD_CONFIGURATION)
        }
    }
}
