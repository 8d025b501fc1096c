//! Metrics and health probes (docs/deployment.md#metrics-and-health): the separate `--metrics-bind` listener serves
//! Prometheus text that parses and moves with what the relay does, never on the public port;
//! `/healthz` and `/readyz` answer there and on the hook API.

use std::collections::BTreeMap;
use std::path::Path;

use grasp_tests::grasp::*;
use grasp_tests::{binary_path, wait_until, NostrClient, TestServer, TIMEOUT};
use nostr::prelude::*;

/// A running relay with the metrics listener on a random loopback port.
fn start(extra: &[&str]) -> TestServer {
    let mut args = vec!["--metrics-bind", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    TestServer::start_with(&args)
}

/// The metrics listener's address, from `<data>/metrics-addr`.
fn metrics_addr(server: &TestServer) -> String {
    wait_until("the metrics address file", TIMEOUT, || {
        std::fs::read_to_string(server.data_dir().join(grasp_state::contract::layout::METRICS_ADDR_FILE)).ok().map(|s| s.trim().to_string())
    })
    .unwrap()
}

async fn get(url: &str) -> (u16, String, String) {
    let resp = reqwest::get(url).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (status, ctype, resp.text().await.unwrap())
}

/// One scrape, parsed: series (`name{labels}`) to value. Panics on anything that is not the
/// Prometheus text format: every sample line is `name{labels} value` with a valid metric name,
/// well-formed labels and a number, and every sample's family has `# HELP` and `# TYPE` lines.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    let mut helped = Vec::new();
    let mut typed = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').unwrap_or_else(|| panic!("HELP without text: {line:?}"));
            helped.push(name.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("TYPE without type: {line:?}"));
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line:?}");
            typed.insert(name.to_string(), kind.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment line {line:?}");
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line:?}"));
                for pair in split_labels(labels) {
                    let (key, quoted) = pair.split_once('=').unwrap_or_else(|| panic!("bad label {pair:?} in {line:?}"));
                    assert!(valid_name(key) && !key.contains(':'), "bad label name {key:?} in {line:?}");
                    assert!(quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'), "unquoted label value in {line:?}");
                }
                name
            }
            None => series,
        };
        assert!(valid_name(name), "bad metric name in {line:?}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.get(*f).is_some_and(|t| t == "histogram")))
            .unwrap_or(name);
        assert!(typed.contains_key(family), "no # TYPE for {family} before {line:?}");
        assert!(helped.iter().any(|h| h == family), "no # HELP for {family} before {line:?}");
        assert!(samples.insert(series.to_string(), value).is_none(), "duplicate series {series}");
    }
    assert!(!samples.is_empty(), "no samples in\n{text}");
    samples
}

