//! The metrics endpoint end to end, with the real Prometheus server (Debian's `prometheus`,
//! installed by scripts/setup/62-prometheus.sh): it scrapes a live `uniagent run` on
//! file-lookup tasks (and, with libtorch, a gateway session), and its HTTP API must give the
//! numbers `summary.json` gives. When `UNIAGENT_PROMETHEUS` is set (the suite sets it) a
//! missing binary fails the test; otherwise it is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{file_reader, stderr, write, ChatServer};
use serde_json::Value;

/// The Prometheus binary, or `None` to skip (only when the suite did not ask for it).
fn prometheus_binary() -> Option<PathBuf> {
    match std::env::var_os("UNIAGENT_PROMETHEUS") {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "UNIAGENT_PROMETHEUS={} is not a file: run scripts/setup/62-prometheus.sh",
                path.display()
            );
            Some(path)
        }
        None => {
            eprintln!("skipped: UNIAGENT_PROMETHEUS is not set");
            None
        }
    }
}

/// A port nobody listens on now (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server scraping `targets` every second; killed on drop.
struct Prometheus {
    child: Child,
    base: String,
}

impl Prometheus {
    fn start(binary: &Path, dir: &Path, targets: &[(&str, u16)]) -> Self {
        let jobs: String = targets
            .iter()
            .map(|(job, port)| {
                format!(
                    "  - job_name: {job}\n    static_configs:\n      - targets: [\"127.0.0.1:{port}\"]\n"
                )
            })
            .collect();
        let config = write(
            dir,
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:{}\n{jobs}",
                if jobs.is_empty() { " []" } else { "" }
            ),
        );
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let prometheus = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let ready = poll(Duration::from_secs(60), || {
            let r = reqwest::blocking::get(format!("{}/-/ready", prometheus.base)).ok()?;
            r.status().is_success().then_some(())
        });
        assert!(
            ready.is_some(),
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        prometheus
    }

