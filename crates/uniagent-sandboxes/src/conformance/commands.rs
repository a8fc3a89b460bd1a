//! Checks of one-off commands (`execute`) and of command semantics inside sessions.

use std::collections::BTreeMap;

use uniagent_core::sandbox::{Action, BashInterruptAction, CheckMode, Command, ExceptionClass};
use uniagent_core::{Capabilities, Deployment, ErrorKind};

use super::{
    close_quietly, ensure, expect_exception, open_session, require, run, with_deadline, Failure,
    Outcome,
};

/// `execute` runs shell strings and argv lists, honours `cwd`, and `env` replaces the
/// environment.
pub(crate) async fn execute_round_trip(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.execute, "execute")?;
    let out = d.execute(Command::shell("echo hi", Some(30.0))).await?;
    ensure!(
        out.stdout == "hi\n" && out.stderr.is_empty() && out.exit_code == Some(0),
        "echo hi gave {out:?}"
    );
    let out = d
        .execute(Command::argv(["printf", "%s|", "a b", "c"], Some(30.0)))
        .await?;
    ensure!(
        out.stdout == "a b|c|",
        "argv kept words apart wrongly: {out:?}"
    );
    let out = d
        .execute(Command {
            cwd: Some("/".into()),
            ..Command::argv(["pwd"], Some(30.0))
        })
        .await?;
    ensure!(out.stdout == "/\n", "cwd ignored: {out:?}");
    let env = BTreeMap::from([("UNIAGENT_CONFORMANCE".to_owned(), "42".to_owned())]);
    let out = d
        .execute(Command {
            env: Some(env),
            ..Command::argv(["/usr/bin/env"], Some(30.0))
        })
        .await?;
    ensure!(
        out.stdout == "UNIAGENT_CONFORMANCE=42\n",
        "env must replace the environment, got {out:?}"
    );
    Ok(())
}

/// Exit codes are data unless a check was asked for; missing programs are `FileNotFoundError`.
pub(crate) async fn exit_codes(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    if caps.execute {
        let out = d
            .execute(Command::argv(["sh", "-c", "exit 3"], Some(30.0)))
            .await?;
        ensure!(out.exit_code == Some(3), "exit 3 gave {out:?}");
        let checked = Command {
            check: true,
            error_msg: "ctx".into(),
            ..Command::argv(["sh", "-c", "exit 4"], Some(30.0))
        };
        let e = expect_exception(
            d.execute(checked).await,
            ExceptionClass::NonZeroExitCode,
            "execute check=true",
        )?;
        ensure!(
            e.message.starts_with("ctx"),
            "error_msg must prefix the message: {e:?}"
        );
        expect_exception(
            d.execute(Command::argv(["uniagent-no-such-binary-xyz"], Some(30.0)))
                .await,
            ExceptionClass::FileNotFound,
            "missing binary",
        )?;
    }
    if caps.sessions {
        let s = "conformance-exit";
        open_session(d, s).await?;
        let silent = run(d, s, "(exit 7)", CheckMode::Silent, 30.0).await?;
        ensure!(silent.exit_code == Some(7), "check=silent gave {silent:?}");
        let ignore = run(d, s, "(exit 7)", CheckMode::Ignore, 30.0).await?;
        ensure!(
            ignore.exit_code.is_none(),
            "check=ignore must return no exit code: {ignore:?}"
        );
        expect_exception(
            run(d, s, "(exit 7)", CheckMode::Raise, 30.0).await,
            ExceptionClass::NonZeroExitCode,
            "raise",
        )?;
        let ok = run(d, s, "true", CheckMode::Raise, 30.0).await?;
        ensure!(ok.exit_code == Some(0), "true gave {ok:?}");
        close_quietly(d, s).await;
    }
    if !caps.execute && !caps.sessions {
        require(false, "execute or sessions")?;
    }
    Ok(())
}

