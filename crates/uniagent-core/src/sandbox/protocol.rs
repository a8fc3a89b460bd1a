//! Request and response bodies of the sandbox protocol: SWE-ReX 1.4's remote-runtime API.
//!
//! Field names, defaults and tags follow SWE-ReX exactly, so these types serve both our server
//! and our client, and interoperate with SWE-ReX's Python server and client.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

fn default_session() -> String {
    "default".to_owned()
}

/// The only session type SWE-ReX defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionType {
    /// An interactive bash shell on a pty.
    #[default]
    Bash,
}

/// `POST /create_session` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateSessionRequest {
    /// Discriminator; always `bash`.
    #[serde(default)]
    pub session_type: SessionType,
    /// Session name.
    #[serde(default = "default_session")]
    pub session: String,
    /// Files to `source` before the prompt is set.
    #[serde(default)]
    pub startup_source: Vec<String>,
    /// Seconds to wait for the first prompt.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout: f64,
}

fn default_startup_timeout() -> f64 {
    1.0
}

impl CreateSessionRequest {
    /// A bash session with the given name and default settings.
    pub fn new(session: impl Into<String>) -> Self {
        Self {
            session_type: SessionType::Bash,
            session: session.into(),
            startup_source: Vec::new(),
            startup_timeout: default_startup_timeout(),
        }
    }
}

/// `POST /create_session` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateSessionResponse {
    /// What the shell printed before its first prompt.
    #[serde(default)]
    pub output: String,
    /// Always `bash`.
    #[serde(default)]
    pub session_type: SessionType,
}

/// How a session command treats a non-zero exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckMode {
    /// Fail with `NonZeroExitCodeError` (SWE-ReX's default).
    #[default]
    Raise,
    /// Report the exit code as data.
    Silent,
    /// Do not extract the exit code (`exit_code: null`).
    Ignore,
}

/// `POST /run_in_session` body, tagged by `action_type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action_type")]
pub enum Action {
    /// Run a command.
    #[serde(rename = "bash")]
    Bash(BashAction),
    /// Interrupt what runs in a session.
    #[serde(rename = "bash_interrupt")]
    Interrupt(BashInterruptAction),
}

impl Action {
    /// The target session.
    pub fn session(&self) -> &str {
        match self {
            Self::Bash(a) => &a.session,
            Self::Interrupt(a) => &a.session,
        }
    }
}

/// Run `command` in a bash session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BashAction {
    /// Shell text; may span several lines.
    pub command: String,
    /// Target session.
    #[serde(default = "default_session")]
    pub session: String,
    /// Seconds to wait for completion; `None` waits forever.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Exit-code handling.
    #[serde(default)]
    pub check: CheckMode,
    /// Prefix of the `NonZeroExitCodeError` message.
    #[serde(default)]
    pub error_msg: String,
    /// Send a line to a program running in the shell.
    #[serde(default)]
    pub is_interactive_command: bool,
    /// A line that ends such a program.
    #[serde(default)]
    pub is_interactive_quit: bool,
    /// Extra regular expressions that end the wait.
    #[serde(default)]
    pub expect: Vec<String>,
}

impl BashAction {
    /// A command whose exit code is returned as data (`check: silent`).
    pub fn new(
        session: impl Into<String>,
        command: impl Into<String>,
        timeout: Option<f64>,
    ) -> Self {
        Self {
            command: command.into(),
            session: session.into(),
            timeout,
            check: CheckMode::Silent,
            error_msg: String::new(),
            is_interactive_command: false,
            is_interactive_quit: false,
            expect: Vec::new(),
        }
    }
}

/// Interrupt the command running in a session (Ctrl-C, then harder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BashInterruptAction {
    /// Target session.
    #[serde(default = "default_session")]
    pub session: String,
    /// Per-attempt wait for the prompt, seconds.
    #[serde(default = "default_interrupt_timeout")]
    pub timeout: f64,
    /// Ctrl-C attempts before the fallback.
    #[serde(default = "default_n_retry")]
    pub n_retry: u32,
    /// Extra patterns besides the prompt.
    #[serde(default)]
    pub expect: Vec<String>,
}

fn default_interrupt_timeout() -> f64 {
    0.2
}

fn default_n_retry() -> u32 {
    3
}

/// `POST /run_in_session` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BashObservation {
    /// stdout and stderr interleaved (both go to the pty).
    #[serde(default)]
    pub output: String,
    /// Exit code; `null` with `check: ignore`.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Always `""` in SWE-ReX 1.4.
    #[serde(default)]
    pub failure_reason: String,
    /// The pattern that ended the wait.
    #[serde(default)]
    pub expect_string: String,
    /// Always `bash`.
    #[serde(default)]
    pub session_type: SessionType,
}

