//! The refs of a files-backend repository as text: the `packed-refs` file and the loose ref files
//! (`refs/...`, `HEAD`), parsed without git.
//!
//! A push's hooks ask the relay for the repository's refs; reading them from these files costs no
//! process. Git keeps refs in two places: a ref updated since the last `git pack-refs` is a
//! *loose* file holding its object id (or `ref: <target>` for a symbolic ref), the others are
//! lines of `packed-refs`; a loose ref wins over a packed one of the same name. The relay reads
//! the loose files first and `packed-refs` after them, as git does, so a concurrent
//! `pack-refs` (which writes `packed-refs` before removing the loose files) or deletion (which
//! rewrites `packed-refs` before removing the loose file) never hides a ref.
//!
//! Everything here is strict: anything these functions do not recognise (a peeled line without
//! a ref before it, a header other than `# pack-refs with:`, a name that is not a valid ref
//! name, a duplicate, a partial line) is `None`, and the caller then asks git
//! (`git for-each-ref`), which knows every case.

use crate::names::refs::{is_valid_oid, is_valid_ref_name, RefMap};

/// What a loose ref file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LooseRef {
    /// An object id.
    Oid(String),
    /// `ref: <target>`: a symbolic ref (HEAD; anything else makes the caller ask git).
    Symbolic(String),
}

/// Parses a loose ref file (`refs/heads/main`, `HEAD`): `<oid>\n` or `ref: <target>\n`, as git
/// writes them. `None` for anything else (empty, partial, trailing data, an invalid target).
pub fn parse_loose_ref(content: &str) -> Option<LooseRef> {
    let line = content.strip_suffix('\n').unwrap_or(content);
    if line.contains('\n') {
        return None;
    }
    if let Some(target) = line.strip_prefix("ref: ") {
        let target = target.trim_end();
        return is_valid_ref_name(target).then(|| LooseRef::Symbolic(target.to_string()));
    }
    let oid = line.trim_end();
    is_valid_oid(oid).then(|| LooseRef::Oid(oid.to_string()))
}

/// Parses a `packed-refs` file: an optional `# pack-refs with: <traits>` header, then one
/// `<oid> <refname>` per line, each optionally followed by a `^<oid>` line (the object an
/// annotated tag peels to, ignored here). `None` for anything else, including a last line
/// without its newline (a file being written is never read: git renames it into place whole).
pub fn parse_packed_refs(content: &str) -> Option<RefMap> {
    let mut refs = RefMap::new();
    if content.is_empty() {
        return Some(refs);
    }
    let body = content.strip_suffix('\n')?;
    let mut lines = body.split('\n').peekable();
    if lines.peek().is_some_and(|l| l.starts_with('#')) {
        let header = lines.next()?;
        header.strip_prefix("# pack-refs with:")?;
    }
    let mut previous_was_ref = false;
    for line in lines {
        if let Some(peeled) = line.strip_prefix('^') {
            if !previous_was_ref || !is_valid_oid(peeled) {
                return None;
            }
            previous_was_ref = false;
            continue;
        }
        let (oid, name) = line.split_once(' ')?;
        if !is_valid_oid(oid) || !name.starts_with("refs/") || !is_valid_ref_name(name) {
            return None;
        }
        if refs.insert(name.to_string(), oid.to_string()).is_some() {
            return None;
        }
        previous_was_ref = true;
    }
    Some(refs)
}

