//! Every editor command on tricky files, and the undo property.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    history: History,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("work");
        fs::create_dir(&root).unwrap();
        let history = History::new(dir.path().join("state"));
        Self {
            root,
            history,
            _dir: dir,
        }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.root.join(name);
        fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn run(&self, args: Value) -> Result<String, EditorError> {
        run_editor(&EditorArgs::from_value(&args).unwrap(), &self.history)
    }

    fn ok(&self, args: Value) -> String {
        self.run(args)
            .unwrap_or_else(|e| panic!("editor refused: {e}"))
    }

    fn err(&self, args: Value) -> String {
        self.run(args).expect_err("editor should refuse").message
    }
}

fn read(path: &str) -> Vec<u8> {
    fs::read(path).unwrap()
}

#[test]
fn str_replace_keeps_crlf_tabs_unicode_and_missing_newline() {
    let f = Fixture::new();
    let original = "fn main() {\r\n\tlet s = \"héllo 🌍\";\r\n\tprintln!(\"{s}\");\r\n}";
    let path = f.file("main.rs", original.as_bytes());
    let out = f.ok(json!({"command": "str_replace", "path": path, "old_str": "héllo 🌍", "new_str": "wörld\tΩ"}));
    assert!(out.contains("     2\t\tlet s = \"wörld\tΩ\";\n"), "{out}");
    assert_eq!(
        read(&path),
        original.replace("héllo 🌍", "wörld\tΩ").as_bytes()
    );
    // An old_str written with bare LF still matches a CRLF file, and the new text gets CRLF.
    f.ok(json!({"command": "str_replace", "path": path, "old_str": "{\n\tlet", "new_str": "{\n\t// hi\n\tlet"}));
    assert_eq!(
        read(&path),
        "fn main() {\r\n\t// hi\r\n\tlet s = \"wörld\tΩ\";\r\n\tprintln!(\"{s}\");\r\n}".as_bytes()
    );
    f.ok(json!({"command": "undo_edit", "path": path}));
    f.ok(json!({"command": "undo_edit", "path": path}));
    assert_eq!(read(&path), original.as_bytes());
}

#[test]
fn str_replace_says_how_often_it_matched() {
    let f = Fixture::new();
    let path = f.file("a.py", b"x = 1\ny = 2\nx = 1\n\tx = 1\n");
    let many = f.err(
        json!({"command": "str_replace", "path": path, "old_str": "x = 1", "new_str": "x = 3"}),
    );
    assert!(
        many.contains("matched 3 times") && many.contains("lines [1, 3, 4]"),
        "{many}"
    );
    let none =
        f.err(json!({"command": "str_replace", "path": path, "old_str": "z = 1", "new_str": "x"}));
    assert!(none.contains("did not appear verbatim"), "{none}");
    let overlap = f.file("o.txt", b"aaa\n");
    let twice =
        f.err(json!({"command": "str_replace", "path": overlap, "old_str": "aa", "new_str": "b"}));
    assert!(twice.contains("matched 2 times"), "{twice}");
    let same = f.err(
        json!({"command": "str_replace", "path": path, "old_str": "y = 2", "new_str": "y = 2"}),
    );
    assert!(same.contains("identical"), "{same}");
    assert_eq!(
        read(&path),
        b"x = 1\ny = 2\nx = 1\n\tx = 1\n",
        "refusals change nothing"
    );
    // A missing new_str deletes.
    f.ok(json!({"command": "str_replace", "path": path, "old_str": "y = 2\n"}));
    assert_eq!(read(&path), b"x = 1\nx = 1\n\tx = 1\n");
}

