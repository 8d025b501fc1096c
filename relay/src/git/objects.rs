//! "Is this object certainly absent?" answered from a bare repository's files, without starting
//! a git process (which costs milliseconds: the bulk of holding a state event in the purgatory).
//!
//! Git keeps an object either as a loose file `objects/xx/yyyy...` or in a pack whose index
//! (`objects/pack/*.idx`, version 2: a 256-entry fan-out table, then the sorted object names)
//! lists it. [`surely_missing`] only ever answers "missing" when that is certain; anything
//! unusual (an alternate other than one object pool without alternates of its own, an index of
//! another version, a pack without its index, an unreadable file) answers "ask git" instead, so
//! it can make a lookup faster but never different. A member of an object pool
//! (docs/architecture.md, "Object pools") is looked up in its own objects and the pool's.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;

use grasp_state::names::refs::is_valid_oid;

const IDX_MAGIC: [u8; 4] = [0xff, b't', b'O', b'c'];
const FANOUT_OFFSET: u64 = 8;
const NAMES_OFFSET: u64 = FANOUT_OFFSET + 256 * 4;

/// At most this many of the asked ids are looked up here (one missing id is enough to answer;
/// a big state whose objects are all present is left to git's single batch lookup).
const MAX_LOOKUPS: usize = 64;

/// True when `repo` certainly lacks at least one of `oids` (an entry that is not an object id
/// counts as missing, as in [`crate::git::missing_objects`]). False means "ask git".
pub fn surely_missing(repo: &Path, oids: &[String]) -> bool {
    if oids.iter().any(|oid| !is_valid_oid(oid)) {
        return true;
    }
    let objects = repo.join("objects");
    let Some(mut stores) = object_stores(&objects) else { return false };
    stores.insert(0, objects);
    let mut indexes = Vec::new();
    for store in &stores {
        let Some(paths) = pack_indexes(&store.join("pack")) else { return false };
        for path in paths {
            match PackIndex::open(&path) {
                Some(idx) => indexes.push(idx),
                None => return false,
            }
        }
    }
    oids.iter().take(MAX_LOOKUPS).any(|oid| {
        if stores.iter().any(|store| !absent(&store.join(&oid[..2]).join(&oid[2..]))) {
            return false;
        }
        let Some(name) = decode_hex(oid) else { return false };
        // Missing only when every index certainly does not list it.
        indexes.iter().all(|idx| idx.contains(&name) == Some(false))
    })
}

/// The object directories `objects` borrows from: none, or the one directory its alternates
/// file names (an object pool), when that directory borrows from nothing itself. `None` for
/// anything else (several alternates, a chain, a quoted line, an unreadable file): ask git.
fn object_stores(objects: &Path) -> Option<Vec<std::path::PathBuf>> {
    let file = objects.join("info").join("alternates");
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    match lines.as_slice() {
        [] => Some(Vec::new()),
        [line] if !line.starts_with('#') && !line.starts_with('"') => {
            let store = objects.join(line);
            (store.is_dir() && absent(&store.join("info").join("alternates"))).then(|| vec![store])
        }
        _ => None,
    }
}

/// How many objects the pack index at `idx` (version 2) lists; `None` when it cannot be read.
pub fn pack_object_count(idx: &Path) -> Option<u64> {
    PackIndex::open(idx).map(|idx| idx.total)
}

/// Only `NotFound` counts as absent; any other error is a doubt.
fn absent(path: &Path) -> bool {
    matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == ErrorKind::NotFound)
}

/// The pack indexes, or None when a pack has no index (being written or moved in) or the
/// directory cannot be read.
fn pack_indexes(dir: &Path) -> Option<Vec<std::path::PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(Vec::new()),
        Err(_) => return None,
    };
    let mut indexes = Vec::new();
    for entry in entries {
        let path = entry.ok()?.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("idx") => indexes.push(path),
            Some("pack") if absent(&path.with_extension("idx")) => return None,
            _ => {}
        }
    }
    Some(indexes)
}

fn decode_hex(oid: &str) -> Option<Vec<u8>> {
    (0..oid.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(oid.get(i..i + 2)?, 16).ok())
        .collect()
}

/// An open version 2 pack index.
struct PackIndex {
    file: File,
    len: u64,
    total: u64,
}

impl PackIndex {
    /// None when it cannot be read or is not a version 2 index.
    fn open(path: &Path) -> Option<PackIndex> {
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        let mut header = [0u8; 8];
        file.read_exact_at(&mut header, 0).ok()?;
        if header[..4] != IDX_MAGIC || header[4..] != [0, 0, 0, 2] {
            return None;
        }
        let mut idx = PackIndex { file, len, total: 0 };
        idx.total = idx.fanout(255)?;
        Some(idx)
    }

