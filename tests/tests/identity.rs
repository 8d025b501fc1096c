//! The relay's own identity (docs/protocol.md, "Relay identity"): its key file (made on first
//! start, kept across restarts, a bad configured one stops startup), NIP-11 `self`/`pubkey` and
//! the NIP-05 answer at `/.well-known/nostr.json`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use grasp_tests::{binary_path, wait_until, TestServer, TIMEOUT};
use nostr::prelude::*;
use reqwest::blocking::Client;
use serde_json::{json, Value};

fn nip11(server: &TestServer) -> Value {
    let resp = Client::new()
        .get(server.http_url() + "/")
        .header("Accept", "application/nostr+json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().unwrap()
}

/// `GET /.well-known/nostr.json<query>`: the status, content type, CORS origin and body.
fn nostr_json(base: &str, query: &str) -> (u16, String, String, Value) {
    let resp = Client::new().get(format!("{base}/.well-known/nostr.json{query}")).send().unwrap();
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let (kind, origin) = (header("content-type"), header("access-control-allow-origin"));
    (resp.status().as_u16(), kind, origin, resp.json().unwrap())
}

/// The public key of the secret key in `path` (hex or nsec).
fn key_in(path: &Path) -> PublicKey {
    Keys::new(SecretKey::parse(std::fs::read_to_string(path).unwrap().trim()).unwrap()).public_key()
}

fn write_key_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `grasp-relay` on `data_dir` with `args` (and `env`), expecting it to stop by itself at
/// startup; killed after the test deadline otherwise.
fn start_fails(data_dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(binary_path("grasp-relay"));
    cmd.args(["--bind", "127.0.0.1:0", "--data-dir"]).arg(data_dir).args(args);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let exited = wait_until("grasp-relay to refuse to start", TIMEOUT, || child.try_wait().ok().flatten());
    if exited.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(exited.is_ok(), "grasp-relay started\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success());
    out
}

#[test]
fn the_relay_makes_its_key_once_and_names_it_in_nip11_and_nip05() {
    let mut server = TestServer::start();
    let key_file = server.data_dir().join(grasp_state::contract::layout::RELAY_KEY_FILE);
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "made readable by its owner only");
    let key = key_in(&key_file);
    let hex = key.to_hex();

    let doc = nip11(&server);
    assert_eq!(doc["pubkey"], json!(hex), "{doc}");
    assert_eq!(doc["self"], json!(hex), "{doc}");

    for query in ["", "?name=_"] {
        let (status, kind, origin, body) = nostr_json(&server.http_url(), query);
        assert_eq!((status, kind.as_str(), origin.as_str()), (200, "application/json", "*"), "{query}");
        assert_eq!(body, json!({ "names": { "_": hex } }), "{query}");
    }
    let (status, _, origin, body) = nostr_json(&server.http_url(), "?name=bob");
    assert_eq!((status, origin.as_str()), (200, "*"));
    assert_eq!(body, json!({ "names": {} }));
    // A browser's preflight for it is answered like any other.
    let resp = Client::new()
        .request(reqwest::Method::OPTIONS, server.http_url() + "/.well-known/nostr.json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert!(server.logs().contains(&key.to_bech32().unwrap()), "the npub is logged at start");

    // A restart keeps the identity.
    let text = std::fs::read_to_string(&key_file).unwrap();
    server.restart();
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), text, "the key file is not rewritten");
    assert_eq!(nip11(&server)["self"], json!(hex));
    assert_eq!(nostr_json(&server.http_url(), "?name=_").3, json!({ "names": { "_": hex } }));
}

#[test]
fn a_configured_key_file_is_the_identity_and_the_admin_stays_the_contact() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::generate();
    let admin = Keys::generate().public_key();
    let key_file = dir.path().join("my-relay.nsec");
    let text = format!("{}\n", keys.secret_key().to_bech32().unwrap());
    write_key_file(&key_file, &text, 0o400);
    let key_arg = key_file.to_str().unwrap();
    let server = TestServer::start_with(&["--relay-key-file", key_arg, "--admin-pubkey", &admin.to_hex()]);
    let doc = nip11(&server);
    assert_eq!(doc["self"], json!(keys.public_key().to_hex()), "{doc}");
    assert_eq!(doc["pubkey"], json!(admin.to_hex()), "NIP-11's administrative contact: {doc}");
    assert_eq!(nostr_json(&server.http_url(), "").3, json!({ "names": { "_": keys.public_key().to_hex() } }));
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), text);
    assert!(!server.data_dir().join(grasp_state::contract::layout::RELAY_KEY_FILE).exists(), "no default key beside a configured one");
}

