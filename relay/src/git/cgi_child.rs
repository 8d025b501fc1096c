//! One CGI child of the public listener (`git http-backend`, started directly or by grasp-cgi's
//! exec, or grasp-cgi answering a page), which never outlives its request.
//!
//! The child runs in a process group of its own, which its git processes and hooks share. A
//! supervisor task owns it and ends it when the request is abandoned ([`CgiControl::abort`]: the
//! client went away or sent nothing for `--git-idle-timeout`, or the answer could not be
//! delivered) or when the relay shuts down: `SIGTERM` to the group first, `SIGKILL` to it after
//! [`TERM_GRACE`]. The supervisor holds a
//! [`Shutdown`] handle, so the relay's shutdown waits until every child is gone.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use crate::shutdown::Shutdown;

/// How long a child has to exit after `SIGTERM` before its group gets `SIGKILL`.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// Why a request's child is ended before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The request body ended before its length (the client closed the connection).
    ClientGone,
    /// The request body arrived slower than the minimum rate (`--git-min-rate`).
    TooSlow(u64),
    /// Nothing arrived from the client for the idle timeout.
    Idle(Duration),
    /// The answer could not be delivered (the client closed before its end).
    AnswerUndelivered,
    /// The whole answer (of a known length) went out before the child's output ended.
    Answered,
    /// The child's answer was unusable (no or a bad CGI header block).
    BadAnswer,
    /// The relay is shutting down.
    Shutdown,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Abandoned::ClientGone => f.write_str("client closed the connection before the end of its request body"),
            Abandoned::Idle(t) => write!(f, "client sent nothing for {t:?} (idle timeout, --git-idle-timeout)"),
            Abandoned::TooSlow(rate) => write!(f, "client sent its request body slower than {rate} bytes/s (--git-min-rate)"),
            Abandoned::AnswerUndelivered => f.write_str("client closed the connection before the end of the answer"),
            Abandoned::Answered => f.write_str("its whole answer was sent"),
            Abandoned::BadAnswer => f.write_str("the CGI program sent no usable answer"),
            Abandoned::Shutdown => f.write_str("relay shutting down"),
        }
    }
}

/// Ends a supervised child. Cheap to clone; the first abort wins.
#[derive(Debug, Clone)]
pub struct CgiControl {
    tx: mpsc::Sender<Abandoned>,
}

impl CgiControl {
    /// Ends the child's whole process tree (asynchronously, by its supervisor).
    pub fn abort(&self, why: Abandoned) {
        let _ = self.tx.try_send(why);
    }
}

/// Hands `child` (spawned with `process_group(0)`) to a supervisor task; `what` names the
/// request in logs. Returns the handle that ends it.
pub fn supervise(child: Child, what: String, shutdown: Shutdown) -> CgiControl {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(run(child, what, rx, shutdown, None));
    CgiControl { tx }
}

/// [`supervise`], also telling whether the child ended by itself with success (`false` when
/// it failed; the sender is dropped when it was ended).
pub fn supervise_reporting(child: Child, what: String, shutdown: Shutdown) -> (CgiControl, oneshot::Receiver<bool>) {
    let (tx, rx) = mpsc::channel(1);
    let (exited, exit) = oneshot::channel();
    tokio::spawn(run(child, what, rx, shutdown, Some(exited)));
    (CgiControl { tx }, exit)
}

async fn run(
    mut child: Child,
    what: String,
    mut aborts: mpsc::Receiver<Abandoned>,
    mut shutdown: Shutdown,
    exited: Option<oneshot::Sender<bool>>,
) {
    let mut controlled = true;
    let why = loop {
        tokio::select! {
            // An abort first: the child often exits right after it (its stdin closed), and the
            // log must say why the request was ended.
            biased;
            why = aborts.recv(), if controlled => match why {
                Some(why) => break why,
                // Every handle dropped without an abort: the request finished; reap the child.
                None => controlled = false,
            },
            status = child.wait() => {
                let success = status.as_ref().is_ok_and(ExitStatus::success);
                report(&what, status);
                if let Some(exited) = exited {
                    let _ = exited.send(success);
                }
                return;
            }
            _ = shutdown.recv() => break Abandoned::Shutdown,
        }
    };
    if why == Abandoned::Answered {
        tracing::debug!(request = %what, reason = %why, "git http: ending the CGI child");
    } else {
        tracing::info!(request = %what, reason = %why, "git http: ending the request and its git processes");
    }
    terminate(&mut child).await;
}

fn report(what: &str, status: std::io::Result<ExitStatus>) {
    match status {
        Ok(status) if !status.success() => {
            tracing::warn!(request = %what, %status, "git http: CGI child exited with failure")
        }
        Err(e) => tracing::warn!(request = %what, error = %e, "git http: waiting for the CGI child"),
        Ok(_) => {}
    }
}

/// `SIGTERM` to the child's group, `SIGKILL` after [`TERM_GRACE`]; reaps the child.
async fn terminate(child: &mut Child) {
    // An unreaped child's pid (and so its group id) cannot be reused.
    let Some(pid) = child.id() else { return };
    signal_group(pid, libc::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, child.wait()).await.is_err() {
        signal_group(pid, libc::SIGKILL);
        let _ = child.wait().await;
    } else {
        // grasp-cgi is gone; anything left in its group goes with it.
        signal_group(pid, libc::SIGKILL);
    }
}

fn signal_group(pid: u32, signal: libc::c_int) {
    // SAFETY: plain syscall; ESRCH (group already gone) is fine.
    unsafe {
        libc::kill(-(pid as libc::pid_t), signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::ShutdownController;

    fn sleeper() -> Child {
        tokio::process::Command::new("sleep").arg("600").process_group(0).kill_on_drop(true).spawn().unwrap()
    }

    fn alive(pid: u32) -> bool {
        // A reaped child is gone: kill(pid, 0) fails with ESRCH.
        unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
    }

    #[tokio::test]
    async fn abort_ends_the_child() {
        let ctl = ShutdownController::new();
        let child = sleeper();
        let pid = child.id().unwrap();
        let control = supervise(child, "test".into(), ctl.subscribe());
        control.abort(Abandoned::Idle(Duration::from_secs(1)));
        // The supervisor drops its Shutdown handle once the child is reaped.
        assert!(ctl.wait_for_tasks(Duration::from_secs(10)).await);
        assert!(!alive(pid));
    }

    #[tokio::test]
    async fn shutdown_ends_the_child_and_waits_for_it() {
        let ctl = ShutdownController::new();
        let child = sleeper();
        let pid = child.id().unwrap();
        let _control = supervise(child, "test".into(), ctl.subscribe());
        assert!(ctl.wait_for_tasks(Duration::from_secs(10)).await);
        assert!(!alive(pid));
    }
}
