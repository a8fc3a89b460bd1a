//! [`ScriptedDeployment`]: an in-memory sandbox with scripted command results.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock;
use crate::error::{Error, Result};
use crate::sandbox::*;

/// What a scripted command answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    /// Output and exit code.
    Output {
        /// Combined output.
        output: String,
        /// Exit code.
        exit_code: i32,
    },
    /// Time out (as a runtime `CommandTimeoutError`).
    Timeout,
    /// Fail like a broken transport (a sandbox error, retryable or not).
    Crash {
        /// Whether the failure is transient.
        retryable: bool,
    },
}

#[derive(Debug, Default)]
struct State {
    started: bool,
    stopped: bool,
    fail_start: bool,
    sessions: BTreeSet<String>,
    files: BTreeMap<String, Vec<u8>>,
    log: Vec<String>,
}

/// An in-memory sandbox: sessions and files are real (kept in memory), command results come
/// from a script keyed by the exact command text. Unknown commands answer
/// `bash: CMD: command not found` with exit code 127. Every operation is logged.
#[derive(Debug, Clone)]
pub struct ScriptedDeployment {
    replies: Arc<BTreeMap<String, ScriptedReply>>,
    state: Arc<Mutex<State>>,
}

impl Default for ScriptedDeployment {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedDeployment {
    /// An empty sandbox (already started, for convenience in tests).
    pub fn new() -> Self {
        let state = State {
            started: true,
            ..State::default()
        };
        Self {
            replies: Arc::default(),
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn with_reply(mut self, command: &str, reply: ScriptedReply) -> Self {
        Arc::make_mut(&mut self.replies).insert(command.to_owned(), reply);
        self
    }

    /// `command` prints `output` and exits with `exit_code`.
    pub fn on_command(self, command: &str, output: &str, exit_code: i32) -> Self {
        self.with_reply(
            command,
            ScriptedReply::Output {
                output: output.to_owned(),
                exit_code,
            },
        )
    }

    /// `command` times out.
    pub fn on_command_timeout(self, command: &str) -> Self {
        self.with_reply(command, ScriptedReply::Timeout)
    }

    /// `command` makes the transport fail.
    pub fn on_command_crash(self, command: &str, retryable: bool) -> Self {
        self.with_reply(command, ScriptedReply::Crash { retryable })
    }

    /// Adds a file.
    pub fn with_file(self, path: &str, content: impl Into<Vec<u8>>) -> Self {
        lock(&self.state)
            .files
            .insert(path.to_owned(), content.into());
        self
    }

    /// `start` fails with a non-retryable sandbox error (for tests of start failures).
    pub fn failing_start(self) -> Self {
        lock(&self.state).fail_start = true;
        self
    }

    /// Every operation so far, as `op: detail` lines.
    pub fn log(&self) -> Vec<String> {
        lock(&self.state).log.clone()
    }

    /// Whether `stop` was called.
    pub fn is_stopped(&self) -> bool {
        lock(&self.state).stopped
    }

    /// Current content of a file.
    pub fn file(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.state).files.get(path).cloned()
    }

    fn live(&self, op: &str, detail: &str) -> Result<()> {
        let mut s = lock(&self.state);
        s.log.push(format!("{op}: {detail}"));
        if !s.started || s.stopped {
            return Err(Error::Sandbox {
                backend: "scripted".into(),
                message: format!("`{op}` on a sandbox that is not running"),
                retryable: false,
                source: None,
            });
        }
        Ok(())
    }

    fn reply(&self, command: &str, timeout: Option<f64>) -> Result<(String, i32)> {
        match self.replies.get(command) {
            Some(ScriptedReply::Output { output, exit_code }) => Ok((output.clone(), *exit_code)),
            Some(ScriptedReply::Timeout) => Err(Error::Runtime {
                backend: "scripted".into(),
                exception: Box::new(RemoteException::new(
                    ExceptionClass::CommandTimeout,
                    format!(
                        "timeout after {} seconds while running command '{command}'",
                        timeout.unwrap_or(0.0)
                    ),
                )),
            }),
            Some(ScriptedReply::Crash { retryable }) => Err(Error::Sandbox {
                backend: "scripted".into(),
                message: format!("connection lost while running `{command}`"),
                retryable: *retryable,
                source: None,
            }),
            None => Ok((format!("bash: {command}: command not found\n"), 127)),
        }
    }
}

#[async_trait]
impl Deployment for ScriptedDeployment {
    fn backend(&self) -> &str {
        "scripted"
    }

    /// Files only: sessions and commands answer from the script, not from a shell, so neither
    /// `sessions` nor `execute` is claimed (the conformance suite skips their checks), and
    /// `upload` does not extract archives.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            files: true,
            ..Capabilities::none()
        }
    }

