//! Repository identifiers and the on-disk layout: `<git_root>/<npub>/<identifier>.git` for the
//! repositories announced here, `<git_root>/prs/<npub>/<identifier>.git` for GRASP-06
//! contributor repositories ([`RepoSpace`], docs/protocol.md#contributor-repositories).
//!
//! Identifiers (the `d` tag of a NIP-34 announcement) come from the network, so they are
//! validated before they touch the disk ([`validate_identifier`]), and [`RepoLayout`] is the
//! one place that turns `(space, owner, identifier)` into a path and a path back into it.
//!
//! Rules (docs/protocol.md#decisions, decision 2):
//! - rejected: empty, `.`, `..`, anything containing `/`, `\`, NUL or another control character
//!   (C0, DEL, C1), and anything longer than [`MAX_IDENTIFIER_BYTES`] bytes of UTF-8;
//! - allowed: any other Unicode, spaces, a leading dot, and a trailing `.git` (the directory is
//!   always `<identifier>.git`, so `foo.git` lives in `foo.git.git`; stripping exactly one `.git`
//!   from a URL or directory name gets the identifier back unambiguously).
//!
//! [`MAX_IDENTIFIER_BYTES`] is 100: far below the 255-byte file name limit of common file systems
//! once `.git` is appended, and long enough for any real project name.
//!
//! URL paths are parsed by [`parse_repo_url_path`] (raw, percent-encoded, as in an HTTP request
//! line) or [`parse_repo_path`] (already decoded, as in CGI `PATH_INFO`): `/<npub>/<id>.git...`
//! or `/prs/<npub>/<id>.git...`. The npub segment must be the canonical lowercase bech32 form, so
//! one repository has exactly one URL. `prs` can never be an npub, so the two spaces never meet.

use std::path::{Component, Path, PathBuf};

use nostr::key::PublicKey;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use nostr::nips::nip19::{FromBech32, ToBech32};

/// The git config every GRASP repository needs: set in each repository at creation by the relay
/// and passed again per request by `grasp-cgi`, so repositories created by older versions still
/// behave.
pub const GRASP_GIT_CONFIG: &[(&str, &str)] = &[
    ("uploadpack.allowFilter", "true"),
    ("uploadpack.allowTipSHA1InWant", "true"),
    ("uploadpack.allowReachableSHA1InWant", "true"),
    ("http.receivepack", "true"),
    ("http.uploadpack", "true"),
    ("receive.advertisePushOptions", "false"),
    // The relay runs `git maintenance run --auto` after each push itself, in the background:
    // receive-pack's own auto-gc would keep the pusher waiting for it (docs/architecture.md).
    ("receive.autoGC", "false"),
];

/// The GRASP settings of a new repository as lines of git's config file: every
/// [`GRASP_GIT_CONFIG`] entry and `core.hooksPath = hooks_dir`, each value quoted. The relay
/// appends them to the `config` that `git init` wrote, in one write, instead of running one `git
/// config` process per setting. `None` when a value cannot be written in that syntax (a
/// newline): set it with `git config` then.
pub fn grasp_config_text(hooks_dir: &str) -> Option<String> {
    let mut out = String::new();
    for (key, value) in GRASP_GIT_CONFIG.iter().copied().chain([("core.hooksPath", hooks_dir)]) {
        let (section, name) = key.split_once('.')?;
        if value.contains('\n') || value.contains('\0') {
            return None;
        }
        let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
        out.push_str(&format!("[{section}]\n\t{name} = \"{quoted}\"\n"));
    }
    Some(out)
}

/// The directory under the git root that holds the object pools (`<git_root>/.pools`).
pub const POOLS_DIR: &str = ".pools";

/// The line of a member repository's `objects/info/alternates` that borrows the objects of the
/// pool of `identifier`: the pool's `objects` directory relative to the member's
/// (`<git_root>/<npub>/<identifier>.git/objects` -> `<git_root>/.pools/<identifier>.git/objects`),
/// so a moved data directory keeps working. Starts with `../`, so git never reads it as a
/// comment or a quoted path. `identifier` must be valid ([`validate_identifier`]). Only hosted
/// repositories are members: contributor repositories (`prs/`) stage what they receive and never
/// join a pool.
pub fn pool_alternate(identifier: &str) -> String {
    format!("../../../{POOLS_DIR}/{identifier}.git/objects")
}

