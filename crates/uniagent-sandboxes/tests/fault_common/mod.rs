//! Helpers for the fault-injection tests: hand-made zip archives (with lying headers) and
//! multipart uploads.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use serde_json::Value;

use crate::server_common::{file_form, TestServer};

/// One entry of a hand-built, stored (uncompressed) zip archive.
pub struct RawEntry<'a> {
    pub name: &'a str,
    pub data: &'a [u8],
    /// The uncompressed size written in the headers (zip64 when above `u32::MAX - 1`).
    pub declared: u64,
    /// Unix mode (`0o120777` for a symlink, `0o100644` for a file).
    pub mode: u32,
}

/// Builds a stored zip whose headers declare `declared` as each entry's size, whatever its
/// data: the shape of the 132-byte archive that made the zip crate allocate 32 TiB.
pub fn raw_zip(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for e in entries {
        let offset = out.len() as u32;
        let crc = crc32(e.data);
        let zip64 = e.declared >= u64::from(u32::MAX);
        let mut extra = Vec::new();
        if zip64 {
            extra.extend(1u16.to_le_bytes());
            extra.extend(16u16.to_le_bytes());
            extra.extend(e.declared.to_le_bytes());
            extra.extend((e.data.len() as u64).to_le_bytes());
        }
        let (size32, csize32) = if zip64 {
            (u32::MAX, u32::MAX)
        } else {
            (e.declared as u32, e.data.len() as u32)
        };
        let version: u16 = if zip64 { 45 } else { 20 };
        // Local header.
        out.extend(0x0403_4b50u32.to_le_bytes());
        out.extend(version.to_le_bytes());
        out.extend(0u16.to_le_bytes()); // flags
        out.extend(0u16.to_le_bytes()); // stored
        out.extend(0u32.to_le_bytes()); // time, date
        out.extend(crc.to_le_bytes());
        out.extend(csize32.to_le_bytes());
        out.extend(size32.to_le_bytes());
        out.extend((e.name.len() as u16).to_le_bytes());
        out.extend((extra.len() as u16).to_le_bytes());
        out.extend(e.name.as_bytes());
        out.extend(&extra);
        out.extend(e.data);
        // Central directory record.
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend((0x0300u16 | version).to_le_bytes()); // made by unix
        central.extend(version.to_le_bytes());
        central.extend(0u16.to_le_bytes());
        central.extend(0u16.to_le_bytes());
        central.extend(0u32.to_le_bytes());
        central.extend(crc.to_le_bytes());
        central.extend(csize32.to_le_bytes());
        central.extend(size32.to_le_bytes());
        central.extend((e.name.len() as u16).to_le_bytes());
        central.extend((extra.len() as u16).to_le_bytes());
        central.extend(0u16.to_le_bytes()); // comment
        central.extend(0u16.to_le_bytes()); // disk
        central.extend(0u16.to_le_bytes()); // internal attributes
        central.extend((e.mode << 16).to_le_bytes());
        central.extend(offset.to_le_bytes());
        central.extend(e.name.as_bytes());
        central.extend(&extra);
    }
    let cd_offset = out.len() as u32;
    out.extend(&central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A real zip written by the zip crate: `(name, contents)` files, deflated.
pub fn deflated_zip(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in files {
        w.start_file(name.as_str(), options).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// `POST /upload` with `unzip`; returns (status, body).
pub async fn upload(s: &TestServer, data: Vec<u8>, target: &str, unzip: bool) -> (u16, Value) {
    let form = file_form(data, "a.zip")
        .text("target_path", target.to_owned())
        .text("unzip", if unzip { "true" } else { "false" });
    let r = s.upload_form(form).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}
