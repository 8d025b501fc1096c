//! A file the operator edits while the relay runs (curation, members): read at startup and again
//! whenever its modification time or size changes, checked at most once per second when asked.
//! A file that cannot be read or parsed keeps the last good contents in force (logged).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often the file's metadata is looked at, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);

type Parser<T> = Box<dyn Fn(&str) -> Result<T, String> + Send + Sync>;

/// What was last seen of the file.
struct Seen<T> {
    /// When the metadata was last looked at (`None`: look now).
    checked: Option<Instant>,
    /// Modification time and size then.
    stamp: Option<(SystemTime, u64)>,
    value: Arc<T>,
}

/// The parsed contents of a file, re-read when it changes.
pub struct Reloadable<T> {
    path: PathBuf,
    parse: Parser<T>,
    state: Mutex<Seen<T>>,
}

impl<T: Default + Send + Sync + 'static> Reloadable<T> {
    /// Reads `path` now. An unreadable file at startup is an error (the operator named it).
    pub fn open(path: &Path, parse: impl Fn(&str) -> Result<T, String> + Send + Sync + 'static) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let value = parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Reloadable {
            path: path.to_path_buf(),
            parse: Box::new(parse),
            state: Mutex::new(Seen { checked: Some(Instant::now()), stamp: stamp(path), value: Arc::new(value) }),
        })
    }

    /// The current contents, re-read first if the file changed.
    pub fn get(&self) -> Arc<T> {
        let mut st = self.state.lock().unwrap();
        let now = Instant::now();
        if st.checked.is_some_and(|t| now.duration_since(t) < CHECK_EVERY) {
            return st.value.clone();
        }
        st.checked = Some(now);
        let current = stamp(&self.path);
        if current == st.stamp {
            return st.value.clone();
        }
        st.stamp = current;
        match std::fs::read_to_string(&self.path).map_err(|e| e.to_string()).and_then(|t| (self.parse)(&t)) {
            Ok(v) => {
                tracing::info!(file = %self.path.display(), "file changed; new contents in force");
                st.value = Arc::new(v);
            }
            Err(e) => {
                tracing::error!(file = %self.path.display(), error = %e, "file changed but cannot be read; the previous contents stay in force");
            }
        }
        st.value.clone()
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rereads_on_change_and_keeps_the_last_good_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("list");
        std::fs::write(&path, "1").unwrap();
        let r = Reloadable::open(&path, |t| t.trim().parse::<u32>().map_err(|e| e.to_string())).unwrap();
        assert_eq!(*r.get(), 1);
        std::fs::write(&path, "22").unwrap();
        r.state.lock().unwrap().checked = None;
        assert_eq!(*r.get(), 22);
        std::fs::write(&path, "bad").unwrap();
        r.state.lock().unwrap().checked = None;
        assert_eq!(*r.get(), 22);
        assert!(Reloadable::open(&dir.path().join("missing"), |_| Ok(0u32)).is_err());
    }
}
