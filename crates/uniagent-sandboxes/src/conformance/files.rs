//! Checks of file transfer: text round trips, binary uploads and zip extraction.

use std::io::Write;

use uniagent_core::sandbox::{
    Command, ExceptionClass, ReadFileRequest, UploadRequest, WriteFileRequest,
};
use uniagent_core::{Capabilities, Deployment};

use super::{ensure, expect_exception, require, Failure, Outcome};

/// `write_file` creates parents and truncates; `read_file` returns the same text; a missing
/// file is `FileNotFoundError`.
pub(crate) async fn text_files(d: &dyn Deployment, caps: Capabilities, scratch: &str) -> Outcome {
    require(caps.files, "files")?;
    let path = format!("{scratch}/text/deep/t.txt");
    let content = "héllo\n中文 ✓\n\ttabs and trailing spaces  \nno newline at end";
    d.write_file(WriteFileRequest {
        content: content.into(),
        path: path.clone(),
    })
    .await?;
    let back = d.read_file(ReadFileRequest::new(&path)).await?;
    ensure!(
        back.content == content,
        "text round trip changed the content: {:?}",
        back.content
    );
    d.write_file(WriteFileRequest {
        content: "short".into(),
        path: path.clone(),
    })
    .await?;
    let back = d.read_file(ReadFileRequest::new(&path)).await?;
    ensure!(
        back.content == "short",
        "write_file must truncate: {:?}",
        back.content
    );
    expect_exception(
        d.read_file(ReadFileRequest::new(format!("{scratch}/text/missing.txt")))
            .await,
        ExceptionClass::FileNotFound,
        "reading a missing file",
    )?;
    Ok(())
}

/// Uploaded bytes arrive unchanged (all 256 byte values), zip archives are extracted into the
/// target directory, and non-UTF-8 files read with `errors: backslashreplace` show `\xNN`.
pub(crate) async fn binary_files_and_zip_upload(
    d: &dyn Deployment,
    caps: Capabilities,
    scratch: &str,
) -> Outcome {
    require(
        caps.upload && caps.execute && caps.files,
        "upload, execute and files",
    )?;
    let all_bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let target = format!("{scratch}/bin/all.bin");
    d.upload(UploadRequest {
        data: all_bytes.clone(),
        target_path: target.clone(),
        unzip: false,
    })
    .await?;
    ensure!(
        bytes_in_sandbox(d, &target).await? == all_bytes,
        "uploaded bytes differ"
    );

    let archive = zip_in_memory(&[
        ("a.txt", b"alpha\n".as_slice()),
        ("nested/b.bin", &all_bytes),
    ])?;
    let dir = format!("{scratch}/unzipped");
    d.upload(UploadRequest {
        data: archive,
        target_path: dir.clone(),
        unzip: true,
    })
    .await?;
    let a = d
        .read_file(ReadFileRequest::new(format!("{dir}/a.txt")))
        .await?;
    ensure!(
        a.content == "alpha\n",
        "a.txt from the zip reads {:?}",
        a.content
    );
    ensure!(
        bytes_in_sandbox(d, &format!("{dir}/nested/b.bin")).await? == all_bytes,
        "nested/b.bin differs"
    );

    let bad = format!("{scratch}/bin/bad.txt");
    d.upload(UploadRequest {
        data: b"ok\xff\xfe\n".to_vec(),
        target_path: bad.clone(),
        unzip: false,
    })
    .await?;
    expect_exception(
        d.read_file(ReadFileRequest::new(&bad)).await,
        ExceptionClass::UnicodeDecode,
        "strict read of invalid UTF-8",
    )?;
    let lenient = ReadFileRequest {
        errors: Some("backslashreplace".into()),
        ..ReadFileRequest::new(&bad)
    };
    let text = d.read_file(lenient).await?;
    ensure!(
        text.content == "ok\\xff\\xfe\n",
        "backslashreplace read gave {:?}",
        text.content
    );
    Ok(())
}

/// The bytes of a file inside the sandbox, through `od` (text-safe on any protocol).
async fn bytes_in_sandbox(d: &dyn Deployment, path: &str) -> Result<Vec<u8>, Failure> {
    let out = d
        .execute(Command::argv(["od", "-An", "-v", "-tx1", path], Some(30.0)))
        .await?;
    ensure!(out.exit_code == Some(0), "od {path} failed: {out:?}");
    out.stdout
        .split_whitespace()
        .map(|h| {
            u8::from_str_radix(h, 16).map_err(|_| Failure::Failed(format!("od printed {h:?}")))
        })
        .collect()
}

/// A zip archive of `(name, bytes)` entries.
fn zip_in_memory(entries: &[(&str, &[u8])]) -> Result<Vec<u8>, Failure> {
    let fail = |e: &dyn std::fmt::Display| Failure::Failed(format!("building the test zip: {e}"));
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .map_err(|e| fail(&e))?;
        writer.write_all(data).map_err(|e| fail(&e))?;
    }
    Ok(writer.finish().map_err(|e| fail(&e))?.into_inner())
}
