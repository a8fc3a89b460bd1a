//! The endpoint serves what the runner and the loop emit: a scripted run with known outcomes
//! gives exact counts on a real HTTP scrape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use uniagent_core::agent::{AgentInteraction, CancellationToken, LoopConfig};
use uniagent_core::runner::{Runner, RunnerConfig};
use uniagent_core::telemetry::RunLabels;
use uniagent_core::testing::{RecordingTool, ScriptedChatModel, ScriptedDeployment, ScriptedTurn};
use uniagent_core::{
    Deployment, EpisodeSignal, Error, Message, Result, RewardContext, RewardOutcome, RewardSpec,
    Task, ToolCall, ToolOutput,
};
use uniagent_metrics::{parse_exposition, Exporter, MetricsError, CORE_CATALOGUE};

/// Solved when the task id is `t0` or `t1`: half of four tasks.
#[derive(Debug)]
struct FirstTwo;

#[async_trait]
impl RewardSpec for FirstTwo {
    fn name(&self) -> &str {
        "first_two"
    }
    async fn score(&self, ctx: &RewardContext<'_>) -> Result<RewardOutcome> {
        Ok(RewardOutcome::binary(matches!(
            ctx.task.id.as_str(),
            "t0" | "t1"
        )))
    }
}

fn reply(id: &str, name: &str, args: serde_json::Value) -> ScriptedTurn {
    ScriptedTurn::Reply(Message::assistant_with_calls(
        None,
        vec![ToolCall::new(id, name, args)],
    ))
}

fn agent() -> AgentInteraction {
    let model = ScriptedChatModel::new(vec![
        reply("c0", "echo", json!({"text": "hi"})),
        reply("c1", "finish", json!({"answer": "x"})),
    ])
    .without_recording();
    let echo = RecordingTool::new("echo", |args| {
        Ok(ToolOutput::success(args["text"].as_str().unwrap_or("")))
    });
    let finish = RecordingTool::new("finish", |_| {
        Ok(ToolOutput::success("done").with_signal(EpisodeSignal::Finish { answer: "x".into() }))
    });
    AgentInteraction::new(
        Arc::new(model),
        vec![Arc::new(echo), Arc::new(finish)],
        LoopConfig::default(),
    )
    .unwrap()
    .with_reward(Arc::new(FirstTwo))
}

/// One scraped series: its name and labels.
fn split(series: &str) -> (String, BTreeMap<String, String>) {
    let Some((name, rest)) = series.split_once('{') else {
        return (series.to_owned(), BTreeMap::new());
    };
    let labels = rest
        .trim_end_matches('}')
        .split("\",")
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.trim_matches('"').to_owned())
        })
        .collect();
    (name.to_owned(), labels)
}

