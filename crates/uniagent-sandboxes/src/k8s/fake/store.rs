//! The object store: every object of every kind the fake serves, one global `resourceVersion`
//! counter, the event history watches resume from, and the broadcast live watches follow.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, Notify};

use super::util::{lock, now_rfc3339, random_suffix, random_uid};

/// Group of `SandboxClaim`, `SandboxTemplate` and `SandboxWarmPool`.
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// Group of `Sandbox`.
pub const AGENTS_GROUP: &str = "agents.x-k8s.io";
/// The one version of the agent-sandbox groups the fake serves.
pub const AGENT_SANDBOX_VERSION: &str = "v1beta1";
/// The finalizer a `propagationPolicy: Foreground` delete adds.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// A kind of object the fake serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// `sandboxclaims.extensions.agents.x-k8s.io`
    SandboxClaims,
    /// `sandboxtemplates.extensions.agents.x-k8s.io`
    SandboxTemplates,
    /// `sandboxwarmpools.extensions.agents.x-k8s.io`
    SandboxWarmPools,
    /// `sandboxes.agents.x-k8s.io`
    Sandboxes,
    /// core `pods` (written by the controller; clients read them)
    Pods,
    /// core `configmaps` (the template's key file comes from one)
    ConfigMaps,
}

impl Resource {
    /// Every kind, in a fixed order.
    pub const ALL: [Resource; 6] = [
        Resource::SandboxClaims,
        Resource::SandboxTemplates,
        Resource::SandboxWarmPools,
        Resource::Sandboxes,
        Resource::Pods,
        Resource::ConfigMaps,
    ];

    /// The API group (`""` for the core group).
    pub fn group(self) -> &'static str {
        match self {
            Resource::SandboxClaims | Resource::SandboxTemplates | Resource::SandboxWarmPools => {
                EXTENSIONS_GROUP
            }
            Resource::Sandboxes => AGENTS_GROUP,
            Resource::Pods | Resource::ConfigMaps => "",
        }
    }

    /// The served version.
    pub fn version(self) -> &'static str {
        if self.group().is_empty() {
            "v1"
        } else {
            AGENT_SANDBOX_VERSION
        }
    }

    /// The plural resource name used in paths.
    pub fn plural(self) -> &'static str {
        match self {
            Resource::SandboxClaims => "sandboxclaims",
            Resource::SandboxTemplates => "sandboxtemplates",
            Resource::SandboxWarmPools => "sandboxwarmpools",
            Resource::Sandboxes => "sandboxes",
            Resource::Pods => "pods",
            Resource::ConfigMaps => "configmaps",
        }
    }

    /// The object kind.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::SandboxClaims => "SandboxClaim",
            Resource::SandboxTemplates => "SandboxTemplate",
            Resource::SandboxWarmPools => "SandboxWarmPool",
            Resource::Sandboxes => "Sandbox",
            Resource::Pods => "Pod",
            Resource::ConfigMaps => "ConfigMap",
        }
    }

    /// `apiVersion` of its objects.
    pub fn api_version(self) -> String {
        if self.group().is_empty() {
            self.version().to_string()
        } else {
            format!("{}/{}", self.group(), self.version())
        }
    }

    /// `plural.group` (just `plural` for the core group), as error messages name it.
    pub fn qualified(self) -> String {
        if self.group().is_empty() {
            self.plural().to_string()
        } else {
            format!("{}.{}", self.plural(), self.group())
        }
    }

    /// Whether the kind has a `status` subresource (status is written only through it).
    pub fn has_status(self) -> bool {
        !matches!(self, Resource::ConfigMaps)
    }

    /// The kind served at `group`/`version`/`plural`.
    pub fn from_parts(group: &str, version: &str, plural: &str) -> Option<Resource> {
        Resource::ALL
            .into_iter()
            .find(|r| r.group() == group && r.version() == version && r.plural() == plural)
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Gone.
    Deleted,
}

impl EventType {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as the history and the live broadcast carry it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The `resourceVersion` the change got.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The object's kind.
    pub resource: Resource,
    /// The object after the change (for `Deleted`: its last state, with the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change (`None` for `Added`): a watch with a selector turns a change
    /// that makes an object match (or stop matching) into `ADDED` (or `DELETED`).
    pub old: Option<Arc<Value>>,
}

