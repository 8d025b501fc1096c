//! Accepting TCP connections: every accepted socket gets `TCP_NODELAY`.
//!
//! Without it, Nagle's algorithm holds back the small second write of an answer until the peer's
//! delayed ACK (about 40 ms), so every second request on a kept-alive connection stalls. Every
//! listener (public, hook API, metrics) accepts through [`accept_with_backoff`], which also
//! pauses after a failed accept (typically out of file descriptors, `EMFILE`) instead of spinning
//! on it.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Accepts one connection from `listener` and sets `TCP_NODELAY` on it.
pub async fn accept(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (stream, remote) = listener.accept().await?;
    if let Err(e) = stream.set_nodelay(true) {
        // The connection still works, only slower: serve it anyway.
        tracing::debug!(%remote, error = %e, "cannot set TCP_NODELAY");
    }
    Ok((stream, remote))
}

/// How long a listener pauses after a failed accept.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts the next connection of `listener` ([`accept`]); a failed accept (out of file
/// descriptors, a connection reset before it was accepted) is logged with the listener's name
/// and retried after [`ACCEPT_BACKOFF`], so a descriptor shortage never spins a core.
pub async fn accept_with_backoff(listener: &TcpListener, name: &str) -> (TcpStream, SocketAddr) {
    loop {
        match accept(listener).await {
            Ok(v) => return v,
            Err(e) => {
                tracing::warn!(listener = name, error = %e, "accept failed; pausing {ACCEPT_BACKOFF:?}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (stream, remote) = accept(&listener).await.unwrap();
        let client = client.await.unwrap();
        assert_eq!(remote, client.local_addr().unwrap());
        assert!(stream.nodelay().unwrap(), "accepted socket must have TCP_NODELAY");
    }
}
