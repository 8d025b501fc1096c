//! git `post-receive` hook: tells the GRASP relay that git data arrived and prints what it released.

use std::time::Duration;

use grasp_hooks::{call, context, say, settings};
use grasp_state::contract::hook_api::{PostReceiveRequest, PostReceiveResponse, PATH_POST_RECEIVE};

/// Releasing may copy objects into other owners' repositories; give it time, but not forever.
const TIMEOUT: Duration = Duration::from_secs(120);

fn main() {
    let result = (|| -> anyhow::Result<PostReceiveResponse> {
        let ctx = context(settings("grasp-post-receive")?.data_dir)?;
        let data_dir = ctx.data_dir.clone();
        let req: PostReceiveRequest = ctx.request();
        call(&data_dir, PATH_POST_RECEIVE, &req, TIMEOUT)
    })();
    match result {
        Ok(resp) => {
            for line in resp.lines() {
                say(&line);
            }
        }
        // The push has already landed; the relay reconciles on its own (at startup and on the
        // next change), so this is a warning, not a failure.
        Err(e) => say(&format!(
            "grasp: warning: the relay was not told about this push ({e:#}); it will pick the data up when it reconciles"
        )),
    }
}
