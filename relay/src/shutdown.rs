//! Graceful shutdown, mini-redis style.
//!
//! [`ShutdownController`] owns the signal; every listener, connection and background task holds a
//! [`Shutdown`] handle, waits on [`Shutdown::recv`], and by dropping its handle tells the
//! controller it has finished ([`ShutdownController::wait_for_tasks`]).

use std::time::Duration;

use tokio::sync::{mpsc, watch};

/// Triggers shutdown and waits for the tasks holding [`Shutdown`] handles to finish.
#[derive(Debug)]
pub struct ShutdownController {
    notify: watch::Sender<bool>,
    done_tx: mpsc::Sender<()>,
    done_rx: mpsc::Receiver<()>,
}

/// A task's view of the shutdown signal. Clone it for each spawned task.
#[derive(Debug, Clone)]
pub struct Shutdown {
    notify: watch::Receiver<bool>,
    _done: mpsc::Sender<()>,
}

impl Default for ShutdownController {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownController {
    pub fn new() -> Self {
        let (notify, _) = watch::channel(false);
        let (done_tx, done_rx) = mpsc::channel(1);
        Self {
            notify,
            done_tx,
            done_rx,
        }
    }

    /// A new handle for a task.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            notify: self.notify.subscribe(),
            _done: self.done_tx.clone(),
        }
    }

    /// Tells every handle to shut down.
    pub fn trigger(&self) {
        self.notify.send_replace(true);
    }

    /// Triggers shutdown and waits (at most `timeout`) until every handle is dropped.
    /// Returns false on timeout.
    pub async fn wait_for_tasks(self, timeout: Duration) -> bool {
        self.trigger();
        let Self {
            done_tx,
            mut done_rx,
            ..
        } = self;
        drop(done_tx);
        tokio::time::timeout(timeout, done_rx.recv()).await.is_ok()
    }
}

/// The shutdown signal alone, without holding shutdown up: for a value that lives as long as the
/// process (such as the maintenance queue kept on `Grasp`) and the short timers it spawns, which
/// end at the signal. A [`Shutdown`] kept there would make every graceful stop wait out
/// [`ShutdownController::wait_for_tasks`]'s whole timeout.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    notify: watch::Receiver<bool>,
}

impl ShutdownSignal {
    /// Waits until shutdown is triggered (returns at once if it already was).
    pub async fn recv(&mut self) {
        let _ = self.notify.wait_for(|v| *v).await;
    }
}

impl Shutdown {
    /// The signal of this handle, without its part in holding shutdown up.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal { notify: self.notify.clone() }
    }

    /// True once shutdown has been triggered.
    pub fn is_shutdown(&self) -> bool {
        *self.notify.borrow()
    }

    /// Waits until shutdown is triggered (returns at once if it already was).
    pub async fn recv(&mut self) {
        // An error means the controller is gone, which also means: shut down.
        let _ = self.notify.wait_for(|v| *v).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_see_signal_and_controller_waits_for_them() {
        let ctl = ShutdownController::new();
        let mut s = ctl.subscribe();
        assert!(!s.is_shutdown());
        let task = tokio::spawn(async move {
            s.recv().await;
            assert!(s.is_shutdown());
        });
        assert!(ctl.wait_for_tasks(Duration::from_secs(5)).await);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_signal_sees_the_trigger_and_does_not_hold_shutdown_up() {
        let ctl = ShutdownController::new();
        let mut signal = ctl.subscribe().signal();
        assert!(ctl.wait_for_tasks(Duration::from_secs(5)).await, "a kept signal held shutdown up");
        tokio::time::timeout(Duration::from_secs(5), signal.recv()).await.expect("the signal never came");
    }

    #[tokio::test]
    async fn wait_times_out_when_a_task_holds_on() {
        let ctl = ShutdownController::new();
        let held = ctl.subscribe();
        assert!(!ctl.wait_for_tasks(Duration::from_millis(50)).await);
        drop(held);
    }
}
