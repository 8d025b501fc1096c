//! End-to-end test harness: run the real `grasp-relay` binary in a temp dir on a random loopback
//! port ([`TestServer`]) and talk to it as a Nostr client ([`NostrClient`]).
//!
//! Build first: `cargo build --workspace && cargo test --workspace` (the tests run the binaries
//! from `target/debug`).

pub mod git;
pub mod grasp;
pub mod client;
pub mod server;
pub mod wait;

pub use client::{NostrClient, ReqOutcome};
pub use server::{binary_path, TestServer};
pub use wait::{wait_until, TIMEOUT};
