//! The k8s fake (`uniagent_sandboxes::k8s::fake`) through kube's own client, as a user of a real API
//! server would reach it: CRUD and `Status` errors, paging, patches, the watcher through
//! dropped watches and compacted history, claims on warm pools and cold starts with real
//! `uniagent-sandbox` processes, foreground deletion, `shutdownTime`, the router, every fault,
//! and the `uniagent-k8s-fake` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by panicking

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{json, Value};
use uniagent_sandboxes::k8s::fake::{
    FakeCluster, FakeOptions, Forbidden, Propagation, Resource, SandboxFault, AGENTS_GROUP,
    AGENT_SANDBOX_VERSION, EXTENSIONS_GROUP, LAUNCH_TYPE_LABEL, SANDBOX_PORT,
};

/// Every test's overall deadline.
const DEADLINE: Duration = Duration::from_secs(90);
const NS: &str = "uniagent-test";

async fn with_deadline<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(DEADLINE, test)
        .await
        .expect("the test ran past its deadline");
}

fn resource(kind: &str) -> ApiResource {
    let (group, plural) = match kind {
        "SandboxClaim" => (EXTENSIONS_GROUP, "sandboxclaims"),
        "SandboxTemplate" => (EXTENSIONS_GROUP, "sandboxtemplates"),
        "SandboxWarmPool" => (EXTENSIONS_GROUP, "sandboxwarmpools"),
        "Sandbox" => (AGENTS_GROUP, "sandboxes"),
        other => panic!("unknown kind {other}"),
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, AGENT_SANDBOX_VERSION, kind),
        plural,
    )
}

struct Env {
    fake: FakeCluster,
    client: kube::Client,
}

