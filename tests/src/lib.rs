//! End-to-end test harness: run the real `grasp-relay` binary in a temp dir on a random loopback
//! port ([`TestServer`]) and talk to it as a Nostr client ([`NostrClient`]).
//!
//! What the suites share lives here, not in `tests/tests/*.rs`: [`grasp`] signs NIP-34 events for
//! a server and runs the common steps (`connect`, `held`, `served`, `stored`, `publish_repo`,
//! pushes and listings); [`git`] drives real git; [`wait`] waits on conditions with a deadline
//! ([`wait_until`] in plain tests, [`eventually!`] in async tests); [`processes`] finds the git
//! processes a relay started for requests; [`fake_relay`] is a scripted relay on loopback for
//! relay-sync tests; [`plain_relay`] is a plain NIP-01 relay, a user's own relay for the ngit
//! suite; [`ngit`] runs the real ngit client in a per-user sandbox.
//!
//! Build first: `cargo build --workspace && cargo test --workspace` (the tests run the binaries
//! from `target/debug`).

pub mod fake_relay;
pub mod git;
pub mod grasp;
pub mod ngit;
pub mod plain_relay;
pub mod client;
pub mod processes;
pub mod server;
pub mod wait;

pub use client::{NostrClient, ReqOutcome};
pub use server::{binary_path, spawn_logged, TestServer};
pub use wait::{wait_until, TIMEOUT};
