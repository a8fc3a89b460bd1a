//! The manifests of `deploy/k8s/agent-sandbox/` against the vendored agent-sandbox CRDs
//! (docs/decisions/0008-k8s-sandboxes.md, "Manifests"): every custom object validates against
//! its CRD's `v1beta1` OpenAPI schema, the worker Role grants exactly what the backend needs,
//! the examples fit together, and broken objects are refused.
//!
//! The OpenAPI v3 schemas become JSON Schema (draft 4) as the API server reads them:
//! `x-kubernetes-*` keys dropped (`int-or-string` becomes `anyOf: [integer, string]` when the
//! schema lacks it), `nullable: true` admits `null`, and an object schema with `properties` is
//! closed (`additionalProperties: false`) unless it has `x-kubernetes-preserve-unknown-fields`:
//! the API server prunes unknown fields, and `kubectl apply` refuses them by default (strict
//! field validation), so an unknown field here is a typo. The CRDs' one CEL rule
//! (`x-kubernetes-validations` on `Sandbox.spec`) is a transition rule (`oldSelf`) and does
//! not apply to a create.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a panic is a test failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s/agent-sandbox")
}

/// The manifest files (not the CRDs), each as its YAML documents.
const FILES: &[&str] = &[
    "namespace.yaml",
    "rbac.yaml",
    "resourcequota.yaml",
    "keys-configmap.example.yaml",
    "template.example.yaml",
    "warmpool.example.yaml",
    "claim.example.yaml",
];

const CRD_FILES: &[&str] = &[
    "agents.x-k8s.io_sandboxes.yaml",
    "extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
];

const NAMESPACE: &str = "uniagent-agent-sandboxes";

/// Every non-empty YAML document of `text`, as JSON values.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn read_docs(name: &str) -> Vec<Value> {
    let path = folder().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    documents(&text)
}

/// All manifest objects, by file.
fn manifests() -> BTreeMap<&'static str, Vec<Value>> {
    FILES.iter().map(|f| (*f, read_docs(f))).collect()
}

/// The schema-valued keywords of an OpenAPI v3 schema object.
const SCHEMA_MAPS: &[&str] = &["properties", "patternProperties"];
const SCHEMA_LISTS: &[&str] = &["anyOf", "allOf", "oneOf"];
const SCHEMA_ONE: &[&str] = &["items", "not", "additionalProperties", "additionalItems"];