/// Longest accepted identifier, in bytes of UTF-8.
pub const MAX_IDENTIFIER_BYTES: usize = 100;

/// The directory under the git root (and the first URL path segment) of the GRASP-06 contributor
/// repositories.
pub const PRS_DIR: &str = "prs";

/// Which kind of repository a path names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoSpace {
    /// `/<npub>/<identifier>.git`: a repository announced here (held or served), or archived;
    /// `npub` is its owner.
    #[default]
    Hosted,
    /// `/prs/<npub>/<identifier>.git`: where `npub` pushes pull requests for repositories named
    /// `identifier` (GRASP-06); only `refs/nostr/<event-id>` refs live there.
    Prs,
}

impl RepoSpace {
    pub fn is_hosted(&self) -> bool {
        *self == RepoSpace::Hosted
    }

    /// The URL path (and directory) prefix of this space: empty or `/prs`.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoSpace::Hosted => "",
            RepoSpace::Prs => "/prs",
        }
    }
}

/// Why an identifier, URL path or repository path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifierError {
    #[error("repository identifier is empty; use a non-empty `d` tag")]
    Empty,
    #[error("repository identifier `.` or `..` is not allowed; choose a name")]
    DotName,
    #[error("repository identifier must not contain `/` or `\\`; use `-` instead")]
    Separator,
    #[error("repository identifier must not contain NUL or control characters")]
    ControlChar,
    #[error(
        "repository identifier is {0} bytes long; at most {MAX_IDENTIFIER_BYTES} bytes are allowed"
    )]
    TooLong(usize),
    #[error("repository path {0} is outside the git root")]
    OutsideRoot(PathBuf),
    #[error("path {0} is not of the form <git_root>/<npub>/<identifier>.git or <git_root>/prs/<npub>/<identifier>.git")]
    NotARepoPath(PathBuf),
}

/// Checks that `identifier` may name a repository directory (see the module docs).
pub fn validate_identifier(identifier: &str) -> Result<(), IdentifierError> {
    if identifier.is_empty() {
        return Err(IdentifierError::Empty);
    }
    if identifier == "." || identifier == ".." {
        return Err(IdentifierError::DotName);
    }
    if identifier.len() > MAX_IDENTIFIER_BYTES {
        return Err(IdentifierError::TooLong(identifier.len()));
    }
    if identifier.contains(['/', '\\']) {
        return Err(IdentifierError::Separator);
    }
    if identifier.chars().any(char::is_control) {
        return Err(IdentifierError::ControlChar);
    }
    Ok(())
}

/// Parses a canonical npub (lowercase bech32 that re-encodes to itself).
pub fn parse_npub(npub: &str) -> Option<PublicKey> {
    let pk = PublicKey::from_bech32(npub).ok()?;
    (pk.to_bech32().ok()? == npub).then_some(pk)
}

/// The npub string of `owner` (infallible for valid keys).
pub fn npub_of(owner: &PublicKey) -> String {
    owner
        .to_bech32()
        .expect("bech32 encoding of a public key cannot fail")
}

/// Where bare repositories live: `<git_root>/<npub>/<identifier>.git`, and the contributor
/// repositories under `<git_root>/prs/` ([`RepoSpace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoLayout {
    git_root: PathBuf,
}

impl RepoLayout {
    /// A layout rooted at `git_root` (use an absolute, canonical path; [`RepoLayout::locate`]
    /// compares canonical hook `GIT_DIR`s against it).
    pub fn new(git_root: impl Into<PathBuf>) -> Self {
        RepoLayout {
            git_root: git_root.into(),
        }
    }

    pub fn git_root(&self) -> &Path {
        &self.git_root
    }

    /// The directory holding the owner directories of `space`: the git root, or `<git_root>/prs`.
    pub fn space_root(&self, space: RepoSpace) -> PathBuf {
        match space {
            RepoSpace::Hosted => self.git_root.clone(),
            RepoSpace::Prs => self.git_root.join(PRS_DIR),
        }
    }