/// Splits `a="x",b="y,z"` at the commas between pairs (not inside quoted values).
fn split_labels(labels: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in labels.chars() {
        match c {
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => {
                if c == '"' && !escaped {
                    quoted = !quoted;
                }
                escaped = c == '\\' && !escaped;
                cur.push(c);
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

async fn scrape(server: &TestServer) -> BTreeMap<String, f64> {
    let (status, ctype, body) = get(&format!("http://{}/metrics", metrics_addr(server))).await;
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    parse(&body)
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_and_move_with_events_and_pushes() {
    let server = start(&[]);
    let before = scrape(&server).await;
    for family in ["grasp_websocket_connections_open", "grasp_connections_open", "grasp_sync_queue_length", "grasp_checkpoint_bytes"] {
        assert!(before.contains_key(family), "{family} missing: {before:?}");
    }
    assert!(before.keys().any(|k| k.starts_with("grasp_build_info{version=")), "{before:?}");
    let held_ann = r#"grasp_events_total{kind="30617",outcome="held",reason=""}"#;
    let refused = r#"grasp_events_total{kind="1",outcome="refused",reason="blocked"}"#;
    let accepted = r#"grasp_pushes_total{outcome="accepted"}"#;
    assert_eq!(value(&before, held_ann), 0.0);
    assert_eq!(value(&before, accepted), 0.0);

    // An announcement (held), an unrelated note (refused), a state (held), then the push.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = NostrClient::connect(&server.ws_url()).await.unwrap();
    let owner = Keys::generate();
    let ann = announcement(&server, &owner, "watched", &[]);
    let (ok, msg) = c.send_event(&ann).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    let (ok, _) = c.send_event(&event(&owner, 1, &[])).await.unwrap();
    assert!(!ok);
    let during = scrape(&server).await;
    assert_eq!(value(&during, held_ann), 1.0, "{during:?}");
    assert_eq!(value(&during, refused), 1.0, "{during:?}");
    assert_eq!(value(&during, r#"grasp_events_received_total{kind="30617"}"#), 1.0);
    assert_eq!(value(&during, "grasp_websocket_connections_open"), 1.0);
    assert_eq!(value(&during, r#"grasp_purgatory_entries{type="announcement",level="waiting"}"#), 1.0);

    let repo = Repo::new(&tmp.path().join("w"), &server, &owner.public_key(), "watched");
    let tip = repo.commit("a", "1");
    let (ok, msg) = c.send_event(&state(&owner, "watched", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
    assert!(ok && msg.starts_with("purgatory:"), "{msg}");
    repo.push(&["main"]).unwrap();
    // A refused push: a commit no state names.
    repo.commit("b", "2");
    assert!(repo.push(&["main"]).is_err());

    let after = scrape(&server).await;
    assert_eq!(value(&after, accepted), 1.0, "{after:?}");
    assert_eq!(value(&after, r#"grasp_pushes_total{outcome="refused"}"#), 1.0, "{after:?}");
    assert_eq!(value(&after, r#"grasp_push_hook_duration_seconds_count{hook="pre-receive"}"#), 2.0);
    assert_eq!(value(&after, r#"grasp_push_hook_duration_seconds_count{hook="post-receive"}"#), 1.0);
    assert_eq!(value(&after, r#"grasp_purgatory_releases_total{kind="30617"}"#), 1.0, "{after:?}");
    assert_eq!(value(&after, r#"grasp_purgatory_releases_total{kind="30618"}"#), 1.0, "{after:?}");
    assert_eq!(value(&after, r#"grasp_purgatory_entries{type="announcement",level="waiting"}"#), 0.0);
    assert!(value(&after, r#"grasp_git_requests_total{service="receive-pack",status="2xx"}"#) >= 4.0, "{after:?}");
    assert!(value(&after, r#"grasp_git_request_duration_seconds_count{service="receive-pack"}"#) >= 4.0, "{after:?}");
    assert!(value(&after, "grasp_websocket_connections_total") >= 1.0);
    for (series, v) in &before {
        if series.contains("_total") {
            assert!(value(&after, series) >= *v, "counter {series} went down");
        }
    }

    // The WebSocket gauge follows the connection.
    drop(c);
    wait_until("the WebSocket gauge to drop", TIMEOUT, || {
        let samples = futures_block(scrape(&server));
        (value(&samples, "grasp_websocket_connections_open") == 0.0).then_some(())
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_are_timed_and_sized() {
    let server = start(&["--checkpoint-interval", "20ms"]);
    let samples = wait_until("a checkpoint in the metrics", TIMEOUT, || {
        let samples = futures_block(scrape(&server));
        (value(&samples, "grasp_checkpoint_duration_seconds_count") >= 1.0).then_some(samples)
    })
    .unwrap();
    let size = std::fs::metadata(server.data_dir().join(grasp_state::contract::layout::CHECKPOINT_FILE)).unwrap().len();
    assert!(value(&samples, "grasp_checkpoint_bytes") > 0.0 && size > 0, "{samples:?}");
    assert_eq!(value(&samples, "grasp_checkpoint_failures_total"), 0.0);
}

/// Runs a future to completion from a synchronous closure inside the test's runtime.
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

#[tokio::test]
async fn metrics_are_not_served_on_the_public_port() {
    let server = start(&[]);
    let (status, _, body) = get(&format!("{}/metrics", server.http_url())).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("grasp_"), "{body}");
    for path in ["/healthz", "/readyz"] {
        let (status, _, body) = get(&format!("{}{path}", server.http_url())).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    // Off by default: no listener, no address file.
    let plain = TestServer::start();
    assert!(!plain.data_dir().join(grasp_state::contract::layout::METRICS_ADDR_FILE).exists());
}

#[tokio::test]
async fn health_probes_answer_on_the_metrics_listener_and_the_hook_api() {
    let server = start(&[]);
    let metrics = metrics_addr(&server);
    let (api, _token) = hook_api(&server);
    for base in [&metrics, &api] {
        let (status, _, body) = get(&format!("http://{base}/healthz")).await;
        assert_eq!((status, body.as_str()), (200, "ok\n"), "{base}");
        let (status, _, body) = get(&format!("http://{base}/readyz")).await;
        assert_eq!(status, 200, "{base}: {body}");
        assert_eq!(body, "ok store\nok data_dir\nok binaries\nok hook_api\n", "{base}");
    }
    // The probes need no token, everything else on the hook API still does.
    let resp = reqwest::get(format!("http://{api}/v1/purgatory")).await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
}

#[tokio::test]
async fn readyz_fails_with_a_reason_when_a_hook_binary_is_gone() {
    let bins = tempfile::tempdir().unwrap();
    for name in ["grasp-cgi", "grasp-pre-receive", "grasp-post-receive"] {
        std::fs::copy(binary_path(name), bins.path().join(name)).unwrap();
    }
    let cgi = bins.path().join("grasp-cgi");
    let server = start(&["--cgi-path", cgi.to_str().unwrap()]);
    let metrics = metrics_addr(&server);
    let (api, _) = hook_api(&server);
    assert_eq!(get(&format!("http://{metrics}/readyz")).await.0, 200);

    remove(&bins.path().join("grasp-post-receive"));
    for base in [&metrics, &api] {
        let (status, _, body) = get(&format!("http://{base}/readyz")).await;
        assert_eq!(status, 503, "{base}: {body}");
        assert!(body.contains("ok store\n") && body.contains("ok hook_api\n"), "{body}");
        let line = body.lines().find(|l| l.starts_with("fail binaries: ")).unwrap_or_else(|| panic!("{body}"));
        assert!(line.contains("grasp-post-receive"), "{line}");
        // Still alive.
        assert_eq!(get(&format!("http://{base}/healthz")).await.0, 200);
    }
}

fn remove(path: &Path) {
    std::fs::remove_file(path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
}
