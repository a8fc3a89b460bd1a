//! The API server's HTTP side: paths, verbs, query parameters, watch streams, `Status` errors,
//! and the `/_fake/*` fault routes.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use super::controller::ControllerHandle;
use super::faults::{FaultState, Faults, Forbidden, SandboxFault};
use super::selector::{FieldSelector, LabelSelector};
use super::serve::Server;
use super::store::{
    name_of, namespace_of, uid_of, ApiError, Deleted, Event, EventType, Propagation, Resource,
    Store,
};
use super::util::merge_patch;

/// Largest request body the API server reads.
const MAX_BODY_BYTES: usize = 16 << 20;
/// `timeoutSeconds` when a watch gives none (a real server picks 30–60 minutes).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Late-bound links from the `/_fake/*` routes to the servers and controller they control.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pub(crate) api: OnceLock<Weak<Server>>,
    pub(crate) controller: OnceLock<Weak<ControllerHandle>>,
}

/// What every API request handler needs.
#[derive(Clone, Debug)]
pub(crate) struct ApiState {
    pub(crate) store: Arc<Store>,
    pub(crate) faults: Arc<FaultState>,
    pub(crate) bookmark_interval: Duration,
    pub(crate) hooks: Arc<Hooks>,
}

/// The API server's routes.
pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/_fake/drop-watches", post(fake_drop_watches))
        .route("/_fake/compact", post(fake_compact))
        .route("/_fake/fail", post(fake_fail))
        .route("/_fake/forbid", post(fake_forbid))
        .route("/_fake/clear", post(fake_clear))
        .route("/_fake/sandbox-fault", post(fake_sandbox_fault))
        .route("/_fake/claims-never-ready", post(fake_never_ready))
        .route("/_fake/restart-api", post(fake_restart_api))
        .route("/_fake/controller/stop", post(fake_controller_stop))
        .route("/_fake/controller/start", post(fake_controller_start))
        .route("/_fake/counters", get(fake_counters))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
            get(super::portforward::portforward),
        )
        .fallback(handle)
        .with_state(state)
}

/// A JSON response.
fn json_response(code: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// The `Status` response for an error (with `Retry-After` on 429, as a real server sends).
pub(crate) fn error_response(error: &ApiError) -> Response {
    let mut response = json_response(error.code, &error.to_status());
    if error.code == 429 {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

struct Target {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

fn parse_path(path: &str) -> Result<Target, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route()),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some((*name).to_string()), None),
        [plural, name, sub] => (*plural, Some((*name).to_string()), Some(*sub)),
        _ => return Err(ApiError::no_route()),
    };
    if (namespace.is_none() && name.is_some()) || sub.is_some_and(|s| s != "status") {
        return Err(ApiError::no_route());
    }
    let resource = Resource::from_parts(group, version, plural).ok_or_else(ApiError::no_route)?;
    if sub.is_some() && !resource.has_status() {
        return Err(ApiError::no_route());
    }
    Ok(Target {
        resource,
        namespace,
        name,
        status: sub.is_some(),
    })
}

type Params = HashMap<String, String>;

fn param<'a>(params: &'a Params, key: &str) -> Option<&'a str> {
    params
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

async fn handle(State(state): State<ApiState>, request: Request) -> Response {
    match serve_api(&state, request).await {
        Ok(response) => response,
        Err(error) => error_response(&error),
    }
}