    /// The instant vector of `query` as `(labels, value)` pairs.
    fn query(&self, query: &str) -> Vec<(Value, f64)> {
        let body: Value = reqwest::blocking::Client::new()
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", query)])
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(body["status"], "success", "{query}: {body}");
        body["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// Waits until `query` gives `want` (scrapes land every second), or fails with what it gave.
    fn expect(&self, query: &str, want: &[(Value, f64)]) {
        let mut last = Vec::new();
        let found = poll(Duration::from_secs(30), || {
            last = self.query(query);
            last.sort_by_key(|a| a.0.to_string());
            (last == want).then_some(())
        });
        assert!(found.is_some(), "{query}: want {want:?}, got {last:?}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn poll<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Five file-lookup tasks × 2 samples, slowly enough (see the model) that the run is scraped
/// while it works.
fn run_config(url: &str) -> String {
    format!(
        "tasks:\n  generate: {{count: 5, seed: 11}}\n\
environment:\n  type: file-lookup\n  sandbox:\n    type: host\n\
model:\n  type: openai\n  http: {{endpoints: [\"{url}\"], model: replay, timeout: 30}}\n\
loop:\n  max_turns: 4\n\
runner:\n  samples_per_task: 2\n  max_concurrent_rollouts: 4\n"
    )
}

#[test]
fn prometheus_scrapes_a_live_run_and_agrees_with_its_summary() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every other final answer is wrong: half the rollouts fail, whichever they are.
    let reader = file_reader(Duration::from_millis(300));
    let finals = std::sync::atomic::AtomicUsize::new(0);
    let responder: common::Responder = std::sync::Arc::new(move |body: &Value| {
        let mut answer = reader(body);
        let call = &mut answer["tool_calls"][0]["function"];
        if call["name"] == "finish" && finals.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            call["arguments"] = Value::String("{\"answer\": \"wrong\"}".into());
        }
        answer
    });
    let server = rt.block_on(ChatServer::start(responder));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "run.yaml", &run_config(&server.base_url));
    let metrics_port = free_port();
    let prometheus = Prometheus::start(&binary, dir.path(), &[("uniagent-run", metrics_port)]);

    let out = common::run_in(
        dir.path(),
        &[
            "run",
            "run.yaml",
            "--out",
            "out",
            "--quiet",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
            "--metrics-linger",
            "4",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "metrics on http://127.0.0.1:{metrics_port}/metrics"
        )),
        "{}",
        stderr(&out)
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["rollouts"], 10, "{summary}");

    // Finished rollouts by exit reason: exactly the summary's counts.
    let by_reason: Vec<(Value, f64)> = summary["exit_reasons"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(reason, n)| {
            (
                serde_json::json!({"exit_reason": reason}),
                n.as_f64().unwrap(),
            )
        })
        .collect();
    prometheus.expect(
        "sum by (exit_reason) (last_over_time(uniagent_rollouts_finished_total{job=\"uniagent-run\",environment=\"file-lookup\",phase=\"run\"}[5m]))",
        &by_reason,
    );
    // The strict success rate, computed by Prometheus, equals the summary's.
    let rate = summary["success_rate"].as_f64().unwrap();
    assert!(rate > 0.0 && rate < 1.0, "{summary}");
    prometheus.expect(
        "sum(last_over_time(uniagent_rollouts_finished_total{success=\"true\"}[5m])) / sum(last_over_time(uniagent_rollouts_finished_total[5m]))",
        &[(serde_json::json!({}), rate)],
    );
    // Every rollout had a host sandbox, started and stopped; two tool calls each.
    prometheus.expect(
        "sum(last_over_time(uniagent_sandbox_starts_total{backend=\"host\"}[5m]))",
        &[(serde_json::json!({}), 10.0)],
    );
    prometheus.expect(
        "sum(last_over_time(uniagent_sandboxes_live[5m]))",
        &[(serde_json::json!({}), 0.0)],
    );
    prometheus.expect(
        "sum by (tool) (last_over_time(uniagent_tool_calls_total{outcome=\"ok\"}[5m]))",
        &[
            (serde_json::json!({"tool": "execute_bash"}), 10.0),
            (serde_json::json!({"tool": "finish"}), 10.0),
        ],
    );
    // The process collector is there too.
    assert!(!prometheus
        .query("last_over_time(process_resident_memory_bytes{job=\"uniagent-run\"}[5m])")
        .is_empty());
}

#[cfg(feature = "tch")]
#[test]
fn prometheus_scrapes_a_gateway_session() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let model = tempfile::tempdir().unwrap();
    common::link_tiny_qwen2(model.path());
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let prometheus = Prometheus::start(&binary, dir.path(), &[("gateway", metrics_port)]);
    let (mut child, base) = common::spawn_listening(&[
        "gateway".as_ref(),
        "--port".as_ref(),
        "0".as_ref(),
        "--model-dir".as_ref(),
        model.path().as_os_str(),
        "--metrics-addr".as_ref(),
        format!("127.0.0.1:{metrics_port}").as_ref(),
    ]);
    let client = reqwest::blocking::Client::new();
    for _ in 0..2 {
        let answer: Value = client
            .post(format!("{base}/sessions/s1/v1/chat/completions"))
            .json(
                &serde_json::json!({"model": "m", "max_tokens": 3, "temperature": 0,
                "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(answer["usage"]["completion_tokens"], 3, "{answer}");
    }
    prometheus.expect(
        "uniagent_gateway_sessions_open{job=\"gateway\"}",
        &[(
            serde_json::json!({"__name__": "uniagent_gateway_sessions_open", "instance": format!("127.0.0.1:{metrics_port}"), "job": "gateway"}),
            1.0,
        )],
    );
    let ended = client
        .post(format!("{base}/sessions/s1/end"))
        .send()
        .unwrap();
    assert_eq!(ended.status(), 200);
    prometheus.expect(
        "sum by (route, status) (uniagent_gateway_requests_total{job=\"gateway\"})",
        &[
            (
                serde_json::json!({"route": "/sessions/{session}/end", "status": "200"}),
                1.0,
            ),
            (
                serde_json::json!({"route": "/sessions/{session}/v1/chat/completions", "status": "200"}),
                2.0,
            ),
        ],
    );
    prometheus.expect(
        "sum(uniagent_gateway_sessions_open{job=\"gateway\"})",
        &[(serde_json::json!({}), 0.0)],
    );
    // Generation took part of each model request; the rest is the gateway's own overhead.
    let generated =
        prometheus.query("sum(uniagent_gateway_generate_seconds_count{job=\"gateway\"})");
    assert_eq!(generated[0].1, 2.0, "{generated:?}");
    let first_tokens = prometheus.query(
        "sum(uniagent_model_time_to_first_token_seconds_count{job=\"gateway\",backend=\"tch\"})",
    );
    assert_eq!(first_tokens[0].1, 2.0, "{first_tokens:?}");
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(any(feature = "tch", feature = "parquet"))]
/// The crates' metric catalogues: the loop's, the servers', the gateway's, the trainer's.
fn catalogues() -> Vec<&'static [uniagent_core::telemetry::MetricDef]> {
    vec![
        uniagent_core::telemetry::CATALOGUE,
        uniagent_sandboxes::telemetry::CATALOGUE,
        uniagent_gateway::telemetry::CATALOGUE,
        uniagent_cli::serve::telemetry::CATALOGUE,
        uniagent_train::telemetry::CATALOGUE,
    ]
}

#[cfg(any(feature = "tch", feature = "parquet"))]
/// Every metric name a uniagent process can export (the crates' catalogues, the process
/// collector's), with the series names a histogram adds.
fn exported_names() -> std::collections::BTreeSet<String> {
    use uniagent_core::telemetry::MetricKind;
    let mut names: std::collections::BTreeSet<String> = uniagent_metrics::PROCESS_METRICS
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    for def in catalogues().into_iter().flatten() {
        names.insert(def.name.to_owned());
        if def.kind == MetricKind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{}{suffix}", def.name));
            }
        }
    }
    names
}

