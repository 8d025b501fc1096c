//! TLS for `wss://` relays (and their `https://` NIP-11 document): rustls with the Mozilla
//! roots (`webpki-roots`), plus the operator's extra roots (`--sync-tls-ca`, for private CAs and
//! tests). The TCP connection is made by [`super::wire`] to the addresses that were checked; the
//! certificate is verified against the host written in the relay URL (SNI too), never against
//! the address connected to.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::sync::relay_url::RelayUrl;

/// Why the TLS settings could not be built.
#[derive(Debug, Error)]
pub enum TlsSetupError {
    #[error("reading --sync-tls-ca {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("--sync-tls-ca {0} holds no PEM certificate; give a file of `-----BEGIN CERTIFICATE-----` blocks")]
    Empty(String),
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client TLS settings shared by every relay connection.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// The Mozilla roots plus the PEM certificates of `extra_ca` (if given).
    pub fn new(extra_ca: Option<&Path>) -> Result<Tls, TlsSetupError> {
        let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(path) = extra_ca {
            let shown = path.display().to_string();
            let bytes = std::fs::read(path).map_err(|e| TlsSetupError::Read { path: shown.clone(), reason: e.to_string() })?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<_, _>>()
                .map_err(|e| TlsSetupError::Read { path: shown.clone(), reason: e.to_string() })?;
            if certs.is_empty() {
                return Err(TlsSetupError::Empty(shown));
            }
            for cert in certs {
                roots.add(cert)?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls { connector: TlsConnector::from(Arc::new(config)) })
    }

    /// The TLS handshake over `tcp`, verifying the certificate against `url`'s host.
    pub async fn connect(&self, url: &RelayUrl, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let name = server_name(url)?;
        self.connector.connect(name, tcp).await
    }
}

/// The name the certificate must carry: the URL's host (an IP literal as an address).
fn server_name(url: &RelayUrl) -> std::io::Result<ServerName<'static>> {
    let authority = url.authority();
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { authority }),
    };
    ServerName::try_from(host.to_string()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(url: &str) -> String {
        match server_name(&RelayUrl::parse(url).unwrap()).unwrap() {
            ServerName::DnsName(d) => d.as_ref().to_string(),
            ServerName::IpAddress(ip) => format!("ip {:?}", std::net::IpAddr::from(ip)),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn the_certificate_name_is_the_url_host() {
        assert_eq!(name("wss://relay.example.com"), "relay.example.com");
        assert_eq!(name("wss://localhost:7443/nostr"), "localhost");
        assert_eq!(name("wss://127.0.0.1:7443"), "ip 127.0.0.1");
        assert_eq!(name("wss://[::1]:7443"), "ip ::1");
    }

    #[test]
    fn extra_roots_must_be_pem_certificates() {
        assert!(Tls::new(None).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("ca.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        assert!(matches!(Tls::new(Some(&junk)), Err(TlsSetupError::Empty(_))));
        assert!(matches!(Tls::new(Some(&dir.path().join("missing.pem"))), Err(TlsSetupError::Read { .. })));
    }
}
