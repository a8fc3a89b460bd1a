//! [`JsonlIndex`]: a byte-offset index of a JSONL file that follows the file as it grows.
//!
//! Only complete lines (ending in `\n`) are indexed; a trailing partial line is a run still
//! writing and is picked up by a later [`JsonlIndex::refresh`]. A line that is not valid JSON
//! is skipped with a warning. A file that shrank was rewritten: the index starts over.
//!
//! [`JsonlIndex::refresh_some`] reads at most a byte budget per call, so a caller holding the
//! index never waits for a whole large file: the first page of a 500 MB file is served from
//! its first chunk while the rest is indexed in the background.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// How many corrupt-line warnings are kept word for word (the rest are counted).
const MAX_LINE_WARNINGS: usize = 20;

/// One indexed line: where it is and what was extracted from it.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// Length of the line in bytes, without the newline.
    pub len: u32,
    /// 1-based line number in the file.
    pub line: u64,
    /// What the extractor took from the line.
    pub row: T,
}

/// A byte-offset index over a JSONL file; `T` is what the extractor keeps per line.
#[derive(Debug)]
pub struct JsonlIndex<T> {
    path: PathBuf,
    entries: Vec<Entry<T>>,
    /// Bytes consumed so far (up to the end of the last complete line).
    scanned: u64,
    /// Lines consumed so far (good, corrupt and blank).
    lines: u64,
    /// Bytes after the last newline at the last refresh (a line being written).
    pending: u64,
    /// Complete-line bytes left unread by the last budgeted refresh.
    behind: u64,
    corrupt: Vec<String>,
    corrupt_count: u64,
    restarted: bool,
    /// Why the last refresh could not read the file (kept until one succeeds).
    error: Option<String>,
    extract: fn(&[u8]) -> Result<T, String>,
}

impl<T> JsonlIndex<T> {
    /// An empty index of `path`; `extract` turns one line into a row or says why it cannot.
    pub fn new(path: impl Into<PathBuf>, extract: fn(&[u8]) -> Result<T, String>) -> Self {
        Self {
            path: path.into(),
            entries: Vec::new(),
            scanned: 0,
            lines: 0,
            pending: 0,
            behind: 0,
            corrupt: Vec::new(),
            corrupt_count: 0,
            restarted: false,
            error: None,
            extract,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file exists (as of now).
    pub fn exists(&self) -> bool {
        self.path.is_file()
    }

    /// Indexes every line appended since the last call. A missing file is an empty index.
    pub fn refresh(&mut self) -> std::io::Result<()> {
        self.refresh_some(u64::MAX).map(|_| ())
    }

    /// Indexes lines appended since the last call, stopping at the first line end past
    /// `budget` bytes; returns whether the index caught up with the file.
    pub fn refresh_some(&mut self, budget: u64) -> std::io::Result<bool> {
        let result = self.read_some(budget);
        self.error = result.as_ref().err().map(|e| {
            format!(
                "{}: cannot be read ({e}); showing what was read before",
                self.path.display()
            )
        });
        result
    }

    fn read_some(&mut self, budget: u64) -> std::io::Result<bool> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                self.reset();
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let len = meta.len();
        if len < self.scanned {
            // Rewritten (train truncates its files on a fresh start): start over.
            self.reset();
            self.restarted = true;
        }
        if len == self.scanned {
            self.pending = 0;
            self.behind = 0;
            return Ok(true);
        }
        let start = self.scanned;
        file.seek(SeekFrom::Start(self.scanned))?;
        let mut reader = BufReader::with_capacity(1 << 20, file.take_len(len - self.scanned));
        let mut line = Vec::new();
        self.pending = 0;
        self.behind = 0;
        loop {
            if self.scanned - start >= budget {
                self.behind = len - self.scanned;
                return Ok(false);
            }
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // Still being written: leave it for the next refresh.
                self.pending = n as u64;
                break;
            }
            let offset = self.scanned;
            self.scanned += n as u64;
            self.lines += 1;
            let body = &line[..n - 1];
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if body.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match (self.extract)(body) {
                Ok(row) => self.entries.push(Entry {
                    offset,
                    len: body.len() as u32,
                    line: self.lines,
                    row,
                }),
                Err(why) => {
                    self.corrupt_count += 1;
                    if self.corrupt.len() < MAX_LINE_WARNINGS {
                        self.corrupt.push(format!(
                            "{} line {}: skipped, {why}",
                            self.path.display(),
                            self.lines
                        ));
                    }
                }
            }
        }
        Ok(true)
    }

    /// Whether the last refresh stopped at its budget before the end of the file.
    pub fn is_behind(&self) -> bool {
        self.behind > 0
    }

    fn reset(&mut self) {
        self.entries.clear();
        self.scanned = 0;
        self.lines = 0;
        self.pending = 0;
        self.behind = 0;
        self.corrupt.clear();
        self.corrupt_count = 0;
    }

    /// The indexed lines, in file order.
    pub fn entries(&self) -> &[Entry<T>] {
        &self.entries
    }

    /// Reads the raw bytes of `entry` from the file.
    pub fn read(&self, entry: &Entry<T>) -> std::io::Result<Vec<u8>> {
        let file = File::open(&self.path)?;
        let mut buf = vec![0; entry.len as usize];
        file.read_exact_at(&mut buf, entry.offset)?;
        Ok(buf)
    }