/// The repository's refs: the packed ones, each replaced by the loose ref of the same name.
pub fn merge(packed: RefMap, loose: impl IntoIterator<Item = (String, String)>) -> RefMap {
    let mut refs = packed;
    refs.extend(loose);
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "4f3c1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b";
    const B: &str = "9ab0c11d2e3f405162738495a6b7c8d9e0f1a2b3";

    #[test]
    fn loose_refs_as_git_writes_them() {
        assert_eq!(parse_loose_ref(&format!("{A}\n")), Some(LooseRef::Oid(A.into())));
        assert_eq!(parse_loose_ref("ref: refs/heads/main\n"), Some(LooseRef::Symbolic("refs/heads/main".into())));
        assert_eq!(parse_loose_ref(A), Some(LooseRef::Oid(A.into())));
        for odd in ["", "\n", &A[..20], &format!("{A}\n{B}\n"), "ref: main\n", "ref:refs/heads/x\n", &A.to_uppercase(), &format!("{A} extra\n")] {
            assert_eq!(parse_loose_ref(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn packed_refs_with_header_and_peeled_tags() {
        let text = format!("# pack-refs with: peeled fully-peeled sorted \n{A} refs/heads/main\n{B} refs/tags/v1\n^{A}\n");
        let refs = parse_packed_refs(&text).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs["refs/heads/main"], A);
        assert_eq!(refs["refs/tags/v1"], B);
        assert_eq!(parse_packed_refs(""), Some(RefMap::new()));
        for odd in [
            format!("{A} refs/heads/main"),
            format!("^{A}\n"),
            format!("{A} refs/heads/main\n^{A}\n^{B}\n"),
            format!("# something else\n{A} refs/heads/main\n"),
            format!("{A} refs/heads/main\n{B} refs/heads/main\n"),
            format!("{A} HEAD\n"),
            format!("{A}  refs/heads/main\n"),
            format!("{A} refs/heads/a..b\n"),
            "\n".to_string(),
        ] {
            assert_eq!(parse_packed_refs(&odd), None, "{odd:?}");
        }
    }

    #[test]
    fn loose_refs_win_over_packed_ones() {
        let packed = RefMap::from([("refs/heads/main".to_string(), A.to_string()), ("refs/tags/v1".to_string(), A.to_string())]);
        let refs = merge(packed, [("refs/heads/main".to_string(), B.to_string())]);
        assert_eq!(refs["refs/heads/main"], B);
        assert_eq!(refs["refs/tags/v1"], A);
    }

    fn ref_name() -> impl Strategy<Value = String> {
        ("(heads|tags|nostr|remotes/origin)", proptest::collection::vec("[a-zA-Z0-9_-]{1,8}", 1..3))
            .prop_map(|(kind, parts)| format!("refs/{kind}/{}", parts.join("/")))
    }

    fn oid() -> impl Strategy<Value = String> {
        "[0-9a-f]{40}|[0-9a-f]{64}"
    }

    /// `packed-refs` as git writes it for `refs`: sorted, optional header, tags peeled.
    fn render_packed(refs: &RefMap, header: bool, peeled: &[bool]) -> String {
        let mut out = String::new();
        if header {
            out.push_str("# pack-refs with: peeled fully-peeled sorted \n");
        }
        for (i, (name, oid)) in refs.iter().enumerate() {
            out.push_str(&format!("{oid} {name}\n"));
            if peeled.get(i).copied().unwrap_or(false) {
                out.push_str(&format!("^{}\n", oid.chars().rev().collect::<String>()));
            }
        }
        out
    }

    proptest! {
        #[test]
        fn packed_refs_read_back_what_was_written(
            refs in proptest::collection::btree_map(ref_name(), oid(), 0..20),
            header: bool,
            peeled in proptest::collection::vec(any::<bool>(), 0..20),
        ) {
            prop_assert_eq!(parse_packed_refs(&render_packed(&refs, header, &peeled)), Some(refs));
        }

        #[test]
        fn a_cut_packed_refs_file_is_never_misread(
            refs in proptest::collection::btree_map(ref_name(), oid(), 1..10),
            cut in 0usize..2000,
        ) {
            // A prefix that does not end a line is refused, never read as fewer refs or a
            // shortened oid.
            let text = render_packed(&refs, true, &[]);
            let cut = cut % text.len();
            if !text[..cut].ends_with('\n') && cut > 0 {
                prop_assert_eq!(parse_packed_refs(&text[..cut]), None);
            }
        }

        #[test]
        fn loose_refs_read_back_what_was_written(oid in oid(), target in ref_name()) {
            prop_assert_eq!(parse_loose_ref(&format!("{oid}\n")), Some(LooseRef::Oid(oid.clone())));
            prop_assert_eq!(parse_loose_ref(&format!("ref: {target}\n")), Some(LooseRef::Symbolic(target)));
            // A torn oid is never taken for another one.
            prop_assert_eq!(parse_loose_ref(&oid[..oid.len() - 1]), None);
        }

        #[test]
        fn parsers_never_panic_and_only_return_valid_refs(text in "(?s).{0,400}") {
            if let Some(refs) = parse_packed_refs(&text) {
                prop_assert!(refs.iter().all(|(name, oid)| is_valid_ref_name(name) && is_valid_oid(oid)));
            }
            match parse_loose_ref(&text) {
                Some(LooseRef::Oid(oid)) => prop_assert!(is_valid_oid(&oid)),
                Some(LooseRef::Symbolic(target)) => prop_assert!(is_valid_ref_name(&target)),
                None => {}
            }
        }
    }
}
