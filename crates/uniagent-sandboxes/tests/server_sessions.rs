//! Bash sessions over real HTTP: output and exit codes, persistence, check modes, syntax errors,
//! timeouts and recovery, interrupts, output limits, non-UTF-8 output, lifecycle errors,
//! interactive programs, concurrency and leaks.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use std::time::{Duration, Instant};

use serde_json::json;
use server_common::{class_path, message, pid_alive, TestServer};

/// `bash_interrupt` of `session` with `timeout`; it must answer 200.
async fn interrupt(s: &TestServer, session: &str, timeout: f64) {
    let (st, b) = s
        .post(
            "/run_in_session",
            json!({"action_type": "bash_interrupt", "session": session, "timeout": timeout}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_outputs_and_state() {
    let s = TestServer::start().await;
    s.create("a").await;
    assert_eq!(s.ok("a", "echo hi").await, ("hi\n".into(), json!(0)));
    assert_eq!(s.ok("a", "cd /tmp").await.0, "");
    assert_eq!(s.ok("a", "pwd").await.0, "/tmp\n");
    s.ok("a", "export X=42").await;
    assert_eq!(s.ok("a", "echo $X").await.0, "42\n");
    assert_eq!(s.ok("a", "echo a\necho b").await.0, "a\nb\n");
    assert_eq!(s.ok("a", "echo to-stderr 1>&2").await.0, "to-stderr\n");
    assert_eq!(s.ok("a", "printf x").await.0, "x");
    assert_eq!(s.ok("a", "f() { echo \"f:$1\"; }").await.0, "");
    assert_eq!(s.ok("a", "f 7").await.0, "f:7\n");
    assert_eq!(s.ok("a", "cat <<'EOF'\n$HOME\nEOF").await.0, "$HOME\n");
    assert_eq!(
        s.ok("a", "echo before SHELLPS1PREFIX after").await.0,
        "before SHELLPS1PREFIX after\n"
    );
    assert_eq!(s.ok("a", "(exit 3)").await, ("".into(), json!(3)));
    assert_eq!(s.ok("a", "false; echo $?").await.0, "1\n");
    // Control bytes in the command are data, not terminal input.
    assert_eq!(
        s.ok("a", "printf '%s' 'a\u{3}b' | od -An -c | tr -s ' '")
            .await
            .0,
        " a 003 b\n"
    );
    // A long single line (beyond the 4 KiB tty line limit) runs whole.
    let long = format!("echo {}", "y".repeat(10_000));
    assert_eq!(s.ok("a", &long).await.0.len(), 10_001);
    // Escape sequences are removed, CRLF becomes LF, a lone CR stays.
    assert_eq!(
        s.ok("a", "printf '\\033[1mbold\\033[0m\\r\\nx\\ry'")
            .await
            .0,
        "bold\nx\ry"
    );
    // Invalid UTF-8 comes back as \xNN escapes (Python's backslashreplace).
    assert_eq!(
        s.ok("a", "printf 'ok\\377\\376\\n'").await.0,
        "ok\\xff\\xfe\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pagers_print_instead_of_waiting_for_a_key() {
    let s = TestServer::start().await;
    s.create("p").await;
    assert_eq!(
        s.ok("p", "echo \"$PAGER $GIT_PAGER $MANPAGER\"").await.0,
        "cat cat cat\n"
    );
    // On the session's terminal git starts its pager (here `more`, as in images without
    // `less`), which waits for a key until the command times out.
    let repo = tempfile::tempdir().unwrap();
    let git = "git -c user.name=u -c user.email=u@example.com -c core.pager=more";
    let command = format!(
        "cd {} && git init -q && {git} commit -q --allow-empty -m first && {git} log --format=%s",
        repo.path().display()
    );
    let (status, body) = s.run("p", &command, Some(10.0)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["output"].as_str(), body["exit_code"].as_i64()),
        (Some("first\n"), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_modes_and_errors() {
    let s = TestServer::start().await;
    s.create("c").await;
    let run = |check: &'static str, cmd: &'static str| {
        s.post("/run_in_session", json!({"action_type": "bash", "session": "c", "command": cmd, "check": check, "error_msg": "probe-custom-msg"}))
    };
    let (st, b) = run("ignore", "(exit 3)").await;
    assert_eq!((st, b["exit_code"].clone()), (200, json!(null)));
    let (st, b) = run("silent", "(exit 3)").await;
    assert_eq!((st, b["exit_code"].clone()), (200, json!(3)));
    let (st, b) = run("raise", "(exit 3)").await;
    assert_eq!(st, 511);
    assert_eq!(class_path(&b), "swerex.exceptions.NonZeroExitCodeError");
    assert_eq!(
        message(&b),
        "probe-custom-msg: Command '(exit 3)' failed with exit code 3. Here is the output:\n''"
    );
    let (st, b) = run("raise", "(a").await;
    assert_eq!(st, 511);
    assert_eq!(class_path(&b), "swerex.exceptions.BashIncorrectSyntaxError");
    assert_eq!(
        b["swerexception"]["extra_info"]["bash_stderr"],
        "bash: line 2: syntax error: unexpected end of file\n"
    );
    // The session is untouched by the rejected command.
    assert_eq!(s.ok("c", "echo still-here").await.0, "still-here\n");
    let (st, b) = s.run("nope", "echo", None).await;
    assert_eq!(
        (st, class_path(&b)),
        (511, "swerex.exceptions.SessionDoesNotExistError")
    );
    assert_eq!(message(&b), "session 'nope' does not exist");
    let (st, b) = s
        .post(
            "/create_session",
            json!({"session_type": "bash", "session": "c"}),
        )
        .await;
    assert_eq!(
        (st, class_path(&b)),
        (511, "swerex.exceptions.SessionExistsError")
    );
    let (st, b) = s
        .post(
            "/run_in_session",
            json!({"action_type": "bash", "session": "c", "command": "echo", "expect": ["("]}),
        )
        .await;
    assert_eq!((st, class_path(&b)), (511, "re.error"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_interrupt_and_leave_the_session_usable() {
    let s = TestServer::start().await;
    s.create("t").await;
    let started = Instant::now();
    let (st, b) = s.run("t", "sleep 5", Some(0.5)).await;
    assert_eq!(st, 511);
    assert_eq!(class_path(&b), "swerex.exceptions.CommandTimeoutError");
    assert_eq!(
        message(&b),
        "timeout after 0.5 seconds while running command 'sleep 5'"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.ok("t", "echo recovered").await.0, "recovered\n");
    // A child that ignores SIGINT is killed with its process group.
    let (st, b) = s
        .run("t", "sh -c 'trap \"\" INT; sleep 30'", Some(0.3))
        .await;
    assert_eq!(
        (st, class_path(&b)),
        (511, "swerex.exceptions.CommandTimeoutError")
    );
    assert_eq!(s.ok("t", "echo again").await.0, "again\n");
    // SWE-agent's follow-up interrupt on an idle session answers at once.
    let (st, b) = s
        .post(
            "/run_in_session",
            json!({"action_type": "bash_interrupt", "session": "t"}),
        )
        .await;
    assert_eq!(
        (st, b["exit_code"].clone(), b["expect_string"].clone()),
        (200, json!(0), json!("SHELLPS1PREFIX"))
    );
    assert_eq!(
        s.ok("t", "echo after-interrupt").await.0,
        "after-interrupt\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interrupt_reaches_a_command_without_timeout() {
    let s = TestServer::start().await;
    s.create("i").await;
    // The command says when it runs: an interrupt sent before the shell started it (a fixed
    // wait on a loaded machine) would test something else.
    let marker = std::env::temp_dir().join(format!("uniagent-interrupt-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let command = format!("touch {}; sleep 60", marker.display());
    let long = s.spawn_run("i", &command);
    let waiting = Instant::now();
    while !marker.exists() {
        assert!(
            waiting.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `sleep` has been exec'd by now (the marker is written just before it).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    interrupt(&s, "i", 5.0).await;
    let long = long
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&marker);
    // 130: SIGINT ended it (a kill after the interrupt's timeout gives 137).
    assert_eq!(long["exit_code"], json!(130), "{long}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "not the 60 s sleep"
    );
    assert_eq!(s.ok("i", "echo ok").await.0, "ok\n");
}

/// A command whose timeout is zero times out before bash has read its line; the Ctrl-C that
/// follows flushes or discards the line. The session must come back at its prompt, not be
/// given up as stuck (seen under load: the shell was killed and later calls got EOF).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_timeout_commands_leave_a_working_session() {
    let s = TestServer::start().await;
    s.create("z").await;
    for i in 0..20 {
        let (st, b) = s.run("z", "true", Some(0.0)).await;
        assert!(
            st == 200 || class_path(&b) == "swerex.exceptions.CommandTimeoutError",
            "round {i}: {st} {b}"
        );
        assert_eq!(s.ok("z", &format!("echo r{i}")).await.0, format!("r{i}\n"));
    }
}

/// An interrupt of an idle shell whose `timeout` is zero still lets the shell handle its SIGINT
/// before the next command line goes out: otherwise bash discards that line and the command
/// never runs (seen under load, where the prompt takes longer than the caller's timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zero_timeout_interrupts_of_an_idle_shell_lose_no_command() {
    let s = TestServer::start().await;
    s.create("z").await;
    for i in 0..20 {
        interrupt(&s, "z", 0.0).await;
        let (st, b) = s.run("z", &format!("echo n{i}"), Some(20.0)).await;
        assert_eq!(
            (st, b["output"].as_str()),
            (200, Some(format!("n{i}\n").as_str())),
            "{b}"
        );
    }
    // A shell that ignores SIGINT prints no prompt for it: the interrupt and the next command
    // still answer, each within a bounded wait.
    s.ok("z", "trap '' INT").await;
    let started = Instant::now();
    interrupt(&s, "z", 0.0).await;
    assert_eq!(s.ok("z", "echo still").await.0, "still\n");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_do_not_block_each_other() {
    let s = TestServer::start().await;
    s.create("slow").await;
    s.create("fast").await;
    let slow = s.spawn_run("slow", "sleep 2");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    assert_eq!(s.get("/is_alive").await.0, 200);
    assert_eq!(s.ok("fast", "echo hi").await.0, "hi\n");
    let (st, _) = s
        .post("/execute", json!({"command": "echo hi", "shell": true}))
        .await;
    assert_eq!(st, 200);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "blocked for {:?}",
        t.elapsed()
    );
    assert_eq!(slow.await.unwrap().status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn output_limit_truncates_with_a_marker() {
    let s = TestServer::start_with(|c| c.shell.max_output_bytes = 1000).await;
    s.create("o").await;
    let (out, code) = s.ok("o", "seq 1 100000; echo done").await;
    assert_eq!(code, json!(0));
    assert!(out.starts_with("1\n2\n3\n"), "{}", &out[..50]);
    assert!(
        out.contains("[uniagent-sandbox: output truncated, "),
        "no marker"
    );
    assert!(out.ends_with("99999\n100000\ndone\n"));
    assert!(out.len() < 20_000, "{}", out.len());
    assert_eq!(s.ok("o", "echo small").await.0, "small\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_close_exit_and_no_leaks() {
    let s = TestServer::start().await;
    s.create("l").await;
    let (out, _) = s.ok("l", "sleep 300 & echo $!").await;
    let bg: i32 = out.trim().parse().unwrap();
    assert!(pid_alive(bg));
    let (st, b) = s
        .post(
            "/close_session",
            json!({"session_type": "bash", "session": "l"}),
        )
        .await;
    assert_eq!((st, b), (200, json!({"session_type": "bash"})));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pid_alive(bg), "background job {bg} survived close_session");
    let (st, b) = s
        .post(
            "/close_session",
            json!({"session_type": "bash", "session": "l"}),
        )
        .await;
    assert_eq!(
        (st, class_path(&b)),
        (511, "swerex.exceptions.SessionDoesNotExistError")
    );

    // `exit` ends the shell: EOF now and later, until close_session.
    s.create("e").await;
    let (st, b) = s.run("e", "exit", Some(5.0)).await;
    assert_eq!((st, class_path(&b)), (511, "pexpect.exceptions.EOF"));
    let (st, b) = s.run("e", "echo", Some(5.0)).await;
    assert_eq!((st, class_path(&b)), (511, "pexpect.exceptions.EOF"));
    assert_eq!(
        s.post(
            "/close_session",
            json!({"session_type": "bash", "session": "e"})
        )
        .await
        .0,
        200
    );

    // /close ends every shell but keeps the names.
    s.create("x").await;
    assert_eq!(s.post("/close", json!(null)).await, (200, json!({})));
    let (st, b) = s.run("x", "echo", None).await;
    assert_eq!(
        (st, class_path(&b), message(&b)),
        (511, "builtins.RuntimeError", "shell not initialized")
    );
    let (st, b) = s
        .post(
            "/create_session",
            json!({"session_type": "bash", "session": "x"}),
        )
        .await;
    assert_eq!(
        (st, class_path(&b)),
        (511, "swerex.exceptions.SessionExistsError")
    );
    assert_eq!(
        s.post(
            "/close_session",
            json!({"session_type": "bash", "session": "x"})
        )
        .await
        .0,
        200
    );
    s.create("x").await;
    assert_eq!(
        s.get("/is_alive").await.1,
        json!({"is_alive": true, "message": ""})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interactive_programs_and_startup_source() {
    let s = TestServer::start().await;
    let rc = s.scratch.path().join("rc.sh");
    std::fs::write(&rc, "export FROM_RC=yes\nPS1='custom> '\n").unwrap();
    let (st, _) = s
        .post("/create_session", json!({"session_type": "bash", "session": "py", "startup_source": [rc.to_string_lossy()]}))
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.ok("py", "echo $FROM_RC").await.0, "yes\n");
    let send = |cmd: &'static str, quit: bool, expect: Vec<&'static str>| {
        s.post(
            "/run_in_session",
            json!({"action_type": "bash", "session": "py", "command": cmd, "timeout": 10,
                   "is_interactive_command": !quit, "is_interactive_quit": quit, "expect": expect}),
        )
    };
    let (st, b) = s.post("/run_in_session", json!({"action_type": "bash", "session": "py", "command": "python3 -i -q", "timeout": 10, "check": "silent", "expect": [">>> "]})).await;
    assert_eq!(
        (st, b["expect_string"].clone()),
        (200, json!(">>> ")),
        "{b}"
    );
    let (st, b) = send("print(6*7)", false, vec![">>> "]).await;
    assert_eq!(
        (st, b["output"].clone(), b["exit_code"].clone()),
        (200, json!("42"), json!(0)),
        "{b}"
    );
    let (st, b) = send("quit()", true, vec![]).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.ok("py", "echo back").await.0, "back\n");
}