    async fn start(&self) -> Result<()> {
        let mut s = lock(&self.state);
        s.log.push("start".into());
        if s.fail_start {
            return Err(Error::Sandbox {
                backend: "scripted".into(),
                message: "scripted start failure".into(),
                retryable: false,
                source: None,
            });
        }
        s.started = true;
        s.stopped = false;
        Ok(())
    }

    async fn stop(&self) -> Result<()> {
        let mut s = lock(&self.state);
        s.log.push("stop".into());
        s.stopped = true;
        s.sessions.clear();
        Ok(())
    }

    async fn is_alive(&self) -> Result<IsAliveResponse> {
        let s = lock(&self.state);
        Ok(IsAliveResponse {
            is_alive: s.started && !s.stopped,
            message: String::new(),
        })
    }

    async fn create_session(&self, request: CreateSessionRequest) -> Result<CreateSessionResponse> {
        self.live("create_session", &request.session)?;
        if !lock(&self.state).sessions.insert(request.session.clone()) {
            return Err(Error::Runtime {
                backend: "scripted".into(),
                exception: Box::new(RemoteException::new(
                    ExceptionClass::SessionExists,
                    format!("session {} already exists", request.session),
                )),
            });
        }
        Ok(CreateSessionResponse {
            output: String::new(),
            session_type: SessionType::Bash,
        })
    }

    async fn run_in_session(&self, action: Action) -> Result<BashObservation> {
        let detail = match &action {
            Action::Bash(a) => a.command.clone(),
            Action::Interrupt(_) => "<interrupt>".into(),
        };
        self.live("run_in_session", &detail)?;
        if !lock(&self.state).sessions.contains(action.session()) {
            return Err(Error::Runtime {
                backend: "scripted".into(),
                exception: Box::new(RemoteException::new(
                    ExceptionClass::SessionDoesNotExist,
                    format!("session {} does not exist", action.session()),
                )),
            });
        }
        let (output, exit_code) = match &action {
            Action::Bash(a) => {
                let (output, code) = self.reply(&a.command, a.timeout)?;
                match a.check {
                    CheckMode::Raise if code != 0 => {
                        return Err(Error::Runtime {
                            backend: "scripted".into(),
                            exception: Box::new(RemoteException::new(
                                ExceptionClass::NonZeroExitCode,
                                format!("Command '{}' failed with exit code {code}.", a.command),
                            )),
                        })
                    }
                    CheckMode::Ignore => (output, None),
                    _ => (output, Some(code)),
                }
            }
            Action::Interrupt(_) => (String::new(), Some(0)),
        };
        Ok(BashObservation {
            output,
            exit_code,
            failure_reason: String::new(),
            expect_string: "SHELLPS1PREFIX".into(),
            session_type: SessionType::Bash,
        })
    }

    async fn close_session(&self, request: CloseSessionRequest) -> Result<CloseSessionResponse> {
        self.live("close_session", &request.session)?;
        if !lock(&self.state).sessions.remove(&request.session) {
            return Err(Error::Runtime {
                backend: "scripted".into(),
                exception: Box::new(RemoteException::new(
                    ExceptionClass::SessionDoesNotExist,
                    format!("session {} does not exist", request.session),
                )),
            });
        }
        Ok(CloseSessionResponse {
            session_type: SessionType::Bash,
        })
    }

    async fn execute(&self, command: Command) -> Result<CommandResponse> {
        let text = match &command.command {
            CommandLine::Text(t) => t.clone(),
            CommandLine::Argv(argv) => argv.join(" "),
        };
        self.live("execute", &text)?;
        let (stdout, code) = self.reply(&text, command.timeout)?;
        Ok(CommandResponse {
            stdout,
            stderr: String::new(),
            exit_code: Some(code),
        })
    }

    async fn read_file(&self, request: ReadFileRequest) -> Result<ReadFileResponse> {
        self.live("read_file", &request.path)?;
        let bytes = lock(&self.state)
            .files
            .get(&request.path)
            .cloned()
            .ok_or_else(|| Error::Runtime {
                backend: "scripted".into(),
                exception: Box::new(RemoteException::new(
                    ExceptionClass::FileNotFound,
                    format!("[Errno 2] No such file or directory: '{}'", request.path),
                )),
            })?;
        let content = String::from_utf8(bytes).map_err(|e| Error::Runtime {
            backend: "scripted".into(),
            exception: Box::new(RemoteException::new(
                ExceptionClass::UnicodeDecode,
                e.to_string(),
            )),
        })?;
        Ok(ReadFileResponse { content })
    }

    async fn write_file(&self, request: WriteFileRequest) -> Result<()> {
        self.live("write_file", &request.path)?;
        lock(&self.state)
            .files
            .insert(request.path, request.content.into_bytes());
        Ok(())
    }

    async fn upload(&self, request: UploadRequest) -> Result<()> {
        self.live("upload", &request.target_path)?;
        if request.unzip {
            return Err(Error::not_supported("upload with unzip", "scripted"));
        }
        lock(&self.state)
            .files
            .insert(request.target_path, request.data);
        Ok(())
    }
}
