//! `/upload`: a multipart form with `file`, `target_path` and `unzip`, staged to disk as it
//! streams in, then moved to `target_path` or extracted there as a zip archive.
//!
//! Decoding ([`read_form`]) is separate from placing ([`place`]) so the decoder can be fuzzed
//! without touching arbitrary paths.

use std::path::{Path, PathBuf};

use axum::extract::Multipart;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::errors::ServerError;
use super::unzip::{self, UnzipLimits};
use super::validate::parse_bool_str;

/// A decoded upload: the staged file and where it goes.
#[derive(Debug)]
pub struct UploadForm {
    /// The staged bytes of the `file` part.
    pub staged: PathBuf,
    /// The `target_path` field.
    pub target_path: String,
    /// The `unzip` field (default false).
    pub unzip: bool,
}

fn multipart_error(e: &axum::extract::multipart::MultipartError) -> ServerError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ServerError::Http {
            status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            detail: "Request body too large".into(),
        }
    } else {
        bad_body()
    }
}

fn bad_body() -> ServerError {
    ServerError::Http {
        status: axum::http::StatusCode::BAD_REQUEST,
        detail: "There was an error parsing the body".into(),
    }
}

/// Reads the multipart form, streaming the `file` part into a new file in `staging_dir`.
/// Missing fields give FastAPI's 422 items; a malformed body gives 400.
pub async fn read_form(
    mut multipart: Multipart,
    staging_dir: &Path,
) -> Result<UploadForm, ServerError> {
    let mut staged: Option<PathBuf> = None;
    let mut target_path = None;
    let mut unzip_raw: Option<String> = None;
    let read = read_fields(
        &mut multipart,
        staging_dir,
        &mut staged,
        &mut target_path,
        &mut unzip_raw,
    )
    .await;
    if let Err(e) = read {
        if let Some(s) = staged {
            let _ = tokio::fs::remove_file(s).await;
        }
        return Err(e);
    }
    let mut errors = Vec::new();
    if staged.is_none() {
        errors.push(json!({"type": "missing", "loc": ["body", "file"], "msg": "Field required", "input": null}));
    }
    if target_path.is_none() {
        errors.push(json!({"type": "missing", "loc": ["body", "target_path"], "msg": "Field required", "input": null}));
    }
    let unzip = match unzip_raw.as_deref().map(parse_bool_str) {
        None => false,
        Some(Some(b)) => b,
        Some(None) => {
            errors.push(json!({"type": "bool_parsing", "loc": ["body", "unzip"],
                "msg": "Input should be a valid boolean, unable to interpret input", "input": unzip_raw}));
            false
        }
    };
    match (staged, target_path) {
        (Some(staged), Some(target_path)) if errors.is_empty() => Ok(UploadForm {
            staged,
            target_path,
            unzip,
        }),
        (staged, _) => {
            if let Some(s) = staged {
                let _ = tokio::fs::remove_file(s).await;
            }
            Err(ServerError::Validation(errors))
        }
    }
}

async fn read_fields(
    multipart: &mut Multipart,
    staging_dir: &Path,
    staged: &mut Option<PathBuf>,
    target_path: &mut Option<String>,
    unzip_raw: &mut Option<String>,
) -> Result<(), ServerError> {
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(&e))?
    {
        match field.name().unwrap_or_default() {
            "file" if field.file_name().is_some() || staged.is_none() => {
                tokio::fs::create_dir_all(staging_dir)
                    .await
                    .map_err(|e| ServerError::os_error(&e, &staging_dir.to_string_lossy()))?;
                let path = staging_dir.join(format!("upload-{:016x}", fastrand::u64(..)));
                let mut file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(&path)
                    .await
                    .map_err(|e| ServerError::os_error(&e, &path.to_string_lossy()))?;
                let copied = async {
                    while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(&e))? {
                        file.write_all(&chunk)
                            .await
                            .map_err(|e| ServerError::os_error(&e, &path.to_string_lossy()))?;
                    }
                    file.flush()
                        .await
                        .map_err(|e| ServerError::os_error(&e, &path.to_string_lossy()))
                }
                .await;
                if let Err(e) = copied {
                    let _ = tokio::fs::remove_file(&path).await;
                    return Err(e);
                }
                if let Some(old) = staged.replace(path) {
                    let _ = tokio::fs::remove_file(old).await;
                }
            }
            "target_path" => {
                *target_path = Some(field.text().await.map_err(|e| multipart_error(&e))?)
            }
            "unzip" => *unzip_raw = Some(field.text().await.map_err(|e| multipart_error(&e))?),
            _ => {}
        }
    }
    Ok(())
}