/// `POST /close_session` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseSessionRequest {
    /// Session name.
    #[serde(default = "default_session")]
    pub session: String,
    /// Always `bash`.
    #[serde(default)]
    pub session_type: SessionType,
}

/// `POST /close_session` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseSessionResponse {
    /// Always `bash`.
    #[serde(default)]
    pub session_type: SessionType,
}

/// A command line: an argv list, or a string (a shell script with `shell: true`, otherwise a
/// program name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CommandLine {
    /// A single string.
    Text(String),
    /// An argv list.
    Argv(Vec<String>),
}

/// `POST /execute` body: a one-off process, no pty, no shared state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// What to run.
    pub command: CommandLine,
    /// Run through `/bin/sh -c`.
    #[serde(default)]
    pub shell: bool,
    /// Seconds before the child is killed; `None` = no limit.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Fail with `NonZeroExitCodeError` on a non-zero exit.
    #[serde(default)]
    pub check: bool,
    /// Prefix for `check` failures.
    #[serde(default)]
    pub error_msg: String,
    /// Replaces the whole environment when set.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Redirect stderr into stdout.
    #[serde(default)]
    pub merge_output_streams: bool,
}

impl Command {
    /// A shell command (`/bin/sh -c`) with a timeout in seconds.
    pub fn shell(script: impl Into<String>, timeout: Option<f64>) -> Self {
        Self {
            command: CommandLine::Text(script.into()),
            shell: true,
            timeout,
            check: false,
            error_msg: String::new(),
            env: None,
            cwd: None,
            merge_output_streams: false,
        }
    }

    /// An argv command with a timeout in seconds.
    pub fn argv<I, S>(argv: I, timeout: Option<f64>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            command: CommandLine::Argv(argv.into_iter().map(Into::into).collect()),
            ..Self::shell("", timeout)
        }
        .with_shell(false)
    }

    fn with_shell(mut self, shell: bool) -> Self {
        self.shell = shell;
        self
    }
}

/// `POST /execute` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResponse {
    /// Standard output (UTF-8, invalid bytes as `\xNN` escapes).
    #[serde(default)]
    pub stdout: String,
    /// Standard error.
    #[serde(default)]
    pub stderr: String,
    /// Exit code; `None` when the process was killed by a signal and no code exists.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// `POST /read_file` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadFileRequest {
    /// Path inside the sandbox.
    pub path: String,
    /// Text encoding (`None` = UTF-8).
    #[serde(default)]
    pub encoding: Option<String>,
    /// Python codec error handler (`strict`, `replace`, `backslashreplace`...).
    #[serde(default)]
    pub errors: Option<String>,
}

impl ReadFileRequest {
    /// Read `path` as strict UTF-8.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            encoding: None,
            errors: None,
        }
    }
}

/// `POST /read_file` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadFileResponse {
    /// File content as text.
    pub content: String,
}

/// `POST /write_file` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteFileRequest {
    /// Text to write (the file is truncated first; parents are created).
    pub content: String,
    /// Path inside the sandbox.
    pub path: String,
}

/// `POST /upload`: bytes to place at `target_path` (multipart on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRequest {
    /// File bytes, or a zip archive with `unzip`.
    pub data: Vec<u8>,
    /// Destination path inside the sandbox.
    pub target_path: String,
    /// Extract `data` as a zip archive into `target_path`.
    pub unzip: bool,
}

/// `GET /is_alive` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsAliveResponse {
    /// Whether the runtime is up.
    pub is_alive: bool,
    /// Optional explanation.
    #[serde(default)]
    pub message: String,
}

/// The body of an HTTP 511 answer: an exception the client re-raises.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExceptionPayload {
    /// The exception.
    pub swerexception: RemoteException,
}

/// An exception raised inside the sandbox runtime, as SWE-ReX transports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteException {
    /// `str(exception)`.
    pub message: String,
    /// Python class path, e.g. `swerex.exceptions.CommandTimeoutError`.
    pub class_path: String,
    /// Formatted traceback (may be empty).
    #[serde(default)]
    pub traceback: String,
    /// Structured extras (`bash_stdout`, `bash_stderr` for syntax errors).
    #[serde(default)]
    pub extra_info: Map<String, Value>,
}

