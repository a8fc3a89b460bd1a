//! The `X-Request-ID` replay cache: a repeated ID gets the stored answer of the first request
//! without running anything again. SWE-ReX keeps one slot and checks it before authentication;
//! we keep many (bounded by count and bytes) and check after authentication.

use std::collections::{HashMap, VecDeque};

use axum::http::StatusCode;
use bytes::Bytes;

/// One stored answer.
#[derive(Debug, Clone)]
pub(crate) struct StoredResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// Body bytes (JSON).
    pub body: Bytes,
}

/// A bounded map from request ID to answer; the oldest entries go first.
#[derive(Debug)]
pub(crate) struct ReplayCache {
    entries: HashMap<String, StoredResponse>,
    order: VecDeque<String>,
    max_entries: usize,
    max_bytes: usize,
    bytes: usize,
}

impl ReplayCache {
    /// A cache holding at most `max_entries` answers and `max_bytes` body bytes.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            max_entries: max_entries.max(1),
            max_bytes,
            bytes: 0,
        }
    }

    /// The stored answer for `id`.
    pub(crate) fn get(&self, id: &str) -> Option<StoredResponse> {
        self.entries.get(id).cloned()
    }

    /// Stores an answer (a body larger than the byte budget is not stored).
    pub(crate) fn insert(&mut self, id: String, response: StoredResponse) {
        if response.body.len() > self.max_bytes {
            return;
        }
        if let Some(old) = self.entries.remove(&id) {
            self.bytes -= old.body.len();
            self.order.retain(|k| k != &id);
        }
        self.bytes += response.body.len();
        self.entries.insert(id.clone(), response);
        self.order.push_back(id);
        while self.entries.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.bytes -= old.body.len();
            }
        }
    }

    /// Number of stored answers.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> StoredResponse {
        StoredResponse {
            status: StatusCode::OK,
            body: Bytes::from(vec![b'x'; n]),
        }
    }

    #[test]
    fn evicts_oldest_by_count_and_bytes() {
        let mut c = ReplayCache::new(2, 100);
        c.insert("a".into(), body(10));
        c.insert("b".into(), body(10));
        c.insert("c".into(), body(10));
        assert!(c.get("a").is_none());
        assert!(c.get("b").is_some() && c.get("c").is_some());
        c.insert("d".into(), body(95));
        assert_eq!(c.len(), 1);
        c.insert("e".into(), body(1000));
        assert!(c.get("e").is_none());
        assert!(c.get("d").is_some());
    }
}
