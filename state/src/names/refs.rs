//! Git refs as plain data: ref names, object ids, and the ref updates a push carries.
//!
//! A repository's refs are a [`RefMap`] (ref name -> oid). A push is a list of
//! [`RefUpdate`]s, exactly as git hands them to the `pre-receive` hook on stdin
//! (`<old-oid> <new-oid> <ref-name>` per line). Nothing here touches the disk: the
//! relay reads refs with git and hands the map in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ref name -> object id (lowercase hex). Ordered so that comparisons and
/// diffs are deterministic.
pub type RefMap = BTreeMap<String, String>;

/// The all-zero SHA-1 oid git uses for "no object" (ref created or deleted).
pub const ZERO_OID: &str = "0000000000000000000000000000000000000000";

/// Prefix of branch refs.
pub const HEADS_PREFIX: &str = "refs/heads/";
/// Prefix of tag refs.
pub const TAGS_PREFIX: &str = "refs/tags/";
/// Prefix of the per-event refs pull requests are pushed to (`refs/nostr/<event-id>`).
pub const NOSTR_PREFIX: &str = "refs/nostr/";

/// Longest ref name we accept. Git itself has no hard limit, but nothing
/// legitimate comes close and the relay should not store megabyte names.
pub const MAX_REF_NAME_LEN: usize = 1024;

/// One ref changed by a push: `old` -> `new` at `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefUpdate {
    /// Oid before the push ([`ZERO_OID`] when the ref is created).
    pub old: String,
    /// Oid after the push ([`ZERO_OID`] when the ref is deleted).
    pub new: String,
    /// Full ref name, e.g. `refs/heads/main`.
    pub name: String,
}

impl RefUpdate {
    /// Build an update from its three parts.
    pub fn new(old: impl Into<String>, new: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            old: old.into(),
            new: new.into(),
            name: name.into(),
        }
    }

    /// The ref did not exist before this push.
    pub fn is_create(&self) -> bool {
        is_zero_oid(&self.old) && !is_zero_oid(&self.new)
    }

    /// The push deletes the ref.
    pub fn is_delete(&self) -> bool {
        is_zero_oid(&self.new) && !is_zero_oid(&self.old)
    }

    /// Old and new are the same: the update changes nothing.
    pub fn is_noop(&self) -> bool {
        self.old == self.new
    }
}

/// Errors reading the `pre-receive` input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// A line was not `<old-oid> <new-oid> <ref-name>`.
    #[error("ref update line {line_no} is malformed ({line:?}): expected `<old-oid> <new-oid> <ref-name>` as git sends to pre-receive")]
    MalformedLine { line_no: usize, line: String },
    /// An oid was not 40 or 64 lowercase hex characters.
    #[error("ref update line {line_no} has an invalid object id {oid:?}: expected 40 (sha1) or 64 (sha256) lowercase hex characters")]
    InvalidOid { line_no: usize, oid: String },
    /// The ref name breaks git's ref name rules.
    #[error("ref update line {line_no} has an invalid ref name {name:?}: use a name git accepts (see `git check-ref-format`)")]
    InvalidRefName { line_no: usize, name: String },
}

/// True for a full object id: 40 (sha1) or 64 (sha256) lowercase hex characters.
pub fn is_valid_oid(oid: &str) -> bool {
    (oid.len() == 40 || oid.len() == 64)
        && oid
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// True for a valid oid made only of zeros (git's "no object").
pub fn is_zero_oid(oid: &str) -> bool {
    is_valid_oid(oid) && oid.bytes().all(|b| b == b'0')
}

/// The first 7 characters of an oid, for messages.
pub fn short_oid(oid: &str) -> &str {
    match oid.char_indices().nth(7) {
        Some((i, _)) => &oid[..i],
        None => oid,
    }
}

/// Git's ref name rules (`git check-ref-format`) that matter for a server:
/// at least two `/`-separated components, no empty component (`//`, leading
/// or trailing `/`), no component starting with `.` or ending with `.lock`, no `..`,
/// no ASCII control characters, none of space `~ ^ : ? * [ \`, no `@{`, not `@`,
/// not ending with `.`, at most [`MAX_REF_NAME_LEN`] bytes.
pub fn is_valid_ref_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_REF_NAME_LEN || name == "@" {
        return false;
    }
    if name.contains("..") || name.contains("@{") || name.ends_with('.') {
        return false;
    }
    if name.chars().any(|c| {
        c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
    }) {
        return false;
    }
    let components: Vec<&str> = name.split('/').collect();
    if components.len() < 2 {
        return false;
    }
    components
        .iter()
        .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
}