/// An OpenAPI v3 schema (as in a CRD) as a draft-4 JSON Schema, with Kubernetes' semantics
/// (see the module docs).
fn json_schema(openapi: &Value) -> Value {
    let Value::Object(schema) = openapi else {
        // `additionalProperties: true/false`.
        return openapi.clone();
    };
    let mut out = Map::new();
    for (key, value) in schema {
        if key.starts_with("x-kubernetes-") || key == "nullable" {
            continue;
        }
        let converted = if SCHEMA_MAPS.contains(&key.as_str()) {
            let props = value.as_object().expect("properties is a map");
            Value::Object(
                props
                    .iter()
                    .map(|(name, s)| (name.clone(), json_schema(s)))
                    .collect(),
            )
        } else if SCHEMA_LISTS.contains(&key.as_str()) {
            Value::Array(
                value
                    .as_array()
                    .expect("anyOf is a list")
                    .iter()
                    .map(json_schema)
                    .collect(),
            )
        } else if SCHEMA_ONE.contains(&key.as_str()) {
            json_schema(value)
        } else {
            // Values, not schemas: `enum`, `default`, `required`, `description`, `format`...
            value.clone()
        };
        out.insert(key.clone(), converted);
    }
    let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") && !out.contains_key("anyOf") {
        out.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if flag("nullable") {
        if let Some(t) = out.get("type").cloned() {
            out.insert("type".into(), json!([t, "null"]));
        }
        if let Some(Value::Array(values)) = out.get_mut("enum") {
            values.push(Value::Null);
        }
    }
    let is_object = out.get("type") == Some(&json!("object"));
    if is_object
        && out.contains_key("properties")
        && !out.contains_key("additionalProperties")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

/// A CRD's kind, group and `v1beta1` validator.
struct Crd {
    group: String,
    plural: String,
    validator: jsonschema::Validator,
}

fn crds() -> BTreeMap<String, Crd> {
    let mut out = BTreeMap::new();
    for file in CRD_FILES {
        let docs = read_docs(&format!("crds/{file}"));
        assert_eq!(docs.len(), 1, "{file}");
        let crd = &docs[0];
        assert_eq!(crd["kind"], "CustomResourceDefinition", "{file}");
        let spec = &crd["spec"];
        let kind = spec["names"]["kind"].as_str().expect("kind").to_owned();
        let group = spec["group"].as_str().expect("group").to_owned();
        let plural = spec["names"]["plural"].as_str().expect("plural").to_owned();
        assert_eq!(spec["scope"], "Namespaced", "{file}");
        assert_eq!(*file, format!("{group}_{plural}.yaml"));
        let version = spec["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .find(|v| v["name"] == "v1beta1")
            .unwrap_or_else(|| panic!("{file}: no v1beta1"));
        assert_eq!(version["served"], true, "{file}");
        assert_eq!(version["storage"], true, "{file}");
        let schema = json_schema(&version["schema"]["openAPIV3Schema"]);
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|e| panic!("{file}: the converted schema does not compile: {e}"));
        out.insert(
            kind,
            Crd {
                group,
                plural,
                validator,
            },
        );
    }
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "Sandbox",
            "SandboxClaim",
            "SandboxTemplate",
            "SandboxWarmPool"
        ]
    );
    out
}

/// Why `object` is not a valid custom object; `None` when it is not one (another kind).
fn custom_object_errors(crds: &BTreeMap<String, Crd>, object: &Value) -> Option<Vec<String>> {
    let kind = object["kind"].as_str()?;
    let crd = crds.get(kind)?;
    let mut errors = Vec::new();
    let expected = format!("{}/v1beta1", crd.group);
    if object["apiVersion"] != json!(expected) {
        errors.push(format!(
            "apiVersion is {}, expected {expected}",
            object["apiVersion"]
        ));
    }
    for e in crd.validator.iter_errors(object) {
        errors.push(format!("{}: {e}", e.instance_path()));
    }
    Some(errors)
}

#[test]
fn every_custom_object_validates_against_its_crd() {
    let crds = crds();
    let mut seen = BTreeSet::new();
    for (file, docs) in manifests() {
        for object in docs {
            if let Some(errors) = custom_object_errors(&crds, &object) {
                assert!(
                    errors.is_empty(),
                    "{file}: {} {}:\n{}",
                    object["kind"],
                    object["metadata"]["name"],
                    errors.join("\n")
                );
                seen.insert(object["kind"].as_str().unwrap().to_owned());
            }
        }
    }
    // The examples cover every kind the backend writes.
    assert_eq!(
        seen.iter().map(String::as_str).collect::<Vec<_>>(),
        ["SandboxClaim", "SandboxTemplate", "SandboxWarmPool"]
    );
}

