//! What an operator meets: the configuration file (`--config`, `config check`, `config show`),
//! SIGHUP re-reading it while the relay runs, `grasp-relay doctor` on a good and a broken
//! installation (docs/deployment.md), and a stop that does not wait for nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use grasp_tests::grasp::*;
use grasp_tests::{binary_path, eventually, spawn_logged, wait_until, TestServer, TIMEOUT};
use nostr::prelude::*;

/// The example configuration file, with every setting at its default.
const EXAMPLE: &str = include_str!("../../docs/grasp-relay.toml");

/// The example with `edits` (`(line, replacement)`) made; panics if a line is gone.
fn example_with(edits: &[(&str, &str)]) -> String {
    let mut text = EXAMPLE.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "docs/grasp-relay.toml has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    text
}

fn relay(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(binary_path("grasp-relay"));
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn hup(server: &TestServer) {
    let status = Command::new("kill").arg("-HUP").arg(server.pid().unwrap().to_string()).status().unwrap();
    assert!(status.success());
}

/// Waits until the relay's log has `needle` `count` times.
async fn logged(server: &TestServer, needle: &str, count: usize) {
    eventually!(format!("{count} x {needle:?} in the log"), (server.logs().matches(needle).count() >= count).then_some(()));
}

#[tokio::test]
async fn the_relay_runs_from_the_file_and_flags_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, example_with(&[("name = \"grasp-relay\"", "name = \"from the file\""), ("max-limit = 500", "max-limit = 2")])).unwrap();
    // TestServer's own --bind, --data-dir and --log win over the file's.
    let server = TestServer::start_with(&["--config", file.to_str().unwrap(), "--max-limit", "3"]);
    let doc = nip11(&server).await;
    assert_eq!(doc["name"], "from the file");
    assert_eq!(doc["limitation"]["max_limit"], 3, "{doc}");
    assert!(server.data_dir().join("events").is_dir(), "the flag's data directory, not the file's ./data");

    // config show: every value and where it came from.
    let out = relay(&["--config", file.to_str().unwrap(), "--max-limit", "3", "config", "show"], &[(grasp_state::contract::env_names::MAX_FILTERS, "4")]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let line_of = |needle: &str| EXAMPLE.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    for expected in [
        "max-limit = 3  # command line\n".to_string(),
        "max-filters = 4  # environment GRASP_MAX_FILTERS\n".to_string(),
        format!("name = \"from the file\"  # {}:{}\n", file.display(), line_of("name = ")),
        "# metrics-bind is not set  # default\n".to_string(),
    ] {
        assert!(shown.contains(&expected), "no {expected:?} in\n{shown}");
    }
}