async fn serve_api(state: &ApiState, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let target = parse_path(parts.uri.path())?;
    let params: Params = Query::<Params>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("bad query: {e}")))?;
    let watching = param(&params, "watch").is_some_and(|v| v == "true" || v == "1");
    let named = target.name.is_some();
    let verb = match (&parts.method, named) {
        (&Method::GET, _) if watching => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        (method, _) => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource: {method}"
            )))
        }
    };
    let namespace = target.namespace.clone().unwrap_or_default();
    if let Some(error) = state
        .faults
        .on_request(verb, target.resource.plural(), &namespace)
    {
        return Err(error);
    }
    if param(&params, "dryRun").is_some() {
        return Err(ApiError::bad_request(
            "the fake API server does not support dryRun",
        ));
    }
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
    let name = target.name.clone().unwrap_or_default();
    match verb {
        "watch" => watch_response(state, &target, &params),
        "list" => list(state, &target, &params),
        "get" => state
            .store
            .get(target.resource, &namespace, &name)
            .map(|o| json_response(200, &o))
            .ok_or_else(|| ApiError::not_found(target.resource, &name)),
        "create" => create(state, &target, &namespace, &body),
        "update" => update(state, &target, &namespace, &name, &body),
        "patch" => patch(
            state,
            &target,
            &namespace,
            &name,
            &parts.headers,
            &params,
            &body,
        ),
        "delete" => delete(state, &target, &namespace, &name, &params, &body),
        _ => Err(ApiError::method_not_allowed(
            "the fake API server does not support deletecollection",
        )),
    }
}

fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON object: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body is not a JSON object"));
    }
    Ok(value)
}

fn check_type(resource: Resource, object: &Value) -> Result<(), ApiError> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let kind = object["kind"].as_str().unwrap_or("");
    if (!api_version.is_empty() && api_version != resource.api_version())
        || (!kind.is_empty() && kind != resource.kind())
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) and kind ({kind}) do not match the path ({}, {})",
            resource.api_version(),
            resource.kind()
        )));
    }
    Ok(())
}

fn create(
    state: &ApiState,
    target: &Target,
    namespace: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let Some(_) = target.namespace else {
        return Err(ApiError::method_not_allowed(
            "create needs a namespace in the path",
        ));
    };
    let mut object = parse_object(body)?;
    check_type(target.resource, &object)?;
    if target.resource.has_status() {
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
    let created = state.store.create(target.resource, namespace, object)?;
    Ok(json_response(201, &created))
}

/// Keeps what a write through the main resource may not change (`status`), or through the
/// `status` subresource everything but `status`.
fn restrict(resource: Resource, status_only: bool, old: &Value, new: &mut Value) {
    if !resource.has_status() {
        return;
    }
    if status_only {
        let status = new["status"].clone();
        *new = old.clone();
        if let Some(map) = new.as_object_mut() {
            if status.is_null() {
                map.remove("status");
            } else {
                map.insert("status".into(), status);
            }
        }
    } else if let Some(map) = new.as_object_mut() {
        if old["status"].is_null() {
            map.remove("status");
        } else {
            map.insert("status".into(), old["status"].clone());
        }
    }
}

fn update(
    state: &ApiState,
    target: &Target,
    namespace: &str,
    name: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let object = parse_object(body)?;
    check_type(target.resource, &object)?;
    if name_of(&object) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            name_of(&object)
        )));
    }
    let wanted_rv = object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if wanted_rv.is_empty() {
        return Err(ApiError::invalid(
            target.resource,
            name,
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
        ));
    }
    let resource = target.resource;
    let status_only = target.status;
    let updated = state.store.modify(resource, namespace, name, |current| {
        if current["metadata"]["resourceVersion"].as_str() != Some(wanted_rv.as_str()) {
            return Err(ApiError::conflict(
                resource,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let old = current.clone();
        let mut new = object;
        restrict(resource, status_only, &old, &mut new);
        *current = new;
        Ok(())
    })?;
    Ok(json_response(200, &updated))
}

#[allow(clippy::too_many_arguments)]
fn patch(
    state: &ApiState,
    target: &Target,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    params: &Params,
    body: &[u8],
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let resource = target.resource;
    let status_only = target.status;
    match content_type.as_str() {
        "application/merge-patch+json" => {
            let patch = parse_object(body)?;
            let wanted_rv = patch["metadata"]["resourceVersion"].as_str().map(str::to_string);
            let patched = state.store.modify(resource, namespace, name, |current| {
                if let Some(rv) = &wanted_rv {
                    if current["metadata"]["resourceVersion"].as_str() != Some(rv.as_str()) {
                        return Err(ApiError::conflict(
                            resource,
                            name,
                            "the object has been modified; please apply your changes to the latest version and try again",
                        ));
                    }
                }
                let old = current.clone();
                let mut new = old.clone();
                merge_patch(&mut new, &patch);
                restrict(resource, status_only, &old, &mut new);
                *current = new;
                Ok(())
            })?;
            Ok(json_response(200, &patched))
        }
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            if param(params, "fieldManager").is_none() {
                return Err(ApiError::bad_request(
                    "PATCH: fieldManager is required for apply requests",
                ));
            }
            let object: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the fake API server reads apply patches written as JSON (as kube sends them): {e}"
                ))
            })?;
            if !object.is_object() {
                return Err(ApiError::bad_request("the apply patch is not an object"));
            }
            if object["apiVersion"].as_str().unwrap_or("").is_empty()
                || object["kind"].as_str().unwrap_or("").is_empty()
            {
                return Err(ApiError::bad_request(
                    "apiVersion and kind must be set in an apply patch",
                ));
            }
            check_type(resource, &object)?;
            if !name_of(&object).is_empty() && name_of(&object) != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    name_of(&object)
                )));
            }
            if state.store.get(resource, namespace, name).is_none() {
                if status_only {
                    return Err(ApiError::not_found(resource, name));
                }
                let mut object = object;
                object["metadata"]["name"] = Value::String(name.to_string());
                if let Some(map) = object.as_object_mut() {
                    map.remove("status");
                }
                let created = state.store.create(resource, namespace, object)?;
                return Ok(json_response(201, &created));
            }
            let applied = state.store.modify(resource, namespace, name, |current| {
                let old = current.clone();
                let mut new = apply_onto(&old, &object);
                restrict(resource, status_only, &old, &mut new);
                *current = new;
                Ok(())
            })?;
            Ok(json_response(200, &applied))
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the fake API server supports application/merge-patch+json and application/apply-patch+yaml, not {other:?}"
        ))),
    }
}