/// The objects the backend renders from its settings (`k8s::render`) are valid too: for the
/// defaults, with egress rules, and for several images.
#[cfg(feature = "k8s")]
#[test]
fn rendered_objects_validate_against_their_crds() {
    use uniagent_sandboxes::k8s::render::{claim, template_and_pool, ClaimLabels};
    use uniagent_sandboxes::k8s::{EgressRule, K8sConfig};

    let crds = crds();
    let base = K8sConfig {
        carrier_image: "registry.example/uniagent-sandbox-carrier:0.1".into(),
        ..K8sConfig::default()
    };
    let with_egress = K8sConfig {
        egress: vec![
            EgressRule {
                cidr: "10.20.30.40/32".into(),
                port: Some(443),
            },
            EgressRule {
                cidr: "fd00::/8".into(),
                port: None,
            },
        ],
        cpus: 0.25,
        warm: 0,
        ..base.clone()
    };
    let mut checked = 0;
    for (cfg, image) in [
        (&base, "python:3.12-slim"),
        (&with_egress, "ghcr.io/org/swe-bench:django__django-11099"),
    ] {
        let rendered = template_and_pool(cfg, image).unwrap();
        let labels = ClaimLabels {
            run_id: "run-1".into(),
            rollout: Some("django__django-11099:0".into()),
            owner: uniagent_sandboxes::owner::Owner {
                host: "worker-0".into(),
                pid: 4242,
                start_ticks: 1234567,
            },
        };
        let claim = claim(
            cfg,
            "ua-run-1-0123456789ab",
            &rendered.name,
            &labels,
            1_900_000_000,
        )
        .unwrap();
        for object in [
            serde_json::to_value(&rendered.template).unwrap(),
            serde_json::to_value(&rendered.pool).unwrap(),
            serde_json::to_value(&claim).unwrap(),
        ] {
            let errors = custom_object_errors(&crds, &object).expect("a custom object");
            assert!(errors.is_empty(), "{object:#}:\n{}", errors.join("\n"));
            assert!(object.pointer("/spec/env").is_none());
            checked += 1;
        }
    }
    assert_eq!(checked, 6);
}

/// One example object of `kind`.
fn example(kind: &str) -> Value {
    manifests()
        .into_values()
        .flatten()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// Sets the value at a JSON pointer, creating objects on the way.
fn set(object: &mut Value, pointer: &str, value: Value) {
    let mut at = object;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for part in &parts[..parts.len() - 1] {
        at = match at {
            Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
            _ => at
                .as_object_mut()
                .unwrap()
                .entry(part.to_string())
                .or_insert_with(|| json!({})),
        };
    }
    let last = parts[parts.len() - 1];
    match at {
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = value,
        _ => {
            at.as_object_mut().unwrap().insert(last.to_owned(), value);
        }
    }
}

fn remove(object: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(last)
        .unwrap_or_else(|| panic!("{pointer} is not there"));
}

#[test]
fn broken_objects_are_refused_where_they_break() {
    let crds = crds();
    let template = "/spec/podTemplate/spec/containers/0";
    // (kind, mutation, the instance path the error must name)
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "SandboxTemplate",
            Box::new(|o| set(o, "/spec/envVarsInjectionPolicy", json!("Sometimes"))),
            "/spec/envVarsInjectionPolicy",
        ),
        (
            "SandboxTemplate",
            Box::new(move |o| set(o, &format!("{template}/imagePullPolicyy"), json!("Always"))),
            "/spec/podTemplate/spec/containers/0",
        ),
        (
            "SandboxTemplate",
            // A quantity is an integer or a string: 0.5 must be written "500m".
            Box::new(move |o| set(o, &format!("{template}/resources/limits/cpu"), json!(0.5))),
            "/spec/podTemplate/spec/containers/0/resources/limits/cpu",
        ),
        (
            "SandboxTemplate",
            Box::new(move |o| {
                set(
                    o,
                    &format!("{template}/resources/limits/memory"),
                    json!("2 GiB"),
                )
            }),
            "/spec/podTemplate/spec/containers/0/resources/limits/memory",
        ),
        (
            "SandboxTemplate",
            Box::new(move |o| remove(o, &format!("{template}/name"))),
            "/spec/podTemplate/spec/containers/0",
        ),
        (
            "SandboxTemplate",
            Box::new(|o| set(o, "/spec/networkPolicy/egress/0/ports/0/port", json!(true))),
            "/spec/networkPolicy/egress/0/ports/0/port",
        ),
        (
            "SandboxWarmPool",
            Box::new(|o| set(o, "/spec/replicas", json!(-1))),
            "/spec/replicas",
        ),
        (
            "SandboxWarmPool",
            Box::new(|o| remove(o, "/spec/sandboxTemplateRef")),
            "/spec",
        ),
        (
            "SandboxClaim",
            Box::new(|o| remove(o, "/spec/warmPoolRef")),
            "/spec",
        ),
        (
            "SandboxClaim",
            Box::new(|o| set(o, "/spec/lifecycle/shutdownTime", json!("in five minutes"))),
            "/spec/lifecycle/shutdownTime",
        ),
        (
            "SandboxClaim",
            Box::new(|o| set(o, "/spec/lifecycle/shutdownPolicy", json!("Foreground"))),
            "/spec/lifecycle/shutdownPolicy",
        ),
        (
            "SandboxClaim",
            Box::new(|o| set(o, "/spec/env", json!([{"name": "X"}]))),
            "/spec/env/0",
        ),
    ];
    for (kind, mutate, path) in cases {
        let mut object = example(kind);
        assert_eq!(custom_object_errors(&crds, &object), Some(vec![]));
        mutate(&mut object);
        let errors = custom_object_errors(&crds, &object).unwrap();
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{path}: "))),
            "{kind} mutated at {path}: expected an error there, got {errors:?}"
        );
    }
    // Int-or-string takes either form; a wrong apiVersion is refused.
    let mut object = example("SandboxTemplate");
    set(
        &mut object,
        "/spec/networkPolicy/egress/0/ports/0/port",
        json!("https"),
    );
    set(
        &mut object,
        &format!("{template}/resources/limits/cpu"),
        json!(2),
    );
    assert_eq!(custom_object_errors(&crds, &object), Some(vec![]));
    set(
        &mut object,
        "/apiVersion",
        json!("extensions.agents.x-k8s.io/v1alpha1"),
    );
    assert_eq!(custom_object_errors(&crds, &object).unwrap().len(), 1);
}