#[test]
fn insert_goes_after_the_line() {
    let f = Fixture::new();
    let path = f.file("t.txt", b"one\ntwo");
    f.ok(json!({"command": "insert", "path": path, "insert_line": 1, "new_str": "after one"}));
    assert_eq!(read(&path), b"one\nafter one\ntwo");
    f.ok(json!({"command": "insert", "path": path, "insert_line": 0, "new_str": "top\n"}));
    assert_eq!(read(&path), b"top\none\nafter one\ntwo");
    // After a last line without newline: the file still ends without one.
    f.ok(json!({"command": "insert", "path": path, "insert_line": 4, "new_str": "end"}));
    assert_eq!(read(&path), b"top\none\nafter one\ntwo\nend");
    let bad = f.err(json!({"command": "insert", "path": path, "insert_line": 6, "new_str": "x"}));
    assert!(bad.contains("[0, 5]"), "{bad}");
    assert!(f
        .err(json!({"command": "insert", "path": path, "insert_line": -1, "new_str": "x"}))
        .contains("[0, 5]"));
    let crlf = f.file("w.txt", b"a\r\nb\r\n");
    f.ok(json!({"command": "insert", "path": crlf, "insert_line": 2, "new_str": "c\nd"}));
    assert_eq!(read(&crlf), b"a\r\nb\r\nc\r\nd\r\n");
    let empty = f.file("e.txt", b"");
    f.ok(json!({"command": "insert", "path": empty, "insert_line": 0, "new_str": "only"}));
    assert_eq!(read(&empty), b"only\n");
}

#[test]
fn create_refuses_to_overwrite_and_undo_removes_it() {
    let f = Fixture::new();
    let existing = f.file("keep.txt", b"precious");
    let refused = f.err(json!({"command": "create", "path": existing, "file_text": "clobber"}));
    assert!(refused.contains("already exists"), "{refused}");
    assert_eq!(read(&existing), b"precious");
    let new = f.root.join("sub/dir/new.txt");
    let new = new.to_str().unwrap();
    f.ok(json!({"command": "create", "path": new, "file_text": "line\r\nno newline\t"}));
    assert_eq!(read(new), b"line\r\nno newline\t");
    f.ok(json!({"command": "str_replace", "path": new, "old_str": "line\r\n", "new_str": "LINE\r\n"}));
    assert_eq!(read(new), b"LINE\r\nno newline\t");
    f.ok(json!({"command": "undo_edit", "path": new}));
    assert_eq!(read(new), b"line\r\nno newline\t");
    let removed = f.ok(json!({"command": "undo_edit", "path": new}));
    assert!(removed.contains("removed"), "{removed}");
    assert!(!Path::new(new).exists());
    assert!(f
        .err(json!({"command": "undo_edit", "path": new}))
        .contains("No edit history"));
    assert!(f
        .err(json!({"command": "create", "path": "rel/x.txt", "file_text": ""}))
        .contains("absolute"));
}

#[test]
fn view_numbers_lines_and_ranges() {
    let f = Fixture::new();
    let path = f.file("v.txt", "a\r\n\tb\nc ü".as_bytes());
    let all = f.ok(json!({"command": "view", "path": path}));
    assert_eq!(all, format!("Here's the result of running `cat -n` on {path}:\n     1\ta\n     2\t\tb\n     3\tc ü\n"));
    let part = f.ok(json!({"command": "view", "path": path, "view_range": [2, -1]}));
    assert!(
        part.ends_with("     2\t\tb\n     3\tc ü\n") && !part.contains("\ta\n"),
        "{part}"
    );
    let clamped = f.ok(json!({"command": "view", "path": path, "view_range": "[3, 99]"}));
    assert!(clamped.ends_with("     3\tc ü\n"), "{clamped}");
    assert!(f
        .err(json!({"command": "view", "path": path, "view_range": [0, 2]}))
        .contains("first element"));
    assert!(f
        .err(json!({"command": "view", "path": path, "view_range": [3, 2]}))
        .contains("second element"));
    let missing = f.root.join("nope");
    assert!(f
        .err(json!({"command": "view", "path": missing}))
        .contains("does not exist"));
}

#[test]
fn view_lists_directories_two_levels_without_hidden() {
    let f = Fixture::new();
    for dir in ["src/deep/deeper", ".git/objects", "src/.cache"] {
        fs::create_dir_all(f.root.join(dir)).unwrap();
    }
    f.file("src/lib.rs", b"");
    f.file("src/deep/deeper/far.rs", b"");
    f.file(".hidden", b"");
    f.file("README", b"");
    let root = f.root.to_str().unwrap();
    let out = f.ok(json!({"command": "view", "path": root}));
    let listed: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(
        listed,
        [
            root.to_owned(),
            format!("{root}/README"),
            format!("{root}/src/"),
            format!("{root}/src/deep/"),
            format!("{root}/src/lib.rs")
        ]
    );
    assert!(f
        .err(json!({"command": "str_replace", "path": root, "old_str": "a"}))
        .contains("directory"));
}