/// Moves the staged file to `target_path` (into it, as `temp_file_transfer`, when it is an
/// existing directory), or extracts it as a zip archive into `target_path` with `unzip`.
pub(crate) fn place(form: &UploadForm, limits: &UnzipLimits) -> Result<(), ServerError> {
    let result = place_inner(form, limits);
    let _ = std::fs::remove_file(&form.staged);
    result
}

fn place_inner(form: &UploadForm, limits: &UnzipLimits) -> Result<(), ServerError> {
    let target = Path::new(&form.target_path);
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| ServerError::os_error(&e, &parent.to_string_lossy()))?;
    }
    if form.unzip {
        std::fs::create_dir_all(target)
            .map_err(|e| ServerError::os_error(&e, &form.target_path))?;
        return unzip::extract(&form.staged, target, limits);
    }
    let destination = if target.is_dir() {
        target.join("temp_file_transfer")
    } else {
        target.to_path_buf()
    };
    let shown = destination.to_string_lossy().into_owned();
    if std::fs::rename(&form.staged, &destination).is_err() {
        std::fs::copy(&form.staged, &destination).map_err(|e| ServerError::os_error(&e, &shown))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::extract::FromRequest;
    use proptest::prelude::*;

    use super::*;

    async fn decode(body: Vec<u8>, dir: &Path) -> Result<UploadForm, ServerError> {
        let request = axum::http::Request::builder()
            .method("POST")
            .uri("/upload")
            .header("content-type", "multipart/form-data; boundary=X")
            .body(axum::body::Body::from(body))
            .map_err(|_| bad_body())?;
        let multipart = Multipart::from_request(request, &())
            .await
            .map_err(|_| bad_body())?;
        read_form(multipart, dir).await
    }

    fn part(name: &str, filename: Option<&str>, data: &[u8]) -> Vec<u8> {
        let mut p = format!("--X\r\nContent-Disposition: form-data; name=\"{name}\"").into_bytes();
        if let Some(f) = filename {
            p.extend(format!("; filename=\"{f}\"").bytes());
        }
        p.extend(b"\r\n\r\n");
        p.extend(data);
        p.extend(b"\r\n");
        p
    }

    #[tokio::test]
    async fn well_formed_forms_decode() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut body = part("file", Some("f"), b"\x00bin\xff");
        body.extend(part("target_path", None, b"/t/x"));
        body.extend(part("unzip", None, b"on"));
        body.extend(b"--X--\r\n");
        let form = decode(body, dir.path())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((form.target_path.as_str(), form.unzip), ("/t/x", true));
        assert_eq!(
            std::fs::read(&form.staged).unwrap_or_default(),
            b"\x00bin\xff"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The fuzz target's multipart half, as a property: random and mangled bodies give a
        /// form or a typed error, never a panic, and leave no staged file behind on error.
        #[test]
        fn multipart_decoding_never_panics(noise in proptest::collection::vec(any::<u8>(), 0..120), cut in 0usize..200, which in 0u8..3) {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let mut body = part("file", Some("f"), &noise);
            body.extend(part("target_path", None, b"/t/x"));
            body.extend(b"--X--\r\n");
            let body = match which {
                0 => noise.clone(),
                1 => body[..cut.min(body.len())].to_vec(),
                _ => body,
            };
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
            let result = rt.block_on(decode(body, dir.path()));
            if result.is_err() {
                let left = std::fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(0);
                prop_assert_eq!(left, 0);
            }
        }
    }
}
