//! HTTP plumbing every listener shares (the public listener, the hook API, the metrics
//! listener, git over HTTP): response bodies and CORS (`http`), accepting sockets with
//! `TCP_NODELAY` and a pause after a failed accept (`tcp`), connection caps
//! (`connection_limits`), the write deadline on every public connection (`write_deadline`).
//! It knows nothing of Nostr, GRASP or git.

pub mod connection_limits;
pub mod http;
pub mod tcp;
pub mod write_deadline;
