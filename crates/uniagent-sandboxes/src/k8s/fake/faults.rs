//! Faults the fake can inject and the request counters it keeps ([`Faults`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::store::{ApiError, Store};
use super::util::lock;

/// Which 403 a forbidden (verb, resource) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden {
    /// A ResourceQuota refusal: the message contains `exceeded quota`.
    Quota,
    /// An RBAC refusal: `User "…" cannot VERB resource "…"`.
    Rbac,
}

/// What happens to sandboxes (pods) the controller starts from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxFault {
    /// They start normally.
    #[default]
    None,
    /// The pod stays `Pending` with the container waiting in `ErrImagePull`.
    ImagePull,
    /// The pod stays `Pending`, `PodScheduled=False` with reason `Unschedulable`.
    Unschedulable,
}

#[derive(Debug, Default)]
struct State {
    fail_next: u32,
    fail_code: u16,
    forbidden: BTreeMap<(String, String), Forbidden>,
    sandbox_fault: SandboxFault,
    claims_never_ready: bool,
    lists: BTreeMap<String, u64>,
    watches: BTreeMap<String, u64>,
    seen: BTreeMap<(String, String), u64>,
}

/// Shared between the API server, the controller and the handle.
#[derive(Debug)]
pub(crate) struct FaultState {
    state: Mutex<State>,
    /// Bumped to end every open watch.
    pub(crate) watch_epoch: watch::Sender<u64>,
}

impl FaultState {
    pub(crate) fn new() -> Self {
        FaultState {
            state: Mutex::new(State::default()),
            watch_epoch: watch::channel(0).0,
        }
    }

    /// Counts a request and returns the error an injected fault makes it fail with.
    pub(crate) fn on_request(
        &self,
        verb: &str,
        resource: &str,
        namespace: &str,
    ) -> Option<ApiError> {
        let mut state = lock(&self.state);
        *state
            .seen
            .entry((verb.to_string(), resource.to_string()))
            .or_default() += 1;
        match verb {
            "list" => *state.lists.entry(resource.to_string()).or_default() += 1,
            "watch" => *state.watches.entry(resource.to_string()).or_default() += 1,
            _ => {}
        }
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return Some(if state.fail_code == 429 {
                ApiError::too_many_requests(
                    "the fake API server is throttling requests (injected fault)",
                )
            } else {
                ApiError::internal("an injected fault of the fake API server")
            });
        }
        let kind = state
            .forbidden
            .get(&(verb.to_string(), resource.to_string()))
            .or_else(|| {
                state
                    .forbidden
                    .get(&("*".to_string(), resource.to_string()))
            })
            .copied()?;
        let qualified = qualified(resource);
        Some(ApiError::forbidden(match kind {
            Forbidden::Quota => format!(
                "{qualified} is forbidden: exceeded quota: uniagent-sandboxes, requested: count/{qualified}=1, used: count/{qualified}=64, limited: count/{qualified}=64"
            ),
            Forbidden::Rbac => format!(
                "{qualified} is forbidden: User \"system:serviceaccount:{namespace}:uniagent-worker\" cannot {verb} resource \"{resource}\" in API group \"{}\" in the namespace \"{namespace}\"",
                group(resource)
            ),
        }))
    }

    pub(crate) fn sandbox_fault(&self) -> SandboxFault {
        lock(&self.state).sandbox_fault
    }

    pub(crate) fn claims_never_ready(&self) -> bool {
        lock(&self.state).claims_never_ready
    }
}

fn group(resource: &str) -> &'static str {
    match resource {
        "sandboxes" => super::store::AGENTS_GROUP,
        "pods" | "configmaps" => "",
        _ => super::store::EXTENSIONS_GROUP,
    }
}

fn qualified(resource: &str) -> String {
    match group(resource) {
        "" => resource.to_string(),
        g => format!("{resource}.{g}"),
    }
}

/// The handle tests use to break the fake and to read its counters. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) store: Arc<Store>,
    pub(crate) hooks: Arc<super::api::Hooks>,
}

impl Faults {
    /// Ends every open watch now (clients see the stream close and re-watch).
    pub fn drop_watches(&self) {
        self.state.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Forgets the event history: the next watch from an earlier version gets an `ERROR` event
    /// with a 410 `Expired` Status. Open watches go on; combine with
    /// [`drop_watches`](Self::drop_watches) to force a re-list.
    pub fn compact_history(&self) {
        self.store.compact();
    }

    /// Fails the next `n` API requests (of any verb) with `code`: 429 (`TooManyRequests`) or
    /// anything else as 500 (`InternalError`).
    pub fn fail_next(&self, n: u32, code: u16) {
        let mut state = lock(&self.state.state);
        state.fail_next = n;
        state.fail_code = code;
    }

    /// Answers `verb` (`create`, `get`, `list`, `watch`, `patch`, `update`, `delete`, or `*`) on
    /// `resource` (a plural such as `sandboxclaims`) with 403 until cleared.
    pub fn forbid(&self, verb: &str, resource: &str, kind: Forbidden) {
        lock(&self.state.state)
            .forbidden
            .insert((verb.to_string(), resource.to_string()), kind);
    }

    /// Ends every [`forbid`](Self::forbid) and pending [`fail_next`](Self::fail_next).
    pub fn clear_request_faults(&self) {
        let mut state = lock(&self.state.state);
        state.forbidden.clear();
        state.fail_next = 0;
    }

    /// What happens to pods started from now on.
    pub fn set_sandbox_fault(&self, fault: SandboxFault) {
        lock(&self.state.state).sandbox_fault = fault;
    }

    /// While on, claims never become Ready (`Ready=False`, reason `SandboxNotReady`), whatever
    /// their sandboxes do.
    pub fn set_claims_never_ready(&self, on: bool) {
        lock(&self.state.state).claims_never_ready = on;
    }

    /// List requests on `resource` (plural) so far.
    pub fn list_count(&self, resource: &str) -> u64 {
        lock(&self.state.state)
            .lists
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// Watch requests on `resource` (plural) so far.
    pub fn watch_count(&self, resource: &str) -> u64 {
        lock(&self.state.state)
            .watches
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// Every (verb, resource) pair requested so far (for checking RBAC rules).
    pub fn requests_seen(&self) -> BTreeSet<(String, String)> {
        lock(&self.state.state).seen.keys().cloned().collect()
    }

    /// Requests per (verb, resource).
    pub fn request_counts(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.state.state).seen.clone()
    }

    /// Forgets the counters.
    pub fn reset_counters(&self) {
        let mut state = lock(&self.state.state);
        state.lists.clear();
        state.watches.clear();
        state.seen.clear();
    }
}