/// The sum of every series named `name` whose labels include `want`.
fn value(scrape: &[(String, f64)], name: &str, want: &[(&str, &str)]) -> f64 {
    scrape
        .iter()
        .filter(|(series, _)| {
            let (n, labels) = split(series);
            n == name
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(url: &str) -> (String, Vec<(String, f64)>) {
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.unwrap();
    let parsed = parse_exposition(&text);
    (text, parsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_gives_exact_counts_on_a_real_scrape() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let exporter = Exporter::start("127.0.0.1:0", &[CORE_CATALOGUE])
            .await
            .unwrap();
        let labels = RunLabels::new("metrics-test", "eval");
        let runner = Runner::new(
            agent(),
            RunnerConfig {
                samples_per_task: 2,
                ..RunnerConfig::default()
            },
        )
        .unwrap()
        .with_labels(labels.clone())
        .with_sandboxes(|_: &Task| Ok(Box::new(ScriptedDeployment::new()) as Box<dyn Deployment>));
        let tasks: Vec<Task> = (0..4)
            .map(|i| Task::new(format!("t{i}"), vec![Message::user("go")]))
            .collect();
        let mut out = Vec::new();
        let summary = runner
            .run(tasks, &CancellationToken::new(), &mut out)
            .await
            .unwrap();
        assert_eq!(out.len(), 8);

        let (text, s) = scrape(&exporter.url()).await;
        let env = [("environment", "metrics-test"), ("phase", "eval")];
        assert_eq!(value(&s, "uniagent_rollouts_started_total", &env), 8.0);
        let ok = [
            env[0],
            env[1],
            ("exit_reason", "finished"),
            ("success", "true"),
        ];
        assert_eq!(value(&s, "uniagent_rollouts_finished_total", &ok), 4.0);
        let failed = [
            env[0],
            env[1],
            ("exit_reason", "finished"),
            ("success", "false"),
        ];
        assert_eq!(value(&s, "uniagent_rollouts_finished_total", &failed), 4.0);
        // The summary and the metrics agree on the success rate.
        let solved = value(&s, "uniagent_rollouts_finished_total", &ok);
        let all = value(&s, "uniagent_rollouts_finished_total", &env);
        assert_eq!(solved / all, summary.success_rate);
        assert_eq!(value(&s, "uniagent_rollouts_in_flight", &env), 0.0);
        assert_eq!(
            value(&s, "uniagent_rollout_duration_seconds_count", &env),
            8.0
        );
        let scripted = [("backend", "scripted")];
        assert_eq!(value(&s, "uniagent_sandbox_starts_total", &scripted), 8.0);
        assert_eq!(value(&s, "uniagent_sandboxes_live", &scripted), 0.0);
        assert_eq!(
            value(&s, "uniagent_sandbox_start_seconds_count", &scripted),
            8.0
        );
        for tool in ["echo", "finish"] {
            let calls = [("tool", tool), ("outcome", "ok")];
            assert_eq!(
                value(&s, "uniagent_tool_calls_total", &calls),
                8.0,
                "{tool}"
            );
            let timed = [("tool", tool)];
            assert_eq!(value(&s, "uniagent_tool_call_seconds_count", &timed), 8.0);
        }
        let reward = [("reward", "first_two")];
        assert_eq!(value(&s, "uniagent_reward_seconds_count", &reward), 8.0);
        // Two queries per rollout, each a model request that went well.
        assert_eq!(value(&s, "uniagent_model_request_seconds_count", &[]), 16.0);
        assert!(value(&s, "uniagent_model_requests_total", &[("outcome", "ok")]) >= 16.0);
        // Histograms come with buckets; help texts and the process collector are there.
        assert!(
            text.contains("uniagent_rollout_duration_seconds_bucket{"),
            "{text}"
        );
        assert!(
            text.contains("# HELP uniagent_rollouts_finished_total"),
            "{text}"
        );
        assert!(
            value(&s, "process_resident_memory_bytes", &[]) > 0.0,
            "{text}"
        );
        exporter.finish(Duration::ZERO).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_and_tool_failures_are_counted_by_class() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let exporter = Exporter::start("127.0.0.1:0", &[CORE_CATALOGUE])
            .await
            .unwrap();
        let runner = Runner::new(agent(), RunnerConfig::default())
            .unwrap()
            .with_labels(RunLabels::new("metrics-failures", "eval"))
            .with_sandboxes(|_: &Task| -> Result<Box<dyn Deployment>> {
                Err(Error::internal("no capacity"))
            });
        let tasks = vec![Task::new("t9", vec![Message::user("go")])];
        let mut out = Vec::new();
        runner
            .run(tasks, &CancellationToken::new(), &mut out)
            .await
            .unwrap();
        let (_, s) = scrape(&exporter.url()).await;
        let env = [
            ("environment", "metrics-failures"),
            ("exit_reason", "sandbox_error"),
        ];
        assert_eq!(value(&s, "uniagent_rollouts_finished_total", &env), 1.0);
        let create = [("class", "create")];
        assert!(value(&s, "uniagent_sandbox_failures_total", &create) >= 1.0);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_bad_address_is_a_typed_error() {
    for bad in ["9464", ":9464", "localhost:port", "127.0.0.1:70000"] {
        let err = Exporter::start(bad, &[]).await.unwrap_err();
        assert!(matches!(err, MetricsError::Address(_)), "{bad}: {err}");
        assert!(err.to_string().contains("HOST:PORT"), "{err}");
    }
    // A port in use is a bind error naming the address.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = Exporter::start(&addr, &[]).await.unwrap_err();
    assert!(matches!(err, MetricsError::Bind { .. }), "{err}");
    assert!(err.to_string().contains(&addr), "{err}");
}