#[test]
fn binary_and_non_utf8_files_are_refused_clearly() {
    let f = Fixture::new();
    let bin = f.file("a.bin", b"\x7fELF\0\0\x01");
    for args in [
        json!({"command": "view", "path": bin}),
        json!({"command": "str_replace", "path": bin, "old_str": "ELF", "new_str": "FLE"}),
        json!({"command": "insert", "path": bin, "insert_line": 0, "new_str": "x"}),
    ] {
        assert!(f.err(args).contains("binary file"));
    }
    let latin1 = f.file("l.txt", b"caf\xe9\n");
    assert!(f
        .err(json!({"command": "view", "path": latin1}))
        .contains("not UTF-8"));
    assert_eq!(read(&bin), b"\x7fELF\0\0\x01");
}

#[test]
fn a_one_megabyte_file_is_edited_exactly_and_viewed_clipped() {
    let f = Fixture::new();
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 1 << 20 {
        text.push_str(&format!("\tline {i} ünicode\r\n"));
        i += 1;
    }
    let path = f.file("big.txt", text.as_bytes());
    let target = format!("\tline {} ünicode\r\n", i / 2);
    f.ok(json!({"command": "str_replace", "path": path, "old_str": target, "new_str": "\tMIDDLE\r\n"}));
    assert_eq!(
        read(&path),
        text.replacen(&target, "\tMIDDLE\r\n", 1).as_bytes()
    );
    let shown = f.ok(json!({"command": "view", "path": path}));
    assert!(
        shown.ends_with(TRUNCATED_NOTE) && shown.len() < MAX_RESPONSE_LEN * 2,
        "clipped view"
    );
    let window =
        f.ok(json!({"command": "view", "path": path, "view_range": [i / 2 + 1, i / 2 + 1]}));
    assert!(
        window.ends_with(&format!("{:6}\t\tMIDDLE\n", i / 2 + 1)),
        "{window}"
    );
    f.ok(json!({"command": "undo_edit", "path": path}));
    assert_eq!(read(&path), text.as_bytes());
}

#[test]
fn file_permissions_survive_edits() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let path = f.file("run.sh", b"#!/bin/sh\necho hi\n");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o750)).unwrap();
    f.ok(json!({"command": "str_replace", "path": path, "old_str": "hi", "new_str": "ho"}));
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o750
    );
}

/// One random edit; indices pick lines/occurrences modulo what the file has.
#[derive(Debug, Clone)]
enum Edit {
    Replace { line: usize, new: String },
    Insert { line: usize, new: String },
}

fn piece() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-c]",
            Just("\t".to_owned()),
            Just("\r\n".to_owned()),
            Just("\n".to_owned()),
            Just("é🌍".to_owned())
        ],
        0..6,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_edits_then_as_many_undos_restore_the_original(
        original in piece().prop_map(|p| format!("{p}x{p}")),
        edits in prop::collection::vec(prop_oneof![
            (0usize..50, piece()).prop_map(|(line, new)| Edit::Replace { line, new }),
            (0usize..50, piece()).prop_map(|(line, new)| Edit::Insert { line, new }),
        ], 1..8),
    ) {
        let f = Fixture::new();
        let path = f.file("p.txt", original.as_bytes());
        let mut applied = 0;
        for edit in &edits {
            let current = String::from_utf8(read(&path)).unwrap();
            let n = text::line_starts(&current).len();
            let result = match edit {
                Edit::Insert { line, new } => {
                    f.run(json!({"command": "insert", "path": path, "insert_line": line % (n + 1), "new_str": new}))
                }
                Edit::Replace { line, new } => {
                    // Replace the first unique non-empty line, if any; else expect a refusal.
                    let lines = text::display_lines(&current);
                    let old = lines.get(line % lines.len().max(1)).copied().unwrap_or("");
                    f.run(json!({"command": "str_replace", "path": path, "old_str": old, "new_str": new}))
                }
            };
            let after = read(&path);
            match result {
                Ok(_) => applied += 1,
                Err(_) => prop_assert_eq!(&after, current.as_bytes(), "a refused edit changed the file"),
            }
        }
        for _ in 0..applied {
            f.ok(json!({"command": "undo_edit", "path": path}));
        }
        prop_assert_eq!(read(&path), original.as_bytes());
        let extra_undo = f.run(json!({"command": "undo_edit", "path": path}));
        prop_assert!(extra_undo.is_err(), "one undo too many must be refused");
    }
}
