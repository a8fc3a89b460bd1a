//! The scenarios every sandbox backend must pass with the built-in tools. Files are checked
//! byte for byte through [`Files`]: on the local file system when the sandbox shares it (host,
//! swerex-remote), or inside the sandbox through its `execute` (docker).

#![allow(dead_code)] // each test binary uses a part of it

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use uniagent_core::sandbox::CreateSessionRequest;
use uniagent_core::{
    Deployment, DeploymentExt, EpisodeSignal, Task, Tool, ToolContext, ToolOutput, ToolStatus,
};
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
        rollout_id: "t:0".into(),
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

/// Where the scenarios set up and check files.
#[derive(Clone)]
pub enum Files {
    /// The local file system, which the sandbox shares.
    Local,
    /// Inside the sandbox, through shell commands (`base64` for byte-exact contents).
    Sandbox(Arc<dyn Deployment>),
}

/// `s` as one single-quoted shell word.
fn shq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Files {
    async fn sh(deployment: &Arc<dyn Deployment>, script: &str) -> String {
        let out = deployment
            .sh(script, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{script}: {out:?}");
        out.stdout
    }

    pub async fn read(&self, path: &Path) -> Vec<u8> {
        match self {
            Files::Local => std::fs::read(path).unwrap(),
            Files::Sandbox(d) => {
                let encoded =
                    Self::sh(d, &format!("base64 -w0 {}", shq(path.to_str().unwrap()))).await;
                base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .unwrap()
            }
        }
    }

    pub async fn write(&self, path: &Path, bytes: &[u8]) {
        match self {
            Files::Local => std::fs::write(path, bytes).unwrap(),
            Files::Sandbox(d) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                Self::sh(
                    d,
                    &format!(
                        "printf %s {} | base64 -d > {}",
                        shq(&encoded),
                        shq(path.to_str().unwrap())
                    ),
                )
                .await;
            }
        }
    }

    pub async fn create_dir(&self, path: &Path) {
        match self {
            Files::Local => std::fs::create_dir(path).unwrap(),
            Files::Sandbox(d) => {
                Self::sh(d, &format!("mkdir {}", shq(path.to_str().unwrap()))).await;
            }
        }
    }

    pub async fn count_entries(&self, dir: &Path) -> usize {
        match self {
            Files::Local => std::fs::read_dir(dir).unwrap().count(),
            Files::Sandbox(d) => {
                let listing = Self::sh(d, &format!("ls -A {}", shq(dir.to_str().unwrap()))).await;
                listing.lines().count()
            }
        }
    }

    /// Runs git in `repo` with a fixed identity; returns its stdout.
    pub async fn git(&self, repo: &Path, args: &[&str]) -> String {
        let identity = [
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ];
        match self {
            Files::Local => {
                let status = std::process::Command::new("git")
                    .args(identity)
                    .args(args)
                    .current_dir(repo)
                    .output()
                    .unwrap();
                assert!(
                    status.status.success(),
                    "git {args:?}: {}",
                    String::from_utf8_lossy(&status.stderr)
                );
                String::from_utf8(status.stdout).unwrap()
            }
            Files::Sandbox(d) => {
                let words: Vec<String> = identity.iter().chain(args).map(|w| shq(w)).collect();
                Self::sh(
                    d,
                    &format!(
                        "cd {} && git {}",
                        shq(repo.to_str().unwrap()),
                        words.join(" ")
                    ),
                )
                .await
            }
        }
    }
}

/// Runs every scenario in `work` (an empty local directory the sandbox can see).
pub async fn run_all(deployment: Arc<dyn Deployment>, work: &Path) {
    run_all_with(deployment, work, Files::Local).await;
}

/// Runs every scenario in `work`, an empty directory inside the sandbox (which need not share
/// the local file system).
pub async fn run_all_in_sandbox(deployment: Arc<dyn Deployment>, work: &Path) {
    let files = Files::Sandbox(deployment.clone());
    run_all_with(deployment, work, files).await;
}

async fn run_all_with(deployment: Arc<dyn Deployment>, work: &Path, files: Files) {
    deployment
        .create_session(CreateSessionRequest::new(SESSION))
        .await
        .unwrap();
    let ctx = context(deployment.clone(), Duration::from_secs(30));
    editor_scenario(&ctx, work, &files).await;
    bash_scenario(deployment.clone(), work).await;
    submit_scenario(&ctx, work, &files).await;
    script_scenario(&ctx, work).await;
    let done = call(&Finish, json!({"answer": "42"}), &ctx).await;
    assert_eq!(
        done.signal,
        Some(EpisodeSignal::Finish {
            answer: "42".into()
        })
    );
}

/// The scenarios of the tools that run commands of their own making (the editor, script
/// tools): these must pass even where the server cannot read exit codes.
pub async fn run_own_command_tools(deployment: Arc<dyn Deployment>, work: &Path) {
    deployment
        .create_session(CreateSessionRequest::new(SESSION))
        .await
        .unwrap();
    let ctx = context(deployment.clone(), Duration::from_secs(30));
    editor_scenario(&ctx, work, &Files::Local).await;
    script_scenario(&ctx, work).await;
}

async fn editor_scenario(ctx: &ToolContext, work: &Path, files: &Files) {
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
    assert_eq!(files.read(&file).await, original.as_bytes());
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
    let edited = String::from_utf8(files.read(&file).await).unwrap();
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
        files.read(&file).await,
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
    assert_eq!(files.read(&big_path).await, big.as_bytes());
    let leftovers = files
        .count_entries(&work.join("toolbox-2/state/args"))
        .await;
    assert_eq!(leftovers, 0, "the arguments file is consumed");
    let listing = ok(&editor, json!({"command": "view", "path": work}), ctx).await;
    assert!(
        listing.contains("big.txt") && !listing.contains(".git"),
        "{listing}"
    );
    let bin = work.join("blob.bin");
    files.write(&bin, b"\0\x01\x02").await;
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

async fn submit_scenario(ctx: &ToolContext, work: &Path, files: &Files) {
    let repo = work.join("repo");
    files.create_dir(&repo).await;
    let git = |args: &'static [&'static str]| files.git(&repo, args);
    git(&["init", "-q"]).await;
    files.write(&repo.join("a.txt"), b"one\n").await;
    files.write(&repo.join(".gitignore"), b"*.log\n").await;
    git(&["add", "-A"]).await;
    git(&["commit", "-qm", "base"]).await;
    let base = git(&["rev-parse", "HEAD"]).await.trim().to_owned();
    files.write(&repo.join("a.txt"), b"two\n").await;
    git(&["commit", "-qam", "agent commit"]).await;
    files
        .write(&repo.join("new file.py"), b"print('hi')\n")
        .await;
    files.write(&repo.join("debug.log"), b"ignored\n").await;
    let submit = Submit {
        repo_dir: Some(repo.to_str().unwrap().into()),
        base_commit: Some(base),
        timeout: None,
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
        git(&["status", "--porcelain"]).await,
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