/// Server-side apply as create-or-replace: every top-level field the applied object sets
/// replaces the current one, top-level fields it leaves out go (except `status`), and its
/// labels and annotations are merged into the current ones.
fn apply_onto(old: &Value, applied: &Value) -> Value {
    let mut new = old.clone();
    let Some(map) = new.as_object_mut() else {
        return new;
    };
    map.retain(|k, _| matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"));
    if let Some(fields) = applied.as_object() {
        for (k, v) in fields {
            // `status` too: `restrict` keeps it or takes it, by subresource.
            if !matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
                map.insert(k.clone(), v.clone());
            }
        }
    }
    for field in ["labels", "annotations"] {
        if let Some(entries) = applied["metadata"][field].as_object() {
            for (k, v) in entries {
                new["metadata"][field][k] = v.clone();
            }
        }
    }
    new
}

fn delete(
    state: &ApiState,
    target: &Target,
    namespace: &str,
    name: &str,
    params: &Params,
    body: &[u8],
) -> Result<Response, ApiError> {
    if target.status {
        return Err(ApiError::method_not_allowed(
            "cannot delete the status subresource",
        ));
    }
    let options: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("bad DeleteOptions: {e}")))?
    };
    if options["dryRun"].as_array().is_some_and(|a| !a.is_empty()) {
        return Err(ApiError::bad_request(
            "the fake API server does not support dryRun",
        ));
    }
    let policy_text = param(params, "propagationPolicy")
        .map(str::to_string)
        .or_else(|| options["propagationPolicy"].as_str().map(str::to_string));
    let policy = match policy_text {
        Some(text) => Propagation::parse(&text).ok_or_else(|| {
            ApiError::invalid(
                target.resource,
                name,
                &format!("propagationPolicy: Unsupported value: \"{text}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
            )
        })?,
        None if options["orphanDependents"] == true => Propagation::Orphan,
        None => Propagation::Background,
    };
    let uid = options["preconditions"]["uid"].as_str();
    let rv = options["preconditions"]["resourceVersion"].as_str();
    match state
        .store
        .delete(target.resource, namespace, name, policy, uid, rv)?
    {
        Deleted::Pending(object) => Ok(json_response(202, &object)),
        Deleted::Gone(object) if target.resource == Resource::Pods => {
            Ok(json_response(200, &object))
        }
        Deleted::Gone(object) => Ok(json_response(
            200,
            &json!({
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Success",
                "details": {
                    "name": name,
                    "group": target.resource.group(),
                    "kind": target.resource.plural(),
                    "uid": uid_of(&object),
                },
            }),
        )),
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

fn list(state: &ApiState, target: &Target, params: &Params) -> Result<Response, ApiError> {
    let labels = param(params, "labelSelector")
        .map(LabelSelector::parse)
        .transpose()
        .map_err(ApiError::bad_request)?
        .unwrap_or_default();
    let fields = param(params, "fieldSelector")
        .map(FieldSelector::parse)
        .transpose()
        .map_err(ApiError::bad_request)?
        .unwrap_or_default();
    let limit: usize = param(params, "limit")
        .map(|l| {
            l.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))
        })
        .transpose()?
        .unwrap_or(0);
    let after = param(params, "continue")
        .map(|token| {
            URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Continue>(&bytes).ok())
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))
        })
        .transpose()?;
    let (items, rv) = state
        .store
        .list(target.resource, target.namespace.as_deref(), |o| {
            labels.matches(o) && fields.matches(o)
        });
    if param(params, "resourceVersionMatch") == Some("Exact")
        && param(params, "resourceVersion").is_some_and(|v| v != rv.to_string())
    {
        return Err(ApiError::expired(
            "the fake API server serves an exact list only at the current resourceVersion",
        ));
    }
    let list_rv = after.as_ref().map(|c| c.rv).unwrap_or(rv);
    let mut items: Vec<Value> = match &after {
        Some(c) => items
            .into_iter()
            .filter(|o| (namespace_of(o), name_of(o)) > (c.ns.as_str(), c.name.as_str()))
            .collect(),
        None => items,
    };
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if limit > 0 && items.len() > limit {
        let remaining = items.len() - limit;
        items.truncate(limit);
        if let Some(last) = items.last() {
            let token = Continue {
                rv: list_rv,
                ns: namespace_of(last).to_string(),
                name: name_of(last).to_string(),
            };
            let text = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default());
            metadata["continue"] = Value::String(text);
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    Ok(json_response(
        200,
        &json!({
            "apiVersion": target.resource.api_version(),
            "kind": format!("{}List", target.resource.kind()),
            "metadata": metadata,
            "items": items,
        }),
    ))
}