impl Env {
    async fn start(options: FakeOptions) -> Env {
        let fake = FakeCluster::start(options).await.expect("start the fake");
        let config = kube::Config::new(fake.api_url().parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Env { fake, client }
    }

    fn api(&self, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &resource(kind))
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create(&self, kind: &str, name: &str, data: Value) -> DynamicObject {
        let object = dynamic(kind, name, data);
        self.api(kind)
            .create(&PostParams::default(), &object)
            .await
            .unwrap()
    }

    async fn claim(&self, name: &str, pool: &str) -> DynamicObject {
        self.create(
            "SandboxClaim",
            name,
            json!({"spec": {"warmPoolRef": {"name": pool}}}),
        )
        .await
    }

    /// Polls `kind/name` until `check` accepts it.
    async fn wait_for(&self, kind: &str, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        let api = self.api(kind);
        loop {
            if let Ok(object) = api.get(name).await {
                let value = serde_json::to_value(&object).unwrap();
                if check(&value) {
                    return value;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_gone(&self, kind: &str, name: &str) {
        let api = self.api(kind);
        while api.get_opt(name).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the claim to be Ready and returns (sandbox name, pod IP).
    async fn wait_ready(&self, claim: &str) -> (String, IpAddr) {
        let value = self
            .wait_for("SandboxClaim", claim, |c| {
                ready(c) && c["status"]["sandbox"]["podIPs"][0].is_string()
            })
            .await;
        let name = value["status"]["sandbox"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let ip = value["status"]["sandbox"]["podIPs"][0]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        (name, ip)
    }
}

/// A DynamicObject; `data.metadata.labels` become its labels.
fn dynamic(kind: &str, name: &str, mut data: Value) -> DynamicObject {
    let labels = data
        .as_object_mut()
        .and_then(|m| m.remove("metadata"))
        .and_then(|m| serde_json::from_value(m["labels"].clone()).ok());
    let mut object = DynamicObject::new(name, &resource(kind)).data(data);
    object.metadata.labels = labels;
    object
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn ready(object: &Value) -> bool {
    condition(object, "Ready").is_some_and(|c| c["status"] == "True")
}

fn reason(object: &Value) -> String {
    condition(object, "Ready")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or("")
        .to_string()
}

fn api_status(error: kube::Error) -> kube::core::Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn is_alive(ip: IpAddr, token: Option<&str>) -> reqwest::StatusCode {
    let mut request = reqwest::Client::new()
        .get(format!("http://{ip}:{SANDBOX_PORT}/is_alive"))
        .timeout(Duration::from_secs(5));
    if let Some(token) = token {
        request = request.header("X-API-Key", token);
    }
    request.send().await.unwrap().status()
}

async fn refuses(ip: IpAddr) -> bool {
    tokio::net::TcpStream::connect((ip, SANDBOX_PORT))
        .await
        .is_err()
}

fn template_data(labels: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_round_trips_and_status_errors() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        let templates = env.api("SandboxTemplate");

        // create, then 409 AlreadyExists
        let created = env
            .create("SandboxTemplate", "t-0", template_data(json!({"set": "a"})))
            .await;
        let meta = &created.metadata;
        assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
        assert_eq!(meta.generation, Some(1));
        let rv0: u64 = meta.resource_version.clone().unwrap().parse().unwrap();
        let object = dynamic("SandboxTemplate", "t-0", template_data(json!({})));
        let status = api_status(
            templates
                .create(&PostParams::default(), &object)
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (status.code, status.reason.as_str()),
            (409, "AlreadyExists")
        );
        assert!(
            status.message.contains("\"t-0\" already exists"),
            "{}",
            status.message
        );

        // get; 404 NotFound with details
        let got = templates.get("t-0").await.unwrap();
        assert_eq!(got.metadata.uid, created.metadata.uid);
        let status = api_status(templates.get("missing").await.unwrap_err());
        assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
        assert_eq!(status.details.unwrap().name, "missing");

        // an invalid name: 422
        let bad = dynamic("SandboxTemplate", "Bad_Name", template_data(json!({})));
        assert_eq!(
            api_status(
                templates
                    .create(&PostParams::default(), &bad)
                    .await
                    .unwrap_err()
            )
            .code,
            422
        );

        // list: selectors, paging, a resourceVersion
        for i in 1..7 {
            let set = if i % 2 == 0 { "a" } else { "b" };
            env.create(
                "SandboxTemplate",
                &format!("t-{i}"),
                template_data(json!({"set": set})),
            )
            .await;
        }
        let all = templates.list(&ListParams::default()).await.unwrap();
        assert_eq!(all.items.len(), 7);
        assert!(all
            .metadata
            .resource_version
            .as_deref()
            .is_some_and(|v| !v.is_empty()));
        let count = |lp: ListParams| {
            let templates = templates.clone();
            async move { templates.list(&lp).await.unwrap().items.len() }
        };
        assert_eq!(count(ListParams::default().labels("set=a")).await, 4);
        assert_eq!(count(ListParams::default().labels("set!=a")).await, 3);
        assert_eq!(count(ListParams::default().labels("set in (a,b)")).await, 7);
        assert_eq!(
            count(ListParams::default().labels("set notin (a)")).await,
            3
        );
        assert_eq!(count(ListParams::default().labels("set")).await, 7);
        assert_eq!(count(ListParams::default().labels("!set")).await, 0);
        assert_eq!(
            count(ListParams::default().fields("metadata.name=t-3")).await,
            1
        );
        let status = api_status(
            templates
                .list(&ListParams::default().fields("spec.x=1"))
                .await
                .unwrap_err(),
        );
        assert_eq!(status.code, 400);
        let mut names = Vec::new();
        let mut lp = ListParams::default().limit(3);
        let mut pages = 0;
        loop {
            let page = templates.list(&lp).await.unwrap();
            pages += 1;
            names.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = ListParams::default().limit(3).continue_token(&token),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(names, (0..7).map(|i| format!("t-{i}")).collect::<Vec<_>>());
        // cluster-wide list
        let everywhere: Api<DynamicObject> =
            Api::all_with(env.client.clone(), &resource("SandboxTemplate"));
        assert_eq!(
            everywhere
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            7
        );

        // merge patch: metadata keeps the generation, spec bumps it; status is not writable here
        let patched = templates
            .patch(
                "t-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}, "status": {"no": 1}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.metadata.generation, Some(1));
        assert_eq!(patched.metadata.labels.unwrap()["x"], "y");
        assert!(patched.data.get("status").is_none());
        let rv1: u64 = patched.metadata.resource_version.unwrap().parse().unwrap();
        assert!(rv1 > rv0);
        let patched = templates
            .patch(
                "t-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"envVarsInjectionPolicy": "Allowed"}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.metadata.generation, Some(2));
        assert_eq!(patched.data["spec"]["envVarsInjectionPolicy"], "Allowed");
        // a stale resourceVersion in the patch: 409 Conflict
        let status = api_status(
            templates
                .patch(
                    "t-0",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}})),
                )
                .await
                .unwrap_err(),
        );
        assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
        // JSON patch is not supported: 415
        let raw = reqwest::Client::new()
            .patch(format!(
                "{}/apis/{EXTENSIONS_GROUP}/v1beta1/namespaces/{NS}/sandboxtemplates/t-0",
                env.fake.api_url()
            ))
            .header("Content-Type", "application/json-patch+json")
            .body("[]")
            .send()
            .await
            .unwrap();
        assert_eq!(raw.status(), 415);
        let body: Value = raw.json().await.unwrap();
        assert_eq!(
            (body["kind"].as_str(), body["status"].as_str()),
            (Some("Status"), Some("Failure"))
        );

        // apply: create-or-replace with a field manager
        let applied = json!({
            "apiVersion": format!("{EXTENSIONS_GROUP}/v1beta1"),
            "kind": "SandboxTemplate",
            "metadata": {"name": "applied", "labels": {"m": "1"}},
            "spec": {"podTemplate": {"spec": {"containers": []}}},
        });
        let params = PatchParams::apply("uniagent");
        let first = templates
            .patch("applied", &params, &Patch::Apply(&applied))
            .await
            .unwrap();
        assert_eq!(first.metadata.generation, Some(1));
        let mut changed = applied.clone();
        changed["spec"] = json!({"networkPolicyManagement": "Managed"});
        let second = templates
            .patch("applied", &params, &Patch::Apply(&changed))
            .await
            .unwrap();
        assert_eq!(second.metadata.uid, first.metadata.uid);
        assert_eq!(second.metadata.generation, Some(2));
        assert_eq!(
            second.data["spec"],
            json!({"networkPolicyManagement": "Managed"})
        );
        let same = templates
            .patch("applied", &params, &Patch::Apply(&changed))
            .await
            .unwrap();
        assert_eq!(
            same.metadata.resource_version,
            second.metadata.resource_version
        );

        // replace (PUT) needs the current resourceVersion
        let mut current = templates.get("t-1").await.unwrap();
        current.data["spec"] = json!({"networkPolicyManagement": "Unmanaged"});
        let replaced = templates
            .replace("t-1", &PostParams::default(), &current)
            .await
            .unwrap();
        assert_eq!(replaced.metadata.generation, Some(2));
        let status = api_status(
            templates
                .replace("t-1", &PostParams::default(), &current)
                .await
                .unwrap_err(),
        );
        assert_eq!(status.code, 409);

        // delete: a Status for a custom resource gone at once; 404 after
        let deleted = templates
            .delete("t-1", &DeleteParams::default())
            .await
            .unwrap();
        assert!(deleted.is_right());
        let status = api_status(
            templates
                .delete("t-1", &DeleteParams::default())
                .await
                .unwrap_err(),
        );
        assert_eq!(status.code, 404);
        // a failed precondition: 409
        let dp = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some("other".into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        assert_eq!(
            api_status(templates.delete("t-2", &dp).await.unwrap_err()).code,
            409
        );
        // an unknown resource: 404 Status
        let raw = reqwest::get(format!(
            "{}/apis/{EXTENSIONS_GROUP}/v1beta1/namespaces/{NS}/widgets",
            env.fake.api_url()
        ))
        .await
        .unwrap();
        assert_eq!(raw.status(), 404);
        env.fake.shutdown().await;
    })
    .await;
}

/// The state a watcher builds, and how many (re-)lists it went through.
#[derive(Default)]
struct Mirror {
    objects: BTreeMap<String, Value>,
    staging: BTreeMap<String, Value>,
    inits: usize,
    applies: usize,
    deletes: usize,
    errors: usize,
}

fn spawn_mirror(
    api: Api<DynamicObject>,
    config: watcher::Config,
) -> (Arc<Mutex<Mirror>>, tokio::task::JoinHandle<()>) {
    let mirror = Arc::new(Mutex::new(Mirror::default()));
    let shared = mirror.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let failed = {
                let mut return_error = false;
                let mut m = shared.lock().unwrap();
                match event {
                    Ok(watcher::Event::Init) => {
                        m.inits += 1;
                        m.staging.clear();
                    }
                    Ok(watcher::Event::InitApply(o)) => {
                        let name = o.metadata.name.clone().unwrap();
                        m.staging.insert(name, serde_json::to_value(&o).unwrap());
                    }
                    Ok(watcher::Event::InitDone) => {
                        let staged = std::mem::take(&mut m.staging);
                        m.objects = staged;
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        m.applies += 1;
                        let name = o.metadata.name.clone().unwrap();
                        m.objects.insert(name, serde_json::to_value(&o).unwrap());
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        m.deletes += 1;
                        m.objects.remove(&o.metadata.name.clone().unwrap());
                    }
                    Err(_) => {
                        m.errors += 1;
                        return_error = true;
                    }
                }
                return_error
            };
            if failed {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    (mirror, task)
}

async fn wait_mirror(mirror: &Arc<Mutex<Mirror>>, check: impl Fn(&Mirror) -> bool) {
    loop {
        if check(&mirror.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn names(m: &Mirror) -> Vec<String> {
    m.objects.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_sees_changes_and_survives_dropped_watches_and_compaction() {
    with_deadline(async {
        let env = Env::start(FakeOptions {
            bookmark_interval: Duration::from_millis(100),
            ..FakeOptions::default()
        })
        .await;
        let faults = env.fake.faults();
        let templates = env.api("SandboxTemplate");
        env.create(
            "SandboxTemplate",
            "before",
            template_data(json!({"w": "1"})),
        )
        .await;
        env.create("SandboxTemplate", "other", template_data(json!({"w": "2"})))
            .await;
        let (mirror, task) = spawn_mirror(
            templates.clone(),
            watcher::Config::default().labels("w=1").page_size(1),
        );
        wait_mirror(&mirror, |m| names(m) == ["before"]).await;
        assert_eq!(faults.list_count("sandboxtemplates"), 1);

        // ADDED, MODIFIED, DELETED
        env.create("SandboxTemplate", "a", template_data(json!({"w": "1"})))
            .await;
        wait_mirror(&mirror, |m| m.objects.contains_key("a")).await;
        templates
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"n": "2"}}})),
            )
            .await
            .unwrap();
        wait_mirror(&mirror, |m| {
            m.objects
                .get("a")
                .is_some_and(|a| a["metadata"]["annotations"]["n"] == "2")
        })
        .await;
        templates
            .delete("a", &DeleteParams::default())
            .await
            .unwrap();
        wait_mirror(&mirror, |m| !m.objects.contains_key("a")).await;
        // Leaving the selection is a DELETED event to this watch.
        templates
            .patch(
                "before",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"w": "0"}}})),
            )
            .await
            .unwrap();
        wait_mirror(&mirror, |m| m.objects.is_empty()).await;
        templates
            .patch(
                "before",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"w": "1"}}})),
            )
            .await
            .unwrap();
        wait_mirror(&mirror, |m| names(m) == ["before"]).await;
        {
            let m = mirror.lock().unwrap();
            assert!(
                m.applies >= 3 && m.deletes >= 2,
                "applies {} deletes {}",
                m.applies,
                m.deletes
            );
        }

        // A dropped watch: kube re-watches from its version, no re-list, nothing lost.
        let watches = faults.watch_count("sandboxtemplates");
        faults.drop_watches();
        env.create("SandboxTemplate", "b", template_data(json!({"w": "1"})))
            .await;
        wait_mirror(&mirror, |m| m.objects.contains_key("b")).await;
        assert!(faults.watch_count("sandboxtemplates") > watches);
        assert_eq!(faults.list_count("sandboxtemplates"), 1);

        // The watcher away while history is compacted: its re-watch gets the 410 ERROR event
        // and kube re-lists; changes made meanwhile are in the final state.
        faults.stop_api().await;
        let store = env.fake.store();
        store
            .create(
                Resource::SandboxTemplates,
                NS,
                json!({"metadata": {"name": "c", "labels": {"w": "1"}}, "spec": {}}),
            )
            .unwrap();
        store
            .delete(
                Resource::SandboxTemplates,
                NS,
                "b",
                Propagation::Background,
                None,
                None,
            )
            .unwrap();
        faults.compact_history();
        faults.restart_api().await.unwrap();
        wait_mirror(&mirror, |m| names(m) == ["before", "c"]).await;
        let lists = faults.list_count("sandboxtemplates");
        assert_eq!(
            lists, 3,
            "the first list (one page), then a re-list of two pages of one"
        );
        assert!(mirror.lock().unwrap().inits >= 2);
        task.abort();
        env.fake.shutdown().await;
    })
    .await;
}