/// An error as the API server reports it: an HTTP status and the `Status` object's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `AlreadyExists`, ...).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, if any.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, resource: Resource, name: &str) -> Self {
        self.details =
            Some(json!({"name": name, "group": resource.group(), "kind": resource.plural()}));
        self
    }

    /// 404 `NotFound` for a named object.
    pub fn not_found(resource: Resource, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified()),
        )
        .with_details(resource, name)
    }

    /// 409 `AlreadyExists`.
    pub fn already_exists(resource: Resource, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource.qualified()),
        )
        .with_details(resource, name)
    }

    /// 409 `Conflict` (a stale `resourceVersion` or a failed precondition).
    pub fn conflict(resource: Resource, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                resource.qualified()
            ),
        )
        .with_details(resource, name)
    }

    /// 422 `Invalid`.
    pub fn invalid(resource: Resource, name: &str, why: &str) -> Self {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {why}", resource.kind()),
        )
        .with_details(resource, name)
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 for a path the server does not serve.
    pub fn no_route() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 415 `UnsupportedMediaType`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 410 `Expired`: the version is older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 403 `Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    /// 429 `TooManyRequests`.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        ApiError::new(429, "TooManyRequests", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(details), Some(map)) = (&self.details, status.as_object_mut()) {
            map.insert("details".into(), details.clone());
        }
        status
    }
}

/// How a delete treats the object's dependents (objects whose `ownerReferences` name it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete now; the garbage collector deletes the dependents afterwards (the default).
    #[default]
    Background,
    /// Keep the object (with `deletionTimestamp` and the `foregroundDeletion` finalizer) until
    /// its dependents are gone.
    Foreground,
    /// Delete now; dependents lose their owner reference and stay.
    Orphan,
}

impl Propagation {
    /// Parses a `propagationPolicy` value.
    pub fn parse(text: &str) -> Option<Propagation> {
        match text {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; its last state.
    Gone(Value),
    /// The object is being deleted (finalizers or graceful pod termination); its state now.
    Pending(Value),
}

/// `(resource, namespace, name)`.
pub(crate) type Key = (Resource, String, String);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Event>,
    /// Watches from a version below this one get 410: the events after it are not all kept.
    compacted: u64,
    history_limit: usize,
}

/// The store behind the fake API server and its controller.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

/// The name of an object (`""` if it has none).
pub fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or("")
}

/// The namespace of an object (`""` if it has none).
pub fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or("")
}

/// The uid of an object (`""` if it has none).
pub fn uid_of(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or("")
}

/// The `resourceVersion` of an object as a number (0 if it has none).
pub fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Whether `name` is a DNS-1123 subdomain, as object names must be.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    if !object.is_object() {
        return None;
    }
    let map = object.as_object_mut()?;
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut()
}

/// Everything but `metadata` and `status`: a change there bumps `metadata.generation`.
fn spec_part(object: &Value) -> Value {
    match object {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

impl Store {
    /// An empty store keeping the last `history_limit` events for watches to resume from.
    pub fn new(history_limit: usize) -> Self {
        let (events, _) = broadcast::channel(65_536);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 1,
                history_limit: history_limit.max(1),
            }),
            events,
            changed: Arc::new(Notify::new()),
        }
    }

    /// Notified (one permit) after every change; the controller waits on it.
    pub fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// The newest `resourceVersion`.
    pub fn resource_version(&self) -> u64 {
        lock(&self.inner).rv
    }

    /// The oldest version a watch may start from; older ones get 410 `Expired`.
    pub fn compacted_version(&self) -> u64 {
        lock(&self.inner).compacted
    }

    /// Forgets the event history: a watch from any version before now gets 410 `Expired`.
    pub fn compact(&self) {
        let mut inner = lock(&self.inner);
        inner.history.clear();
        inner.compacted = inner.rv;
    }

    fn record(
        &self,
        inner: &mut Inner,
        kind: EventType,
        resource: Resource,
        object: Value,
        old: Option<Value>,
    ) {
        let event = Event {
            rv: inner.rv,
            kind,
            resource,
            object: Arc::new(object),
            old: old.map(Arc::new),
        };
        inner.history.push_back(event.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.events.send(event);
        self.changed.notify_one();
    }

    /// Creates an object in `namespace`: sets `uid`, `creationTimestamp`, `resourceVersion`,
    /// `generation`, the namespace, `apiVersion` and `kind`, and a name from `generateName`.
    pub fn create(
        &self,
        resource: Resource,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        let given = name_of(&object).to_string();
        let generate = object["metadata"]["generateName"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if given.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                resource,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        let object_ns = namespace_of(&object).to_string();
        if !object_ns.is_empty() && object_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut inner = lock(&self.inner);
        let name = if given.is_empty() {
            let mut name = format!("{generate}{}", random_suffix(5));
            while inner
                .objects
                .contains_key(&(resource, namespace.to_string(), name.clone()))
            {
                name = format!("{generate}{}", random_suffix(5));
            }
            name
        } else {
            given
        };
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                resource,
                &name,
                "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
            ));
        }
        let key = (resource, namespace.to_string(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(resource, &name));
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(resource.api_version()));
            map.insert("kind".into(), Value::String(resource.kind().into()));
        } else {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        let meta =
            metadata_mut(&mut object).ok_or_else(|| ApiError::bad_request("bad metadata"))?;
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert("namespace".into(), Value::String(namespace.to_string()));
        meta.insert("uid".into(), Value::String(random_uid()));
        meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        inner.objects.insert(key, object.clone());
        self.record(&mut inner, EventType::Added, resource, object.clone(), None);
        Ok(object)
    }

    /// The object, if it exists.
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.inner)
            .objects
            .get(&(resource, namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The objects of `resource` (in `namespace`, or all namespaces) that `keep` accepts, in
    /// (namespace, name) order, and the version of this snapshot.
    pub fn list(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        mut keep: impl FnMut(&Value) -> bool,
    ) -> (Vec<Value>, u64) {
        let inner = lock(&self.inner);
        let items = inner
            .objects
            .iter()
            .filter(|((r, ns, _), _)| *r == resource && namespace.is_none_or(|want| want == ns))
            .filter(|(_, v)| keep(v))
            .map(|(_, v)| v.clone())
            .collect();
        (items, inner.rv)
    }

    /// Every object (for the controller), and the snapshot's version.
    pub fn snapshot(&self) -> (Vec<(Resource, Value)>, u64) {
        let inner = lock(&self.inner);
        let items = inner
            .objects
            .iter()
            .map(|((r, _, _), v)| (*r, v.clone()))
            .collect();
        (items, inner.rv)
    }

    /// Changes an object with `change`. Name, namespace, uid and creation time cannot change.
    /// A change outside `metadata` and `status` bumps `generation`; no change at all emits no
    /// event. An object being deleted whose last finalizer goes is removed.
    pub fn modify(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value) -> Result<(), ApiError>,
    ) -> Result<Value, ApiError> {
        let mut inner = lock(&self.inner);
        let key = (resource, namespace.to_string(), name.to_string());
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        let mut new = old.clone();
        change(&mut new)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        }
        // Fields the server owns.
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "generation",
            "deletionTimestamp",
        ] {
            let kept = old["metadata"][field].clone();
            if let Some(meta) = metadata_mut(&mut new) {
                if kept.is_null() {
                    meta.remove(field);
                } else {
                    meta.insert(field.into(), kept);
                }
            }
        }
        if let Some(map) = new.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(resource.api_version()));
            map.insert("kind".into(), Value::String(resource.kind().into()));
        }
        if new == old {
            return Ok(old);
        }
        if spec_part(&new) != spec_part(&old) {
            let generation = old["metadata"]["generation"].as_u64().unwrap_or(1) + 1;
            if let Some(meta) = metadata_mut(&mut new) {
                meta.insert("generation".into(), json!(generation));
            }
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(meta) = metadata_mut(&mut new) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        if is_deleting(&new) && finalizers(&new).is_empty() && resource != Resource::Pods {
            inner.objects.remove(&key);
            self.record(
                &mut inner,
                EventType::Deleted,
                resource,
                new.clone(),
                Some(old),
            );
        } else {
            inner.objects.insert(key, new.clone());
            self.record(
                &mut inner,
                EventType::Modified,
                resource,
                new.clone(),
                Some(old),
            );
        }
        Ok(new)
    }

    /// Removes `finalizer` from the object (which then goes if it was being deleted and that was
    /// its last finalizer).
    pub fn remove_finalizer(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        finalizer: &str,
    ) -> Result<Value, ApiError> {
        self.modify(resource, namespace, name, |object| {
            if let Some(list) = object["metadata"]["finalizers"].as_array_mut() {
                list.retain(|f| f.as_str() != Some(finalizer));
                if list.is_empty() {
                    if let Some(meta) = metadata_mut(object) {
                        meta.remove("finalizers");
                    }
                }
            }
            Ok(())
        })
    }

    /// Deletes an object. Pods are deleted gracefully (the object stays with
    /// `deletionTimestamp` until the kubelet, here the controller, has stopped it and calls
    /// [`Store::remove_now`]); objects with finalizers or a `Foreground` delete stay until their
    /// finalizers are gone. `precondition_uid`/`precondition_rv` must match if given.
    pub fn delete(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
        policy: Propagation,
        precondition_uid: Option<&str>,
        precondition_rv: Option<&str>,
    ) -> Result<Deleted, ApiError> {
        let mut inner = lock(&self.inner);
        let key = (resource, namespace.to_string(), name.to_string());
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        if let Some(uid) = precondition_uid {
            if uid_of(&old) != uid {
                return Err(ApiError::conflict(
                    resource,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        uid_of(&old)
                    ),
                ));
            }
        }
        if let Some(rv) = precondition_rv {
            let current = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if rv != current {
                return Err(ApiError::conflict(
                    resource,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {current}"),
                ));
            }
        }
        let mut new = old.clone();
        let mut fins = finalizers(&old);
        if policy == Propagation::Foreground && !fins.iter().any(|f| f == FOREGROUND_FINALIZER) {
            fins.push(FOREGROUND_FINALIZER.to_string());
        }
        let stays = resource == Resource::Pods || !fins.is_empty();
        if stays {
            if let Some(meta) = metadata_mut(&mut new) {
                if !meta.contains_key("deletionTimestamp") {
                    meta.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
                    meta.insert(
                        "deletionGracePeriodSeconds".into(),
                        json!(if resource == Resource::Pods { 30 } else { 0 }),
                    );
                }
                if !fins.is_empty() {
                    meta.insert("finalizers".into(), json!(fins));
                }
            }
            if new == old {
                return Ok(Deleted::Pending(old));
            }
            inner.rv += 1;
            let rv = inner.rv;
            if let Some(meta) = metadata_mut(&mut new) {
                meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
            }
            inner.objects.insert(key, new.clone());
            self.record(
                &mut inner,
                EventType::Modified,
                resource,
                new.clone(),
                Some(old),
            );
            return Ok(Deleted::Pending(new));
        }
        if policy == Propagation::Orphan {
            let uid = uid_of(&old).to_string();
            self.strip_owner(&mut inner, &uid);
        }
        Ok(Deleted::Gone(self.remove_locked(&mut inner, key, old)))
    }

    fn strip_owner(&self, inner: &mut Inner, owner_uid: &str) {
        let dependents: Vec<Key> = inner
            .objects
            .iter()
            .filter(|(_, v)| owners(v).iter().any(|o| o == owner_uid))
            .map(|(k, _)| k.clone())
            .collect();
        for key in dependents {
            let Some(old) = inner.objects.get(&key).cloned() else {
                continue;
            };
            let mut new = old.clone();
            if let Some(refs) = new["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(owner_uid));
            }
            inner.rv += 1;
            let rv = inner.rv;
            if let Some(meta) = metadata_mut(&mut new) {
                meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
            }
            inner.objects.insert(key.clone(), new.clone());
            self.record(inner, EventType::Modified, key.0, new, Some(old));
        }
    }

    fn remove_locked(&self, inner: &mut Inner, key: Key, old: Value) -> Value {
        inner.objects.remove(&key);
        inner.rv += 1;
        let rv = inner.rv;
        let mut last = old.clone();
        if let Some(meta) = metadata_mut(&mut last) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        self.record(inner, EventType::Deleted, key.0, last.clone(), Some(old));
        last
    }

    /// Removes an object at once, whatever its finalizers (the kubelet's final pod delete).
    pub fn remove_now(&self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        let mut inner = lock(&self.inner);
        let key = (resource, namespace.to_string(), name.to_string());
        let old = inner.objects.get(&key).cloned()?;
        Some(self.remove_locked(&mut inner, key, old))
    }

    /// Starts a watch of `resource` after version `from` (`None`: the current objects as
    /// `ADDED` events first). Returns the events to send first, the live receiver (subscribed
    /// atomically with the backlog, so nothing is missed or repeated) and the version the
    /// backlog reaches. `Err` is 410 `Expired` when `from` is older than the kept history.
    pub fn watch(
        &self,
        resource: Resource,
        from: Option<u64>,
    ) -> Result<(Vec<Event>, broadcast::Receiver<Event>, u64), ApiError> {
        let inner = lock(&self.inner);
        let backlog = match from {
            None => inner
                .objects
                .iter()
                .filter(|((r, _, _), _)| *r == resource)
                .map(|((r, _, _), v)| Event {
                    rv: rv_of(v),
                    kind: EventType::Added,
                    resource: *r,
                    object: Arc::new(v.clone()),
                    old: None,
                })
                .collect(),
            Some(from) => {
                if from < inner.compacted {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {from} ({})",
                        inner.compacted
                    )));
                }
                inner
                    .history
                    .iter()
                    .filter(|e| e.rv > from && e.resource == resource)
                    .cloned()
                    .collect()
            }
        };
        Ok((backlog, self.events.subscribe(), inner.rv))
    }

    /// Uids of every object.
    pub fn uids(&self) -> HashSet<String> {
        lock(&self.inner)
            .objects
            .values()
            .map(|v| uid_of(v).to_string())
            .collect()
    }
}

/// The uids an object's `ownerReferences` name.
pub(crate) fn owners(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the object has a `deletionTimestamp`.
pub(crate) fn deleting(object: &Value) -> bool {
    is_deleting(object)
}

/// The object's finalizers.
pub(crate) fn finalizers_of(object: &Value) -> Vec<String> {
    finalizers(object)
}
