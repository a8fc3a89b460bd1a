//! [`SessionTable`]: the open sessions, and the ids of those that ended.
//!
//! A session is opened by its first model request (or by [`Gateway::open`](crate::Gateway::open)
//! for a harness the gateway launches itself) and ended once. A reward for an id never seen,
//! or any request for an ended id, is refused: silently creating a fresh session would drop
//! the reward or record stray trajectories under an id whose record is already written.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::error::{GatewayError, Result};
use crate::session::Session;
use crate::telemetry;

/// A session behind its own lock (requests of one session run one at a time).
pub(crate) type SessionHandle = Arc<tokio::sync::Mutex<Session>>;

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// Ended ids remembered (oldest forgotten first); past that an ended id counts as never seen.
const ENDED_REMEMBERED: usize = 1 << 16;

/// Open sessions by id, and the most recently ended ids.
#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    open: HashMap<String, SessionHandle>,
    ended: HashSet<String>,
    ended_order: VecDeque<String>,
}

/// Checks a session id: not empty, at most [`MAX_SESSION_ID_BYTES`], no control characters
/// (ids end up in trajectory ids, file names of harness work directories and logs).
pub(crate) fn check_session_id(id: &str) -> Result<()> {
    let bad = |message: String| Err(GatewayError::InvalidSession { message });
    if id.is_empty() {
        return bad("the session id is empty (route `/sessions/{id}/...`)".into());
    }
    if id.len() > MAX_SESSION_ID_BYTES {
        return bad(format!(
            "the session id has {} bytes, at most {MAX_SESSION_ID_BYTES} are accepted",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return bad("the session id contains control characters".into());
    }
    Ok(())
}

impl SessionTable {
    /// The open session `id`, opened now if it is new; an ended id is refused.
    pub(crate) fn get_or_open(&mut self, id: &str) -> Result<SessionHandle> {
        check_session_id(id)?;
        if self.ended.contains(id) {
            return Err(GatewayError::SessionEnded { session: id.into() });
        }
        Ok(self.open_entry(id))
    }

    /// The handle of `id` in the open map, inserted (and counted) if absent.
    fn open_entry(&mut self, id: &str) -> SessionHandle {
        let handle = self.open.entry(id.to_owned()).or_insert_with(|| {
            telemetry::session_opened();
            SessionHandle::default()
        });
        Arc::clone(handle)
    }

    /// Opens `id` (again, if it had ended: its earlier record stays as written).
    pub(crate) fn reopen(&mut self, id: &str) -> Result<SessionHandle> {
        check_session_id(id)?;
        if self.ended.remove(id) {
            self.ended_order.retain(|e| e != id);
        }
        Ok(self.open_entry(id))
    }

    /// The open session `id`: 404 for an id never seen, 409 for an ended one.
    pub(crate) fn existing(&self, id: &str) -> Result<SessionHandle> {
        check_session_id(id)?;
        if let Some(handle) = self.open.get(id) {
            return Ok(Arc::clone(handle));
        }
        if self.ended.contains(id) {
            return Err(GatewayError::SessionEnded { session: id.into() });
        }
        Err(GatewayError::SessionNotFound { session: id.into() })
    }

    /// The open session `id`, if there is one.
    pub(crate) fn get(&self, id: &str) -> Option<SessionHandle> {
        self.open.get(id).cloned()
    }

    /// Removes an open session and remembers its id as ended.
    pub(crate) fn end(&mut self, id: &str) -> Option<SessionHandle> {
        let handle = self.open.remove(id)?;
        telemetry::session_closed();
        if self.ended.insert(id.to_owned()) {
            self.ended_order.push_back(id.to_owned());
            if self.ended_order.len() > ENDED_REMEMBERED {
                if let Some(oldest) = self.ended_order.pop_front() {
                    self.ended.remove(&oldest);
                }
            }
        }
        Some(handle)
    }

    /// Whether no session is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// The ids of the open sessions.
    pub(crate) fn open_ids(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_and_ended_sessions_are_not_reopened_by_requests() {
        let mut table = SessionTable::default();
        assert!(matches!(
            table.get_or_open(""),
            Err(GatewayError::InvalidSession { .. })
        ));
        assert!(table
            .get_or_open(&"x".repeat(MAX_SESSION_ID_BYTES + 1))
            .is_err());
        assert!(table.get_or_open("a\nb").is_err());
        assert!(matches!(
            table.existing("s"),
            Err(GatewayError::SessionNotFound { .. })
        ));
        table
            .get_or_open("s")
            .map(drop)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(table.existing("s").is_ok());
        assert!(table.end("s").is_some());
        assert!(table.end("s").is_none());
        assert!(matches!(
            table.existing("s"),
            Err(GatewayError::SessionEnded { .. })
        ));
        assert!(matches!(
            table.get_or_open("s"),
            Err(GatewayError::SessionEnded { .. })
        ));
        assert!(table.reopen("s").is_ok());
        assert!(table.existing("s").is_ok());
    }

    #[test]
    fn the_ended_memory_is_bounded() {
        let mut table = SessionTable::default();
        for i in 0..ENDED_REMEMBERED + 10 {
            let id = i.to_string();
            let _ = table.get_or_open(&id);
            table.end(&id);
        }
        assert_eq!(table.ended.len(), ENDED_REMEMBERED);
        assert_eq!(table.ended_order.len(), ENDED_REMEMBERED);
        assert!(matches!(
            table.existing("0"),
            Err(GatewayError::SessionNotFound { .. })
        ));
        assert!(matches!(
            table.existing(&(ENDED_REMEMBERED + 9).to_string()),
            Err(GatewayError::SessionEnded { .. })
        ));
    }
}
