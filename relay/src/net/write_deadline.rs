//! A write deadline on every connection of the public listener.
//!
//! A client that stops reading makes every write to its socket wait once the kernel buffers are
//! full; without a bound the task writing to it (a WebSocket connection, a git response and the
//! git processes and git request slot behind it) would wait forever. [`WriteDeadline`] wraps the
//! socket: a write or flush that cannot make progress for `--write-timeout` fails with
//! `TimedOut`, so hyper and the WebSocket drop the connection and everything it held
//! (docs/security.md).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `--write-timeout`'s default.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// A stream whose writes fail once they have waited `limit` without progress.
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    remote: SocketAddr,
    /// Armed while a write waits; disarmed by any progress.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration, remote: SocketAddr) -> Self {
        WriteDeadline { inner, limit, remote, timer: None }
    }

    /// Called when the inner write is pending: arms the timer, or fails once it has fired.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::info!(remote = %self.remote, reason = "write timeout", "client read nothing for {limit:?}: connection dropped");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client read nothing for {limit:?} (--write-timeout)"),
                )))
            }
        }
    }

    fn progress<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            ready => {
                self.timer = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(r, cx)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(r, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_write_the_peer_never_reads_fails_after_the_limit() {
        let (a, _b) = tokio::io::duplex(16);
        let mut w = WriteDeadline::new(a, Duration::from_millis(100), "127.0.0.1:1".parse().unwrap());
        let started = std::time::Instant::now();
        let err = w.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_reading_peer_never_times_out() {
        let (a, mut b) = tokio::io::duplex(16);
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut b, &mut sink).await.unwrap();
            sink.len()
        });
        let mut w = WriteDeadline::new(a, Duration::from_millis(200), "127.0.0.1:1".parse().unwrap());
        for _ in 0..20 {
            w.write_all(&[1u8; 64]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), 20 * 64);
    }
}
