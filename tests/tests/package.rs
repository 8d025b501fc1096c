//! The Debian package end to end (docs/deployment.md#testing): built with `cargo deb` from
//! relay/Cargo.toml's `[package.metadata.deb]`, unpacked into a temporary root (`dpkg -x`),
//! its systemd units checked with `systemd-analyze verify` and `security`, and the installed
//! relay started from the installed configuration: it serves a push and a clone through the
//! installed hooks and grasp-cgi, the installed doctor finds it fit, and it stops gracefully.
//!
//! Needs `cargo-deb` (`cargo install cargo-deb`), `dpkg` and `systemd-analyze` (Debian's
//! `systemd` package), so the test is ignored by the plain `cargo test`; `.ci/run` installs
//! them and runs `cargo test -p grasp-tests --test package -- --ignored`. To keep CI fast the
//! package is made from the debug binaries `cargo build --workspace` left (a `target/release`
//! of links to them, `--no-build`); a release package is built the same way from a release
//! build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use grasp_state::names::identifier::npub_of;
use grasp_tests::git::WorkTree;
use grasp_tests::grasp::*;
use grasp_tests::{binary_path, spawn_logged, wait_until, NostrClient, TIMEOUT};
use nostr::prelude::*;

const BINARIES: [&str; 4] = ["grasp-relay", "grasp-cgi", "grasp-pre-receive", "grasp-post-receive"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(out.status.success(), "{shown}: {}\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// `cargo deb` on this workspace's binaries; returns the .deb.
fn build_package(stage: &Path) -> PathBuf {
    let version = Command::new("cargo").args(["deb", "--version"]).output();
    assert!(version.is_ok_and(|o| o.status.success()), "cargo-deb is not installed: cargo install cargo-deb (or run .ci/run)");
    let release = stage.join("release");
    std::fs::create_dir_all(&release).unwrap();
    for name in BINARIES {
        let built = binary_path(name);
        if std::fs::hard_link(&built, release.join(name)).is_err() {
            std::fs::copy(&built, release.join(name)).unwrap();
        }
    }
    let out_dir = stage.join("debian");
    run(Command::new("cargo")
        .args(["deb", "-p", "grasp-relay", "--no-build", "--no-strip", "--fast", "--locked", "-o"])
        .arg(&out_dir)
        .current_dir(workspace())
        .env("CARGO_TARGET_DIR", stage));
    let debs: Vec<PathBuf> = std::fs::read_dir(&out_dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "deb")).collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    debs[0].clone()
}

/// The package's unit files, their absolute paths pointing into `root`, in `dir`.
fn units_in_root(root: &Path, dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    ["grasp-relay.service", "grasp-relay-fcgiwrap.socket", "grasp-relay-fcgiwrap.service"]
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root.join("usr/lib/systemd/system").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let copy = dir.join(name);
            std::fs::write(&copy, text.replace("/usr/bin/grasp-", &format!("{}/usr/bin/grasp-", root.display()))).unwrap();
            copy
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs cargo-deb, dpkg and systemd-analyze; run by .ci/run with --ignored"]
async fn the_package_installs_and_its_relay_serves_from_its_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let deb = build_package(&tmp.path().join("stage"));

    // Its control data: dependencies, the configuration kept across upgrades, the service's user
    // and data directory made at installation.
    let control = tmp.path().join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    let fields = std::fs::read_to_string(control.join("control")).unwrap();
    assert!(fields.contains("Package: grasp-relay\n") && fields.contains("git (>= 1:2.37)"), "{fields}");
    assert_eq!(std::fs::read_to_string(control.join("conffiles")).unwrap().trim(), "/etc/grasp-relay/config.toml");
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("adduser --system --group --home /var/lib/grasp-relay"), "{postinst}");
    assert!(postinst.contains("install -d -o grasp-relay -g grasp-relay -m 0750 /var/lib/grasp-relay"), "{postinst}");
    assert!(postinst.contains("deb-systemd-helper enable grasp-relay.service"), "{postinst}");

    // Its files, unpacked into a temporary root.
    let root = tmp.path().join("root");
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    for name in BINARIES {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(root.join("usr/bin").join(name)).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755, "{name}");
    }
    let config = root.join("etc/grasp-relay/config.toml");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), std::fs::read_to_string(workspace().join("packaging/config.toml")).unwrap());
    assert!(root.join("usr/share/doc/grasp-relay/examples/grasp-relay.toml").is_file());
    assert!(root.join("usr/share/doc/grasp-relay/examples/nginx-site.conf").is_file());

    // The units: systemd finds nothing to say about them, and the relay's is hardened.
    let units = units_in_root(&root, &tmp.path().join("units"));
    let out = Command::new("systemd-analyze").arg("verify").args(&units).output().expect("systemd-analyze (apt-get install systemd)");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
    let out = Command::new("systemd-analyze").args(["security", "--offline=true", "--threshold=40", "--no-pager"]).arg(&units[0]).output().unwrap();
    assert!(out.status.success(), "exposure above 4.0:\n{}", String::from_utf8_lossy(&out.stdout));

    // The installed relay, from the installed configuration; only what a test machine needs
    // differs, through the environment (which wins over the file).
    let data = tmp.path().join("data");
    let log_path = tmp.path().join("relay.log");
    let mut relay = spawn_logged(
        Command::new(root.join("usr/bin/grasp-relay"))
            .arg("--config")
            .arg(&config)
            .env(grasp_state::contract::env_names::DATA_DIR, &data)
            .env(grasp_state::contract::env_names::BIND, "127.0.0.1:0")
            .env(grasp_state::contract::env_names::LOG, "info"),
        &log_path,
    );
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let addr = wait_until("the installed relay to listen", TIMEOUT, || {
        if let Ok(Some(status)) = relay.try_wait() {
            panic!("the installed relay exited with {status}:\n{}", logs());
        }
        std::fs::read_to_string(data.join(grasp_state::contract::layout::RELAY_ADDR_FILE)).ok().map(|a| a.trim().to_string())
    })
    .unwrap();
    assert!(logs().contains(&format!("binary={}/usr/bin/grasp-pre-receive", root.display())), "hooks from the package:\n{}", logs());

    // It serves: a repository announced, pushed through the installed hooks and cloned.
    let owner = Keys::generate();
    let url = format!("http://{addr}/{}/served.git", npub_of(&owner.public_key()));
    let mut c = NostrClient::connect(&format!("ws://{addr}/")).await.unwrap();
    let (ok, msg) = c.send_event(&announcement_with_urls(&owner, "served", &url, &format!("ws://{addr}"))).await.unwrap();
    assert!(ok, "{msg}");
    let repo = Repo { work: WorkTree::new(tmp.path().join("work")), url: url.clone() };
    let tip = repo.commit("README", "from the package\n");
    let (ok, msg) = c.send_event(&state(&owner, "served", &[("refs/heads/main", &tip)], Some("main"))).await.unwrap();
    assert!(ok, "{msg}");
    repo.push(&["main"]).unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    clone(&url, &tmp.path().join("clone"), &[]).unwrap();
    assert!(std::fs::read_to_string(tmp.path().join("clone/README")).unwrap().contains("from the package"));

    // The installed doctor finds the installation fit (run with the same configuration).
    let out = Command::new(root.join("usr/bin/grasp-relay"))
        .args(["--config"])
        .arg(&config)
        .arg("doctor")
        .env(grasp_state::contract::env_names::DATA_DIR, &data)
        .env(grasp_state::contract::env_names::MIN_FREE_DISK, "1")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains(&format!("ok    binaries: {}/usr/bin/grasp-cgi", root.display())), "{report}");

    // SIGTERM, as systemd stops it: a clean exit with the last checkpoint written.
    let _ = Command::new("kill").arg("-TERM").arg(relay.id().to_string()).status();
    let status = wait_until("the installed relay to stop", TIMEOUT, || relay.try_wait().ok().flatten());
    let status = status.unwrap_or_else(|e| {
        let _ = relay.kill();
        panic!("{e}\n{}", logs())
    });
    assert!(status.success(), "{status}\n{}", logs());
    assert!(logs().contains("purgatory checkpoint written"), "{}", logs());
}