/// `execute` keeps the streams apart unless merging was asked for; sessions interleave them.
pub(crate) async fn stdout_and_stderr(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.execute && caps.sessions, "execute and sessions")?;
    let script = "echo out; echo err 1>&2";
    let out = d
        .execute(Command::argv(["sh", "-c", script], Some(30.0)))
        .await?;
    ensure!(
        out.stdout == "out\n" && out.stderr == "err\n",
        "streams mixed up: {out:?}"
    );
    let merged = Command {
        merge_output_streams: true,
        ..Command::argv(["sh", "-c", script], Some(30.0))
    };
    let out = d.execute(merged).await?;
    ensure!(
        out.stdout == "out\nerr\n" && out.stderr.is_empty(),
        "merge_output_streams ignored: {out:?}"
    );
    let s = "conformance-streams";
    open_session(d, s).await?;
    let obs = run(d, s, script, CheckMode::Silent, 30.0).await?;
    ensure!(
        obs.output == "out\nerr\n",
        "session output must interleave both streams: {obs:?}"
    );
    let obs = run(d, s, "printf x", CheckMode::Silent, 30.0).await?;
    ensure!(obs.output == "x", "no newline may be added: {obs:?}");
    close_quietly(d, s).await;
    Ok(())
}

/// A command past its timeout fails with `CommandTimeoutError`; after an interrupt the session
/// works again, both with a patient interrupt (5 s per attempt, as SWE-agent sends) and with
/// SWE-ReX's defaults (0.2 s per attempt, 3 attempts) sent right after the timeout, for each
/// check mode. `execute` kills its child on timeout.
pub(crate) async fn timeouts_and_recovery(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.sessions, "sessions")?;
    let s = "conformance-timeout";
    open_session(d, s).await?;
    let cases = [
        ("sleep 30", 0.5, CheckMode::Silent, 5.0),
        ("sleep 30", 0.5, CheckMode::Raise, 0.2),
        ("sleep 30", 0.5, CheckMode::Ignore, 0.2),
        ("sleep 5", 1.0, CheckMode::Raise, 0.2),
    ];
    for (command, timeout, check, per_attempt) in cases {
        let what = format!("`{command}` with timeout {timeout} and check {check:?}");
        let slow = with_deadline(run(d, s, command, check, timeout)).await?;
        let e = expect_exception(slow, ExceptionClass::CommandTimeout, &what)?;
        ensure!(!e.message.is_empty(), "timeout without a message");
        let interrupt = BashInterruptAction {
            session: s.into(),
            timeout: per_attempt,
            n_retry: 3,
            expect: vec![],
        };
        let interrupted = with_deadline(d.run_in_session(Action::Interrupt(interrupt))).await??;
        ensure!(
            interrupted.exit_code == Some(0),
            "interrupt after {what} answered {interrupted:?}"
        );
        let obs = run(d, s, "echo recovered", CheckMode::Silent, 10.0).await.map_err(|e| {
            Failure::Failed(format!("session unusable after {what} and an interrupt of {per_attempt} s per attempt: {e}"))
        })?;
        ensure!(
            obs.output == "recovered\n" && obs.exit_code == Some(0),
            "session not usable after {what} and an interrupt: {obs:?}"
        );
    }
    close_quietly(d, s).await;
    if caps.execute {
        let slow = with_deadline(d.execute(Command::argv(["sleep", "30"], Some(0.5)))).await?;
        let err = slow.err().map(|e| e.kind());
        ensure!(
            err == Some(ErrorKind::Timeout),
            "execute sleep 30 with timeout 0.5 gave {err:?}"
        );
    }
    Ok(())
}

/// Large outputs arrive complete and in order (`seq 1 100000`, 588 895 bytes, through `execute`;
/// `seq 1 20000` through a session).
pub(crate) async fn large_outputs(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.execute || caps.sessions, "execute or sessions")?;
    let expected = |n: u32| (1..=n).map(|i| format!("{i}\n")).collect::<String>();
    if caps.execute {
        let out = d
            .execute(Command::argv(["seq", "1", "100000"], Some(60.0)))
            .await?;
        let want = expected(100_000);
        ensure!(
            out.stdout == want,
            "execute output differs: {} bytes, want {} (tail {:?})",
            out.stdout.len(),
            want.len(),
            out.stdout
                .chars()
                .rev()
                .take(40)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        );
    }
    if caps.sessions {
        let s = "conformance-large";
        open_session(d, s).await?;
        let obs = run(d, s, "seq 1 20000", CheckMode::Silent, 60.0).await?;
        let want = expected(20_000);
        ensure!(
            obs.output == want,
            "session output differs: {} bytes, want {}",
            obs.output.len(),
            want.len()
        );
        close_quietly(d, s).await;
    }
    Ok(())
}
