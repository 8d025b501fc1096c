//! Raising the open file limit at startup (`grasp_state::trust::fd_budget`): the soft limit goes up to
//! the hard one, and the relay refuses to start when even the hard one is below what its
//! connection and git request limits need.

use anyhow::Context;

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit; fails (with what to do) when the hard
/// limit is below `needed`. Returns the limit now in force.
pub fn raise(needed: u64) -> anyhow::Result<u64> {
    let (soft, hard) = current().context("reading the open file limit (RLIMIT_NOFILE)")?;
    let mut lim = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
    let target = grasp_state::trust::fd_budget::plan(soft, hard, needed).map_err(anyhow::Error::msg)?;
    if target != soft {
        lim.rlim_cur = target as libc::rlim_t;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(std::io::Error::last_os_error()).context("raising the open file limit (RLIMIT_NOFILE)");
        }
    }
    tracing::info!(soft = target, hard, needed, "open file limit");
    Ok(target)
}

/// The open file limit in force: (soft, hard).
pub fn current() -> std::io::Result<(u64, u64)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // `rlim_t` is `u64` on Linux only.
    #[allow(clippy::unnecessary_cast)]
    Ok((lim.rlim_cur as u64, lim.rlim_max as u64))
}
