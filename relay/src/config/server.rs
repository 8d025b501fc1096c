//! `[server]`: listeners, the public host, the relay's key, the helper binaries, logging.
//!
//! The flags of one section of the configuration file ([`super::sections`]), flattened into
//! [`super::Config`]; each field's clap argument id is its name, its file key the flag's long name.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use grasp_state::contract::env_names;

/// The `[server]` section: listeners, the public host, the relay's key, the helper binaries, logging.
#[derive(Debug, Clone, Args)]
pub struct ServerConfig {
    /// Address of the public listener (WebSocket relay, NIP-11, git smart HTTP).
    #[arg(long, env = env_names::BIND, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Public host[:port] of this service, as it appears in repository announcements
    /// (`clone`/`relays` tags); decides whether an announcement lists this server, and is never
    /// synced from. A leading `https://` or `http://` (the pages' links) and a trailing `/` are
    /// allowed. Defaults to the bound address.
    #[arg(long, env = env_names::PUBLIC_HOST)]
    pub public_host: Option<String>,

    /// Address of the internal hook API (loopback only; token protected).
    #[arg(long, env = env_names::API_BIND, default_value = "127.0.0.1:0")]
    pub api_bind: SocketAddr,

    /// Address of the metrics listener: Prometheus `/metrics`, `/healthz` and `/readyz` (off when
    /// not given; never the public port; no authentication, so keep it on loopback or a private
    /// network).
    #[arg(long, env = env_names::METRICS_BIND, value_name = "ADDR")]
    pub metrics_bind: Option<SocketAddr>,

    /// Path of the `grasp-cgi` wrapper: it serves repository pages, 404s, a private service's
    /// requests and a push waiting for another (a plain git request to a public repository runs
    /// git http-backend directly). The hook binaries must sit beside it. Defaults to `grasp-cgi`
    /// next to this executable.
    #[arg(long, env = env_names::CGI_PATH)]
    pub cgi_path: Option<PathBuf>,

    /// The relay's own key (its identity: NIP-11 `self`, the NIP-05 name `_` at
    /// `/.well-known/nostr.json`): a file holding the secret key, hex or nsec, one line, readable
    /// by its owner only (mode 0600). A configured file must exist: missing, unreadable, not a
    /// key or readable by others, it stops startup. Default: `<data-dir>/relay-key`, made with a
    /// new key (mode 0600) on first start. A private service may point `--service-key-file` at
    /// the same file to use one key for both (docs/protocol.md, "Relay identity").
    #[arg(long, env = env_names::RELAY_KEY_FILE, value_name = "PATH")]
    pub relay_key_file: Option<PathBuf>,

    /// Log filter in `tracing` syntax, e.g. `info` or `grasp_relay=debug,info`.
    #[arg(long, env = env_names::LOG, default_value = "info")]
    pub log: String,
}

impl ServerConfig {
    /// The public host[:port]: the configured one, else the bind address.
    pub fn public_host(&self) -> String {
        self.public_host
            .clone()
            .unwrap_or_else(|| self.bind.to_string())
    }

    /// The public host as bare `host[:port]` (scheme and trailing `/` dropped): what this
    /// server's own URLs are recognised by (git sync, relay sync).
    pub fn public_authority(&self) -> String {
        grasp_state::names::host::public_authority(&self.public_host()).to_string()
    }

    /// The addresses sync never fetches from, this server's own: its public authority and the
    /// address it binds.
    pub fn own_hosts(&self) -> Vec<String> {
        vec![self.public_authority(), self.bind.to_string()]
    }

    /// Path of the CGI wrapper binary.
    pub fn cgi_path(&self) -> PathBuf {
        if let Some(p) = &self.cgi_path {
            return p.clone();
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("grasp-cgi")))
            .unwrap_or_else(|| PathBuf::from("grasp-cgi"))
    }

    /// The helper binaries the relay runs and installs: grasp-cgi (`--cgi-path`) and the hook
    /// binaries beside it.
    pub fn helper_binaries(&self) -> Vec<PathBuf> {
        let cgi = self.cgi_path();
        let dir = cgi.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        vec![cgi, dir.join("grasp-pre-receive"), dir.join("grasp-post-receive")]
    }
}

impl Default for ServerConfig {
    /// The built-in defaults (no flag, environment variable or file read).
    fn default() -> Self {
        super::Config::defaults().server
    }
}
