//! `/read_file` and `/write_file`: text files as Python's `Path.read_text` / `write_text` see
//! them (universal newlines on read, parents created on write).

use std::path::Path;

use uniagent_core::sandbox::{ReadFileRequest, ReadFileResponse, WriteFileRequest};

use super::errors::{class, ServerError};
use super::pyfmt::{decode_backslashreplace, py_repr};

/// Reads a file as text. Supported encodings: UTF-8 (the default), ASCII and Latin-1; error
/// handlers: `strict` (the default), `replace`, `ignore`, `backslashreplace`, `surrogateescape`
/// (rendered like `backslashreplace`, since JSON text cannot carry lone surrogates).
///
/// Only regular files of at most `max_bytes` are read: a FIFO, a device such as `/dev/zero` or
/// a huge file would block the request or exhaust memory. They give `OSError` (`EINVAL`,
/// `EFBIG`) instead.
pub(crate) async fn read_file(
    request: &ReadFileRequest,
    max_bytes: u64,
) -> Result<ReadFileResponse, ServerError> {
    let path = request.path.clone();
    let bytes = tokio::task::spawn_blocking(move || read_regular(&path, max_bytes))
        .await
        .map_err(|e| ServerError::exception(class::OS_ERROR, e.to_string()))??;
    let text = decode(
        &bytes,
        request.encoding.as_deref(),
        request.errors.as_deref(),
    )?;
    Ok(ReadFileResponse {
        content: universal_newlines(&text),
    })
}

/// Reads a regular file of at most `max_bytes`. Opened non-blocking, so opening a FIFO never
/// waits for a writer; the type and size are checked on the open descriptor.
fn read_regular(path: &str, max_bytes: u64) -> Result<Vec<u8>, ServerError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| ServerError::os_error(&e, path))?;
    let meta = file
        .metadata()
        .map_err(|e| ServerError::os_error(&e, path))?;
    if meta.is_dir() {
        return Err(ServerError::os_error(
            &std::io::Error::from_raw_os_error(nix::libc::EISDIR),
            path,
        ));
    }
    if !meta.is_file() {
        return Err(ServerError::exception(
            class::OS_ERROR,
            format!(
                "[Errno 22] Not a regular file (FIFO, socket or device): {}",
                py_repr(path)
            ),
        ));
    }
    let too_big = || {
        ServerError::exception(
            class::OS_ERROR,
            format!(
                "[Errno 27] File too large: {} (read_file reads at most {max_bytes} bytes)",
                py_repr(path)
            ),
        )
    };
    if meta.len() > max_bytes {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // A file that grows while we read is bounded all the same.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ServerError::os_error(&e, path))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big());
    }
    Ok(bytes)
}

/// Writes a file as UTF-8 text, creating parent directories and truncating the file.
pub(crate) async fn write_file(request: &WriteFileRequest) -> Result<(), ServerError> {
    let path = Path::new(&request.path);
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| ServerError::os_error(&e, &parent.to_string_lossy()))?;
    }
    tokio::fs::write(path, request.content.as_bytes())
        .await
        .map_err(|e| ServerError::os_error(&e, &request.path))
}

/// Python's universal-newline translation: `\r\n` and lone `\r` become `\n`.
pub(crate) fn universal_newlines(text: &str) -> String {
    if !text.contains('\r') {
        return text.to_owned();
    }
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// Decodes bytes with a Python encoding name and error handler.
pub(crate) fn decode(
    bytes: &[u8],
    encoding: Option<&str>,
    errors: Option<&str>,
) -> Result<String, ServerError> {
    let handler = errors.unwrap_or("strict");
    if !matches!(
        handler,
        "strict" | "replace" | "ignore" | "backslashreplace" | "surrogateescape"
    ) {
        return Err(ServerError::exception(
            class::LOOKUP_ERROR,
            format!("unknown error handler name {}", py_repr(handler)),
        ));
    }
    let norm = encoding
        .unwrap_or("utf-8")
        .to_ascii_lowercase()
        .replace('_', "-");
    match norm.as_str() {
        "utf-8" | "utf8" | "u8" | "utf" => decode_utf8(bytes, handler),
        "ascii" | "us-ascii" => {
            if let Some(pos) = bytes.iter().position(|b| !b.is_ascii()) {
                if handler == "strict" {
                    return Err(ServerError::exception(
                        class::UNICODE_DECODE,
                        format!("'ascii' codec can't decode byte 0x{:02x} in position {pos}: ordinal not in range(128)", bytes[pos]),
                    ));
                }
            }
            Ok(bytes
                .iter()
                .filter_map(|b| match (b.is_ascii(), handler) {
                    (true, _) => Some((*b as char).to_string()),
                    (false, "ignore") => None,
                    (false, "replace") => Some('\u{fffd}'.to_string()),
                    (false, _) => Some(format!("\\x{b:02x}")),
                })
                .collect())
        }
        "latin-1" | "latin1" | "iso-8859-1" | "iso8859-1" | "l1" => {
            Ok(bytes.iter().map(|b| char::from(*b)).collect())
        }
        _ => Err(ServerError::exception(
            class::LOOKUP_ERROR,
            format!("unknown encoding: {}", encoding.unwrap_or("")),
        )),
    }
}

fn decode_utf8(bytes: &[u8], handler: &str) -> Result<String, ServerError> {
    match handler {
        "strict" => match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => {
                let pos = e.valid_up_to();
                let reason = match e.error_len() {
                    None => "unexpected end of data",
                    Some(_)
                        if bytes[pos] >= 0x80 && bytes[pos] < 0xc0
                            || bytes[pos] >= 0xf5
                            || bytes[pos] == 0xc0
                            || bytes[pos] == 0xc1 =>
                    {
                        "invalid start byte"
                    }
                    Some(_) => "invalid continuation byte",
                };
                Err(ServerError::exception(
                    class::UNICODE_DECODE,
                    format!(
                        "'utf-8' codec can't decode byte 0x{:02x} in position {pos}: {reason}",
                        bytes[pos]
                    ),
                ))
            }
        },
        "replace" => Ok(String::from_utf8_lossy(bytes).into_owned()),
        "ignore" => {
            let mut out = String::with_capacity(bytes.len());
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
            }
            Ok(out)
        }
        _ => Ok(decode_backslashreplace(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_utf8_errors_read_like_python() {
        let ServerError::Exception(e) = decode(b"ok\xff", None, None).unwrap_err() else {
            panic!("exception expected")
        };
        assert_eq!(
            e.message,
            "'utf-8' codec can't decode byte 0xff in position 2: invalid start byte"
        );
        assert_eq!(
            decode(b"ok\xff\xfe\n", None, Some("backslashreplace")).unwrap(),
            "ok\\xff\\xfe\n"
        );
        assert!(decode(b"x", Some("klingon"), None).is_err());
    }

    #[test]
    fn newlines_are_universal() {
        assert_eq!(universal_newlines("a\r\nb\rc\n"), "a\nb\nc\n");
    }
}