#[test]
fn the_schema_conversion_follows_kubernetes() {
    let openapi = json!({
        "type": "object",
        "properties": {
            "port": {"x-kubernetes-int-or-string": true},
            "maybe": {"type": "string", "nullable": true, "enum": ["a"]},
            "open": {"type": "object", "properties": {"a": {"type": "string"}},
                     "x-kubernetes-preserve-unknown-fields": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"type": "object",
                     "properties": {"x": {"type": "integer"}}},
                     "x-kubernetes-list-type": "atomic"},
            "default": {"type": "object", "default": {"properties": 1}},
        },
    });
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&json_schema(&openapi))
        .unwrap();
    let ok = json!({"port": 1, "maybe": null, "open": {"b": 1},
                    "labels": {"k": "v"}, "list": [{"x": 1}], "default": {}});
    assert!(validator.is_valid(&ok));
    assert!(validator.is_valid(&json!({"port": "http", "maybe": "a"})));
    for bad in [
        json!({"port": 1.5}),
        json!({"maybe": "b"}),
        json!({"labels": {"k": 1}}),
        json!({"list": [{"y": 1}]}),
        json!({"unknown": 1}),
    ] {
        assert!(!validator.is_valid(&bad), "{bad}");
    }
}

/// (apiGroup, resource) → verbs granted to any name, and verbs granted to named objects only.
type Grants = BTreeMap<(String, String), (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>)>;

fn grants(role: &Value) -> Grants {
    let mut out = Grants::new();
    for rule in role["rules"].as_array().expect("rules") {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default()
        };
        let names = list("resourceNames");
        for group in list("apiGroups") {
            for resource in list("resources") {
                let entry = out.entry((group.clone(), resource)).or_default();
                for verb in list("verbs") {
                    if names.is_empty() {
                        entry.0.insert(verb.clone());
                    } else {
                        for name in &names {
                            entry
                                .1
                                .entry(name.clone())
                                .or_default()
                                .insert(verb.clone());
                        }
                    }
                }
            }
        }
    }
    out
}

