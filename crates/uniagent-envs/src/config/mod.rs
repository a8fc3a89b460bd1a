//! Configuration documents: a file read into a JSON value with `--set` overrides applied, whose
//! typed sections decode with errors that name the file, the line and the key.

mod doc;
mod locate;

use std::path::{Path, PathBuf};

pub use doc::{ConfigDoc, Override};
pub use locate::line_of;

/// `path` against `base` unless it is absolute.
///
/// ```
/// use std::path::{Path, PathBuf};
/// use uniagent_envs::config::resolve;
/// assert_eq!(resolve(Path::new("/cfg"), Path::new("tasks.jsonl")), PathBuf::from("/cfg/tasks.jsonl"));
/// assert_eq!(resolve(Path::new("/cfg"), Path::new("/data/t.jsonl")), PathBuf::from("/data/t.jsonl"));
/// ```
pub fn resolve(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || base.as_os_str().is_empty() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}