/// True for `refs/heads/*` and `refs/tags/*`: the refs a state event declares
/// and a GRASP server serves.
pub fn is_served_ref(name: &str) -> bool {
    name.starts_with(HEADS_PREFIX) || name.starts_with(TAGS_PREFIX)
}

/// Parse the `pre-receive` stdin: one `<old> <new> <ref>` per line. Blank
/// lines are skipped and a trailing `\r` is tolerated; anything else that is
/// not well formed is an error naming the line.
pub fn parse_ref_updates(stdin: &str) -> Result<Vec<RefUpdate>, RefError> {
    let mut updates = Vec::new();
    for (i, raw) in stdin.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let [old, new, name] = parts[..] else {
            return Err(RefError::MalformedLine {
                line_no,
                line: line.chars().take(200).collect(),
            });
        };
        for oid in [old, new] {
            if !is_valid_oid(oid) {
                return Err(RefError::InvalidOid {
                    line_no,
                    oid: oid.chars().take(80).collect(),
                });
            }
        }
        if !is_valid_ref_name(name) {
            return Err(RefError::InvalidRefName {
                line_no,
                name: name.chars().take(200).collect(),
            });
        }
        updates.push(RefUpdate::new(old, new, name));
    }
    Ok(updates)
}

/// The refs after applying `updates` to `current`: deletes remove the ref,
/// everything else sets it to `new`. Whether `old` matched is git's business
/// (receive-pack checks it atomically); this only predicts the result.
pub fn apply_updates(current: &RefMap, updates: &[RefUpdate]) -> RefMap {
    let mut result = current.clone();
    for update in updates {
        if is_zero_oid(&update.new) {
            result.remove(&update.name);
        } else {
            result.insert(update.name.clone(), update.new.clone());
        }
    }
    result
}