const CLAIMS_GROUP: &str = "extensions.agents.x-k8s.io";

/// What 0008's "Manifests" section says the worker Role grants: (group, resource, verbs,
/// resource names or none for any).
fn worker_needs() -> Vec<(
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
)> {
    vec![
        (
            CLAIMS_GROUP,
            "sandboxclaims",
            &["create", "get", "list", "watch", "patch", "delete"],
            &[],
        ),
        (
            CLAIMS_GROUP,
            "sandboxtemplates",
            &["get", "create", "patch"],
            &[],
        ),
        (
            CLAIMS_GROUP,
            "sandboxwarmpools",
            &["get", "create", "patch"],
            &[],
        ),
        ("agents.x-k8s.io", "sandboxes", &["get"], &[]),
        ("", "pods", &["get"], &[]),
        ("", "secrets", &["get"], &["uniagent-signing-key"]),
    ]
}

/// Whether `docs` (rbac.yaml) grant the worker exactly what it needs, and port-forwarding only
/// through its own Role; the problems otherwise.
fn rbac_problems(docs: &[Value]) -> Vec<String> {
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    };
    let mut problems = Vec::new();
    for doc in docs {
        if doc["metadata"]["namespace"] != NAMESPACE {
            problems.push(format!(
                "{} {}: not in {NAMESPACE}",
                doc["kind"], doc["metadata"]["name"]
            ));
        }
    }
    let Some(role) = find("Role", "uniagent-worker") else {
        return vec!["no Role uniagent-worker".into()];
    };
    let mut granted = grants(role);
    for (group, resource, verbs, names) in worker_needs() {
        let Some((any, named)) = granted.remove(&(group.to_owned(), resource.to_owned())) else {
            problems.push(format!("{resource}.{group}: not granted"));
            continue;
        };
        let want: BTreeSet<String> = verbs.iter().map(|v| v.to_string()).collect();
        if names.is_empty() {
            if any != want || !named.is_empty() {
                problems.push(format!(
                    "{resource}.{group}: grants {any:?} {named:?}, needs {want:?}"
                ));
            }
        } else {
            let want_named: BTreeMap<String, BTreeSet<String>> = names
                .iter()
                .map(|n| (n.to_string(), want.clone()))
                .collect();
            if !any.is_empty() || named != want_named {
                problems.push(format!(
                    "{resource}.{group}: grants {any:?} {named:?}, needs only {want_named:?}"
                ));
            }
        }
    }
    for ((group, resource), grant) in granted {
        problems.push(format!("{resource}.{group}: granted {grant:?}, not needed"));
    }
    match find("Role", "uniagent-port-forward") {
        None => problems.push("no Role uniagent-port-forward".into()),
        Some(role) => {
            let mut expected = Grants::new();
            expected.insert(
                (String::new(), "pods/portforward".into()),
                (["create".to_owned()].into(), BTreeMap::new()),
            );
            if grants(role) != expected {
                problems.push(format!("uniagent-port-forward grants {:?}", grants(role)));
            }
        }
    }
    match find("RoleBinding", "uniagent-worker") {
        None => problems.push("no RoleBinding uniagent-worker".into()),
        Some(binding) => {
            if binding["roleRef"]
                != json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "uniagent-worker"})
            {
                problems.push(format!("the binding refers to {}", binding["roleRef"]));
            }
            let subject = json!({"kind": "ServiceAccount", "name": "uniagent-worker", "namespace": NAMESPACE});
            if binding["subjects"] != json!([subject]) {
                problems.push(format!(
                    "the binding's subjects are {}",
                    binding["subjects"]
                ));
            }
        }
    }
    if find("ServiceAccount", "uniagent-worker").is_none() {
        problems.push("no ServiceAccount uniagent-worker".into());
    }
    if docs
        .iter()
        .any(|d| d["kind"] == "RoleBinding" && d["roleRef"]["name"] == "uniagent-port-forward")
    {
        problems.push("port-forwarding is bound by default".into());
    }
    problems
}

