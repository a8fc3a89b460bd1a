//! Packing a local directory as a zip archive for `POST /upload` with `unzip=true`.
//!
//! Entry names are relative to the directory root with `/` separators, as SWE-ReX's
//! `shutil.make_archive` writes them; the server extracts them *into* the target path.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use uniagent_core::{Error, Result};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// Zips the contents of `dir` (not `dir` itself) into memory.
///
/// Files keep their Unix permission bits. Symbolic links to files are followed (their target's
/// bytes are stored); symbolic links to directories are not descended into, so cycles cannot
/// occur. Empty directories are kept as directory entries.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::create_dir(dir.path().join("nested")).unwrap();
/// std::fs::write(dir.path().join("nested/b.txt"), "b").unwrap();
/// let bytes = uniagent_sandboxes::client::zip_directory(dir.path()).unwrap();
/// assert_eq!(&bytes[..2], b"PK");
/// ```
pub fn zip_directory(dir: &Path) -> Result<Vec<u8>> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let mut stack: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = stack.pop() {
        let mut entries = std::fs::read_dir(&path)
            .map_err(|e| Error::io(format!("listing {}", path.display()), e))?
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::io(format!("listing {}", path.display()), e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().into_string().map_err(|raw| {
                Error::invalid_input(format!(
                    "cannot upload {}: the name is not UTF-8",
                    Path::new(&raw).display()
                ))
            })?;
            let entry_path = entry.path();
            let zip_name = format!("{prefix}{name}");
            let link_meta = entry.metadata().map_err(|e| {
                Error::io(format!("reading metadata of {}", entry_path.display()), e)
            })?;
            let is_link = entry
                .file_type()
                .map_err(|e| Error::io(format!("reading type of {}", entry_path.display()), e))?
                .is_symlink();
            let meta = if is_link {
                std::fs::metadata(&entry_path)
                    .map_err(|e| Error::io(format!("following link {}", entry_path.display()), e))?
            } else {
                link_meta
            };
            let options = file_options(&meta);
            if meta.is_dir() {
                writer
                    .add_directory(format!("{zip_name}/"), options)
                    .map_err(zip_error)?;
                if !is_link {
                    stack.push((entry_path, format!("{zip_name}/")));
                }
            } else {
                let data = std::fs::read(&entry_path)
                    .map_err(|e| Error::io(format!("reading {}", entry_path.display()), e))?;
                writer.start_file(zip_name, options).map_err(zip_error)?;
                writer
                    .write_all(&data)
                    .map_err(|e| Error::io("writing the zip archive", e))?;
            }
        }
    }
    let cursor = writer.finish().map_err(zip_error)?;
    Ok(cursor.into_inner())
}

fn file_options(meta: &std::fs::Metadata) -> SimpleFileOptions {
    use std::os::unix::fs::PermissionsExt;
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Deflated)
        .unix_permissions(meta.permissions().mode() & 0o7777)
        .large_file(meta.len() >= u64::from(u32::MAX))
}

fn zip_error(e: zip::result::ZipError) -> Error {
    Error::Internal {
        message: format!("building the upload archive failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn archive_holds_relative_paths_contents_modes_and_empty_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
        std::fs::create_dir_all(dir.path().join("nested/deeper")).unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let bin: Vec<u8> = (0..=255u8).collect();
        std::fs::write(dir.path().join("nested/deeper/bin.dat"), &bin).unwrap();
        std::fs::write(dir.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            dir.path().join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink(dir.path().join("a.txt"), dir.path().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("nested/loop")).unwrap();

        let bytes = zip_directory(dir.path()).unwrap();
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        let mut names: Vec<String> = archive.file_names().map(str::to_owned).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "a.txt",
                "empty/",
                "link.txt",
                "nested/",
                "nested/deeper/",
                "nested/deeper/bin.dat",
                "nested/loop/",
                "run.sh"
            ]
        );
        let mut content = Vec::new();
        archive
            .by_name("nested/deeper/bin.dat")
            .unwrap()
            .read_to_end(&mut content)
            .unwrap();
        assert_eq!(content, bin);
        let mut link = String::new();
        archive
            .by_name("link.txt")
            .unwrap()
            .read_to_string(&mut link)
            .unwrap();
        assert_eq!(link, "alpha");
        assert_eq!(
            archive.by_name("run.sh").unwrap().unix_mode().unwrap() & 0o777,
            0o755
        );
    }

    #[test]
    fn a_missing_directory_is_an_io_error() {
        let err = zip_directory(Path::new("/nonexistent/uniagent/dir")).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
    }
}