    /// The directory holding all repositories of `owner`.
    pub fn owner_dir(&self, owner: &PublicKey) -> PathBuf {
        self.owner_dir_in(RepoSpace::Hosted, owner)
    }

    /// The directory holding all repositories of `owner` in `space`.
    pub fn owner_dir_in(&self, space: RepoSpace, owner: &PublicKey) -> PathBuf {
        self.space_root(space).join(npub_of(owner))
    }

    /// `owner`'s repository for `identifier` announced here: [`RepoLayout::repo_path_in`] of
    /// [`RepoSpace::Hosted`].
    pub fn repo_path(
        &self,
        owner: &PublicKey,
        identifier: &str,
    ) -> Result<PathBuf, IdentifierError> {
        self.repo_path_in(RepoSpace::Hosted, owner, identifier)
    }

    /// The ONE function building repository paths: `<git_root>/<npub>/<identifier>.git` or
    /// `<git_root>/prs/<npub>/<identifier>.git`, after validating `identifier` and checking the
    /// result stays where its space's repositories live.
    pub fn repo_path_in(
        &self,
        space: RepoSpace,
        owner: &PublicKey,
        identifier: &str,
    ) -> Result<PathBuf, IdentifierError> {
        validate_identifier(identifier)?;
        let path = self.owner_dir_in(space, owner).join(format!("{identifier}.git"));
        let depth = match space {
            RepoSpace::Hosted => 2,
            RepoSpace::Prs => 3,
        };
        self.below_root(path, depth)
    }

    /// The directory holding every identifier family's object pool: `<git_root>/.pools`
    /// (docs/architecture.md, "Object pools"). Owner directories are canonical npubs and the
    /// contributor repositories live under `prs/`, so this is never one, and no URL path names it.
    pub fn pools_dir(&self) -> PathBuf {
        self.git_root.join(POOLS_DIR)
    }

    /// The ONE function building object pool paths: `<git_root>/.pools/<identifier>.git`, after
    /// validating `identifier` (as [`RepoLayout::repo_path`] does) and checking the result stays
    /// inside the pools directory.
    pub fn pool_path(&self, identifier: &str) -> Result<PathBuf, IdentifierError> {
        validate_identifier(identifier)?;
        self.below_root(self.pools_dir().join(format!("{identifier}.git")), 2)
    }

    /// `path`, proven to be exactly `depth` plain components below the git root (belt and braces:
    /// validation already excludes every way out).
    fn below_root(&self, path: PathBuf, depth: usize) -> Result<PathBuf, IdentifierError> {
        let rel = path
            .strip_prefix(&self.git_root)
            .map_err(|_| IdentifierError::OutsideRoot(path.clone()))?;
        let normal = rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !normal || rel.components().count() != depth {
            return Err(IdentifierError::OutsideRoot(path));
        }
        Ok(path)
    }

    /// The identifier whose pool `path` is, iff it is exactly `<git_root>/.pools/<identifier>.git`.
    pub fn locate_pool(&self, path: &Path) -> Result<String, IdentifierError> {
        let bad = || IdentifierError::NotARepoPath(path.to_path_buf());
        let rel = path.strip_prefix(self.pools_dir()).map_err(|_| bad())?;
        let mut parts = rel.components();
        let (Some(Component::Normal(dir)), None) = (parts.next(), parts.next()) else { return Err(bad()) };
        let identifier = dir.to_str().and_then(|d| d.strip_suffix(".git")).ok_or_else(bad)?;
        validate_identifier(identifier)?;
        Ok(identifier.to_string())
    }

    /// The inverse of [`RepoLayout::repo_path`]: given a (canonicalised) `GIT_DIR`, returns
    /// `(owner, identifier)` iff it is exactly `<git_root>/<npub>/<identifier>.git`.
    pub fn locate(&self, git_dir: &Path) -> Result<(PublicKey, String), IdentifierError> {
        match self.locate_in(git_dir)? {
            (RepoSpace::Hosted, owner, identifier) => Ok((owner, identifier)),
            (RepoSpace::Prs, ..) => Err(IdentifierError::NotARepoPath(git_dir.to_path_buf())),
        }
    }