struct WatchFilter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    name: Option<FieldSelector>,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace_of(object) == ns)
            && self.labels.matches(object)
            && self.fields.matches(object)
            && self.name.as_ref().is_none_or(|n| n.matches(object))
    }
}

struct WatchStream {
    resource: Resource,
    backlog: VecDeque<Event>,
    live: broadcast::Receiver<Event>,
    filter: WatchFilter,
    /// Events at or below this version were sent already (or predate the watch).
    sent_through: u64,
    deadline: tokio::time::Instant,
    bookmarks: Option<tokio::time::Interval>,
    epoch: watch::Receiver<u64>,
    finished: bool,
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

impl WatchStream {
    fn render(&self, event: &Event) -> Option<Bytes> {
        let now = self.filter.matches(&event.object);
        let before = event.old.as_ref().is_some_and(|o| self.filter.matches(o));
        let kind = match event.kind {
            EventType::Added if now => "ADDED",
            EventType::Modified => match (before, now) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            },
            EventType::Deleted if now || before => "DELETED",
            _ => return None,
        };
        Some(event_line(kind, &event.object))
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        while let Some(event) = self.backlog.pop_front() {
            if let Some(line) = self.render(&event) {
                return Some(line);
            }
        }
        loop {
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = self.epoch.changed() => return None,
                received = self.live.recv() => match received {
                    Ok(event) => {
                        if event.rv <= self.sent_through {
                            continue;
                        }
                        self.sent_through = event.rv;
                        if event.resource != self.resource {
                            continue;
                        }
                        if let Some(line) = self.render(&event) {
                            return Some(line);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.finished = true;
                        let error = ApiError::expired("the watch fell too far behind; re-list");
                        return Some(event_line("ERROR", &error.to_status()));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = next_tick(&mut self.bookmarks) => {
                    return Some(event_line("BOOKMARK", &json!({
                        "apiVersion": self.resource.api_version(),
                        "kind": self.resource.kind(),
                        "metadata": {"resourceVersion": self.sent_through.to_string()},
                    })));
                }
            }
        }
    }
}

async fn next_tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

fn stream_response(stream: impl futures::Stream<Item = Bytes> + Send + 'static) -> Response {
    use futures::StreamExt as _;
    let body = Body::from_stream(stream.map(Ok::<_, Infallible>));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn watch_response(
    state: &ApiState,
    target: &Target,
    params: &Params,
) -> Result<Response, ApiError> {
    if param(params, "sendInitialEvents") == Some("true") {
        return Err(ApiError::invalid(
            target.resource,
            "",
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    }
    let filter = WatchFilter {
        namespace: target.namespace.clone(),
        labels: param(params, "labelSelector")
            .map(LabelSelector::parse)
            .transpose()
            .map_err(ApiError::bad_request)?
            .unwrap_or_default(),
        fields: param(params, "fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(ApiError::bad_request)?
            .unwrap_or_default(),
        name: target.name.as_deref().map(FieldSelector::name),
    };
    let from = match param(params, "resourceVersion") {
        None | Some("0") => None,
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {text:?}")))?,
        ),
    };
    let timeout = param(params, "timeoutSeconds")
        .map(|t| {
            t.parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))
        })
        .transpose()?
        .unwrap_or(DEFAULT_WATCH_TIMEOUT);
    let bookmarks = param(params, "allowWatchBookmarks") == Some("true");
    let (backlog, live, reached) = match state.store.watch(target.resource, from) {
        Ok(started) => started,
        Err(expired) => {
            // HTTP 200, then one ERROR event: the only form on which kube's watcher re-lists.
            let line = event_line("ERROR", &expired.to_status());
            return Ok(stream_response(futures::stream::iter([line])));
        }
    };
    let start = tokio::time::Instant::now();
    let mut epoch = state.faults.watch_epoch.subscribe();
    epoch.mark_unchanged();
    let period = state.bookmark_interval.max(Duration::from_millis(10));
    let stream = WatchStream {
        resource: target.resource,
        backlog: backlog.into(),
        live,
        filter,
        sent_through: reached.max(from.unwrap_or(0)),
        deadline: start + timeout,
        bookmarks: bookmarks.then(|| tokio::time::interval_at(start + period, period)),
        epoch,
        finished: false,
    };
    let lines = futures::stream::unfold(stream, |mut stream| async move {
        stream.next_line().await.map(|line| (line, stream))
    });
    Ok(stream_response(lines))
}

fn faults_of(state: &ApiState) -> Faults {
    Faults {
        state: state.faults.clone(),
        store: state.store.clone(),
        hooks: state.hooks.clone(),
    }
}

fn ok() -> Response {
    json_response(200, &json!({"ok": true}))
}

async fn fake_drop_watches(State(state): State<ApiState>) -> Response {
    faults_of(&state).drop_watches();
    ok()
}

async fn fake_compact(State(state): State<ApiState>) -> Response {
    faults_of(&state).compact_history();
    ok()
}

async fn fake_fail(State(state): State<ApiState>, Query(q): Query<Params>) -> Response {
    let n = q.get("n").and_then(|n| n.parse().ok()).unwrap_or(1);
    let code = q.get("code").and_then(|c| c.parse().ok()).unwrap_or(500);
    faults_of(&state).fail_next(n, code);
    ok()
}

async fn fake_forbid(State(state): State<ApiState>, Query(q): Query<Params>) -> Response {
    let kind = match q.get("kind").map(String::as_str) {
        Some("rbac") => Forbidden::Rbac,
        _ => Forbidden::Quota,
    };
    let (Some(verb), Some(resource)) = (q.get("verb"), q.get("resource")) else {
        return error_response(&ApiError::bad_request("verb and resource are required"));
    };
    faults_of(&state).forbid(verb, resource, kind);
    ok()
}

async fn fake_clear(State(state): State<ApiState>) -> Response {
    let faults = faults_of(&state);
    faults.clear_request_faults();
    faults.set_sandbox_fault(SandboxFault::None);
    faults.set_claims_never_ready(false);
    ok()
}

async fn fake_sandbox_fault(State(state): State<ApiState>, Query(q): Query<Params>) -> Response {
    let fault = match q.get("mode").map(String::as_str) {
        Some("image-pull") => SandboxFault::ImagePull,
        Some("unschedulable") => SandboxFault::Unschedulable,
        Some("none") | None => SandboxFault::None,
        Some(other) => {
            return error_response(&ApiError::bad_request(format!(
                "unknown mode {other:?} (none, image-pull, unschedulable)"
            )))
        }
    };
    faults_of(&state).set_sandbox_fault(fault);
    ok()
}

async fn fake_never_ready(State(state): State<ApiState>, Query(q): Query<Params>) -> Response {
    let on = q.get("on").is_none_or(|v| v == "true" || v == "1");
    faults_of(&state).set_claims_never_ready(on);
    ok()
}

async fn fake_restart_api(State(state): State<ApiState>, Query(q): Query<Params>) -> Response {
    let down = Duration::from_millis(q.get("down_ms").and_then(|d| d.parse().ok()).unwrap_or(500));
    let Some(server) = state.hooks.api.get().and_then(Weak::upgrade) else {
        return error_response(&ApiError::internal("no API server to restart"));
    };
    // After the response is out: the stop closes this very connection.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.stop().await;
        tokio::time::sleep(down).await;
        if let Err(e) = server.restart().await {
            tracing::error!("the fake API server could not restart: {e}");
        }
    });
    ok()
}

async fn fake_controller_stop(State(state): State<ApiState>) -> Response {
    match state.hooks.controller.get().and_then(Weak::upgrade) {
        Some(controller) => {
            controller.stop();
            ok()
        }
        None => error_response(&ApiError::internal("no controller")),
    }
}

async fn fake_controller_start(State(state): State<ApiState>) -> Response {
    match state.hooks.controller.get().and_then(Weak::upgrade) {
        Some(controller) => {
            controller.start();
            ok()
        }
        None => error_response(&ApiError::internal("no controller")),
    }
}

async fn fake_counters(State(state): State<ApiState>) -> Response {
    let faults = faults_of(&state);
    let requests: Vec<Value> = faults
        .request_counts()
        .into_iter()
        .map(
            |((verb, resource), count)| json!({"verb": verb, "resource": resource, "count": count}),
        )
        .collect();
    let mut lists = serde_json::Map::new();
    let mut watches = serde_json::Map::new();
    for resource in Resource::ALL {
        lists.insert(
            resource.plural().into(),
            json!(faults.list_count(resource.plural())),
        );
        watches.insert(
            resource.plural().into(),
            json!(faults.watch_count(resource.plural())),
        );
    }
    json_response(
        200,
        &json!({"lists": lists, "watches": watches, "requests": requests}),
    )
}
