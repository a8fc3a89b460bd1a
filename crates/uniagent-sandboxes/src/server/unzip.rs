//! Zip extraction for `/upload` with `unzip`, entry by entry under budgets.
//!
//! The zip crate's `extract` trusts declared sizes (a symlink entry declaring 32 TiB makes it
//! allocate that much) and has no limit on entries or bytes. Here every entry is checked before
//! anything is read, bytes are counted as they are written (declared sizes may lie), symlink
//! targets are read through a small fixed bound, and symlinks are created only after every file
//! and directory is in place, so an archive cannot write through a link it created itself.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::errors::{class, ServerError};

/// The longest symlink target accepted (Linux's `PATH_MAX`).
const MAX_LINK_TARGET: u64 = 4096;

/// Budgets for one extraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnzipLimits {
    /// Entries in the archive (files, directories and links together).
    pub max_entries: usize,
    /// Bytes written in all, whatever the archive declares.
    pub max_total_bytes: u64,
    /// Bytes written per archive byte: `max_ratio × archive size` also bounds the total, which
    /// stops bombs that reuse one compressed stream for many entries.
    pub max_ratio: u64,
}

impl Default for UnzipLimits {
    fn default() -> Self {
        Self {
            max_entries: 100_000,
            max_total_bytes: 4 << 30,
            max_ratio: 1100,
        }
    }
}

fn bad_zip(message: impl Into<String>) -> ServerError {
    ServerError::exception(class::BAD_ZIP, message)
}

fn too_large(message: impl Into<String>) -> ServerError {
    ServerError::exception(class::LARGE_ZIP, message)
}

fn os_error(e: &std::io::Error, path: &Path) -> ServerError {
    ServerError::os_error(e, &path.to_string_lossy())
}

/// The entry's path below `target`, or `None` for absolute paths and `..` that leave it.
fn contained(target: &Path, name: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(target.join(out))
}

/// Creates `dir` and its parents below `target`, refusing to pass through a symlink.
fn make_dirs(target: &Path, dir: &Path) -> Result<(), ServerError> {
    let Ok(relative) = dir.strip_prefix(target) else {
        return Err(bad_zip(format!("unsafe path {}", dir.display())));
    };
    let mut here = target.to_path_buf();
    for part in relative.components() {
        here.push(part);
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(bad_zip(format!(
                    "{} exists and is not a directory",
                    here.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&here).map_err(|e| os_error(&e, &here))?;
            }
            Err(e) => return Err(os_error(&e, &here)),
        }
    }
    Ok(())
}

/// Extracts the zip archive `archive` into the existing directory `target` within `limits`.
///
/// Errors: `zipfile.BadZipFile` for a malformed archive or an entry whose path leaves `target`
/// (absolute, `..`, through a symlink); `zipfile.LargeZipFile` when a budget is exceeded;
/// `OSError` for file-system failures (a full disk, say). Files written before an error stay.
pub fn extract(archive: &Path, target: &Path, limits: &UnzipLimits) -> Result<(), ServerError> {
    let file = std::fs::File::open(archive).map_err(|e| os_error(&e, archive))?;
    let archive_len = file.metadata().map_err(|e| os_error(&e, archive))?.len();
    let mut zip = zip::ZipArchive::new(file).map_err(|_| bad_zip("File is not a zip file"))?;
    if zip.len() > limits.max_entries {
        return Err(too_large(format!(
            "the archive has {} entries, more than the limit of {}",
            zip.len(),
            limits.max_entries
        )));
    }
    let budget = limits
        .max_total_bytes
        .min(archive_len.saturating_mul(limits.max_ratio.max(1)));
    let mut written = 0u64;
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    for index in 0..zip.len() {
        let mut entry = zip
            .by_index(index)
            .map_err(|e| bad_zip(format!("entry {index}: {e}")))?;
        let name = PathBuf::from(entry.name());
        let Some(path) = contained(target, &name) else {
            return Err(bad_zip(format!("unsafe path {}", entry.name())));
        };
        if entry.is_dir() {
            make_dirs(target, &path)?;
            continue;
        }
        if let Some(parent) = path.parent() {
            make_dirs(target, parent)?;
        }
        if entry.is_symlink() {
            if entry.size() > MAX_LINK_TARGET {
                return Err(bad_zip(format!(
                    "{}: symlink target declared as {} bytes (at most {MAX_LINK_TARGET})",
                    entry.name(),
                    entry.size()
                )));
            }
            let mut link = Vec::new();
            (&mut entry)
                .take(MAX_LINK_TARGET + 1)
                .read_to_end(&mut link)
                .map_err(|e| bad_zip(format!("{}: {e}", entry.name())))?;
            if link.len() as u64 > MAX_LINK_TARGET || link.is_empty() {
                return Err(bad_zip(format!(
                    "{}: symlink target longer than {MAX_LINK_TARGET} bytes or empty",
                    entry.name()
                )));
            }
            let link = String::from_utf8(link)
                .map_err(|_| bad_zip(format!("{}: symlink target is not UTF-8", entry.name())))?;
            links.push((path, PathBuf::from(link)));
            continue;
        }
        let left = budget.saturating_sub(written);
        if entry.size() > left {
            return Err(too_large(format!(
                "{} declares {} bytes; the extraction budget has {left} left",
                entry.name(),
                entry.size()
            )));
        }
        let mode = entry.unix_mode().map(|m| m & 0o777);
        let mut out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| os_error(&e, &path))?;
        // The declared size was checked against the budget above; an entry that inflates past
        // it lies, and is stopped there rather than at the (much larger) total budget.
        let declared = entry.size();
        let copied = copy_bounded(&mut entry, &mut out, declared, &path)?;
        written += copied;
        if let Some(mode) = mode.filter(|m| *m != 0) {
            let _ = out.set_permissions(std::fs::Permissions::from_mode(mode));
        }
    }
    for (path, link) in links {
        std::os::unix::fs::symlink(&link, &path).map_err(|e| os_error(&e, &path))?;
    }
    Ok(())
}

/// Copies at most `declared` bytes (the entry's declared size, already within the budget);
/// one more byte available is a budget error: the entry inflates past what it declared.
fn copy_bounded(
    from: &mut impl Read,
    to: &mut std::fs::File,
    declared: u64,
    path: &Path,
) -> Result<u64, ServerError> {
    let mut buf = vec![0u8; 64 << 10];
    let mut copied = 0u64;
    loop {
        let n = from
            .read(&mut buf)
            .map_err(|e| bad_zip(format!("{}: {e}", path.display())))?;
        if n == 0 {
            return Ok(copied);
        }
        copied += n as u64;
        if copied > declared {
            return Err(too_large(format!(
                "{}: inflates past its declared size of {declared} bytes (extraction stopped \
                 there, within the extraction budget)",
                path.display()
            )));
        }
        // Only the bytes within the declared size are written.
        to.write_all(&buf[..n]).map_err(|e| os_error(&e, path))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_target() {
        let t = Path::new("/t");
        assert_eq!(
            contained(t, Path::new("a/./b")),
            Some(PathBuf::from("/t/a/b"))
        );
        assert_eq!(
            contained(t, Path::new("a/../b")),
            Some(PathBuf::from("/t/b"))
        );
        assert_eq!(contained(t, Path::new("../b")), None);
        assert_eq!(contained(t, Path::new("a/../../b")), None);
        assert_eq!(contained(t, Path::new("/etc/passwd")), None);
    }
}
