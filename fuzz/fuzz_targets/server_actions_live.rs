//! Decodes fuzz input as `run_in_session`, `bash_interrupt`, `create_session`, `close_session`
//! and `/execute` bodies and *executes* them against a live session manager with real bash
//! sessions: timeouts, check modes, expect patterns, interactive flags, retries, env and cwd
//! all come from the input. Bounded and harmless by construction: every command is replaced by
//! a `printf` of its (quoted) text, timeouts are clamped to 0.3 s, retries to 3, sessions to 4,
//! startup files dropped, and interactive lines stripped of control characters (the tty would
//! act on them). Nothing may panic or hang; the manager must keep answering.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use uniagent_core::sandbox::{
    Action, CloseSessionRequest, Command, CommandLine, CreateSessionRequest,
};
use uniagent_sandboxes::fuzzing::execute;
use uniagent_sandboxes::fuzzing::{parse_body, ACTION, CLOSE_SESSION, COMMAND, CREATE_SESSION};
use uniagent_sandboxes::server::{SessionManager, ShellOptions};

struct Live {
    runtime: tokio::runtime::Runtime,
    sessions: SessionManager,
}

fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let scratch =
            std::env::temp_dir().join(format!("uniagent-fuzz-live-{}", std::process::id()));
        let options = ShellOptions {
            max_output_bytes: 64 << 10,
            scratch_dir: scratch,
            ..ShellOptions::default()
        };
        Live {
            runtime,
            sessions: SessionManager::new(options, 4),
        }
    })
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn harmless(text: &str) -> String {
    format!("printf '%s' {}", quote(text))
}

fn clamp(t: Option<f64>) -> Option<f64> {
    Some(t.unwrap_or(0.3).clamp(0.0, 0.3))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let live = live();
    live.runtime.block_on(async {
        // The session most inputs address; recreated when a close took it away.
        if live.sessions.get("s").is_err() {
            let _ = live.sessions.create(&CreateSessionRequest::new("s")).await;
        }
        match selector % 4 {
            0 => {
                let Ok(mut action) = parse_body::<Action>(body, &ACTION) else {
                    return;
                };
                match &mut action {
                    Action::Bash(a) => {
                        a.command = if a.is_interactive_command || a.is_interactive_quit {
                            harmless(
                                &a.command
                                    .chars()
                                    .take(1000)
                                    .map(|c| if c.is_control() { ' ' } else { c })
                                    .collect::<String>(),
                            )
                        } else {
                            harmless(&a.command)
                        };
                        a.timeout = clamp(a.timeout);
                    }
                    Action::Interrupt(a) => {
                        a.timeout = a.timeout.clamp(0.0, 0.3);
                        a.n_retry = a.n_retry.min(3);
                    }
                }
                let _ = live.sessions.run(&action).await;
            }
            1 => {
                if let Ok(mut request) = parse_body::<CreateSessionRequest>(body, &CREATE_SESSION) {
                    request.startup_source.clear();
                    request.startup_timeout = request.startup_timeout.clamp(0.0, 1.0);
                    let _ = live.sessions.create(&request).await;
                }
            }
            2 => {
                if let Ok(request) = parse_body::<CloseSessionRequest>(body, &CLOSE_SESSION) {
                    let _ = live.sessions.close_session(&request).await;
                }
            }
            _ => {
                let Ok(mut command) = parse_body::<Command>(body, &COMMAND) else {
                    return;
                };
                let text = match &command.command {
                    CommandLine::Text(s) => s.clone(),
                    CommandLine::Argv(v) => v.join(" "),
                };
                command.command = CommandLine::Argv(vec!["printf".into(), "%s".into(), text]);
                command.shell = false;
                command.timeout = clamp(command.timeout);
                if let Some(env) = &mut command.env {
                    env.insert("PATH".into(), "/usr/bin:/bin".into());
                }
                let _ = execute(&command, 64 << 10).await;
            }
        }
        // Still serving: a plain command in the main session answers.
        if live.sessions.get("s").is_ok() {
            let probe = Action::Bash(uniagent_core::sandbox::BashAction::new(
                "s",
                "true",
                Some(5.0),
            ));
            let _ = live.sessions.run(&probe).await;
        }
    });
});
