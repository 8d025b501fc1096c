//! NIP-05 for the relay itself: `GET /.well-known/nostr.json` names the relay's own key
//! ([`crate::identity`]) `_`, so `_@<public host>` identifies the server (docs/protocol.md,
//! "Relay identity"). No other name is known here.

use nostr::prelude::PublicKey;
use serde_json::{json, Value};

/// Where NIP-05 clients ask.
pub const PATH: &str = "/.well-known/nostr.json";

/// The name of the relay's key: `_@<host>` is the host itself.
pub const RELAY_NAME: &str = "_";

/// The answer to `GET /.well-known/nostr.json?<query>`: `{"names":{"_":"<hex>"}}` for `name=_`
/// or no name at all, `{"names":{}}` for any other name (the first `name` counts; NIP-05 names
/// are case-insensitive).
pub fn answer(query: Option<&str>, relay: &PublicKey) -> Value {
    let asked = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("name="))
        .map(|name| grasp_state::names::identifier::percent_decode(&name.replace('+', " ")));
    let names_the_relay = match asked {
        None => true,
        Some(name) => name.is_some_and(|name| name.eq_ignore_ascii_case(RELAY_NAME)),
    };
    if names_the_relay {
        json!({ "names": { RELAY_NAME: relay.to_hex() } })
    } else {
        json!({ "names": {} })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    #[test]
    fn names_the_relay_underscore_and_nobody_else() {
        let key = Keys::generate().public_key();
        let relay = json!({ "names": { "_": key.to_hex() } });
        for query in [None, Some(""), Some("name=_"), Some("name=%5F"), Some("x=1&name=_"), Some("name=_&name=bob")] {
            assert_eq!(answer(query, &key), relay, "{query:?}");
        }
        for query in ["name=bob", "name=", "name=_x", "name=%ZZ", "name=bob&name=_"] {
            assert_eq!(answer(Some(query), &key), json!({ "names": {} }), "{query}");
        }
    }
}