#[test]
fn a_bad_key_file_stops_startup_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let hex = Keys::generate().secret_key().to_secret_hex();
    let missing = dir.path().join("missing-key");
    let invalid = dir.path().join("invalid-key");
    write_key_file(&invalid, "not a key\n", 0o600);
    let empty = dir.path().join("empty-key");
    write_key_file(&empty, "", 0o600);
    let open = dir.path().join("open-key");
    write_key_file(&open, &hex, 0o644);
    // Unreadable whoever runs the test (root reads any file): a directory.
    let unreadable = dir.path().join("unreadable-key");
    std::fs::create_dir(&unreadable).unwrap();
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o700)).unwrap();

    for (path, says) in [
        (&missing, "does not exist"),
        (&invalid, "no secret key"),
        (&empty, "empty"),
        (&open, "mode 0644"),
        (&unreadable, "cannot read"),
    ] {
        let out = start_fails(&data, &["--relay-key-file", path.to_str().unwrap()], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&path.display().to_string()) && stderr.contains(says), "{}: {stderr}", path.display());
        assert!(!stderr.contains(&hex), "the key is never printed: {stderr}");
    }
    assert!(!missing.exists(), "a configured key file is never made");
    assert_eq!(std::fs::read_to_string(&invalid).unwrap(), "not a key\n", "nor replaced");
    assert!(!data.join(grasp_state::contract::layout::RELAY_KEY_FILE).exists());

    // The same through the environment variable.
    let out = start_fails(&data, &[], &[(grasp_state::contract::env_names::RELAY_KEY_FILE, &missing)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&missing.display().to_string()));

    // The default file, once it exists, is never replaced either.
    let default = data.join(grasp_state::contract::layout::RELAY_KEY_FILE);
    write_key_file(&default, "junk\n", 0o600);
    let out = start_fails(&data, &[], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&default.display().to_string()) && stderr.contains("no secret key"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&default).unwrap(), "junk\n");
}

#[test]
fn help_lists_the_key_file() {
    let out = Command::new(binary_path("grasp-relay")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--relay-key-file") && help.contains(grasp_state::contract::env_names::RELAY_KEY_FILE), "{help}");
}

/// At startup the relay publishes its profile (kind 0: name = domain, nip05 `_@domain`) and its
/// relay list (kind 10002 naming its own URL) to each index relay holding none for its key; what
/// an index relay already holds is kept, and a restart publishes nothing again.
#[test]
fn the_relay_publishes_its_profile_and_relay_list_to_index_relays_holding_none() {
    use grasp_tests::plain_relay::PlainRelay;
    let (fresh, known) = (PlainRelay::start(), PlainRelay::start());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join(grasp_state::contract::layout::RELAY_KEY_FILE);
    let keys = Keys::generate();
    write_key_file(&key_file, &keys.secret_key().to_secret_hex(), 0o600);
    // The second index relay already holds a profile of the key (the operator's own words).
    let own = EventBuilder::new(Kind::Metadata, r#"{"name":"the operator's words"}"#).finalize(&keys).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = grasp_tests::NostrClient::connect(&known.url()).await.unwrap();
        assert!(c.send_event(&own).await.unwrap().0);
    });
    let indexes = format!("{},{}", fresh.url(), known.url());
    let mut server = TestServer::start_with(&[
        "--sync-allow-private",
        "--public-host",
        "git.example.com",
        "--relay-key-file",
        key_file.to_str().unwrap(),
        "--index-relay",
        &indexes,
    ]);
    let pk = keys.public_key();
    let of = |relay: &PlainRelay, kind: u16| relay.events().into_iter().find(|e| e.pubkey == pk && e.kind.as_u16() == kind);
    let (profile, list) = wait_until("the profile and relay list on the fresh index relay", TIMEOUT, || Some((of(&fresh, 0)?, of(&fresh, 10002)?)))
        .unwrap_or_else(|e| panic!("{e}\n{}", server.logs()));
    let content: Value = serde_json::from_str(&profile.content).unwrap();
    assert_eq!(content["name"], "git.example.com");
    assert_eq!(content["nip05"], "_@git.example.com");
    let r: Vec<Vec<String>> = list.tags.iter().map(|t| t.as_slice().to_vec()).collect();
    assert_eq!(r, [["r", "wss://git.example.com"]]);
    wait_until("the relay list on the other index relay", TIMEOUT, || of(&known, 10002)).unwrap();
    assert_eq!(of(&known, 0).unwrap().id, own.id, "a profile already there is kept");
    // A restart finds both on both relays: nothing is published again.
    let held = |server: &TestServer| server.logs().matches("already holds the relay's own event").count();
    assert_eq!(held(&server), 1);
    server.restart();
    wait_until("the restarted relay to find its events on both index relays", TIMEOUT, || (held(&server) == 5).then_some(())).unwrap_or_else(|e| panic!("{e}\n{}", server.logs()));
    assert_eq!((of(&fresh, 0).unwrap().id, of(&fresh, 10002).unwrap().id), (profile.id, list.id));
    // Without index relays (the tests' default) nothing is looked up or published.
    let quiet = TestServer::start();
    assert!(!quiet.logs().contains("index relay"), "{}", quiet.logs());
}