    /// The inverse of [`RepoLayout::repo_path_in`]: given a (canonicalised) `GIT_DIR`, returns
    /// `(space, owner, identifier)` iff it is exactly a repository path of one of the spaces.
    pub fn locate_in(&self, git_dir: &Path) -> Result<(RepoSpace, PublicKey, String), IdentifierError> {
        let bad = || IdentifierError::NotARepoPath(git_dir.to_path_buf());
        let rel = git_dir.strip_prefix(&self.git_root).map_err(|_| bad())?;
        let parts: Vec<&str> = rel
            .components()
            .map(|c| match c {
                Component::Normal(s) => s.to_str().ok_or_else(bad),
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()?;
        let (space, npub, dir) = match parts.as_slice() {
            [npub, dir] => (RepoSpace::Hosted, npub, dir),
            [prs, npub, dir] if *prs == PRS_DIR => (RepoSpace::Prs, npub, dir),
            _ => return Err(bad()),
        };
        let owner = parse_npub(npub).ok_or_else(bad)?;
        let identifier = dir.strip_suffix(".git").ok_or_else(bad)?;
        validate_identifier(identifier)?;
        Ok((space, owner, identifier.to_string()))
    }
}

/// A URL path addressing a repository: `/<npub>/<identifier>.git<rest>`, or
/// `/prs/<npub>/<identifier>.git<rest>` ([`RepoSpace::Prs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoUrlPath {
    pub space: RepoSpace,
    pub owner: PublicKey,
    pub npub: String,
    /// Decoded and validated.
    pub identifier: String,
    /// What follows `.git`: empty, `/`, or `/info/refs`, `/git-upload-pack`, ... (decoded).
    /// Never contains `.` or `..` segments, `\`, or control characters.
    pub rest: String,
}

/// Parses a raw (percent-encoded) URL path such as `/npub1.../my%20repo.git/info/refs`.
/// Each segment is decoded separately, so `%2F` can never introduce a separator. Returns `None`
/// for invalid percent-encoding or UTF-8, a non-canonical npub, or an invalid identifier.
pub fn parse_repo_url_path(path: &str) -> Option<RepoUrlPath> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let mut decoded = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            decoded.push('/');
        }
        let seg = percent_decode(segment)?;
        if seg.contains('/') {
            return None;
        }
        decoded.push_str(&seg);
    }
    parse_repo_path(&decoded)
}

impl RepoUrlPath {
    /// The repository's own path, without `rest`: `/<npub>/<identifier>.git` or
    /// `/prs/<npub>/<identifier>.git` (decoded, as CGI's `PATH_INFO` is).
    pub fn repo_root(&self) -> String {
        format!("{}/{}/{}.git", self.space.url_prefix(), self.npub, self.identifier)
    }
}

/// Parses an already decoded path (CGI `PATH_INFO`) of the form `/<npub>/<identifier>.git<rest>`
/// or `/prs/<npub>/<identifier>.git<rest>`.
pub fn parse_repo_path(path: &str) -> Option<RepoUrlPath> {
    let path = path.strip_prefix('/')?;
    let (space, path) = match path.strip_prefix(PRS_DIR).and_then(|p| p.strip_prefix('/')) {
        Some(rest) => (RepoSpace::Prs, rest),
        None => (RepoSpace::Hosted, path),
    };
    let (npub, after) = path.split_once('/')?;
    let owner = parse_npub(npub)?;
    let (dir, rest) = match after.find('/') {
        Some(i) => after.split_at(i),
        None => (after, ""),
    };
    let identifier = dir.strip_suffix(".git")?;
    validate_identifier(identifier).ok()?;
    let rest_ok = !rest.contains('\\')
        && !rest.chars().any(char::is_control)
        && rest.split('/').all(|s| s != "." && s != "..");
    if !rest_ok {
        return None;
    }
    Some(RepoUrlPath {
        space,
        owner,
        npub: npub.to_string(),
        identifier: identifier.to_string(),
        rest: rest.to_string(),
    })
}

