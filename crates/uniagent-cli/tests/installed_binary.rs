//! A `uniagent` built with `--features tch` starts from a clean shell: libtorch's directory is
//! the binary's run path (`build.rs`), so neither `LD_LIBRARY_PATH` nor `scripts/env/torch.sh`
//! is needed, as for a binary installed with `cargo install --features tch`.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_tch_binary_starts_without_ld_library_path() {
    for args in [
        &["--version"][..],
        &["view", "--help"],
        &["train", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_uniagent"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "uniagent {args:?} from a clean environment: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