/// Reads a raw watch until it ends, returning its lines.
async fn raw_watch(url: String) -> (reqwest::StatusCode, Vec<Value>) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_protocol_bookmarks_timeouts_and_expiry() {
    with_deadline(async {
        let env = Env::start(FakeOptions {
            bookmark_interval: Duration::from_millis(200),
            ..FakeOptions::default()
        })
        .await;
        let base = format!(
            "{}/apis/{EXTENSIONS_GROUP}/v1beta1/namespaces/{NS}/sandboxtemplates",
            env.fake.api_url()
        );
        let first = env
            .create("SandboxTemplate", "w-1", template_data(json!({})))
            .await;
        let rv1 = first.metadata.resource_version.clone().unwrap();
        env.create("SandboxTemplate", "w-2", template_data(json!({})))
            .await;

        // Strictly after the version; closes at timeoutSeconds; bookmarks carry a version.
        let started = Instant::now();
        let (status, lines) = raw_watch(format!(
            "{base}?watch=true&resourceVersion={rv1}&timeoutSeconds=1&allowWatchBookmarks=true"
        ))
        .await;
        let took = started.elapsed();
        assert_eq!(status, 200);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert_eq!(lines[0]["type"], "ADDED");
        assert_eq!(lines[0]["object"]["metadata"]["name"], "w-2");
        let bookmarks: Vec<&Value> = lines.iter().filter(|l| l["type"] == "BOOKMARK").collect();
        assert!(bookmarks.len() >= 3, "{lines:?}");
        assert!(!bookmarks[0]["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .is_empty());
        assert_eq!(lines.iter().filter(|l| l["type"] == "ADDED").count(), 1);

        // `watch=1` and resourceVersion 0: the current objects first.
        let (_, lines) =
            raw_watch(format!("{base}?watch=1&resourceVersion=0&timeoutSeconds=1")).await;
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| l["type"] == "ADDED"));

        // An expired version: HTTP 200, then one ERROR event with a 410 Expired Status.
        env.fake.faults().compact_history();
        let (status, lines) = raw_watch(format!(
            "{base}?watch=true&resourceVersion={rv1}&timeoutSeconds=5"
        ))
        .await;
        assert_eq!(status, 200);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["type"], "ERROR");
        assert_eq!(lines[0]["object"]["kind"], "Status");
        assert_eq!(lines[0]["object"]["code"], 410);
        assert_eq!(lines[0]["object"]["reason"], "Expired");

        // Streaming lists are refused.
        let response = reqwest::get(format!(
            "{base}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        ))
        .await
        .unwrap();
        assert_eq!(response.status(), 422);
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_claim_becomes_ready_and_its_server_checks_tokens() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        env.fake.create_warm_pool(NS, "pool", 2).await.unwrap();
        env.fake
            .wait_pool_ready(NS, "pool", 2, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(env.fake.running_sandboxes(), 2);

        let started = Instant::now();
        env.claim("claim-1", "pool").await;
        let (sandbox, ip) = env.wait_ready("claim-1").await;
        eprintln!("warm claim ready after {:?}", started.elapsed());
        let sandbox_object = env.wait_for("Sandbox", &sandbox, |_| true).await;
        assert_eq!(
            sandbox_object["metadata"]["labels"][LAUNCH_TYPE_LABEL],
            "warm"
        );
        assert_eq!(
            sandbox_object["metadata"]["ownerReferences"][0]["kind"],
            "SandboxClaim"
        );
        assert_eq!(
            condition(&sandbox_object, "PodScheduled").unwrap()["status"],
            "True"
        );
        assert!(ip
            .to_string()
            .starts_with(&format!("127.{}.", env.fake.loopback_octet())));

        // The pod, through the typed API.
        let pod = env.pods().get(&sandbox).await.unwrap();
        let pod_status = pod.status.unwrap();
        assert_eq!(pod_status.phase.as_deref(), Some("Running"));
        assert_eq!(pod_status.pod_ip.as_deref(), Some(ip.to_string().as_str()));

        // The real server, with a token for this sandbox only.
        assert_eq!(is_alive(ip, Some(&env.fake.mint(&sandbox))).await, 200);
        assert_eq!(is_alive(ip, None).await, 401);
        assert_eq!(
            is_alive(ip, Some(&env.fake.mint("another-sandbox"))).await,
            401
        );

        // The pool refills to two unclaimed ready sandboxes.
        env.wait_for("SandboxWarmPool", "pool", |p| {
            p["status"]["readyReplicas"] == 2 && p["status"]["replicas"] == 2
        })
        .await;
        assert_eq!(env.fake.running_sandboxes(), 3);
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_when_the_pool_is_empty() {
    with_deadline(async {
        let env = Env::start(FakeOptions {
            cold_delay: Duration::from_millis(400),
            ..FakeOptions::default()
        })
        .await;
        env.fake.create_warm_pool(NS, "empty", 0).await.unwrap();
        let started = Instant::now();
        env.claim("cold-1", "empty").await;
        let (sandbox, ip) = env.wait_ready("cold-1").await;
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(sandbox, "cold-1", "a cold sandbox is named after its claim");
        let object = env.wait_for("Sandbox", &sandbox, |_| true).await;
        assert_eq!(object["metadata"]["labels"][LAUNCH_TYPE_LABEL], "cold");
        assert_eq!(is_alive(ip, Some(&env.fake.mint(&sandbox))).await, 200);
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_delete_waits_for_the_process_to_die() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        env.fake.create_warm_pool(NS, "pool", 1).await.unwrap();
        env.claim("fg", "pool").await;
        let (sandbox, ip) = env.wait_ready("fg").await;
        assert_eq!(is_alive(ip, Some(&env.fake.mint(&sandbox))).await, 200);

        let claims = env.api("SandboxClaim");
        let pending = claims
            .delete("fg", &DeleteParams::foreground())
            .await
            .unwrap();
        let object = pending
            .left()
            .expect("a foreground delete returns the object");
        assert!(object.metadata.deletion_timestamp.is_some());
        assert!(object
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string()));
        env.wait_gone("SandboxClaim", "fg").await;
        // By the time the claim is gone, so are its Sandbox, its pod and its process.
        assert!(env
            .api("Sandbox")
            .get_opt(&sandbox)
            .await
            .unwrap()
            .is_none());
        assert!(env.pods().get_opt(&sandbox).await.unwrap().is_none());
        assert!(refuses(ip).await, "the sandbox still accepts connections");

        // A background delete: the claim goes at once, the process soon after.
        env.wait_for("SandboxWarmPool", "pool", |p| {
            p["status"]["readyReplicas"] == 1
        })
        .await;
        env.claim("bg", "pool").await;
        let (_, ip) = env.wait_ready("bg").await;
        assert!(claims
            .delete("bg", &DeleteParams::background())
            .await
            .unwrap()
            .is_right());
        while !refuses(ip).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_time_expires_claims() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        env.fake.create_warm_pool(NS, "pool", 2).await.unwrap();
        let soon = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(2);
        let soon = k8s_openapi::jiff::Timestamp::from_second(soon.as_second() + 1).unwrap().to_string();
        env.create("SandboxClaim", "expire-delete", json!({"spec": {"warmPoolRef": {"name": "pool"}, "lifecycle": {"shutdownTime": soon, "shutdownPolicy": "DeleteForeground"}}})).await;
        env.create("SandboxClaim", "expire-retain", json!({"spec": {"warmPoolRef": {"name": "pool"}, "lifecycle": {"shutdownTime": soon}}})).await;
        let (_, ip_delete) = env.wait_ready("expire-delete").await;
        let (retained_sandbox, ip_retain) = env.wait_ready("expire-retain").await;
        env.wait_gone("SandboxClaim", "expire-delete").await;
        assert!(refuses(ip_delete).await);
        let retained = env.wait_for("SandboxClaim", "expire-retain", |c| reason(c) == "ClaimExpired").await;
        assert!(!ready(&retained));
        env.wait_gone("Sandbox", &retained_sandbox).await;
        while !refuses(ip_retain).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_reasons_and_finished() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        env.claim("no-pool", "missing").await;
        env.wait_for("SandboxClaim", "no-pool", |c| reason(c) == "WarmPoolNotFound").await;
        env.create("SandboxWarmPool", "orphan-pool", json!({"spec": {"replicas": 1, "sandboxTemplateRef": {"name": "nope"}}})).await;
        env.claim("no-template", "orphan-pool").await;
        env.wait_for("SandboxClaim", "no-template", |c| reason(c) == "TemplateNotFound").await;

        // The process dies: Finished, not Ready.
        env.fake.create_warm_pool(NS, "pool", 1).await.unwrap();
        env.claim("dies", "pool").await;
        let (sandbox, ip) = env.wait_ready("dies").await;
        let token = env.fake.mint(&sandbox);
        // Kill the server through its own shell.
        let _ = reqwest::Client::new()
            .post(format!("http://{ip}:{SANDBOX_PORT}/execute"))
            .header("X-API-Key", &token)
            .json(&json!({"command": "kill -9 $PPID; kill -9 $(pgrep -f 'sandbox-name dies' | head -1)", "shell": true, "timeout": 5}))
            .send()
            .await;
        let finished = env
            .wait_for("SandboxClaim", "dies", |c| condition(c, "Finished").is_some_and(|f| f["status"] == "True"))
            .await;
        assert!(!ready(&finished));
        env.fake.shutdown().await;
    })
    .await;
}

/// An upstream on `ip:0` answering every request with what it received.
async fn echo_server(ip: IpAddr) -> u16 {
    use axum::extract::Request;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(|request: Request| async move {
        let headers: BTreeMap<String, String> = request
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let path = request.uri().to_string();
        let body = axum::body::to_bytes(request.into_body(), usize::MAX)
            .await
            .unwrap();
        axum::Json(json!({"headers": headers, "path": path, "body_len": body.len()}))
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_forwards_and_checks_headers() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        env.fake.create_warm_pool(NS, "pool", 1).await.unwrap();
        env.claim("routed", "pool").await;
        let (sandbox, ip) = env.wait_ready("routed").await;
        let router = env.fake.router_url();
        let http = reqwest::Client::new();
        let token = env.fake.mint(&sandbox);

        // To the sandbox server, through the router.
        let response = http
            .get(format!("{router}/is_alive"))
            .header("X-Sandbox-ID", &sandbox)
            .header("X-Sandbox-Namespace", NS)
            .header("X-Sandbox-Port", "8000")
            .header("X-API-Key", &token)
            .header("Authorization", "Bearer router-token")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.json::<Value>().await.unwrap()["is_alive"], true);

        // Headers and bodies as an upstream sees them: no Authorization, API key kept, 4 MiB
        // streamed up, the path and query verbatim.
        let port = echo_server(ip).await;
        let body = vec![b'x'; 4 << 20];
        let echoed: Value = http
            .post(format!("{router}/some/path?a=1"))
            .header("X-Sandbox-ID", &sandbox)
            .header("X-Sandbox-Namespace", NS)
            .header("X-Sandbox-Port", port.to_string())
            .header("X-API-Key", "kept")
            .header("Authorization", "Bearer router-token")
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(echoed["body_len"], 4 << 20);
        assert_eq!(echoed["path"], "/some/path?a=1");
        assert!(echoed["headers"].get("authorization").is_none());
        assert_eq!(echoed["headers"]["x-api-key"], "kept");

        // Bad headers: 400 with the real router's details.
        let cases: [(&[(&str, &str)], &str); 7] = [
            (&[], "X-Sandbox-ID header is required."),
            (&[("X-Sandbox-ID", "Bad_ID")], "Invalid sandbox ID format."),
            (
                &[("X-Sandbox-ID", "ok"), ("X-Sandbox-Namespace", "a.b")],
                "Invalid namespace format.",
            ),
            (
                &[("X-Sandbox-ID", "ok"), ("X-Sandbox-Port", "x")],
                "Invalid port format.",
            ),
            (
                &[("X-Sandbox-ID", "ok"), ("X-Sandbox-Port", "0")],
                "Invalid port format.",
            ),
            (
                &[("X-Sandbox-ID", "ok"), ("X-Sandbox-Port", "70000")],
                "Invalid port format.",
            ),
            (
                &[("X-Sandbox-ID", "ok"), ("X-Sandbox-Pod-IP", "127.0.0.1")],
                "Invalid target IP address.",
            ),
        ];
        for (headers, detail) in cases {
            let mut request = http.get(format!("{router}/is_alive"));
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 400, "{headers:?}");
            assert_eq!(response.json::<Value>().await.unwrap()["detail"], detail);
        }

        // Unknown sandbox, and a known one with nothing on the port: 502 (after dial retries).
        let response = http
            .get(format!("{router}/is_alive"))
            .header("X-Sandbox-ID", "nobody")
            .header("X-Sandbox-Namespace", NS)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 502);
        let started = Instant::now();
        let response = http
            .get(format!("{router}/is_alive"))
            .header("X-Sandbox-ID", &sandbox)
            .header("X-Sandbox-Namespace", NS)
            .header("X-Sandbox-Port", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 502);
        assert!(
            started.elapsed() >= Duration::from_millis(1000),
            "retried: {:?}",
            started.elapsed()
        );
        assert_eq!(
            response.json::<Value>().await.unwrap()["detail"],
            format!("Could not connect to the backend sandbox: {sandbox}")
        );
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_faults_and_counters() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        let faults = env.fake.faults();
        let claims = env.api("SandboxClaim");
        let claim = |name: &str| {
            DynamicObject::new(name, &resource("SandboxClaim"))
                .data(json!({"spec": {"warmPoolRef": {"name": "p"}}}))
        };

        faults.fail_next(2, 500);
        for _ in 0..2 {
            let status = api_status(
                claims
                    .create(&PostParams::default(), &claim("f"))
                    .await
                    .unwrap_err(),
            );
            assert_eq!(
                (status.code, status.reason.as_str()),
                (500, "InternalError")
            );
        }
        claims
            .create(&PostParams::default(), &claim("f"))
            .await
            .unwrap();

        faults.fail_next(1, 429);
        let raw = reqwest::get(format!(
            "{}/apis/{EXTENSIONS_GROUP}/v1beta1/namespaces/{NS}/sandboxclaims",
            env.fake.api_url()
        ))
        .await
        .unwrap();
        assert_eq!(raw.status(), 429);
        assert_eq!(raw.headers()["retry-after"], "1");
        assert_eq!(
            raw.json::<Value>().await.unwrap()["reason"],
            "TooManyRequests"
        );

        faults.forbid("create", "sandboxclaims", Forbidden::Quota);
        let status = api_status(
            claims
                .create(&PostParams::default(), &claim("q"))
                .await
                .unwrap_err(),
        );
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        assert!(
            status.message.contains("exceeded quota"),
            "{}",
            status.message
        );
        claims.get("f").await.unwrap(); // other verbs pass
        faults.forbid("get", "pods", Forbidden::Rbac);
        let status = api_status(env.pods().get("x").await.unwrap_err());
        assert_eq!(status.code, 403);
        assert!(
            status.message.contains("forbidden")
                && status.message.contains("cannot get resource \"pods\""),
            "{}",
            status.message
        );
        faults.clear_request_faults();
        claims
            .create(&PostParams::default(), &claim("q"))
            .await
            .unwrap();

        let _ = claims.list(&ListParams::default()).await.unwrap();
        let seen = faults.requests_seen();
        for pair in [
            ("create", "sandboxclaims"),
            ("get", "sandboxclaims"),
            ("list", "sandboxclaims"),
            ("get", "pods"),
        ] {
            assert!(
                seen.contains(&(pair.0.to_string(), pair.1.to_string())),
                "{pair:?} in {seen:?}"
            );
        }
        assert_eq!(faults.list_count("sandboxclaims"), 2);
        assert_eq!(faults.watch_count("sandboxclaims"), 0);

        // The same through /_fake/*.
        let http = reqwest::Client::new();
        let api = env.fake.api_url();
        http.post(format!(
            "{api}/_fake/forbid?verb=delete&resource=sandboxclaims&kind=rbac"
        ))
        .send()
        .await
        .unwrap();
        assert_eq!(
            api_status(
                claims
                    .delete("q", &DeleteParams::default())
                    .await
                    .unwrap_err()
            )
            .code,
            403
        );
        http.post(format!("{api}/_fake/clear"))
            .send()
            .await
            .unwrap();
        claims.delete("q", &DeleteParams::default()).await.unwrap();
        let counters: Value = http
            .get(format!("{api}/_fake/counters"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(counters["lists"]["sandboxclaims"], 2);
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_faults_show_on_pods_sandboxes_and_claims() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        let faults = env.fake.faults();
        env.fake.create_warm_pool(NS, "empty", 0).await.unwrap();

        faults.set_sandbox_fault(SandboxFault::ImagePull);
        env.claim("pull", "empty").await;
        let pod = loop {
            if let Some(pod) = env.pods().get_opt("pull").await.unwrap() {
                let waiting = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c[0].state.as_ref())
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone());
                if waiting.is_some() {
                    break pod;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let waiting = status.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
        let claim = env
            .wait_for("SandboxClaim", "pull", |c| condition(c, "Ready").is_some())
            .await;
        assert!(!ready(&claim));

        faults.set_sandbox_fault(SandboxFault::Unschedulable);
        env.claim("unsched", "empty").await;
        // Before the pod reports, the condition is already False with `PodSchedulingUnknown`.
        let sandbox = env
            .wait_for("Sandbox", "unsched", |s| {
                condition(s, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable")
            })
            .await;
        assert_eq!(
            condition(&sandbox, "PodScheduled").unwrap()["status"],
            "False"
        );
        assert!(!ready(&sandbox));

        faults.set_sandbox_fault(SandboxFault::None);
        assert_eq!(env.fake.running_sandboxes(), 0);
        env.fake.create_warm_pool(NS, "pool", 1).await.unwrap();
        env.fake
            .wait_pool_ready(NS, "pool", 1, Duration::from_secs(30))
            .await
            .unwrap();
        faults.set_claims_never_ready(true);
        env.claim("never", "pool").await;
        let claim = env
            .wait_for("SandboxClaim", "never", |c| {
                c["status"]["sandbox"]["name"].is_string()
            })
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let claim_now =
            serde_json::to_value(env.api("SandboxClaim").get("never").await.unwrap()).unwrap();
        assert!(!ready(&claim) && !ready(&claim_now));
        assert_eq!(reason(&claim_now), "SandboxNotReady");
        faults.set_claims_never_ready(false);
        env.wait_ready("never").await;
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_restart_and_controller_stop_keep_the_store() {
    with_deadline(async {
        let env = Env::start(FakeOptions::default()).await;
        let faults = env.fake.faults();
        let created = env
            .create("SandboxTemplate", "kept", template_data(json!({})))
            .await;
        let (mirror, task) = spawn_mirror(env.api("SandboxTemplate"), watcher::Config::default());
        wait_mirror(&mirror, |m| names(m) == ["kept"]).await;

        faults.stop_api().await;
        assert!(!faults.api_running());
        assert!(env.api("SandboxTemplate").get("kept").await.is_err());
        faults.restart_api().await.unwrap();
        let again = env.api("SandboxTemplate").get("kept").await.unwrap();
        assert_eq!(
            again.metadata.resource_version,
            created.metadata.resource_version
        );
        env.create("SandboxTemplate", "after", template_data(json!({})))
            .await;
        wait_mirror(&mirror, |m| names(m) == ["after", "kept"]).await;
        task.abort();

        // A stopped controller binds nothing; started again it catches up.
        env.fake.create_warm_pool(NS, "pool", 1).await.unwrap();
        env.fake
            .wait_pool_ready(NS, "pool", 1, Duration::from_secs(30))
            .await
            .unwrap();
        faults.stop_controller();
        assert!(!faults.controller_running());
        env.claim("waits", "pool").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let claim =
            serde_json::to_value(env.api("SandboxClaim").get("waits").await.unwrap()).unwrap();
        assert!(claim["status"].is_null() || !ready(&claim));
        assert_eq!(env.fake.running_sandboxes(), 1);
        faults.start_controller();
        env.wait_ready("waits").await;
        env.fake.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_and_exits_on_sigterm() {
    with_deadline(async {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_uniagent-k8s-fake"))
            .args([
                "--warm-pool",
                &format!("{NS}/pool=1"),
                "--cold-delay-ms",
                "100",
            ])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let api = lines.next_line().await.unwrap().unwrap();
        let router = lines.next_line().await.unwrap().unwrap();
        let key = lines.next_line().await.unwrap().unwrap();
        let api = api.strip_prefix("listening on ").unwrap().to_string();
        assert!(router.starts_with("router on http://"), "{router}");
        let key_file = key.strip_prefix("signing key file ").unwrap();
        let minter = uniagent_sandboxes::signed_token::Minter::from_seed_base64(
            &std::fs::read_to_string(key_file).unwrap(),
        )
        .unwrap();

        let client = kube::Client::try_from(kube::Config::new(api.parse().unwrap())).unwrap();
        let claims: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NS, &resource("SandboxClaim"));
        let object = DynamicObject::new("bin", &resource("SandboxClaim"))
            .data(json!({"spec": {"warmPoolRef": {"name": "pool"}}}));
        claims
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let (name, ip) = loop {
            let claim = serde_json::to_value(claims.get("bin").await.unwrap()).unwrap();
            if ready(&claim) {
                let ip: IpAddr = claim["status"]["sandbox"]["podIPs"][0]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                break (
                    claim["status"]["sandbox"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    ip,
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let token = minter.mint(&name, 4_102_444_800, "fake");
        assert_eq!(is_alive(ip, Some(&token)).await, 200);

        let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(0));
        assert!(refuses(ip).await, "a sandbox outlived the fake");
    })
    .await;
}