#[test]
fn the_worker_role_grants_what_the_backend_needs_and_nothing_more() {
    let docs = read_docs("rbac.yaml");
    assert_eq!(rbac_problems(&docs), Vec::<String>::new());

    // Each broken variant is caught.
    let role_index = docs
        .iter()
        .position(|d| d["kind"] == "Role" && d["metadata"]["name"] == "uniagent-worker")
        .unwrap();
    type Break = fn(&mut Value);
    let breaks: [(Break, &str); 6] = [
        (
            |role| role["rules"][0]["verbs"] = json!(["create", "get", "list", "patch", "delete"]),
            "sandboxclaims",
        ),
        (
            |role| role["rules"][0]["verbs"] = json!(["*"]),
            "sandboxclaims",
        ),
        (
            |role| {
                role["rules"][4]
                    .as_object_mut()
                    .unwrap()
                    .remove("resourceNames");
            },
            "secrets",
        ),
        (
            |role| role["rules"][3]["verbs"] = json!(["get", "list"]),
            "pods",
        ),
        (
            |role| {
                role["rules"].as_array_mut().unwrap().push(
                    json!({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}),
                )
            },
            "pods/exec",
        ),
        (
            |role| {
                role["rules"].as_array_mut().unwrap().remove(2);
            },
            "sandboxes",
        ),
    ];
    for (breaking, named) in breaks {
        let mut broken = docs.clone();
        breaking(&mut broken[role_index]);
        let problems = rbac_problems(&broken);
        assert!(
            problems.iter().any(|p| p.starts_with(named)),
            "breaking {named}: {problems:?}"
        );
    }
    let mut bound = docs.clone();
    bound.push(
        json!({"kind": "RoleBinding", "metadata": {"name": "pf", "namespace": NAMESPACE},
                      "roleRef": {"kind": "Role", "name": "uniagent-port-forward"}}),
    );
    assert_eq!(
        rbac_problems(&bound),
        ["port-forwarding is bound by default"]
    );
}