#[cfg(any(feature = "tch", feature = "parquet"))]
/// The metric names an expression reads (identifiers starting `uniagent_` or `process_`).
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            if word.starts_with("uniagent_") || word.starts_with("process_") {
                out.push(word.clone());
            }
            word.clear();
        }
    }
    out
}

// The trainer's catalogue comes with uniagent-train (`tch` or `parquet`).
#[cfg(any(feature = "tch", feature = "parquet"))]
#[test]
fn the_grafana_dashboard_is_valid_and_reads_only_exported_metrics() {
    let path = common::repo_root().join("deploy/grafana/uniagent.json");
    let dashboard: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for key in ["title", "uid"] {
        assert!(dashboard[key].is_string(), "{key}");
    }
    assert!(dashboard["schemaVersion"].is_u64());
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "job"]);
    let exported = exported_names();
    let mut used = std::collections::BTreeSet::new();
    let mut exprs = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    let mut cells = std::collections::BTreeSet::new();
    let mut rows = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate id {panel}"
        );
        let g = &panel["gridPos"];
        let (h, w, x, y) = (
            g["h"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
        );
        assert!(x + w <= 24 && h > 0 && w > 0, "{panel}");
        // No two panels overlap on Grafana's 24-column grid.
        for dy in 0..h {
            for dx in 0..w {
                assert!(cells.insert((x + dx, y + dy)), "overlap at {panel}");
            }
        }
        match panel["type"].as_str().unwrap() {
            "row" => rows.push(panel["title"].as_str().unwrap().to_owned()),
            "timeseries" => {
                let targets = panel["targets"].as_array().unwrap();
                assert!(!targets.is_empty(), "{panel}");
                let mut ref_ids = std::collections::BTreeSet::new();
                for t in targets {
                    assert!(ref_ids.insert(t["refId"].as_str().unwrap()), "{panel}");
                    assert_eq!(t["datasource"]["uid"], "${datasource}");
                    let expr = t["expr"].as_str().unwrap();
                    let names = names_in(expr);
                    assert!(!names.is_empty(), "{expr}");
                    for name in names {
                        assert!(
                            exported.contains(&name),
                            "`{name}` in `{expr}` is not exported"
                        );
                        used.insert(name);
                    }
                    exprs.push(expr.to_owned());
                }
            }
            other => panic!("unexpected panel type {other}"),
        }
    }
    assert_eq!(
        rows,
        [
            "Runs",
            "Sandboxes",
            "Model",
            "Trainer",
            "Gateway",
            "Rollout service",
            "Process"
        ]
    );
    // Every metric of the loop, the servers, the gateway and the trainer has a panel.
    for def in catalogues().into_iter().flatten() {
        let shown = used
            .iter()
            .any(|u| u == def.name || u.strip_prefix(def.name).is_some_and(|s| s.starts_with('_')));
        assert!(shown, "{} has no panel", def.name);
    }
    // And every expression is PromQL the real Prometheus parses.
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(&binary, dir.path(), &[]);
    for expr in exprs {
        let concrete = expr.replace("$__rate_interval", "1m").replace("$job", ".*");
        prometheus.query(&concrete);
    }
}
