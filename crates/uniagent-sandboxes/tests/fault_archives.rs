//! Fault injection, hostile archives: `/upload` with `unzip` against traversal, absolute paths,
//! symlink-then-write, lying size headers, bombs and entry floods. Every case gets a typed 511
//! answer, writes nothing outside the target, and leaves the server serving.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fault_common;
mod server_common;

use fault_common::{deflated_zip, raw_zip, upload, RawEntry};
use serde_json::json;
use server_common::{class_path, TestServer};

const LINK: u32 = 0o120_777;
const FILE: u32 = 0o100_644;

async fn assert_alive(s: &TestServer) {
    assert_eq!(
        s.get("/is_alive").await,
        (200, json!({"is_alive": true, "message": ""}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_size_headers_do_not_allocate() {
    let s = TestServer::start().await;
    let target = s.scratch.path().join("t1");
    // The 132-byte archive: a zip64 symlink entry declaring 32 TiB.
    let zip = raw_zip(&[RawEntry {
        name: "l",
        data: b"x",
        declared: 32 << 40,
        mode: LINK,
    }]);
    assert!(zip.len() < 200, "{}", zip.len());
    let (status, body) = upload(&s, zip, target.to_str().unwrap(), true).await;
    assert_eq!(status, 511, "{body}");
    assert!(class_path(&body).starts_with("zipfile."), "{body}");
    assert_alive(&s).await;
    // The same declaration on a file entry, and 4 GiB on a symlink.
    for (declared, mode) in [(32u64 << 40, FILE), (4 << 30, LINK), (4 << 30, FILE)] {
        let zip = raw_zip(&[RawEntry {
            name: "f",
            data: b"x",
            declared,
            mode,
        }]);
        let (status, body) = upload(&s, zip, target.to_str().unwrap(), true).await;
        assert_eq!(status, 511, "{declared} {mode:o}: {body}");
        assert!(class_path(&body).starts_with("zipfile."), "{body}");
    }
    assert_alive(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_never_leave_the_target() {
    let s = TestServer::start().await;
    let base = s.scratch.path();
    let target = base.join("t2");
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let abs = format!("{}/abs", outside.display());
    let link_target = outside.display().to_string();
    let cases: Vec<Vec<RawEntry<'_>>> = vec![
        vec![RawEntry {
            name: "../escape",
            data: b"x",
            declared: 1,
            mode: FILE,
        }],
        vec![RawEntry {
            name: "a/../../escape",
            data: b"x",
            declared: 1,
            mode: FILE,
        }],
        vec![RawEntry {
            name: &abs,
            data: b"x",
            declared: 1,
            mode: FILE,
        }],
        // Symlink then write through it.
        vec![
            RawEntry {
                name: "link",
                data: link_target.as_bytes(),
                declared: link_target.len() as u64,
                mode: LINK,
            },
            RawEntry {
                name: "link/pwned",
                data: b"x",
                declared: 1,
                mode: FILE,
            },
        ],
        // A symlink to a file outside, then a file entry with the link's name.
        vec![
            RawEntry {
                name: "l2",
                data: abs.as_bytes(),
                declared: abs.len() as u64,
                mode: LINK,
            },
            RawEntry {
                name: "l2",
                data: b"x",
                declared: 1,
                mode: FILE,
            },
        ],
    ];
    for (i, entries) in cases.iter().enumerate() {
        let (status, body) = upload(&s, raw_zip(entries), target.to_str().unwrap(), true).await;
        let _ = (status, &body);
        let escaped: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert!(
            escaped.is_empty(),
            "case {i}: wrote outside: {escaped:?} ({body})"
        );
        assert!(!base.join("escape").exists(), "case {i}");
    }
    // The first three are refused outright.
    for entries in &cases[..3] {
        let (status, body) = upload(&s, raw_zip(entries), target.to_str().unwrap(), true).await;
        assert_eq!(
            (status, class_path(&body)),
            (511, "zipfile.BadZipFile"),
            "{body}"
        );
    }
    // An honest archive with a relative symlink still extracts.
    let ok = raw_zip(&[
        RawEntry {
            name: "d/f",
            data: b"hi",
            declared: 2,
            mode: FILE,
        },
        RawEntry {
            name: "d/l",
            data: b"f",
            declared: 1,
            mode: LINK,
        },
    ]);
    let good = base.join("good");
    assert_eq!(upload(&s, ok, good.to_str().unwrap(), true).await.0, 200);
    assert_eq!(std::fs::read_to_string(good.join("d/l")).unwrap(), "hi");
    assert_alive(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_and_floods_hit_the_budgets() {
    let s = TestServer::start_with(|c| {
        c.limits.unzip.max_total_bytes = 8 << 20;
        c.limits.unzip.max_entries = 2000;
    })
    .await;
    let base = s.scratch.path();
    // 64 MiB of zeros deflates to ~64 KiB: over the 8 MiB total budget.
    let bomb = deflated_zip(&[("zeros".into(), vec![0u8; 64 << 20])]);
    let (status, body) = upload(&s, bomb, base.join("b").to_str().unwrap(), true).await;
    assert_eq!(
        (status, class_path(&body)),
        (511, "zipfile.LargeZipFile"),
        "{body}"
    );
    let written = std::fs::metadata(base.join("b/zeros"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(written <= 8 << 20, "{written}");
    // A declared size that is honest but over budget is refused before anything is read.
    let zip = raw_zip(&[RawEntry {
        name: "big",
        data: b"",
        declared: 9 << 20,
        mode: FILE,
    }]);
    let (status, body) = upload(&s, zip, base.join("c").to_str().unwrap(), true).await;
    assert_eq!(
        (status, class_path(&body)),
        (511, "zipfile.LargeZipFile"),
        "{body}"
    );
    assert!(!base.join("c/big").exists());
    // An entry flood: more entries than allowed is refused before extraction.
    let files: Vec<(String, Vec<u8>)> = (0..2001).map(|i| (format!("f{i}"), Vec::new())).collect();
    let (status, body) = upload(
        &s,
        deflated_zip(&files),
        base.join("d").to_str().unwrap(),
        true,
    )
    .await;
    assert_eq!(
        (status, class_path(&body)),
        (511, "zipfile.LargeZipFile"),
        "{body}"
    );
    assert!(!base.join("d/f0").exists());
    assert_alive(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_entries_are_refused_by_default() {
    let s = TestServer::start().await;
    let files: Vec<(String, Vec<u8>)> =
        (0..100_001).map(|i| (format!("{i}"), Vec::new())).collect();
    let target = s.scratch.path().join("e");
    let (status, body) = upload(&s, deflated_zip(&files), target.to_str().unwrap(), true).await;
    assert_eq!(
        (status, class_path(&body)),
        (511, "zipfile.LargeZipFile"),
        "{body}"
    );
    assert_alive(&s).await;
}

/// Sets the uncompressed size of every entry of a (non-zip64) archive to `size`, in the local
/// headers and the central directory alike: an entry that declares less than it inflates to.
fn declare_size(mut zip: Vec<u8>, size: u32) -> Vec<u8> {
    let mut at = 0;
    while at + 4 <= zip.len() {
        let field = match zip[at..at + 4] {
            [0x50, 0x4b, 0x03, 0x04] => Some(at + 22),
            [0x50, 0x4b, 0x01, 0x02] => Some(at + 24),
            _ => None,
        };
        if let Some(field) = field {
            zip[field..field + 4].copy_from_slice(&size.to_le_bytes());
        }
        at += 1;
    }
    zip
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_inflating_past_its_declared_size_stops_there_with_default_budgets() {
    let s = TestServer::start().await;
    let target = s.scratch.path().join("lie");
    // 64 MiB of zeros (a ~64 KiB deflate stream) declared as 1 KiB: well inside the default
    // 4 GiB budget, so only counting against the declaration stops it.
    let zip = declare_size(deflated_zip(&[("zeros".into(), vec![0u8; 64 << 20])]), 1024);
    let (status, body) = upload(&s, zip, target.to_str().unwrap(), true).await;
    assert_eq!(
        (status, class_path(&body)),
        (511, "zipfile.LargeZipFile"),
        "{body}"
    );
    assert!(body.to_string().contains("declared size"), "{body}");
    let written = std::fs::metadata(target.join("zeros"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        written <= 1024,
        "{written} bytes written past a 1 KiB declaration"
    );
    // An honest archive of the same content is extracted whole.
    let honest = deflated_zip(&[("zeros".into(), vec![0u8; 1 << 20])]);
    let ok = s.scratch.path().join("honest");
    assert_eq!(upload(&s, honest, ok.to_str().unwrap(), true).await.0, 200);
    assert_eq!(std::fs::metadata(ok.join("zeros")).unwrap().len(), 1 << 20);
    assert_alive(&s).await;
}
