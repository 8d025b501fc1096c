//! Every line a hook prints goes out in one `write` (git relays stderr as `remote:` sideband
//! packets; clients that show packets as they come, such as libgit2's, split a line written in
//! pieces). Checked with `strace` on the pre-receive hook's fail-closed path, whose message is
//! formatted from an error chain; skipped with a note where `strace` is missing or not permitted.

use std::process::{Command, Stdio};

#[test]
fn pre_receive_writes_each_line_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let run = Command::new("strace")
        .args(["-f", "-qq", "-s", "65536", "-e", "trace=write", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_grasp-pre-receive"))
        .arg("--data-dir")
        .arg(&data)
        .env("GIT_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) => return eprintln!("note: strace not available ({e}); skipped"),
    };
    let trace = std::fs::read_to_string(&log).unwrap_or_default();
    if !trace.contains("write(") {
        return eprintln!("note: strace cannot trace here; skipped: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(out.status.code(), Some(1), "the hook fails closed");
    let writes: Vec<&str> = trace.lines().filter(|l| l.contains("write(2, ")).collect();
    assert_eq!(writes.len(), 2, "one write per line:\n{trace}");
    for w in &writes {
        assert!(w.contains("grasp: ") && w.contains("\\n\","), "a whole line with its newline: {w}");
    }
    assert!(writes[0].contains("could not get a verdict from the GRASP relay: "), "{trace}");
}
