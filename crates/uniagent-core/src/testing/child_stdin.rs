//! [`output_with_stdin`]: a child process fed its standard input, for tests of binaries and of
//! Python reference scripts that read a request on stdin.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `command` with `input` written to its stdin (then closed) and its stdout and stderr
/// captured, and waits for it.
///
/// ```
/// use std::process::Command;
/// use uniagent_core::testing::output_with_stdin;
///
/// let out = output_with_stdin(&mut Command::new("cat"), b"hi").unwrap();
/// assert_eq!(out.stdout, b"hi");
/// ```
///
/// # Errors
/// When the process cannot be started, written to or waited for.
pub fn output_with_stdin(command: &mut Command, input: &[u8]) -> std::io::Result<Output> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input)?;
    }
    child.wait_with_output()
}
