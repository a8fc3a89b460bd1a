//! The numbered, non-blank lines of a JSONL file: what each format's reader iterates over.

use std::fmt::Display;
use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A JSONL file read line by line, counting lines from 1 and skipping blank ones.
#[derive(Debug)]
pub(crate) struct JsonlLines {
    path: PathBuf,
    lines: Lines<BufReader<File>>,
    line: usize,
}

impl JsonlLines {
    /// Opens `path`; [`Error::Io`] naming it when it cannot be opened.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file =
            File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        Ok(Self {
            path: path.to_owned(),
            lines: BufReader::new(file).lines(),
            line: 0,
        })
    }

    /// The next non-blank line through `parse` (given the text and its line number); `None` at
    /// the end. A parse error becomes [`Error::InvalidInput`] naming `path:line`, a read error
    /// [`Error::Io`].
    pub(crate) fn next_parsed<T, E: Display>(
        &mut self,
        parse: impl FnOnce(&str, usize) -> std::result::Result<T, E>,
    ) -> Option<Result<T>> {
        loop {
            let text = match self.lines.next()? {
                Ok(text) => text,
                Err(e) => {
                    return Some(Err(Error::io(
                        format!("reading {}", self.path.display()),
                        e,
                    )))
                }
            };
            self.line += 1;
            if text.trim().is_empty() {
                continue;
            }
            let line = self.line;
            return Some(parse(&text, line).map_err(|e| {
                Error::invalid_input(format!("{}:{line}: {e}", self.path.display()))
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_from_one_blank_ones_skipped_and_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, "a\n\n  \nb\nbad\n").unwrap();
        let mut lines = JsonlLines::open(&path).unwrap();
        let parse = |text: &str, line: usize| match text {
            "bad" => Err("not a letter"),
            _ => Ok((text.to_owned(), line)),
        };
        assert_eq!(lines.next_parsed(parse).unwrap().unwrap(), ("a".into(), 1));
        assert_eq!(lines.next_parsed(parse).unwrap().unwrap(), ("b".into(), 4));
        let err = lines.next_parsed(parse).unwrap().unwrap_err().to_string();
        assert!(err.contains("x.jsonl:5: not a letter"), "{err}");
        assert!(lines.next_parsed(parse).is_none());
        let missing = JsonlLines::open(&dir.path().join("none.jsonl")).unwrap_err();
        assert!(missing.to_string().contains("none.jsonl"), "{missing}");
    }
}