#[test]
fn a_refused_file_stops_the_relay_and_says_where_and_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, example_with(&[("max-connections = 1024", "max-connections = 0"), ("\n[pages]\n", "\n[pages]\nnam = \"typo\"\n"), ("\nprivate = false", "\nprivate = \"no\"")])).unwrap();
    let line_of = |needle: &str| EXAMPLE.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    let expected = [
        format!("{}:{}:19: `max-connections` in `[limits]`: 0 is not in 1..=4294967295", bad.display(), line_of("max-connections = ")),
        format!("{}:{}:11: `private` in `[trust]` takes true or false, not a string", bad.display(), line_of("private = ")),
        format!("{}:{}:1: unknown key `nam` in `[pages]`", bad.display(), line_of("[pages]") + 1),
    ];

    // The relay does not start: status 2 (no restart loop under systemd), every problem named.
    let data = dir.path().join("data");
    let out = relay(&["--config", bad.to_str().unwrap(), "--bind", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    for e in &expected {
        assert!(text(&out).contains(e.as_str()), "no {e:?} in\n{}", text(&out));
    }
    assert!(!data.exists(), "nothing was started");

    // config check: the same, without starting.
    let out = relay(&["config", "check", bad.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    for e in &expected {
        assert!(text(&out).contains(e.as_str()), "no {e:?} in\n{}", text(&out));
    }
    let good = dir.path().join("good.toml");
    std::fs::write(&good, EXAMPLE).unwrap();
    // The environment is not the file's business: a bad variable does not fail the check.
    let out = relay(&["config", "check", good.to_str().unwrap()], &[(grasp_state::contract::env_names::MAX_CONNECTIONS, "0")]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("{}: ok", good.display())), "{}", text(&out));
}

/// SIGHUP: the allow/deny lists and the free-disk watermark change at once, a changed listener
/// waits for a restart (logged), and a broken file changes nothing.
#[tokio::test]
async fn sighup_applies_what_can_change_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    // Every event refused for want of disk space, to begin with.
    std::fs::write(&file, example_with(&[("min-free-disk = 1073741824", "min-free-disk = 9223372036854775807")])).unwrap();
    let (server, mut c) = connected(&["--config", file.to_str().unwrap()]).await;
    // Kind 10317 is replaceable: a fresh key for each event that should be stored.
    let mallory = Keys::generate();
    let (ok, msg) = c.send_event(&event(&Keys::generate(), 10317, &[&["t", "1"]])).await.unwrap();
    assert!(!ok && msg.contains("low on disk"), "{msg}");

    let blocked = format!("block-author = [\"{}\"]", mallory.public_key().to_bech32().unwrap());
    std::fs::write(&file, example_with(&[("block-author = []", &blocked), ("max-connections = 1024", "max-connections = 5")])).unwrap();
    hup(&server);
    logged(&server, "SIGHUP: configuration changes in force", 1).await;
    let logs = server.logs();
    assert!(logs.contains("min-free-disk, block-author"), "{logs}");
    assert!(logs.contains("take effect only after a restart") && logs.contains("settings=max-connections"), "{logs}");
    let (ok, msg) = c.send_event(&event(&Keys::generate(), 10317, &[&["t", "2"]])).await.unwrap();
    assert!(ok, "the watermark is 0 now: {msg}");
    let (ok, msg) = c.send_event(&event(&mallory, 10317, &[&["t", "3"]])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");

    // A broken file: refused, everything stays as it is.
    std::fs::write(&file, "[trust]\nblock-author = \"not a list\"\n").unwrap();
    hup(&server);
    logged(&server, "SIGHUP: the configuration is refused", 1).await;
    assert!(server.logs().contains(&format!("{}:2:16", file.display())), "{}", server.logs());
    let (ok, msg) = c.send_event(&event(&mallory, 10317, &[&["t", "4"]])).await.unwrap();
    assert!(!ok && msg.starts_with("blocked:"), "{msg}");
    let (ok, msg) = c.send_event(&event(&Keys::generate(), 10317, &[&["t", "5"]])).await.unwrap();
    assert!(ok, "{msg}");
    // The same file again: the restart setting is still pending, and said so again.
    std::fs::write(&file, example_with(&[("block-author = []", &blocked), ("max-connections = 1024", "max-connections = 5")])).unwrap();
    hup(&server);
    logged(&server, "take effect only after a restart", 2).await;
}

/// The log filter is replaced too: a relay started with `log = "warn"` logs nothing at INFO
/// until a SIGHUP brings `log = "info"`, whose own INFO line then appears.
#[test]
fn sighup_changes_the_log_filter() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let data = dir.path().join("data");
    let config = |log: &str| {
        example_with(&[
            ("log = \"info\"", &format!("log = \"{log}\"")),
            ("bind = \"127.0.0.1:8080\"", "bind = \"127.0.0.1:0\""),
            ("data-dir = \"./data\"", &format!("data-dir = \"{}\"", data.display())),
        ])
    };
    std::fs::write(&file, config("warn")).unwrap();
    let mut child = spawn_logged(Command::new(binary_path("grasp-relay")).arg("--config").arg(&file), &dir.path().join("relay.log"));
    let logs = || std::fs::read_to_string(dir.path().join("relay.log")).unwrap_or_default();
    wait_until("the relay to listen", TIMEOUT, || data.join(grasp_state::contract::layout::RELAY_ADDR_FILE).exists().then_some(())).unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert!(!logs().contains(" INFO "), "{}", logs());
    std::fs::write(&file, config("info")).unwrap();
    let status = Command::new("kill").arg("-HUP").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let found = wait_until("the INFO line of the reload", TIMEOUT, || logs().contains("SIGHUP: configuration changes in force").then_some(()));
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let exited = wait_until("the relay to stop", TIMEOUT, || child.try_wait().ok().flatten());
    if exited.is_err() {
        let _ = child.kill();
    }
    found.unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert!(logs().contains("settings=log"), "{}", logs());
}

/// `grasp-relay doctor` on `data` with limits any test machine's open file limit holds and a
/// watermark any disk is above.
fn doctor(args: &[&str], data: &Path) -> (bool, String) {
    let mut argv = vec!["--data-dir", data.to_str().unwrap(), "--min-free-disk", "1", "--git-max-requests", "4"];
    argv.extend_from_slice(args);
    argv.push("doctor");
    let out = relay(&argv, &[]);
    assert!(out.stderr.is_empty(), "{}", text(&out));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_doctor_tells_a_good_installation_from_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o750)).unwrap();
    let (fit, report) = doctor(&["--public-host", "git.example.com", "--max-connections", "16"], &data);
    assert!(fit, "{report}");
    for check in ["git", "binaries", "data directory", "free disk", "open files", "public host"] {
        assert!(report.lines().any(|l| l.starts_with(&format!("ok    {check}: "))), "no ok line for {check}:\n{report}");
    }
    assert!(report.trim_end().ends_with("fit to serve (0 warnings)"), "{report}");

    // Broken: no grasp-cgi where it is said to be, a data directory anyone can write, an
    // open file limit the connection limits do not fit in, a public host with a path.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let missing: PathBuf = dir.path().join("bin/grasp-cgi");
    let (fit, report) = doctor(&["--cgi-path", missing.to_str().unwrap(), "--max-connections", "4294967295", "--public-host", "git.example.com/x"], &data);
    assert!(!fit, "{report}");
    for (check, why) in [
        ("binaries", format!("{} (missing)", missing.display())),
        ("data directory", "writable by every user (mode 0777)".to_string()),
        ("open files", "raise it".to_string()),
        ("public host", "is not a host[:port]".to_string()),
    ] {
        let line = report.lines().find(|l| l.starts_with(&format!("FAIL  {check}: "))).unwrap_or_else(|| panic!("no FAIL line for {check}:\n{report}"));
        assert!(line.contains(&why), "{line}");
    }
    assert!(report.lines().any(|l| l.starts_with("      fix: ")), "{report}");
    assert!(report.contains("not fit to serve: 4 problems to fix"), "{report}");
}

/// SIGTERM on a relay that served a push and whose clients are gone stops it without waiting out
/// the shutdown grace: no background part keeps a shutdown handle it never drops (the
/// maintenance queue, kept as long as the process, once did: every stop took 10 s and warned).
#[tokio::test]
async fn a_quiet_relay_stops_without_waiting_out_the_grace() {
    let (mut server, tmp, mut c) = started(&[]).await;
    let owner = Keys::generate();
    publish_repo(&server, &mut c, &tmp.path().join("w"), &owner, "quiet").await;
    drop(c);
    let status = server.stop();
    assert!(status.success(), "{status}");
    let logs = server.logs();
    assert!(logs.contains("stopped"), "{logs}");
    assert!(!logs.contains("did not finish within"), "the stop waited out its grace:\n{logs}");
}
