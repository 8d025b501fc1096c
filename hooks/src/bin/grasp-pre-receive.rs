//! git `pre-receive` hook: asks the GRASP relay whether this push may go in. Fails closed.

use std::time::Duration;

use grasp_hooks::{call, context, data_dir_from_args, say};
use grasp_state::hook_api::{check_version, PreReceiveRequest, PreReceiveResponse, PATH_PRE_RECEIVE};

/// How long the pusher waits for a verdict before the push is rejected.
const TIMEOUT: Duration = Duration::from_secs(5);

fn main() {
    let verdict = (|| -> anyhow::Result<PreReceiveResponse> {
        let ctx = context(data_dir_from_args("grasp-pre-receive")?)?;
        let req = PreReceiveRequest::new(ctx.owner, ctx.identifier, ctx.updates);
        let resp: PreReceiveResponse = call(&ctx.data_dir, PATH_PRE_RECEIVE, &req, TIMEOUT)?;
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