/// Only the `refs/heads/*` and `refs/tags/*` entries of `map`.
pub fn served_refs(map: &RefMap) -> RefMap {
    map.iter()
        .filter(|(name, _)| is_served_ref(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One compare-and-swap ref change, as a plan step (the relay applies a list of them as one
/// all-or-nothing `git update-ref --stdin` transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefChange {
    /// Set `name` to `new`, provided it currently is `old` ([`ZERO_OID`]: must not exist).
    Set { name: String, old: String, new: String },
    /// Delete `name`, provided it currently is `old`.
    Delete { name: String, old: String },
}

impl RefChange {
    /// The ref this change touches.
    pub fn name(&self) -> &str {
        match self {
            RefChange::Set { name, .. } | RefChange::Delete { name, .. } => name,
        }
    }
}

/// `map` with `changes` applied (what the refs are once the transaction committed).
pub fn apply_changes(map: &RefMap, changes: &[RefChange]) -> RefMap {
    let mut result = map.clone();
    for change in changes {
        match change {
            RefChange::Set { name, new, .. } => {
                result.insert(name.clone(), new.clone());
            }
            RefChange::Delete { name, .. } => {
                result.remove(name);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn oids() {
        assert!(is_valid_oid(A));
        assert!(is_valid_oid(ZERO_OID));
        assert!(is_valid_oid(&"0123456789abcdef".repeat(4)));
        assert!(!is_valid_oid(&"a".repeat(39)));
        assert!(!is_valid_oid(&"a".repeat(41)));
        assert!(!is_valid_oid(&"A".repeat(40)));
        assert!(!is_valid_oid(&"g".repeat(40)));
        assert!(!is_valid_oid(""));
        assert!(is_zero_oid(ZERO_OID));
        assert!(is_zero_oid(&"0".repeat(64)));
        assert!(!is_zero_oid(A));
        assert!(!is_zero_oid("0"));
    }

    #[test]
    fn short_oids() {
        assert_eq!(short_oid(A), "aaaaaaa");
        assert_eq!(short_oid("abc"), "abc");
        assert_eq!(short_oid(""), "");
        assert_eq!(short_oid("ééééééééé"), "ééééééé");
    }

    #[test]
    fn ref_names_valid() {
        for name in [
            "refs/heads/main",
            "refs/heads/feature/x",
            "refs/tags/v1.0",
            "refs/nostr/abc",
            "refs/heads/ünïcode",
            "refs/heads/a.b",
            "refs/heads/a@b",
        ] {
            assert!(is_valid_ref_name(name), "{name}");
        }
    }

    #[test]
    fn ref_names_invalid() {
        let long = format!("refs/heads/{}", "a".repeat(MAX_REF_NAME_LEN));
        for name in [
            "",
            "main",
            "HEAD",
            "@",
            "refs/heads/a..b",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[",
            "refs/heads/a\\b",
            "refs/heads/a\u{7f}",
            "refs/heads/a\nb",
            "refs/heads/a\0",
            "refs//heads",
            "refs/heads/",
            "/refs/heads/a",
            "refs/heads/a.lock",
            "refs/heads/a.lock/b",
            "refs/heads/a.",
            "refs/heads/.hidden",
            "refs/.heads/a",
            "refs/heads/a@{1}",
            long.as_str(),
        ] {
            assert!(!is_valid_ref_name(name), "{name:?}");
        }
    }

    #[test]
    fn update_kinds() {
        let create = RefUpdate::new(ZERO_OID, A, "refs/heads/main");
        assert!(create.is_create() && !create.is_delete() && !create.is_noop());
        let delete = RefUpdate::new(A, ZERO_OID, "refs/heads/main");
        assert!(delete.is_delete() && !delete.is_create());
        let update = RefUpdate::new(A, B, "refs/heads/main");
        assert!(!update.is_delete() && !update.is_create() && !update.is_noop());
        let noop = RefUpdate::new(A, A, "refs/heads/main");
        assert!(noop.is_noop());
        let zero_noop = RefUpdate::new(ZERO_OID, ZERO_OID, "refs/heads/main");
        assert!(zero_noop.is_noop() && !zero_noop.is_create() && !zero_noop.is_delete());
    }

    #[test]
    fn parse_updates() {
        let input = format!("{ZERO_OID} {A} refs/heads/main\n\n{A} {B} refs/tags/v1\r\n");
        let updates = parse_ref_updates(&input).unwrap();
        assert_eq!(
            updates,
            vec![
                RefUpdate::new(ZERO_OID, A, "refs/heads/main"),
                RefUpdate::new(A, B, "refs/tags/v1"),
            ]
        );
        assert_eq!(parse_ref_updates("").unwrap(), vec![]);
    }

    #[test]
    fn parse_updates_errors() {
        assert!(matches!(
            parse_ref_updates(&format!("{A} {B}")),
            Err(RefError::MalformedLine { line_no: 1, .. })
        ));
        assert!(matches!(
            parse_ref_updates(&format!("{A} {B} refs/heads/a extra")),
            Err(RefError::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_ref_updates(&format!("{A}  {B} refs/heads/a")),
            Err(RefError::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_ref_updates(&format!("\n{A} xyz refs/heads/a")),
            Err(RefError::InvalidOid { line_no: 2, .. })
        ));
        let err = parse_ref_updates(&format!("{A} {B} refs/heads/a..b")).unwrap_err();
        assert!(matches!(err, RefError::InvalidRefName { .. }));
        assert!(err.to_string().contains("check-ref-format"));
    }

    #[test]
    fn apply_and_serve() {
        let mut current = RefMap::new();
        current.insert("refs/heads/main".into(), A.into());
        current.insert("refs/heads/old".into(), A.into());
        current.insert("refs/nostr/x".into(), A.into());
        let updates = vec![
            RefUpdate::new(A, B, "refs/heads/main"),
            RefUpdate::new(A, ZERO_OID, "refs/heads/old"),
            RefUpdate::new(ZERO_OID, B, "refs/tags/v1"),
            RefUpdate::new(ZERO_OID, ZERO_OID, "refs/heads/never"),
        ];
        let after = apply_updates(&current, &updates);
        let mut expected = RefMap::new();
        expected.insert("refs/heads/main".into(), B.into());
        expected.insert("refs/tags/v1".into(), B.into());
        expected.insert("refs/nostr/x".into(), A.into());
        assert_eq!(after, expected);
        expected.remove("refs/nostr/x");
        assert_eq!(served_refs(&after), expected);
    }
}
