//! Building an image from a local build context (a Harbor task's `environment/`): its base
//! images must already be local (there may be no registry), the context goes to the daemon as
//! a tar archive, and the whole build runs under a deadline.

use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt;
use uniagent_core::{Error, Result};

use super::engine::{count_call, docker_error, engine, sandbox_error};
use super::image::image_exists;

/// Builds `context`'s `Dockerfile` as `tag` unless `tag` exists; at most `timeout`.
///
/// Every base image of the Dockerfile (its `FROM`s, not earlier stages or `scratch`) must be
/// local: a missing one is a configuration error naming it, before anything is sent to the
/// daemon. A failing step is a sandbox error carrying the builder's message.
///
/// ```no_run
/// # async fn demo() -> uniagent_core::Result<()> {
/// use std::time::Duration;
/// let built = uniagent_sandboxes::docker::build_context(
///     std::path::Path::new("datasets/harbor-mini/hello-file/environment"),
///     "uniagent-harbor/hello-file:0123",
///     Duration::from_secs(600),
/// ).await?;
/// println!("built now: {built}");
/// # Ok(()) }
/// ```
pub async fn build_context(context: &Path, tag: &str, timeout: Duration) -> Result<bool> {
    let docker = engine().await?;
    if image_exists(&docker, tag).await? {
        return Ok(false);
    }
    let dockerfile = context.join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile)
        .map_err(|e| Error::io(format!("reading {}", dockerfile.display()), e))?;
    for base in base_images(&text) {
        if !image_exists(&docker, &base).await? {
            return Err(Error::config(format!(
                "{}: base image `{base}` is not on this machine and no registry is used; build or load it first (`docker image inspect {base}` must succeed)",
                dockerfile.display()
            )));
        }
    }
    let context_dir = context.to_path_buf();
    let archive = tokio::task::spawn_blocking(move || tar_dir(&context_dir))
        .await
        .map_err(|e| Error::internal(format!("archiving the build context: {e}")))??;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let build = async {
        count_call();
        let mut stream = std::pin::pin!(docker.build_image(
            options,
            None,
            Some(bollard::body_full(archive.into()))
        ));
        let mut log = String::new();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| docker_error(&format!("building `{tag}`"), e))?;
            if let Some(text) = info.stream {
                log.push_str(&text);
                if log.len() > 8192 {
                    log.drain(..log.len() - 4096);
                }
            }
            if let Some(error) = info.error {
                return Err(sandbox_error(format!(
                    "building `{tag}` failed: {error}\n{}",
                    log.trim_end()
                )));
            }
        }
        Ok::<_, Error>(())
    };
    within_deadline(&format!("building `{tag}`"), timeout, build).await?;
    if !image_exists(&docker, tag).await? {
        return Err(sandbox_error(format!(
            "building `{tag}` ended without the image"
        )));
    }
    Ok(true)
}

async fn within_deadline(
    what: &str,
    timeout: Duration,
    work: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout {
            operation: what.to_owned(),
            after: timeout,
        }),
    }
}

/// The images a Dockerfile builds `FROM`: not `scratch`, not an earlier stage's name, with
/// `--platform=` flags skipped and `ARG` defaults substituted where they are plain.
pub fn base_images(dockerfile: &str) -> Vec<String> {
    let mut args: Vec<(String, String)> = Vec::new();
    let mut stages: Vec<String> = Vec::new();
    let mut bases = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().map(|w| w.to_ascii_uppercase()) {
            Some(ref w) if w == "ARG" => {
                if let Some((name, value)) = words.get(1).and_then(|a| a.split_once('=')) {
                    args.push((name.to_owned(), value.trim_matches('"').to_owned()));
                }
            }
            Some(ref w) if w == "FROM" => {
                let rest: Vec<&str> = words[1..]
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                let Some(image) = rest.first() else { continue };
                let mut image = (*image).to_owned();
                for (name, value) in &args {
                    image = image
                        .replace(&format!("${{{name}}}"), value)
                        .replace(&format!("${name}"), value);
                }
                // An earlier stage's name is not an image.
                if image != "scratch" && !stages.contains(&image) && !bases.contains(&image) {
                    bases.push(image);
                }
                if rest.len() >= 3 && rest[1].eq_ignore_ascii_case("AS") {
                    stages.push(rest[2].to_owned());
                }
            }
            _ => {}
        }
    }
    bases
}

/// A tar archive of `dir` (regular files and directories, modes kept; symlinks as links).
fn tar_dir(dir: &Path) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder
        .append_dir_all(".", dir)
        .map_err(|e| Error::io(format!("archiving {}", dir.display()), e))?;
    builder
        .into_inner()
        .map_err(|e| Error::io(format!("archiving {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_images_skip_stages_scratch_and_flags() {
        let text = "ARG BASE=debian:12\nFROM --platform=linux/amd64 ${BASE} AS build\nRUN make\nFROM build AS test\nFROM scratch\nfrom uniagent-sandbox-base:latest\nCOPY --from=build /a /a\n";
        assert_eq!(
            base_images(text),
            ["debian:12", "uniagent-sandbox-base:latest"]
        );
    }
}
