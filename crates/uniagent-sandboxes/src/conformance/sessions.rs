//! Checks of bash sessions: state, lifecycle errors, concurrency and cleanup.

use std::time::Duration;

use uniagent_core::sandbox::{
    CheckMode, CloseSessionRequest, Command, CreateSessionRequest, ExceptionClass,
};
use uniagent_core::{Capabilities, Deployment};

use super::{
    close_quietly, ensure, expect_exception, open_session, require, run, with_deadline, Failure,
    Outcome,
};

/// The working directory, variables and functions persist between commands of one session and
/// do not leak into another; multi-line commands run whole.
pub(crate) async fn state_persists(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.sessions, "sessions")?;
    let (a, b) = ("conformance-state-a", "conformance-state-b");
    open_session(d, a).await?;
    open_session(d, b).await?;
    run(
        d,
        a,
        "cd /tmp && export UA_CONF_X=42 && ua_conf_fn() { echo \"fn-$1\"; }",
        CheckMode::Raise,
        30.0,
    )
    .await?;
    for (command, want) in [
        ("pwd", "/tmp\n"),
        ("echo $UA_CONF_X", "42\n"),
        ("ua_conf_fn a", "fn-a\n"),
        ("echo a\necho b", "a\nb\n"),
        ("cat <<'EOF'\nline $UA_CONF_X\nEOF", "line $UA_CONF_X\n"),
    ] {
        let obs = run(d, a, command, CheckMode::Silent, 30.0).await?;
        ensure!(
            obs.output == want && obs.exit_code == Some(0),
            "{command:?} in session a gave {obs:?}"
        );
    }
    let obs = run(d, b, "echo ${UA_CONF_X:-unset}", CheckMode::Silent, 30.0).await?;
    ensure!(
        obs.output == "unset\n",
        "state leaked between sessions: {obs:?}"
    );
    close_quietly(d, a).await;
    close_quietly(d, b).await;
    Ok(())
}

/// Duplicate and unknown session names, and syntax errors, raise SWE-ReX's exception classes.
pub(crate) async fn lifecycle_errors(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.sessions, "sessions")?;
    let s = "conformance-lifecycle";
    open_session(d, s).await?;
    expect_exception(
        d.create_session(CreateSessionRequest::new(s)).await,
        ExceptionClass::SessionExists,
        "creating a session twice",
    )?;
    let syntax = expect_exception(
        run(d, s, "(a", CheckMode::Raise, 30.0).await,
        ExceptionClass::BashIncorrectSyntax,
        "a syntax error",
    )?;
    let stderr = syntax
        .extra_info
        .get("bash_stderr")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    ensure!(
        stderr.contains("syntax error"),
        "extra_info.bash_stderr must quote bash: {syntax:?}"
    );
    let obs = run(d, s, "echo still-fine", CheckMode::Silent, 30.0).await?;
    ensure!(
        obs.output == "still-fine\n",
        "a rejected command must not disturb the session: {obs:?}"
    );
    d.close_session(CloseSessionRequest {
        session: s.into(),
        session_type: Default::default(),
    })
    .await?;
    expect_exception(
        run(d, s, "echo hi", CheckMode::Silent, 30.0).await,
        ExceptionClass::SessionDoesNotExist,
        "a closed session",
    )?;
    expect_exception(
        d.close_session(CloseSessionRequest {
            session: s.into(),
            session_type: Default::default(),
        })
        .await,
        ExceptionClass::SessionDoesNotExist,
        "closing twice",
    )?;
    Ok(())
}

/// Sessions run in parallel: eight are created and used at once, and a command blocked on a
/// FIFO in one session is released by a command in another, which a server that handles one
/// request at a time can never do.
pub(crate) async fn concurrent_sessions(
    d: &dyn Deployment,
    caps: Capabilities,
    scratch: &str,
) -> Outcome {
    require(caps.sessions, "sessions")?;
    let names: Vec<String> = (0..8).map(|i| format!("conformance-par-{i}")).collect();
    let created = futures::future::join_all(names.iter().map(|n| open_session(d, n))).await;
    for result in created {
        result?;
    }
    let outputs = futures::future::join_all(names.iter().map(|n| {
        run(
            d,
            n,
            format!("sleep 0.1; echo {n}"),
            CheckMode::Silent,
            30.0,
        )
    }))
    .await;
    for (name, obs) in names.iter().zip(outputs) {
        let obs = obs?;
        ensure!(
            obs.output == format!("{name}\n"),
            "session {name} answered {obs:?}"
        );
    }
    let fifo = format!("{scratch}/rendezvous.fifo");
    run(
        d,
        &names[0],
        format!("mkdir -p {scratch} && mkfifo {fifo}"),
        CheckMode::Raise,
        30.0,
    )
    .await?;
    let (reader, writer) = tokio::join!(
        run(d, &names[0], format!("cat {fifo}"), CheckMode::Silent, 15.0),
        run(
            d,
            &names[1],
            format!("echo ping > {fifo}"),
            CheckMode::Silent,
            15.0
        ),
    );
    let (reader, writer) = (reader?, writer?);
    ensure!(
        reader.output == "ping\n" && writer.exit_code == Some(0),
        "rendezvous failed: {reader:?} / {writer:?}"
    );
    for name in &names {
        close_quietly(d, name).await;
    }
    Ok(())
}

/// Closing a session ends the background jobs it started.
pub(crate) async fn no_leaked_processes(d: &dyn Deployment, caps: Capabilities) -> Outcome {
    require(caps.sessions && caps.execute, "sessions and execute")?;
    let s = "conformance-leak";
    open_session(d, s).await?;
    let obs = run(d, s, "sleep 1000 & echo $!", CheckMode::Silent, 30.0).await?;
    let pid: u32 = obs
        .output
        .trim()
        .rsplit('\n')
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| Failure::Failed(format!("no pid in {obs:?}")))?;
    ensure!(
        process_alive(d, pid).await?,
        "the background job {pid} is not running before close"
    );
    d.close_session(CloseSessionRequest {
        session: s.into(),
        session_type: Default::default(),
    })
    .await?;
    with_deadline(async {
        for _ in 0..100 {
            if !process_alive(d, pid).await? {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Failure::Failed(format!(
            "background job {pid} survived close_session by 5 s"
        )))
    })
    .await?
}

/// Whether `pid` exists inside the sandbox and is not a zombie.
async fn process_alive(d: &dyn Deployment, pid: u32) -> Result<bool, Failure> {
    let out = d
        .execute(Command::argv(
            ["cat", &format!("/proc/{pid}/stat")],
            Some(30.0),
        ))
        .await?;
    if out.exit_code != Some(0) {
        return Ok(false);
    }
    let state = out
        .stdout
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("");
    Ok(!state.is_empty() && state != "Z" && state != "X")
}
