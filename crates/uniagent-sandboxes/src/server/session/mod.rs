//! Bash sessions on ptys, and the registry that names them: the engine behind
//! `/create_session`, `/run_in_session`, `/close_session` and `/close`.
//!
//! This module does not depend on HTTP: an in-process runtime can drive [`SessionManager`]
//! directly. Each session has its own locks, so requests on different sessions never wait for
//! each other.

mod output;
mod procs;
mod shell;
mod syntax;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use output::shorten;
pub use output::{clean_output, truncation_note, ExpectSearch, OutputBuffer, PromptMarker};
pub(crate) use procs::signal_group;
pub(crate) use shell::BashSession;
pub use shell::ShellOptions;
use uniagent_core::sandbox::{
    Action, BashObservation, CloseSessionRequest, CloseSessionResponse, CreateSessionRequest,
    CreateSessionResponse, SessionType,
};

use super::errors::{class, ServerError};
use super::limits::seconds;
use super::pyfmt::py_repr;

/// The least time a session start is given, whatever `startup_timeout` says.
pub(crate) const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
enum Slot {
    Starting,
    Open(Arc<BashSession>),
}

/// The named sessions of one server.
#[derive(Debug)]
pub struct SessionManager {
    sessions: Mutex<HashMap<String, Slot>>,
    options: Arc<ShellOptions>,
    counter: AtomicU64,
    max_sessions: usize,
}

impl SessionManager {
    /// An empty registry whose sessions use `options`, holding at most `max_sessions` names.
    pub fn new(options: ShellOptions, max_sessions: usize) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            options: Arc::new(options),
            counter: AtomicU64::new(0),
            max_sessions,
        }
    }

    /// The shell settings.
    pub fn options(&self) -> &ShellOptions {
        &self.options
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a session. A name that is taken (even by a session whose shell `/close` ended)
    /// gives `SessionExistsError`; a failed start leaves the name free (SWE-ReX keeps it).
    pub async fn create(
        &self,
        request: &CreateSessionRequest,
    ) -> Result<CreateSessionResponse, ServerError> {
        {
            let mut sessions = self.lock();
            if sessions.contains_key(&request.session) {
                return Err(ServerError::exception(
                    class::SESSION_EXISTS,
                    format!("session {} already exists", request.session),
                ));
            }
            if sessions.len() >= self.max_sessions {
                return Err(ServerError::exception(
                    class::RUNTIME_ERROR,
                    format!(
                        "too many sessions: the server allows {} (close one first)",
                        self.max_sessions
                    ),
                ));
            }
            sessions.insert(request.session.clone(), Slot::Starting);
        }
        // A caller that goes away while the shell starts (a cancelled future) must not leave
        // the name stuck in `Starting`.
        let mut reservation = Reservation {
            manager: self,
            name: &request.session,
            armed: true,
        };
        let n = self.counter.fetch_add(1, Ordering::SeqCst);
        let dir = self.options.scratch_dir.join(format!("s{n}"));
        // SWE-ReX sleeps 0.3 s before it starts the `startup_timeout` clock; we do not sleep, and
        // on a loaded machine bash and its rc files can need more than the 1 s default.
        let timeout = seconds(request.startup_timeout).max(MIN_STARTUP_TIMEOUT);
        let started = BashSession::start(
            &request.session,
            &request.startup_source,
            timeout,
            dir,
            self.options.clone(),
        )
        .await;
        let mut sessions = self.lock();
        reservation.armed = false;
        match started {
            Ok((session, output)) => {
                sessions.insert(request.session.clone(), Slot::Open(Arc::new(session)));
                Ok(CreateSessionResponse {
                    output,
                    session_type: SessionType::Bash,
                })
            }
            Err(e) => {
                sessions.remove(&request.session);
                Err(e)
            }
        }
    }

    /// The open session called `name`.
    pub fn get(&self, name: &str) -> Result<Arc<BashSession>, ServerError> {
        match self.lock().get(name) {
            Some(Slot::Open(s)) => Ok(s.clone()),
            _ => Err(ServerError::exception(
                class::SESSION_MISSING,
                format!("session {} does not exist", py_repr(name)),
            )),
        }
    }

    /// Runs a command or an interrupt.
    pub async fn run(&self, action: &Action) -> Result<BashObservation, ServerError> {
        let session = self.get(action.session())?;
        match action {
            Action::Bash(a) => session.run(a).await,
            Action::Interrupt(a) => session.interrupt(a).await,
        }
    }

    /// Closes a session and forgets its name.
    pub async fn close_session(
        &self,
        request: &CloseSessionRequest,
    ) -> Result<CloseSessionResponse, ServerError> {
        let session = {
            let mut sessions = self.lock();
            match sessions.get(&request.session) {
                Some(Slot::Open(_)) => match sessions.remove(&request.session) {
                    Some(Slot::Open(s)) => s,
                    _ => return Err(missing(&request.session)),
                },
                _ => return Err(missing(&request.session)),
            }
        };
        session.close().await;
        Ok(CloseSessionResponse {
            session_type: SessionType::Bash,
        })
    }

    /// Closes every session's shell (`/close`); the names stay registered, as in SWE-ReX.
    pub async fn close_all(&self) {
        let open: Vec<Arc<BashSession>> = self
            .lock()
            .values()
            .filter_map(|s| {
                if let Slot::Open(s) = s {
                    Some(s.clone())
                } else {
                    None
                }
            })
            .collect();
        for session in open {
            session.close().await;
        }
    }

    /// Closes every shell and forgets every name (server shutdown).
    pub async fn shutdown(&self) {
        self.close_all().await;
        self.lock().clear();
        let _ = std::fs::remove_dir_all(&self.options.scratch_dir);
    }
}

/// Frees a `Starting` slot when the start is abandoned.
struct Reservation<'a> {
    manager: &'a SessionManager,
    name: &'a str,
    armed: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut sessions = self.manager.lock();
            if matches!(sessions.get(self.name), Some(Slot::Starting)) {
                sessions.remove(self.name);
            }
        }
    }
}

fn missing(name: &str) -> ServerError {
    ServerError::exception(
        class::SESSION_MISSING,
        format!("session {} does not exist", py_repr(name)),
    )
}
