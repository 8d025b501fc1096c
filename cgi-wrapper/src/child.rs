//! The lifetime of `git http-backend` under grasp-cgi: it never outlives its request.
//!
//! The backend runs in a process group of its own (it starts `git receive-pack` or
//! `upload-pack`, which start `index-pack` and the hooks: all in that group), so one signal ends
//! the whole tree without touching the web server's group (fcgiwrap's, or the relay's).
//! The group is killed when:
//! - grasp-cgi is told to stop (`SIGTERM`, `SIGINT`, `SIGHUP`: the relay ends an abandoned
//!   request this way), by [`install_signal_handlers`];
//! - the request body ends short of its `CONTENT_LENGTH` (the client went away) or nothing of
//!   it arrives for the idle timeout (`--idle-timeout`), by [`feed_body`], which copies
//!   grasp-cgi's stdin to the backend itself instead of handing its stdin over: stock
//!   `git http-backend` spins forever on a body that ends short;
//! - the response cannot be delivered (the caller kills it on a write error).

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use grasp_state::contract::transfer;

/// The backend's process group (its pid), 0 while none runs. Read by the signal handler.
static BACKEND_GROUP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    // Only async-signal-safe calls here: kill(2) and _exit(2).
    let group = BACKEND_GROUP.load(Ordering::SeqCst);
    unsafe {
        if group > 0 {
            libc::kill(-group, libc::SIGKILL);
        }
        libc::_exit(128 + signal);
    }
}

/// On `SIGTERM`, `SIGINT` or `SIGHUP`, kill the backend's group (if one runs) and exit.
pub fn install_signal_handlers() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for signal in STOP_SIGNALS {
        // SAFETY: the handler only makes async-signal-safe calls.
        unsafe {
            libc::signal(signal, handler);
        }
    }
}

/// The signals that stop grasp-cgi ([`install_signal_handlers`]).
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Holds the stop signals back while the backend is started and its group recorded: a stop that
/// arrives between `spawn` and [`BackendGroup::register`] would otherwise find no group to kill
/// and leave the backend running as an orphan. Pending signals are delivered when this drops,
/// with the group known. (The spawned child starts with an empty signal mask: std resets it.)
pub struct StopSignalsHeld {
    previous: libc::sigset_t,
}

impl StopSignalsHeld {
    pub fn hold() -> StopSignalsHeld {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in STOP_SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            StopSignalsHeld { previous }
        }
    }
}

impl Drop for StopSignalsHeld {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `hold`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// The running backend's group; killed (SIGKILL) by [`BackendGroup::kill`] or on drop unless
/// [`BackendGroup::finished`] was called after the backend exited.
pub struct BackendGroup {
    group: i32,
    live: bool,
}

impl BackendGroup {
    /// Records `pid` (spawned with `process_group(0)`) as the group the signal handler kills.
    pub fn register(pid: u32) -> BackendGroup {
        let group = pid as i32;
        BACKEND_GROUP.store(group, Ordering::SeqCst);
        BackendGroup { group, live: true }
    }

    /// Kills every process of the group.
    pub fn kill(&self) {
        kill_group(self.group);
    }

    /// The backend closed its output and exited on its own: the handler forgets the group.
    pub fn finished(mut self) {
        self.live = false;
        BACKEND_GROUP.store(0, Ordering::SeqCst);
    }
}

impl Drop for BackendGroup {
    fn drop(&mut self) {
        if self.live {
            self.kill();
            BACKEND_GROUP.store(0, Ordering::SeqCst);
        }
    }
}

/// Kills (SIGKILL) every process of `group`.
pub fn kill_group(group: i32) {
    if group > 0 {
        // SAFETY: plain syscall; a group that no longer exists gives ESRCH, which is fine.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

/// Why feeding the body stopped before its end.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// The body ended after `got` of `expected` bytes: the client went away.
    Short { got: u64, expected: u64 },
    /// Nothing arrived for the idle timeout.
    Idle(Duration),
    /// Past the idle timeout, the body averaged less than this many bytes per second.
    TooSlow(u64),
    /// Reading the request failed.
    Read(io::ErrorKind),
}

impl std::fmt::Display for BodyFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyFault::Short { got, expected } => write!(
                f,
                "the request body ended after {got} of its {expected} bytes (client gone)"
            ),
            BodyFault::Idle(t) => write!(f, "no request body data for {t:?} (idle timeout)"),
            BodyFault::TooSlow(rate) => write!(f, "the request body arrived slower than {rate} bytes/s ({})", grasp_state::contract::env_names::GIT_MIN_RATE),
            BodyFault::Read(kind) => write!(f, "reading the request body failed: {kind}"),
        }
    }
}

