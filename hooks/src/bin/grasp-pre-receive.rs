//! git `pre-receive` hook: asks the GRASP relay whether this push may go in. Fails closed.

use std::time::Duration;

use grasp_hooks::{call, context, say, settings};
use grasp_state::contract::hook_api::{check_version, PreReceiveRequest, PreReceiveResponse, PATH_PRE_RECEIVE};

/// How long the pusher waits for a verdict before the push is rejected.
const TIMEOUT: Duration = Duration::from_secs(5);

fn main() {
    let verdict = (|| -> anyhow::Result<PreReceiveResponse> {
        let settings = settings("grasp-pre-receive")?;
        let limits = settings.limits;
        let ctx = context(settings.data_dir)?;
        // Size limits first, on the quarantine: a refused pack never lands.
        let incoming = std::env::var_os("GIT_QUARANTINE_PATH").map_or(0, |q| dir_bytes(std::path::Path::new(&q)));
        if let Err(message) = limits.check_in(ctx.space, &ctx.updates, incoming) {
            return Ok(PreReceiveResponse::reject(vec![format!("grasp: push rejected: {message}")]));
        }
        let data_dir = ctx.data_dir.clone();
        // The relay counts the bytes of a push reserving git-first placeholders as unsigned
        // data of its address (docs/protocol.md#caps).
        let req: PreReceiveRequest = ctx.request().bringing(incoming);
        let resp: PreReceiveResponse = call(&data_dir, PATH_PRE_RECEIVE, &req, TIMEOUT)?;
        check_version(resp.version)?;
        Ok(resp)
    })();
    match verdict {
        Ok(resp) => {
            for line in &resp.messages {
                say(line);
            }
            std::process::exit(if resp.accepted { 0 } else { 1 });
        }
        Err(e) => {
            say(&format!("grasp: push rejected: could not get a verdict from the GRASP relay: {e:#}"));
            say("grasp: nothing was changed; try again in a moment, or tell the server's operator");
            std::process::exit(1);
        }
    }
}

/// Bytes of the files under `dir` (git's quarantine of this push's objects).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