#[test]
fn no_claim_sets_env_and_the_examples_fit_together() {
    let all = manifests();
    let objects: Vec<&Value> = all.values().flatten().collect();
    let one = |kind: &str| {
        let found: Vec<&&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{kind}");
        *found[0]
    };
    for object in &objects {
        if object["kind"] == "Namespace" {
            assert_eq!(object["metadata"]["name"], NAMESPACE);
        } else {
            assert_eq!(object["metadata"]["namespace"], NAMESPACE, "{object}");
        }
        if object["kind"] == "SandboxClaim" {
            assert!(object["spec"].get("env").is_none(), "a claim sets spec.env");
            assert_eq!(
                object["spec"]["lifecycle"]["shutdownPolicy"],
                "DeleteForeground"
            );
            assert!(object["spec"]["lifecycle"]["shutdownTime"].is_string());
        }
    }
    let template = one("SandboxTemplate");
    let pool = one("SandboxWarmPool");
    let claim = one("SandboxClaim");
    let keys = one("ConfigMap");
    assert_eq!(
        pool["spec"]["sandboxTemplateRef"]["name"],
        template["metadata"]["name"]
    );
    assert_eq!(pool["spec"]["updateStrategy"]["type"], "Recreate");
    assert_eq!(
        claim["spec"]["warmPoolRef"]["name"],
        pool["metadata"]["name"]
    );

    let spec = &template["spec"];
    assert_eq!(spec["envVarsInjectionPolicy"], "Disallowed");
    assert_eq!(spec["networkPolicyManagement"], "Managed");
    let egress = spec["networkPolicy"]["egress"].as_array().unwrap();
    assert!(
        !egress.is_empty()
            && egress.iter().all(|r| r["to"]
                .as_array()
                .is_some_and(|to| to.iter().all(|peer| peer["ipBlock"]["cidr"].is_string()))),
        "egress only to listed CIDRs"
    );
    assert!(!spec["networkPolicy"]["ingress"]
        .as_array()
        .unwrap()
        .is_empty());

    let pod = &spec["podTemplate"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let volumes = pod["volumes"].as_array().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap();
    assert!(volume("uniagent")["emptyDir"].is_object());
    assert_eq!(
        volume("keys")["configMap"]["name"],
        keys["metadata"]["name"]
    );
    let init = &pod["initContainers"][0];
    assert_eq!(init["volumeMounts"][0]["name"], "uniagent");
    let install_dir = init["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let copied_to = init["command"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_str()
        .unwrap();
    assert_eq!(copied_to, format!("{install_dir}/uniagent-sandbox"));

    let server = &pod["containers"][0];
    assert_eq!(server["command"][0], copied_to);
    let mounts = server["volumeMounts"].as_array().unwrap();
    let mount = |name: &str| mounts.iter().find(|m| m["name"] == name).unwrap();
    assert_eq!(mount("uniagent")["mountPath"], install_dir);
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--host=0.0.0.0") && args.contains(&"--port=8000"),
        "{args:?}"
    );
    assert!(!args
        .iter()
        .any(|a| a.starts_with("--auth-token") || a.starts_with("--insecure")));
    let key_file = args
        .iter()
        .find_map(|a| a.strip_prefix("--auth-public-key-file="))
        .expect("--auth-public-key-file");
    let (dir, key) = key_file.rsplit_once('/').unwrap();
    assert_eq!(mount("keys")["mountPath"], dir);
    assert!(
        keys["data"][key].is_string(),
        "the ConfigMap has no key {key}"
    );
    assert_eq!(
        server["env"],
        json!([{"name": "UNIAGENT_SANDBOX_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "the only env var is the downward API's name"
    );
    assert_eq!(server["readinessProbe"]["tcpSocket"]["port"], 8000);
    for resource in ["cpu", "memory"] {
        assert!(
            server["resources"]["limits"][resource].is_string(),
            "limits.{resource}"
        );
    }

    let quota = one("ResourceQuota");
    for key in [
        "count/sandboxclaims.extensions.agents.x-k8s.io",
        "limits.cpu",
        "limits.memory",
    ] {
        assert!(quota["spec"]["hard"][key].is_string(), "quota {key}");
    }
}

/// The example key file parses as the server will read it.
#[cfg(feature = "signed-token")]
#[test]
fn the_example_keys_parse() {
    let keys = example("ConfigMap");
    let text = keys["data"]["keys"].as_str().unwrap();
    let parsed = uniagent_sandboxes::signed_token::PublicKeys::parse(text).unwrap();
    assert_eq!(parsed.len(), 2);
    // Their documented private keys.
    for (seed, kid) in [(1u8, "example-2026-08"), (2, "example-2026-09")] {
        let minter = uniagent_sandboxes::signed_token::Minter::from_seed([seed; 32]);
        assert!(text.contains(&format!("{kid} {}", minter.public_key_base64())));
    }
}

#[test]
fn the_crds_are_the_vendored_release() {
    let source = std::fs::read_to_string(folder().join("crds/SOURCE")).unwrap();
    assert!(source.contains("tag:    v0.5.6"));
    assert!(source.contains("commit: 211b7579cabed9460c1a692eb687084ff4c5879d"));
    let license = std::fs::read_to_string(folder().join("crds/LICENSE")).unwrap();
    assert!(license.contains("Apache License") && license.contains("Version 2.0"));
    let crds = crds();
    let plurals: Vec<String> = crds
        .values()
        .map(|c| format!("{}.{}", c.plural, c.group))
        .collect();
    assert_eq!(
        plurals,
        [
            "sandboxes.agents.x-k8s.io",
            "sandboxclaims.extensions.agents.x-k8s.io",
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "sandboxwarmpools.extensions.agents.x-k8s.io",
        ]
    );
}