    fn fanout(&self, i: u64) -> Option<u64> {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, FANOUT_OFFSET + i * 4).ok()?;
        Some(u32::from_be_bytes(b) as u64)
    }

    /// Whether the index lists `name`; None when that cannot be told (a short or inconsistent
    /// file, names of another length).
    fn contains(&self, name: &[u8]) -> Option<bool> {
        let first = name[0] as u64;
        let lo = if first == 0 { 0 } else { self.fanout(first - 1)? };
        let hi = self.fanout(first)?;
        let width = name.len() as u64;
        if lo > hi || hi > self.total || NAMES_OFFSET + self.total * width > self.len {
            return None;
        }
        let mut names = vec![0u8; ((hi - lo) * width) as usize];
        self.file.read_exact_at(&mut names, NAMES_OFFSET + lo * width).ok()?;
        Some(names.chunks_exact(width as usize).collect::<Vec<_>>().binary_search(&name).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut agrees with git whenever it answers, for loose and packed objects, and
    /// defers to git for alternates and packs without an index.
    #[test]
    fn surely_missing_only_answers_when_git_would_say_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, work) = (tmp.path().join("r.git"), tmp.path().join("w"));
        crate::git::test_git(tmp.path(), &["init", "-q", "--bare", repo.to_str().unwrap()]);
        crate::git::test_git(tmp.path(), &["init", "-q", work.to_str().unwrap()]);
        let mut commits = Vec::new();
        for i in 0..40 {
            crate::git::test_git(&work, &["commit", "-q", "--allow-empty", "-m", &format!("c{i}")]);
            commits.push(crate::git::test_git(&work, &["rev-parse", "HEAD"]));
        }
        let tip = commits.last().unwrap().clone();
        let absent = "1".repeat(40);
        let agrees = |oids: &[String]| {
            let git_says = !crate::git::missing_objects(&repo, oids).unwrap().is_empty();
            let shortcut = surely_missing(&repo, oids);
            assert!(!shortcut || git_says, "shortcut says missing, git says present: {oids:?}");
            shortcut
        };
        // An empty repository: everything is missing.
        assert!(agrees(std::slice::from_ref(&tip)));
        assert!(surely_missing(&repo, &["not an oid".to_string()]));
        assert!(!agrees(&[]), "nothing asked, nothing missing");
        // Loose objects.
        crate::git::test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        assert!(!agrees(&commits));
        assert!(agrees(&[tip.clone(), absent.clone()]));
        // Packed objects (two packs), and every name shape near the fan-out edges.
        crate::git::test_git(&repo, &["repack", "-q", "-a", "-d"]);
        crate::git::test_git(&work, &["commit", "-q", "--allow-empty", "-m", "late"]);
        let late = crate::git::test_git(&work, &["rev-parse", "HEAD"]);
        crate::git::test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        crate::git::test_git(&repo, &["repack", "-q", "-d"]);
        assert!(!agrees(&commits));
        assert!(!agrees(std::slice::from_ref(&late)));
        // A name that differs from the tip in its last digit only (never the tip itself).
        let near_tip = format!("{}{}", &tip[..39], if tip.ends_with('0') { '1' } else { '0' });
        for probe in ["0".repeat(40), "f".repeat(40), absent.clone(), near_tip] {
            assert!(agrees(&[tip.clone(), probe]));
        }
        // A pack without its index: ask git.
        let pack = std::fs::read_dir(repo.join("objects/pack")).unwrap().flatten().find(|e| e.path().extension().is_some_and(|x| x == "pack")).unwrap().path();
        std::fs::copy(&pack, pack.with_file_name("pack-extra.pack")).unwrap();
        assert!(!surely_missing(&repo, std::slice::from_ref(&absent)));
        std::fs::remove_file(pack.with_file_name("pack-extra.pack")).unwrap();
        assert!(surely_missing(&repo, std::slice::from_ref(&absent)));
        // One alternate (a pool): looked up there too.
        let other = tmp.path().join("o.git");
        crate::git::test_git(tmp.path(), &["init", "-q", "--bare", other.to_str().unwrap()]);
        assert!(surely_missing(&other, std::slice::from_ref(&tip)));
        std::fs::write(other.join("objects/info/alternates"), "../../r.git/objects\n").unwrap();
        let agrees_in = |repo: &Path, oids: &[String]| {
            let git_says = !crate::git::missing_objects(repo, oids).unwrap().is_empty();
            let shortcut = surely_missing(repo, oids);
            assert!(!shortcut || git_says, "shortcut says missing, git says present: {oids:?}");
            shortcut
        };
        assert!(!agrees_in(&other, std::slice::from_ref(&tip)));
        assert!(agrees_in(&other, &[tip.clone(), absent.clone()]));
        // Loose in the pool.
        crate::git::test_git(&work, &["commit", "-q", "--allow-empty", "-m", "loose"]);
        let loose = crate::git::test_git(&work, &["rev-parse", "HEAD"]);
        crate::git::test_git(&work, &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"]);
        assert!(!agrees_in(&other, std::slice::from_ref(&loose)));
        // A chain of alternates, or several: ask git.
        std::fs::write(repo.join("objects/info/alternates"), format!("{}\n", other.join("objects").display())).unwrap();
        assert!(!surely_missing(&other, std::slice::from_ref(&absent)));
        std::fs::remove_file(repo.join("objects/info/alternates")).unwrap();
        std::fs::write(other.join("objects/info/alternates"), "../../r.git/objects\n../../r.git/objects\n").unwrap();
        assert!(!surely_missing(&other, std::slice::from_ref(&absent)));
        assert_eq!(pack_object_count(&repo.join("objects/pack/none.idx")), None);
    }
}