/// The exception classes a SWE-ReX runtime raises that callers branch on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExceptionClass {
    /// `swerex.exceptions.CommandTimeoutError`.
    CommandTimeout,
    /// `swerex.exceptions.NonZeroExitCodeError`.
    NonZeroExitCode,
    /// `swerex.exceptions.BashIncorrectSyntaxError`.
    BashIncorrectSyntax,
    /// `swerex.exceptions.SessionExistsError`.
    SessionExists,
    /// `swerex.exceptions.SessionDoesNotExistError`.
    SessionDoesNotExist,
    /// `swerex.exceptions.SessionNotInitializedError`.
    SessionNotInitialized,
    /// `builtins.FileNotFoundError`.
    FileNotFound,
    /// `builtins.UnicodeDecodeError`.
    UnicodeDecode,
    /// Any other class path.
    Other(String),
}

impl ExceptionClass {
    /// The Python class path SWE-ReX uses for this class.
    pub fn class_path(&self) -> &str {
        match self {
            Self::CommandTimeout => "swerex.exceptions.CommandTimeoutError",
            Self::NonZeroExitCode => "swerex.exceptions.NonZeroExitCodeError",
            Self::BashIncorrectSyntax => "swerex.exceptions.BashIncorrectSyntaxError",
            Self::SessionExists => "swerex.exceptions.SessionExistsError",
            Self::SessionDoesNotExist => "swerex.exceptions.SessionDoesNotExistError",
            Self::SessionNotInitialized => "swerex.exceptions.SessionNotInitializedError",
            Self::FileNotFound => "builtins.FileNotFoundError",
            Self::UnicodeDecode => "builtins.UnicodeDecodeError",
            Self::Other(path) => path,
        }
    }

    /// Parses a class path.
    pub fn from_class_path(path: &str) -> Self {
        match path {
            "swerex.exceptions.CommandTimeoutError" => Self::CommandTimeout,
            "swerex.exceptions.NonZeroExitCodeError" => Self::NonZeroExitCode,
            "swerex.exceptions.BashIncorrectSyntaxError" => Self::BashIncorrectSyntax,
            "swerex.exceptions.SessionExistsError" => Self::SessionExists,
            "swerex.exceptions.SessionDoesNotExistError" => Self::SessionDoesNotExist,
            "swerex.exceptions.SessionNotInitializedError" => Self::SessionNotInitialized,
            "builtins.FileNotFoundError" => Self::FileNotFound,
            "builtins.UnicodeDecodeError" => Self::UnicodeDecode,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl RemoteException {
    /// The parsed class.
    pub fn class(&self) -> ExceptionClass {
        ExceptionClass::from_class_path(&self.class_path)
    }

    /// A new exception of `class` with `message`.
    pub fn new(class: ExceptionClass, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            class_path: class.class_path().to_owned(),
            traceback: String::new(),
            extra_info: Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bash_action_matches_the_swerex_wire_shape() {
        let wire = json!({"command": "echo hi", "session": "probe", "timeout": 10.0,
            "check": "raise", "error_msg": "", "is_interactive_command": false,
            "is_interactive_quit": false, "expect": [], "action_type": "bash"});
        let action: Action = serde_json::from_value(wire.clone()).unwrap();
        let Action::Bash(ref a) = action else {
            panic!("wrong variant")
        };
        assert_eq!(a.command, "echo hi");
        assert_eq!(a.check, CheckMode::Raise);
        let back = serde_json::to_value(&action).unwrap();
        assert_eq!(back, wire);
    }

    #[test]
    fn interrupt_defaults_match_swerex() {
        let a: Action = serde_json::from_value(json!({"action_type": "bash_interrupt"})).unwrap();
        assert_eq!(
            a,
            Action::Interrupt(BashInterruptAction {
                session: "default".into(),
                timeout: 0.2,
                n_retry: 3,
                expect: vec![]
            })
        );
    }

    #[test]
    fn command_accepts_string_or_argv() {
        let c: Command =
            serde_json::from_value(json!({"command": ["sh", "-c", "exit 3"]})).unwrap();
        assert_eq!(
            c.command,
            CommandLine::Argv(vec!["sh".into(), "-c".into(), "exit 3".into()])
        );
        let c: Command =
            serde_json::from_value(json!({"command": "echo hi", "shell": true})).unwrap();
        assert_eq!(c.command, CommandLine::Text("echo hi".into()));
    }

    #[test]
    fn exception_class_paths_round_trip() {
        for class in [
            ExceptionClass::CommandTimeout,
            ExceptionClass::NonZeroExitCode,
            ExceptionClass::BashIncorrectSyntax,
            ExceptionClass::SessionExists,
            ExceptionClass::SessionDoesNotExist,
            ExceptionClass::SessionNotInitialized,
            ExceptionClass::FileNotFound,
            ExceptionClass::UnicodeDecode,
            ExceptionClass::Other("builtins.RuntimeError".into()),
        ] {
            assert_eq!(ExceptionClass::from_class_path(class.class_path()), class);
        }
    }
}