/// Characters percent-encoded in one path segment: all but the unreserved ones (RFC 3986).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Decodes `%XX` escapes into bytes; `None` on a malformed escape (a `%` not followed by two hex
/// digits), which the `percent-encoding` crate would pass through unchanged.
pub fn percent_decode_bytes(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let well_formed = bytes.iter().enumerate().filter(|(_, b)| **b == b'%').all(|(i, _)| {
        bytes.get(i + 1..i + 3).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    well_formed.then(|| percent_decode_str(s).collect())
}

/// Decodes `%XX` escapes; `None` on a malformed escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    String::from_utf8(percent_decode_bytes(s)?).ok()
}

/// Percent-encodes `s` for use as one URL path segment (unreserved characters stay as they are).
pub fn percent_encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grasp_config_is_one_quoted_line_per_setting() {
        let text = grasp_config_text("/data/ho\"o\\ks").unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with('\t')).count(), GRASP_GIT_CONFIG.len() + 1);
        assert!(text.contains("[uploadpack]\n\tallowFilter = \"true\"\n"), "{text}");
        assert!(text.ends_with("[core]\n\thooksPath = \"/data/ho\\\"o\\\\ks\"\n"), "{text}");
        assert_eq!(grasp_config_text("/a\nb"), None);
    }

    fn owner() -> (PublicKey, String) {
        let pk =
            PublicKey::from_hex("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
                .unwrap();
        let npub = npub_of(&pk);
        (pk, npub)
    }

    #[test]
    fn valid_identifiers() {
        for id in [
            "ngit",
            "my repo",
            "Ünïcødé-名前",
            ".hidden",
            "foo.git",
            "a..b",
            "x",
            "-dash",
            "100%",
        ] {
            assert_eq!(validate_identifier(id), Ok(()), "{id:?}");
        }
        assert_eq!(
            validate_identifier(&"a".repeat(MAX_IDENTIFIER_BYTES)),
            Ok(())
        );
    }

    #[test]
    fn invalid_identifiers() {
        use IdentifierError::*;
        let cases: &[(&str, IdentifierError)] = &[
            ("", Empty),
            (".", DotName),
            ("..", DotName),
            ("../x", Separator),
            ("a/b", Separator),
            ("/abs", Separator),
            ("a\\b", Separator),
            ("..\\x", Separator),
            ("a\0b", ControlChar),
            ("a\nb", ControlChar),
            ("tab\t", ControlChar),
            ("del\x7f", ControlChar),
            ("c1\u{85}", ControlChar),
        ];
        for (id, err) in cases {
            assert_eq!(validate_identifier(id).as_ref(), Err(err), "{id:?}");
        }
        let long = "é".repeat(51); // 102 bytes, 51 chars
        assert_eq!(validate_identifier(&long), Err(TooLong(102)));
    }

    #[test]
    fn repo_path_and_locate_round_trip() {
        let (pk, npub) = owner();
        let layout = RepoLayout::new("/srv/git");
        for id in ["ngit", "my repo", "foo.git", ".hidden", "名前"] {
            let p = layout.repo_path(&pk, id).unwrap();
            assert_eq!(p, PathBuf::from(format!("/srv/git/{npub}/{id}.git")));
            assert_eq!(layout.locate(&p).unwrap(), (pk, id.to_string()));
        }
    }

    #[test]
    fn pool_paths_round_trip_and_never_meet_an_owner_directory() {
        let layout = RepoLayout::new("/srv/git");
        let (pk, npub) = owner();
        for id in ["r", "my repo", ".hidden", "x.git", "é"] {
            let pool = layout.pool_path(id).unwrap();
            assert_eq!(pool, Path::new("/srv/git/.pools").join(format!("{id}.git")));
            assert_eq!(layout.locate_pool(&pool).unwrap(), id);
            assert!(layout.locate(&pool).is_err(), "a pool is never a repository");
            let member = layout.repo_path(&pk, id).unwrap();
            assert_ne!(member.parent(), pool.parent());
            assert!(layout.locate_pool(&member).is_err());
            // The alternates line, resolved against the member's objects directory, is the
            // pool's objects directory.
            let resolved = member.join("objects").join(pool_alternate(id));
            let normal: PathBuf = resolved.components().fold(PathBuf::new(), |mut p, c| {
                match c {
                    Component::ParentDir => {
                        p.pop();
                    }
                    other => p.push(other),
                }
                p
            });
            assert_eq!(normal, pool.join("objects"));
        }
        assert!(parse_npub(POOLS_DIR).is_none());
        assert_eq!(npub.len(), 63);
        for id in ["", ".", "..", "a/b", "../x"] {
            assert!(layout.pool_path(id).is_err(), "{id:?}");
        }
        assert!(layout.locate_pool(Path::new("/srv/git/.pools/a/b.git")).is_err());
        assert!(layout.locate_pool(Path::new("/srv/git/.pools/.tmp-1")).is_err());
    }

    #[test]
    fn repo_path_rejects_traversal() {
        let (pk, _) = owner();
        let layout = RepoLayout::new("/srv/git");
        for id in ["..", "../x", "a/b", "/etc", "", "a\0"] {
            assert!(layout.repo_path(&pk, id).is_err(), "{id:?}");
        }
    }

    #[test]
    fn locate_rejects_anything_else() {
        let (_, npub) = owner();
        let layout = RepoLayout::new("/srv/git");
        let bad = [
            "/srv/git".to_string(),
            format!("/srv/git/{npub}"),
            format!("/srv/git/{npub}/repo"),
            format!("/srv/git/{npub}/.git"),
            format!("/srv/git/{npub}/repo.git/objects"),
            format!("/srv/gitx/{npub}/repo.git"),
            format!("/other/{npub}/repo.git"),
            format!("/srv/git/{npub}/../{npub}/repo.git"),
            format!("/srv/git/{}/repo.git", npub.to_uppercase()),
            "/srv/git/npub1notakey/repo.git".to_string(),
            "/srv/git/x/y/repo.git".to_string(),
        ];
        for p in bad {
            assert!(layout.locate(Path::new(&p)).is_err(), "{p}");
        }
    }

    #[test]
    fn parses_url_paths() {
        let (pk, npub) = owner();
        let p = parse_repo_url_path(&format!("/{npub}/my%20repo.git/info/refs")).unwrap();
        assert_eq!(
            p,
            RepoUrlPath {
                space: RepoSpace::Hosted,
                owner: pk,
                npub: npub.clone(),
                identifier: "my repo".into(),
                rest: "/info/refs".into()
            }
        );
        let p = parse_repo_url_path(&format!("/{npub}/ngit.git")).unwrap();
        assert_eq!((p.identifier.as_str(), p.rest.as_str()), ("ngit", ""));
        let p = parse_repo_url_path(&format!("/{npub}/ngit.git/")).unwrap();
        assert_eq!(p.rest, "/");
        let p = parse_repo_url_path(&format!(
            "/{npub}/ngit.git/info/refs?service=git-upload-pack"
        ))
        .unwrap();
        assert_eq!(p.rest, "/info/refs");
        let p = parse_repo_url_path(&format!("/{npub}/foo.git.git/HEAD")).unwrap();
        assert_eq!(p.identifier, "foo.git");
        let p = parse_repo_url_path(&format!("/{npub}/%E5%90%8D%E5%89%8D.git/HEAD")).unwrap();
        assert_eq!(p.identifier, "名前");
        let p = parse_repo_path(&format!("/{npub}/my repo.git/git-upload-pack")).unwrap();
        assert_eq!(p.identifier, "my repo");
    }

    #[test]
    fn rejects_bad_url_paths() {
        let (_, npub) = owner();
        let bad = [
            String::new(),
            "/".into(),
            format!("/{npub}"),
            format!("/{npub}/"),
            format!("/{npub}/repo"),
            format!("/{npub}/.git"),
            format!("/{npub}/..git"),
            format!("/{npub}/...git/info/refs"),
            format!("/{npub}/%2e%2e.git/info/refs"),
            format!("/{npub}/%2E.git"),
            format!("/{npub}/a%2Fb.git/info/refs"),
            format!("/{npub}/a%2fb.git"),
            format!("/{npub}/a%5Cb.git"),
            format!("/{npub}/a%00b.git"),
            format!("/{npub}/a%0Ab.git"),
            format!("/{npub}/a%ZZ.git"),
            format!("/{npub}/a%2.git"),
            format!("/{npub}/a%FF.git"),
            format!("/{npub}/repo.git/../../etc/passwd"),
            format!("/{npub}/repo.git/%2e%2e/x"),
            format!("/{npub}/repo.git/objects/%2F/x"),
            format!("/{npub}/repo.git/./HEAD"),
            format!("/{npub}/repo.git/a%00"),
            format!("/{}/repo.git", npub.to_uppercase()),
            format!("{npub}/repo.git"),
            "/npub1xyz/repo.git".into(),
            "/../repo.git".into(),
            format!("/{}/repo.git", "a".repeat(63)),
            format!("/{npub}/{}.git", "a".repeat(101)),
        ];
        for p in bad {
            assert_eq!(parse_repo_url_path(&p), None, "{p}");
        }
        assert_eq!(parse_repo_path(&format!("/{npub}/a\0.git")), None);
    }

    #[test]
    fn contributor_repositories_live_under_prs() {
        let (pk, npub) = owner();
        let layout = RepoLayout::new("/srv/git");
        let p = layout.repo_path_in(RepoSpace::Prs, &pk, "my repo").unwrap();
        assert_eq!(p, PathBuf::from(format!("/srv/git/prs/{npub}/my repo.git")));
        assert_eq!(layout.locate_in(&p).unwrap(), (RepoSpace::Prs, pk, "my repo".to_string()));
        assert!(layout.locate(&p).is_err(), "a hosted lookup never names a contributor repository");
        let hosted = layout.repo_path(&pk, "my repo").unwrap();
        assert_eq!(layout.locate_in(&hosted).unwrap().0, RepoSpace::Hosted);
        for id in ["..", "../x", "a/b", ""] {
            assert!(layout.repo_path_in(RepoSpace::Prs, &pk, id).is_err(), "{id:?}");
        }
        for bad in [format!("/srv/git/prs/{npub}"), format!("/srv/git/other/{npub}/r.git"), format!("/srv/git/prs/prs/{npub}/r.git")] {
            assert!(layout.locate_in(Path::new(&bad)).is_err(), "{bad}");
        }

        let u = parse_repo_url_path(&format!("/prs/{npub}/my%20repo.git/info/refs")).unwrap();
        assert_eq!((u.space, u.identifier.as_str(), u.rest.as_str()), (RepoSpace::Prs, "my repo", "/info/refs"));
        assert_eq!(u.repo_root(), format!("/prs/{npub}/my repo.git"));
        let h = parse_repo_url_path(&format!("/{npub}/r.git")).unwrap();
        assert_eq!((h.space, h.repo_root()), (RepoSpace::Hosted, format!("/{npub}/r.git")));
        for bad in [format!("/prs/{npub}"), format!("/prs/prs/{npub}/r.git"), "/prs/r.git".to_string(), format!("/prs{npub}/r.git"), format!("/PRS/{npub}/r.git")] {
            assert_eq!(parse_repo_url_path(&bad), None, "{bad}");
        }
    }

    #[test]
    fn percent_encoding_round_trips() {
        for s in ["my repo", "名前", "100%", "a/b", "plain-name_1.0~"] {
            assert_eq!(
                percent_decode(&percent_encode_segment(s)).as_deref(),
                Some(s)
            );
        }
        assert_eq!(percent_encode_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn malformed_escapes_are_refused() {
        for bad in ["%", "%2", "a%zz", "%%41", "%4G", "%\u{e9}1"] {
            assert_eq!(percent_decode_bytes(bad), None, "{bad:?}");
        }
        assert_eq!(percent_decode_bytes("%2f%2F%ff").unwrap(), b"//\xff");
        assert_eq!(percent_decode("%ff"), None, "not UTF-8");
    }

    /// Reference decoder: every `%` starts exactly two hex digits.
    fn reference_decode(s: &str) -> Option<Vec<u8>> {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        Some(out)
    }

    proptest::proptest! {
        #[test]
        fn decoding_inverts_encoding(s in "\\PC{0,30}") {
            let encoded = percent_encode_segment(&s);
            proptest::prop_assert!(!encoded.contains('/'));
            proptest::prop_assert_eq!(percent_decode(&encoded), Some(s));
        }

        #[test]
        fn decoding_matches_a_reference(s in "([a-z/é]|%[0-9a-fA-F]{2}|%.{0,2})*") {
            proptest::prop_assert_eq!(percent_decode_bytes(&s), reference_decode(&s));
        }
    }
}
