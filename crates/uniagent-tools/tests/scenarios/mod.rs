//! The scenarios every sandbox backend must pass with the built-in tools. Files are checked
//! byte for byte on the local file system, so the sandbox must share it (host, swerex-remote).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use uniagent_core::sandbox::CreateSessionRequest;
use uniagent_core::{Deployment, EpisodeSignal, Task, Tool, ToolContext, ToolOutput, ToolStatus};
use uniagent_tools::{ExecuteBash, Finish, ScriptTool, StrReplaceEditor, Submit, ToolboxConfig};

pub const SESSION: &str = "tools";

pub fn toolbox_config(install_dir: &Path) -> ToolboxConfig {
    ToolboxConfig::default()
        .with_install_dir(install_dir.to_str().unwrap())
        .with_binary(env!("CARGO_BIN_EXE_uniagent-toolbox"))
}

pub fn context(deployment: Arc<dyn Deployment>, timeout: Duration) -> ToolContext {
    ToolContext {
        deployment: Some(deployment),
        session: SESSION.into(),
        timeout,
        task: Arc::new(Task::new("scenario", vec![])),
        call_id: "call-1".into(),
    }
}

async fn call(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> ToolOutput {
    tool.call(args.clone(), ctx)
        .await
        .unwrap_or_else(|e| panic!("{} {args} failed: {e}", tool.spec().function.name))
}

async fn ok(tool: &dyn Tool, args: Value, ctx: &ToolContext) -> String {
    let out = call(tool, args.clone(), ctx).await;
    assert_eq!(out.status, ToolStatus::Success, "{args}: {}", out.content);
    out.content
}

/// Runs every scenario in `work` (an empty local directory the sandbox can see).
pub async fn run_all(deployment: Arc<dyn Deployment>, work: &Path) {
    deployment
        .create_session(CreateSessionRequest::new(SESSION))
        .await
        .unwrap();
    let ctx = context(deployment.clone(), Duration::from_secs(30));
    editor_scenario(&ctx, work).await;
    bash_scenario(deployment.clone(), work).await;
    submit_scenario(&ctx, work).await;
    script_scenario(&ctx, work).await;
    let done = call(&Finish, json!({"answer": "42"}), &ctx).await;
    assert_eq!(
        done.signal,
        Some(EpisodeSignal::Finish {
            answer: "42".into()
        })
    );
}

async fn editor_scenario(ctx: &ToolContext, work: &Path) {
    // A fresh install dir: the first call finds no toolbox and installs it.
    let editor = StrReplaceEditor::new(toolbox_config(&work.join("toolbox")));
    let file = work.join("tricky.go");
    let path = file.to_str().unwrap();
    let original =
        "package main\r\n\nfunc main() {\n\tprintln(\"héllo 🌍 'quoted' $HOME `tick` \\\\ \")\n}";
    let created = ok(
        &editor,
        json!({"command": "create", "path": path, "file_text": original}),
        ctx,
    )
    .await;
    assert!(created.contains("File created successfully"), "{created}");
    assert_eq!(std::fs::read(&file).unwrap(), original.as_bytes());
    let refused = call(
        &editor,
        json!({"command": "create", "path": path, "file_text": "x"}),
        ctx,
    )
    .await;
    assert_eq!(refused.status, ToolStatus::Failed);
    assert!(
        refused.content.contains("already exists"),
        "{}",
        refused.content
    );

    ok(&editor, json!({"command": "str_replace", "path": path, "old_str": "\tprintln", "new_str": "\t// say hi\n\tprintln"}), ctx)
        .await;
    ok(
        &editor,
        json!({"command": "insert", "path": path, "insert_line": 6, "new_str": "// end"}),
        ctx,
    )
    .await;
    let edited = std::fs::read_to_string(&file).unwrap();
    // The file's first line ends in CRLF, so that is the line ending inserted text gets.
    assert_eq!(
        edited,
        original.replace("\tprintln", "\t// say hi\n\tprintln") + "\r\n// end"
    );
    let view = ok(
        &editor,
        json!({"command": "view", "path": path, "view_range": [4, 5]}),
        ctx,
    )
    .await;
    assert!(
        view.contains("     4\t\t// say hi\n     5\t\tprintln(\"héllo 🌍"),
        "{view}"
    );
    let twice = call(
        &editor,
        json!({"command": "str_replace", "path": path, "old_str": "main", "new_str": "x"}),
        ctx,
    )
    .await;
    assert!(
        twice.content.contains("matched 2 times") && twice.content.contains("[1, 3]"),
        "{}",
        twice.content
    );
    ok(&editor, json!({"command": "undo_edit", "path": path}), ctx).await;
    ok(&editor, json!({"command": "undo_edit", "path": path}), ctx).await;
    assert_eq!(
        std::fs::read(&file).unwrap(),
        original.as_bytes(),
        "two undos restore the original"
    );

    // Large content travels through an uploaded arguments file, also when the first call has
    // to install the toolbox (a fresh install dir) and retry.
    let fresh = StrReplaceEditor::new(toolbox_config(&work.join("toolbox-2")));
    let big: String = (0..6000)
        .map(|i| format!("\tline {i} — ünïcödé\r\n"))
        .collect();
    let big_path = work.join("big.txt");
    ok(
        &fresh,
        json!({"command": "create", "path": big_path, "file_text": big}),
        ctx,
    )
    .await;
    assert_eq!(std::fs::read(&big_path).unwrap(), big.as_bytes());
    let leftovers = std::fs::read_dir(work.join("toolbox-2/state/args"))
        .unwrap()
        .count();
    assert_eq!(leftovers, 0, "the arguments file is consumed");
    let listing = ok(&editor, json!({"command": "view", "path": work}), ctx).await;
    assert!(
        listing.contains("big.txt") && !listing.contains(".git"),
        "{listing}"
    );
    let bin = work.join("blob.bin");
    std::fs::write(&bin, b"\0\x01\x02").unwrap();
    let refused = call(&editor, json!({"command": "view", "path": bin}), ctx).await;
    assert!(
        refused.status == ToolStatus::Failed && refused.content.contains("binary"),
        "{}",
        refused.content
    );
    let bad = call(&editor, json!({"command": "insert", "path": path}), ctx).await;
    assert!(
        bad.status == ToolStatus::Failed && bad.content.contains("insert_line"),
        "{}",
        bad.content
    );
}

async fn bash_scenario(deployment: Arc<dyn Deployment>, work: &Path) {
    let bash = ExecuteBash {
        max_output_chars: 200,
        ..ExecuteBash::default()
    };
    let ctx = context(deployment.clone(), Duration::from_secs(30));
    let dir = work.to_str().unwrap();
    ok(
        &bash,
        json!({"command": format!("cd '{dir}' && export GREETING=hej")}),
        &ctx,
    )
    .await;
    let out = ok(&bash, json!({"command": "pwd; echo $GREETING"}), &ctx).await;
    assert_eq!(out, format!("{dir}\nhej"), "state persists across calls");
    let long = ok(&bash, json!({"command": "seq 1 5000"}), &ctx).await;
    assert!(
        long.starts_with("1\n2\n")
            && long.ends_with("4999\n5000")
            && long.contains("characters elided"),
        "{long}"
    );
    let failing = call(
        &bash,
        json!({"command": "printf 'caf\\xe9\\n'; (exit 3)"}),
        &ctx,
    )
    .await;
    assert!(
        failing.content.starts_with("caf") && failing.content.ends_with("[exit code: 3]"),
        "{}",
        failing.content
    );
    assert_eq!(failing.metadata["exit_code"], 3);
    let quiet = ok(&bash, json!({"command": "true"}), &ctx).await;
    assert_eq!(quiet, uniagent_tools::tools::NO_OUTPUT);

    let short = context(deployment, Duration::from_secs(2));
    let slow = call(&bash, json!({"command": "sleep 30"}), &short).await;
    assert_eq!(slow.status, ToolStatus::TimedOut, "{}", slow.content);
    assert!(
        slow.content.contains("took more than 2 seconds"),
        "{}",
        slow.content
    );
    let after = ok(&bash, json!({"command": "echo still here; pwd"}), &ctx).await;
    assert_eq!(
        after,
        format!("still here\n{dir}"),
        "the session survives a timeout"
    );
}

async fn submit_scenario(ctx: &ToolContext, work: &Path) {
    let repo = work.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        String::from_utf8(status.stdout).unwrap()
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    let base = git(&["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(repo.join("a.txt"), "two\n").unwrap();
    git(&["commit", "-qam", "agent commit"]);
    std::fs::write(repo.join("new file.py"), "print('hi')\n").unwrap();
    std::fs::write(repo.join("debug.log"), "ignored\n").unwrap();
    let submit = Submit {
        repo_dir: Some(repo.to_str().unwrap().into()),
        base_commit: Some(base),
        timeout_secs: None,
    };
    let out = call(&submit, json!({}), ctx).await;
    let Some(EpisodeSignal::Submit { patch }) = out.signal else {
        panic!("no submit signal: {}", out.content)
    };
    assert!(
        patch.contains("-one\n+two\n"),
        "committed changes count against the base: {patch}"
    );
    assert!(
        patch.contains("+++ b/new file.py") && patch.contains("+print('hi')"),
        "untracked files included: {patch}"
    );
    assert!(!patch.contains("debug.log"), "ignored files excluded");
    assert_eq!(
        git(&["status", "--porcelain"]),
        "?? \"new file.py\"\n",
        "the agent's index is untouched"
    );
    let missing = Submit {
        repo_dir: Some(work.join("nope").to_str().unwrap().into()),
        ..Submit::default()
    };
    assert_eq!(
        call(&missing, json!({}), ctx).await.status,
        ToolStatus::Failed
    );
}

async fn script_scenario(ctx: &ToolContext, work: &Path) {
    let spec = uniagent_core::ToolSpec::function(
        "shout",
        "Upper-cases its `text`.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    );
    let script = b"#!/bin/sh\nprintf %s \"$1\" | base64 -d | tr a-z A-Z\n".to_vec();
    let mut tool = ScriptTool::new(spec, script);
    tool.install_dir = work.join("scripts").to_str().unwrap().into();
    let out = ok(&tool, json!({"text": "it's \"quoted\"\n$x"}), ctx).await;
    assert_eq!(out, r#"{"TEXT":"IT'S \"QUOTED\"\N$X"}"#);
}
