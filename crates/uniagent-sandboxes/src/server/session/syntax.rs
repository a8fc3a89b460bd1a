//! The syntax check that runs before a session command: `bash -n` with the command on stdin, as
//! SWE-ReX does, so a command with a syntax error is never sent to the shell (where it would
//! leave the prompt waiting for more input).
//!
//! A one-line command made only of plain words (letters, digits and `_-./=:,+@%`), none of them a
//! reserved word, cannot be a syntax error, so it skips the extra process ([`is_trivially_valid`]);
//! a property test checks this claim against `bash -n`.

use std::process::Stdio;

use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;

use crate::server::errors::{class, ServerError};
use crate::server::pyfmt::{decode_backslashreplace, py_repr};

const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "time", "coproc",
];

/// Whether `command` is a single simple command of plain words, which `bash -n` always accepts.
pub(crate) fn is_trivially_valid(command: &str) -> bool {
    let plain = command.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b' ' | b'_' | b'-' | b'.' | b'/' | b'=' | b':' | b',' | b'+' | b'@' | b'%'
            )
    });
    plain && !command.split(' ').any(|word| RESERVED.contains(&word))
}

/// Runs `bash -n` on `command`; `Err` is SWE-ReX's `BashIncorrectSyntaxError` (with
/// `extra_info.bash_stdout` / `bash_stderr`) or an OS error starting bash.
pub(crate) async fn check_syntax(bash: &str, command: &str) -> Result<(), ServerError> {
    if is_trivially_valid(command) {
        return Ok(());
    }
    let mut child = tokio::process::Command::new(bash)
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ServerError::os_error(&e, bash))?;
    if let Some(mut stdin) = child.stdin.take() {
        let mut script = command.as_bytes().to_vec();
        script.push(b'\n');
        // A write error means bash exited early; its status says why.
        let _ = stdin.write_all(&script).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| ServerError::os_error(&e, bash))?;
    if out.status.success() {
        return Ok(());
    }
    let stdout = decode_backslashreplace(&out.stdout);
    let stderr = decode_backslashreplace(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    let message = format!(
        "Error (exit code {code}) while checking bash command \n{}\n---- Stderr ----\n{stderr}\n---- Stdout ----\n{stdout}",
        py_repr(command)
    );
    let mut extra = Map::new();
    extra.insert("bash_stdout".into(), Value::String(stdout));
    extra.insert("bash_stderr".into(), Value::String(stderr));
    Err(ServerError::exception_with(
        class::BASH_SYNTAX,
        message,
        extra,
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_words_are_trivially_valid() {
        assert!(is_trivially_valid("echo hi"));
        assert!(!is_trivially_valid("echo $(date)"));
        assert!(!is_trivially_valid("fi"));
    }

    fn bash_accepts(command: &str) -> bool {
        let mut child = match std::process::Command::new("bash")
            .arg("-n")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => panic!("bash is required for this test: {e}"),
        };
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            let _ = stdin.write_all(format!("{command}\n").as_bytes());
        }
        child.wait().map(|s| s.success()).unwrap_or(false)
    }

    #[tokio::test]
    async fn syntax_errors_carry_bash_output() {
        let err = check_syntax("bash", "(a").await.unwrap_err();
        let ServerError::Exception(e) = err else {
            panic!("expected an exception")
        };
        assert_eq!(e.class_path, class::BASH_SYNTAX);
        assert!(
            e.message.starts_with(
                "Error (exit code 2) while checking bash command \n'(a'\n---- Stderr ----\n"
            ),
            "{}",
            e.message
        );
        assert!(e.extra_info["bash_stderr"]
            .as_str()
            .unwrap_or("")
            .contains("syntax error"));
        assert_eq!(e.extra_info["bash_stdout"], "");
        check_syntax("bash", "for i in 1 2; do\n echo $i\ndone")
            .await
            .unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The fast path never accepts what `bash -n` rejects.
        #[test]
        fn fast_path_agrees_with_bash(words in proptest::collection::vec(prop_oneof![
            "[a-z0-9_./=:,+@%-]{1,6}",
            Just("if".to_owned()), Just("then".to_owned()), Just("fi".to_owned()), Just("done".to_owned()),
            Just("do".to_owned()), Just("esac".to_owned()), Just("in".to_owned()), Just("{".to_owned()), Just("}".to_owned()),
            Just("(".to_owned()), Just(";".to_owned()), Just("&&".to_owned()), Just("|".to_owned()), Just("'".to_owned()),
        ], 0..5)) {
            let command = words.join(" ");
            if is_trivially_valid(&command) {
                prop_assert!(bash_accepts(&command), "fast path accepted {command:?}, bash -n rejects it");
            }
        }
    }
}
