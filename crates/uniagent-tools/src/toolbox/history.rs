//! Per-file edit history, persisted in the sandbox so `undo_edit` works across toolbox runs.
//!
//! # Layout
//! `STATE_DIR/history/<16 hex digits>/` holds the history of one path: the digits are the
//! FNV-1a hash of the path (a collision moves to the next number), the file `path` holds the
//! path itself, and each edit adds one entry, numbered from 1: `NNNNNNNNNN.prev` with the
//! file's exact bytes before the edit, or an empty `NNNNNNNNNN.absent` when the edit created
//! the file. `undo_edit` takes the highest entry, restores it and deletes it. Entries are
//! written to a temporary name and renamed, so an interrupted run never leaves half an entry.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The edit history under one state directory.
#[derive(Debug, Clone)]
pub struct History {
    root: PathBuf,
}

/// What a history entry says the file was before an edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Previous {
    /// The file did not exist.
    Absent,
    /// The file's exact bytes.
    Content(Vec<u8>),
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl History {
    /// The history kept under `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            root: state_dir.into().join("history"),
        }
    }

    /// The directory of `path`'s history; created when `create` is set, else `None` if absent.
    fn dir_for(&self, path: &str, create: bool) -> io::Result<Option<PathBuf>> {
        let mut key = fnv1a(path.as_bytes());
        loop {
            let dir = self.root.join(format!("{key:016x}"));
            match fs::read(dir.join("path")) {
                Ok(stored) if stored == path.as_bytes() => return Ok(Some(dir)),
                Ok(_) => key = key.wrapping_add(1),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if !create {
                        return Ok(None);
                    }
                    fs::create_dir_all(&dir)?;
                    write_atomically(&dir.join("path"), path.as_bytes())?;
                    return Ok(Some(dir));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn entries(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry_path = entry?.path();
            let number = entry_path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| {
                    n.strip_suffix(".prev")
                        .or_else(|| n.strip_suffix(".absent"))
                })
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(number) = number {
                entries.push((number, entry_path));
            }
        }
        entries.sort();
        Ok(entries)
    }

    /// Records what `path` was before an edit.
    pub fn record(&self, path: &str, previous: &Previous) -> io::Result<()> {
        let Some(dir) = self.dir_for(path, true)? else {
            return Err(io::Error::other("history directory vanished"));
        };
        let next = Self::entries(&dir)?.last().map_or(1, |(n, _)| n + 1);
        match previous {
            Previous::Absent => write_atomically(&dir.join(format!("{next:010}.absent")), b""),
            Previous::Content(bytes) => {
                write_atomically(&dir.join(format!("{next:010}.prev")), bytes)
            }
        }
    }

    /// Removes and returns the latest entry of `path`, if any.
    pub fn pop(&self, path: &str) -> io::Result<Option<Previous>> {
        let Some(dir) = self.dir_for(path, false)? else {
            return Ok(None);
        };
        let Some((_, entry)) = Self::entries(&dir)?.pop() else {
            return Ok(None);
        };
        let previous = if entry.extension().is_some_and(|e| e == "absent") {
            Previous::Absent
        } else {
            Previous::Content(fs::read(&entry)?)
        };
        fs::remove_file(&entry)?;
        Ok(Some(previous))
    }

    /// How many edits of `path` can be undone.
    pub fn depth(&self, path: &str) -> io::Result<usize> {
        match self.dir_for(path, false)? {
            Some(dir) => Ok(Self::entries(&dir)?.len()),
            None => Ok(0),
        }
    }
}

/// Writes `bytes` to a temporary sibling of `target` and renames it over `target`.
pub fn write_atomically(target: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    let tmp = target.with_file_name(format!(".{name}.uniagent-tmp-{:016x}", fastrand::u64(..)));
    let result = fs::write(&tmp, bytes).and_then(|()| {
        if let Ok(meta) = fs::metadata(target) {
            fs::set_permissions(&tmp, meta.permissions())?;
        }
        fs::rename(&tmp, target)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_pop_in_reverse_order_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        history.record("/a", &Previous::Absent).unwrap();
        history
            .record("/a", &Previous::Content(b"one".to_vec()))
            .unwrap();
        history
            .record("/b", &Previous::Content(b"bee".to_vec()))
            .unwrap();
        let reopened = History::new(dir.path());
        assert_eq!(reopened.depth("/a").unwrap(), 2);
        assert_eq!(
            reopened.pop("/a").unwrap(),
            Some(Previous::Content(b"one".to_vec()))
        );
        assert_eq!(reopened.pop("/a").unwrap(), Some(Previous::Absent));
        assert_eq!(reopened.pop("/a").unwrap(), None);
        assert_eq!(
            reopened.pop("/b").unwrap(),
            Some(Previous::Content(b"bee".to_vec()))
        );
        assert_eq!(reopened.pop("/never").unwrap(), None);
    }

    #[test]
    fn hash_collisions_probe_onwards() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        // Occupy /x's slot with another path, as a collision would.
        let slot = dir
            .path()
            .join("history")
            .join(format!("{:016x}", fnv1a(b"/x")));
        fs::create_dir_all(&slot).unwrap();
        fs::write(slot.join("path"), "/other").unwrap();
        history
            .record("/x", &Previous::Content(b"x".to_vec()))
            .unwrap();
        assert_eq!(fs::read(slot.join("path")).unwrap(), b"/other");
        assert_eq!(
            history.pop("/x").unwrap(),
            Some(Previous::Content(b"x".to_vec()))
        );
    }
}
