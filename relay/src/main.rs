//! `grasp-relay` binary: parse the configuration, set up logging, run the server.

use clap::Parser;
use grasp_relay::config::Config;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cfg = Config::parse();
    if let Some(command) = &cfg.command {
        return match grasp_relay::api::run_command(&cfg.data_dir, command) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("grasp-relay: error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let filter = EnvFilter::try_new(&cfg.log).unwrap_or_else(|e| {
        eprintln!(
            "grasp-relay: invalid --log filter {:?} ({e}); using \"info\"",
            cfg.log
        );
        EnvFilter::new("info")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    match grasp_relay::server::run(cfg).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grasp-relay: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