    /// What a reader should know: corrupt lines, a line still being written, a restart.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.corrupt.clone();
        out.extend(self.error.clone());
        let unlisted = self.corrupt_count.saturating_sub(self.corrupt.len() as u64);
        if unlisted > 0 {
            out.push(format!(
                "{}: {unlisted} more corrupt lines skipped",
                self.path.display()
            ));
        }
        if self.pending > 0 {
            out.push(format!(
                "{}: the last line is incomplete ({} bytes, still being written?); not shown yet",
                self.path.display(),
                self.pending
            ));
        }
        if self.behind > 0 {
            out.push(format!(
                "{}: still indexing, {:.1} MB to go; counts and searches cover what is indexed",
                self.path.display(),
                self.behind as f64 / 1e6
            ));
        }
        if self.restarted {
            out.push(format!(
                "{}: the file shrank (rewritten); indexed again from the start",
                self.path.display()
            ));
        }
        out
    }
}

/// `Read::take` by value on a `File` without importing `Read` at every call site.
trait TakeLen: Sized {
    fn take_len(self, n: u64) -> std::io::Take<Self>;
}

impl TakeLen for File {
    fn take_len(self, n: u64) -> std::io::Take<Self> {
        std::io::Read::take(self, n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use proptest::prelude::*;

    use super::*;

    fn number(line: &[u8]) -> Result<u64, String> {
        serde_json::from_slice::<serde_json::Value>(line)
            .map_err(|e| format!("not JSON: {e}"))?
            .get("n")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| "no `n`".to_owned())
    }

    #[test]
    fn follows_a_growing_file_and_waits_for_partial_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut f = File::create(&path).unwrap();
        write!(f, "{{\"n\":1}}\n\n{{oops\n{{\"n\":2}}\n{{\"n\":").unwrap();
        let mut index = JsonlIndex::new(&path, number);
        index.refresh().unwrap();
        let rows: Vec<u64> = index.entries().iter().map(|e| e.row).collect();
        assert_eq!(rows, [1, 2]);
        let warnings = index.warnings().join("\n");
        assert!(warnings.contains("line 3: skipped"), "{warnings}");
        assert!(warnings.contains("incomplete"), "{warnings}");
        writeln!(f, "3}}").unwrap();
        index.refresh().unwrap();
        let last = index.entries().last().unwrap();
        assert_eq!((last.row, last.line), (3, 5));
        assert_eq!(index.read(last).unwrap(), b"{\"n\":3}");
        assert!(!index.warnings().join("").contains("incomplete"));
        // Rewritten shorter: indexed again.
        std::fs::write(&path, "{\"n\":9}\n").unwrap();
        index.refresh().unwrap();
        assert_eq!(index.entries().len(), 1);
        assert!(index.warnings().join("").contains("shrank"));
    }

    #[test]
    fn a_budget_indexes_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let text: String = (0..100).map(|n| format!("{{\"n\":{n}}}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let mut index = JsonlIndex::new(&path, number);
        assert!(!index.refresh_some(100).unwrap());
        let first = index.entries().len();
        assert!((1..100).contains(&first), "{first}");
        assert!(index.is_behind() && index.warnings().join("").contains("still indexing"));
        while !index.refresh_some(100).unwrap() {}
        let rows: Vec<u64> = index.entries().iter().map(|e| e.row).collect();
        assert_eq!(rows, (0..100).collect::<Vec<u64>>());
        assert!(!index.is_behind() && index.warnings().is_empty());
    }

    proptest! {
        /// Any bytes, indexed in chunks of any size, give the rows of one full pass and never
        /// panic; the torn tail (no final newline) is never indexed.
        #[test]
        fn chunked_indexing_equals_one_pass(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    (0u64..1000).prop_map(|n| format!("{{\"n\":{n}}}")),
                    "[ -~]{0,12}",
                ],
                0..40,
            ),
            tail in "[ -~]{0,8}",
            budget in 1u64..64,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.jsonl");
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect::<String>() + &tail;
            std::fs::write(&path, &text).unwrap();
            let mut whole = JsonlIndex::new(&path, number);
            whole.refresh().unwrap();
            let mut chunked = JsonlIndex::new(&path, number);
            while !chunked.refresh_some(budget).unwrap() {}
            let rows = |i: &JsonlIndex<u64>| i.entries().iter().map(|e| (e.offset, e.line, e.row)).collect::<Vec<_>>();
            prop_assert_eq!(rows(&whole), rows(&chunked));
            let expected: Vec<u64> = lines.iter().filter_map(|l| number(l.as_bytes()).ok()).collect();
            prop_assert_eq!(whole.entries().iter().map(|e| e.row).collect::<Vec<_>>(), expected);
            for e in whole.entries() {
                prop_assert_eq!(number(&whole.read(e).unwrap()).unwrap(), e.row);
            }
        }
    }

    #[test]
    fn a_missing_file_is_empty() {
        let mut index = JsonlIndex::new("/nonexistent/x.jsonl", number);
        index.refresh().unwrap();
        assert!(index.entries().is_empty() && !index.exists());
    }
}