/// Copies the request body from `from` to the backend's stdin: exactly `content_length` bytes
/// when given (what the client sends beyond is not the backend's), else up to end of input.
/// Closes the backend's stdin at the end. A body that ends short, stalls for `idle`, or past
/// `idle` averages less than `min_rate` bytes per second (`grasp_state::contract::transfer`; 0: no
/// minimum) is a fault; the caller kills the backend. The backend closing its stdin early is
/// not a fault.
pub fn feed_body(
    from: &mut (impl Read + AsRawFd),
    to: ChildStdin,
    content_length: Option<u64>,
    idle: Duration,
    min_rate: u64,
) -> Result<u64, BodyFault> {
    let mut to = Some(to);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    let started = std::time::Instant::now();
    loop {
        let want = match content_length {
            Some(expected) if got >= expected => return Ok(got),
            Some(expected) => buf.len().min((expected - got).min(usize::MAX as u64) as usize),
            None => buf.len(),
        };
        let mut wait = idle;
        if let Some(slow) = transfer::slow_at(got, idle, min_rate) {
            wait = wait.min(slow.saturating_sub(started.elapsed()));
        }
        if !readable_within(from.as_raw_fd(), wait).map_err(|e| BodyFault::Read(e.kind()))? {
            // A body that stopped is idle, whatever its rate.
            if wait >= idle {
                return Err(BodyFault::Idle(idle));
            }
            if transfer::too_slow(got, started.elapsed(), idle, min_rate) {
                return Err(BodyFault::TooSlow(min_rate));
            }
            continue;
        }
        let n = match from.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(BodyFault::Read(e.kind())),
        };
        if n == 0 {
            return match content_length {
                Some(expected) => Err(BodyFault::Short { got, expected }),
                None => Ok(got),
            };
        }
        got += n as u64;
        if let Some(pipe) = to.as_mut() {
            if pipe.write_all(&buf[..n]).is_err() {
                // The backend stopped reading (it answered without the body): drain the rest
                // so the client can read the answer.
                to = None;
            }
        }
    }
}

/// Waits until `fd` is readable (data or end of input) for at most `timeout`.
fn readable_within(fd: i32, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::process::{Command, Stdio};

    fn cat() -> std::process::Child {
        Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap()
    }

    #[test]
    fn feeds_exactly_content_length_then_closes() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        client.write_all(b"hello world, and more").unwrap();
        let mut child = cat();
        let stdin = child.stdin.take().unwrap();
        let fed = feed_body(&mut server, stdin, Some(11), Duration::from_secs(5), 0).unwrap();
        assert_eq!(fed, 11);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"hello world");
    }

    #[test]
    fn a_short_body_is_a_fault() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        client.write_all(b"hello").unwrap();
        drop(client);
        let mut child = cat();
        let stdin = child.stdin.take().unwrap();
        let fault = feed_body(&mut server, stdin, Some(100), Duration::from_secs(5), 0).unwrap_err();
        assert_eq!(fault, BodyFault::Short { got: 5, expected: 100 });
        let _ = child.wait();
    }

    #[test]
    fn a_stalled_body_is_a_fault() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        client.write_all(b"hello").unwrap();
        let mut child = cat();
        let stdin = child.stdin.take().unwrap();
        let fault = feed_body(&mut server, stdin, Some(100), Duration::from_millis(50), 0).unwrap_err();
        assert_eq!(fault, BodyFault::Idle(Duration::from_millis(50)));
        drop(client);
        let _ = child.wait();
    }

    #[test]
    fn a_trickling_body_is_a_fault_past_the_idle_timeout() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            // One byte every 20 ms (50 bytes/s), never idle for the 100 ms idle timeout.
            for _ in 0..100 {
                if client.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let mut child = cat();
        let stdin = child.stdin.take().unwrap();
        let started = std::time::Instant::now();
        let fault = feed_body(&mut server, stdin, Some(1000), Duration::from_millis(100), 1000).unwrap_err();
        assert_eq!(fault, BodyFault::TooSlow(1000));
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        drop(server);
        let _ = child.wait();
        trickle.join().unwrap();
    }

    #[test]
    fn without_content_length_the_end_of_input_ends_the_body() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        client.write_all(b"chunked").unwrap();
        drop(client);
        let mut child = cat();
        let stdin = child.stdin.take().unwrap();
        assert_eq!(feed_body(&mut server, stdin, None, Duration::from_secs(5), 0).unwrap(), 7);
        assert_eq!(child.wait_with_output().unwrap().stdout, b"chunked");
    }
}
