//! `uniagent view` over HTTP: every JSON route on generated output directories, paging and
//! search on 100,000 trajectories, growing and damaged files, bad requests, and the binary's
//! `--port 0` contract.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod viewfix;

use serde_json::{json, Value};
use viewfix::{append, get, qwen_dir, serve, write_run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_trajectory_and_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // 30 rollouts over 10 tasks; in A tasks 0..5 are solved, in B tasks 3..8.
    write_run(&a, 30, 10, |i| i % 10 < 5);
    write_run(&b, 30, 10, |i| (3..8).contains(&(i % 10)));
    // B knows its tokenizer through the effective config, like a `run` with `model.dir`.
    std::fs::write(
        b.join("config.yaml"),
        format!("model:\n  dir: {}\n", qwen_dir().display()),
    )
    .unwrap();
    let missing = tmp.path().join("not-there");
    let base = serve(&[a.clone(), b.clone(), missing]).await;

    let (status, runs) = get(&format!("{base}/api/runs")).await;
    assert_eq!(status, 200, "{runs}");
    let ra = &runs["runs"][0];
    assert_eq!(ra["name"], "a");
    assert_eq!(ra["stats"]["rollouts"], 30);
    assert_eq!(ra["stats"]["tasks"], 10);
    assert_eq!(ra["stats"]["succeeded"], 15);
    assert_eq!(ra["stats"]["success_rate"], 0.5);
    assert_eq!(
        ra["stats"]["exit_reasons"],
        json!({"finished": 10, "max_turns": 10, "sandbox_error": 10})
    );
    assert_eq!(ra["stats"]["reward_hist"]["counts"][0], 15);
    assert_eq!(ra["stats"]["reward_hist"]["counts"][9], 15);
    assert_eq!(ra["stats"]["tokens"]["sampled"], 90);
    assert_eq!(ra["stats"]["tokens"]["prompt"], 180);
    assert_eq!(ra["stats"]["timings"]["total"], 1.0);
    assert_eq!(ra["warnings"], json!([]));
    // The run's report is the one `uniagent report` builds from the same file, and its table
    // rows are the ones the terminal table prints.
    let report = uniagent_cli::report::Report::from_dir(&a).unwrap();
    assert_eq!(ra["report"], serde_json::to_value(&report).unwrap());
    assert_eq!(
        ra["report_table"],
        serde_json::to_value(uniagent_cli::report::table_rows(&[&report])).unwrap()
    );
    assert_eq!(ra["report"]["rollouts"], 15, "the rl phase's lines");
    let gone = &runs["runs"][2];
    assert_eq!(gone["stats"]["rollouts"], 0);
    assert!(
        gone["warnings"][0]
            .as_str()
            .unwrap()
            .contains("no such directory"),
        "{gone}"
    );

    // Comparison: tasks 0..3 lost, 5..8 gained, 3..5 pass in both.
    let (_, c) = get(&format!("{base}/api/compare?a=0&b=1")).await;
    assert_eq!(
        (
            c["common"].as_u64(),
            c["gained"].as_u64(),
            c["lost"].as_u64()
        ),
        (Some(10), Some(3), Some(3))
    );
    assert_eq!(c["passing"], json!([5, 5]));
    let flips: Vec<(&str, &str)> = c["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["flip"].is_null())
        .map(|t| (t["task_id"].as_str().unwrap(), t["flip"].as_str().unwrap()))
        .collect();
    assert_eq!(flips.len(), 6, "flipped tasks first: {flips:?}");
    assert!(flips.contains(&("task-0", "lost")) && flips.contains(&("task-7", "gained")));

    // Filters.
    let list = |q: &str| get(format!("{base}/api/runs/0/trajectories?{q}"));
    let (_, page) = list("task=task-3").await;
    assert_eq!(page["total"], 3);
    assert!(page["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["task_id"] == "task-3"));
    assert_eq!(
        list("success=true&exit_reason=finished").await.1["total"],
        5
    );
    assert_eq!(list("reward_min=0.5").await.1["total"], 15);
    assert_eq!(list("reward_max=0.5&step=0&version=0").await.1["total"], 15);
    assert_eq!(list("version=1").await.1["total"], 0);
    assert_eq!(list("phase=eval&task=task-3").await.1["total"], 3);
    assert_eq!(list("phase=rl&task=task-3").await.1["total"], 0);
    assert_eq!(list("q=KEY-17").await.1["items"][0]["id"], "task-7:1");

    // One trajectory: messages, reward details; the token view undecoded (A has no tokenizer).
    let (status, t) = get(&format!("{base}/api/runs/0/trajectories/4")).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["trajectory"]["messages"][3]["content"], "value 28");
    assert_eq!(
        t["trajectory"]["reward"]["details"]["tests"]["test_b"],
        "PASSED"
    );
    assert!(
        t["trajectory"].get("response_ids").is_none(),
        "token arrays only in the token view"
    );
    let tv = &t["tokens"];
    assert_eq!(tv["prompt_len"], 6);
    assert_eq!(tv["ids"].as_array().unwrap().len(), 17);
    assert!(tv["text"].is_null());
    assert_eq!(tv["source"][9], "sampled");
    assert_eq!(tv["source"][6], "inserted");
    assert_eq!(tv["logprob"][10], -3.5);
    assert_eq!(tv["version"][9], 0);
    assert_eq!(tv["turn_starts"], json!([9]));
    assert!(
        t["warnings"][0].as_str().unwrap().contains("no tokenizer"),
        "{t}"
    );

    // B decodes with its tokenizer and tells template from observation.
    let (_, t) = get(&format!("{base}/api/runs/1/trajectories/0")).await;
    let tv = &t["tokens"];
    let text = strs(&tv["text"]);
    assert_eq!(
        text[6..].concat(),
        "<|im_start|>assistant\nHello world<|im_end|>\n<|im_start|>user\nok"
    );
    let sources = strs(&tv["source"]);
    assert_eq!(
        sources[6..],
        [
            "template",
            "template",
            "template",
            "sampled",
            "sampled",
            "sampled",
            "template",
            "template",
            "template",
            "template",
            "observation"
        ]
    );
    assert_eq!(t["warnings"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_and_search_over_100k_trajectories() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    write_run(&dir, 100_000, 1000, |i| i % 4 == 0);
    let base = serve(&[dir]).await;
    let list = |q: &str| get(format!("{base}/api/runs/0/trajectories?{q}"));
    // The first answer comes from what is indexed so far (a chunk at a time)...
    let (status, first) = list("limit=100").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["items"].as_array().unwrap().len(), 100);
    if first["indexing"] == true {
        assert!(
            first["warnings"].to_string().contains("still indexing"),
            "{first}"
        );
    }
    // ...and the background indexer finishes the rest.
    let start = std::time::Instant::now();
    let first = loop {
        let (_, page) = list("limit=100").await;
        if page["indexing"] == false {
            break page;
        }
        assert!(
            start.elapsed().as_secs() < 300,
            "indexing never finished: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(first["total"], 100_000);
    assert_eq!(first["items"].as_array().unwrap().len(), 100);
    assert_eq!(first["items"][0]["id"], "task-0:0");
    // A deep page: the right rows, by position.
    let (_, deep) = list("offset=99950&limit=100").await;
    let items = deep["items"].as_array().unwrap();
    assert_eq!(items.len(), 50);
    assert_eq!(items[0]["index"], 99_950);
    assert_eq!(items[0]["id"], "task-950:99");
    assert_eq!(items[49]["id"], "task-999:99");
    // Filter + page.
    let (_, solved) = list("success=true&offset=10&limit=5").await;
    assert_eq!(solved["total"], 25_000);
    assert_eq!(solved["items"][0]["index"], 40);
    // Search: one exact hit, a hundred "needle"s, paged.
    let (_, hit) = list("q=key-12345").await;
    assert_eq!(hit["total"], 1);
    assert_eq!(hit["items"][0]["index"], 12_345);
    let (_, needles) = list("q=NEEDLE&offset=90&limit=50").await;
    assert_eq!(needles["total"], 100);
    assert_eq!(needles["items"].as_array().unwrap().len(), 10);
    assert_eq!(needles["items"][9]["index"], 99_007);
    // The last trajectory opens.
    let (status, t) = get(&format!("{base}/api/runs/0/trajectories/99999")).await;
    assert_eq!(status, 200);
    assert_eq!(t["trajectory"]["id"], "task-999:99");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_damaged_and_bad_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("live");
    write_run(&dir, 3, 3, |_| true);
    // A corrupt line, then a line still being written.
    append(&dir, "trajectories.jsonl", "{\"id\": \"broken\n");
    let fourth = viewfix::trajectory(3, 3, false).to_string();
    let (head, tail) = fourth.split_at(40);
    append(&dir, "trajectories.jsonl", head);
    let base = serve(std::slice::from_ref(&dir)).await;

    let (status, page) = get(&format!("{base}/api/runs/0/trajectories")).await;
    assert_eq!(status, 200);
    assert_eq!(page["total"], 3);
    let warnings = page["warnings"].to_string();
    assert!(warnings.contains("line 4: skipped"), "{warnings}");
    assert!(warnings.contains("incomplete"), "{warnings}");
    let (_, runs) = get(&format!("{base}/api/runs")).await;
    assert!(runs["runs"][0]["warnings"]
        .to_string()
        .contains("incomplete"));

    // A gateway-style record flagged not append-only.
    let mut flagged = viewfix::trajectory(9, 3, true);
    flagged["extra_fields"] = json!({"gateway": {"append_only": false}});
    let (_, t) = get(format!("{base}/api/runs/0/trajectories/0")).await;
    assert_eq!(t["append_only"], json!(null));

    // The writer finishes the line: it appears without a restart.
    append(&dir, "trajectories.jsonl", &format!("{tail}\n"));
    let (_, page) = get(&format!("{base}/api/runs/0/trajectories")).await;
    assert_eq!(page["total"], 4);
    assert_eq!(page["items"][3]["success"], false);
    assert!(!page["warnings"].to_string().contains("incomplete"));
    append(&dir, "trajectories.jsonl", &format!("{flagged}\n"));
    let (_, t) = get(format!("{base}/api/runs/0/trajectories/4")).await;
    assert_eq!(t["append_only"], false);
    assert!(t["warnings"].to_string().contains("not append-only"), "{t}");

    // metrics.jsonl: series over step, a field that appears late stays aligned.
    append(&dir, "metrics.jsonl", "{\"step\":1,\"mean_reward\":0.25,\"kl\":0.01}\n{\"step\":2,\"mean_reward\":0.5,\"kl\":0.02,\"staleness\":1}\nnot json\n");
    let (status, m) = get(&format!("{base}/api/runs/0/metrics")).await;
    assert_eq!(status, 200);
    assert_eq!(m["steps"], json!([1.0, 2.0]));
    assert_eq!(m["series"]["mean_reward"], json!([0.25, 0.5]));
    assert_eq!(m["series"]["staleness"], json!([null, 1]));
    assert!(m["warnings"].to_string().contains("line 3: skipped"));

    // A corrupt summary.json is a warning too.
    std::fs::write(dir.join("summary.json"), "{").unwrap();
    let (status, run) = get(&format!("{base}/api/runs/0")).await;
    assert_eq!(status, 200);
    assert!(
        run["warnings"].to_string().contains("summary.json"),
        "{run}"
    );

    // A file given as the directory, and a directory where the JSONL file should be: warnings.
    let odd = tmp.path().join("odd");
    std::fs::create_dir_all(odd.join("trajectories.jsonl")).unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let base2 = serve(&[odd, file]).await;
    let (status, runs) = get(format!("{base2}/api/runs")).await;
    assert_eq!(status, 200, "{runs}");
    assert!(
        runs["runs"][0]["warnings"]
            .to_string()
            .contains("cannot be read"),
        "{runs}"
    );
    assert!(
        runs["runs"][1]["warnings"]
            .to_string()
            .contains("no such directory"),
        "{runs}"
    );
    let (status, page) = get(format!("{base2}/api/runs/0/trajectories")).await;
    assert_eq!((status, page["total"].as_u64()), (200, Some(0)), "{page}");

    // Bad requests: typed JSON errors, never a crash.
    for (url, code, says) in [
        ("/api/runs/7", 404, "no run 7"),
        ("/api/runs/x/trajectories", 400, "bad path"),
        ("/api/runs/0/trajectories/-1", 400, "bad path"),
        ("/api/runs/0/trajectories/99", 404, "no trajectory 99"),
        ("/api/runs/0/trajectories?limit=0", 400, "limit"),
        (
            "/api/runs/0/trajectories?reward_min=high",
            400,
            "reward_min",
        ),
        (
            "/api/runs/0/trajectories?colour=red",
            400,
            "unknown parameter",
        ),
        ("/api/compare?a=0", 400, "`b`"),
        ("/api/compare?a=0&b=5", 404, "no run 5"),
        ("/assets/nope.js", 404, "no asset"),
        ("/api/nothing", 404, "no such"),
    ] {
        let (status, body) = get(&format!("{base}{url}")).await;
        assert_eq!(status, code, "{url}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{url}: {body}"
        );
    }
    // The server is still up, and serves the UI.
    let html = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("/assets/app.js"));
    let js = reqwest::get(format!("{base}/assets/app.js")).await.unwrap();
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
}

#[test]
fn binary_prints_the_listening_line_first_and_serves() {
    let tmp = tempfile::tempdir().unwrap();
    write_run(tmp.path(), 2, 2, |_| true);
    let (mut child, url) = common::spawn_listening(&[
        "view".as_ref(),
        tmp.path().as_os_str(),
        "--port".as_ref(),
        "0".as_ref(),
    ]);
    let body = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async { reqwest::get(format!("{url}/api/runs")).await?.text().await })
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
        "{url}"
    );
    assert!(body.unwrap().contains("\"rollouts\":2"));
    // No directory given: bad usage, exit 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_uniagent"))
        .arg("view")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// What `uniagent run`'s own writer produces (the sink behind `trajectories.jsonl`, with
/// weight versions, and `summary.json`) is what the viewer reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_what_the_run_writer_writes() {
    use std::sync::Arc;
    use uniagent_cli::model::VersionLog;
    use uniagent_cli::output::OutputDir;
    use uniagent_core::agent::{ExitReason, Trajectory};
    use uniagent_core::runner::TrajectorySink;
    use uniagent_core::{Message, RewardOutcome};

    let tmp = tempfile::tempdir().unwrap();
    let out = OutputDir::create(tmp.path()).unwrap();
    let versions = Arc::new(VersionLog::default());
    versions.record("t:0", 2, Some(5));
    let mut sink = out.sink(true, Some(Arc::clone(&versions))).unwrap();
    let messages = vec![Message::user("hi"), Message::assistant("Hello world")];
    let mut t = Trajectory::empty("t", 0, messages, ExitReason::Finished, None);
    t.reward = Some(RewardOutcome::binary(true).with_detail("expected", json!("Hello")));
    t.output.prompt_ids = vec![1, 2];
    t.output.response_ids = vec![3, 4, 5];
    t.output.response_mask = vec![1, 1, 0];
    t.output.response_logprobs = Some(vec![-0.5, -1.5, 0.0]);
    sink.write(&t).unwrap();
    out.write_summary(1, 0.5).unwrap();

    let base = serve(&[tmp.path().to_path_buf()]).await;
    let (_, runs) = get(format!("{base}/api/runs")).await;
    let run = &runs["runs"][0];
    assert_eq!(run["warnings"], json!([]), "{run}");
    assert_eq!(run["stats"]["rollouts"], 1);
    assert_eq!(run["stats"]["success_rate"], 1.0);
    assert_eq!(run["stats"]["tokens"]["sampled"], 2);
    assert_eq!(run["stats"]["versions"], json!([5, 5]));
    assert_eq!(run["summary"]["rollouts"], 1);
    let (_, page) = get(format!(
        "{base}/api/runs/0/trajectories?version=5&success=true"
    ))
    .await;
    assert_eq!(page["items"][0]["id"], "t:0");
    let (_, one) = get(format!("{base}/api/runs/0/trajectories/0")).await;
    assert_eq!(one["trajectory"]["messages"][1]["content"], "Hello world");
    assert_eq!(one["trajectory"]["reward"]["details"]["expected"], "Hello");
    let tv = &one["tokens"];
    assert_eq!(
        tv["source"],
        json!(["prompt", "prompt", "sampled", "sampled", "inserted"])
    );
    assert_eq!(tv["version"], json!([null, null, 5, 5, null]));
    assert_eq!(tv["logprob"], json!([null, null, -0.5, -1.5, 0.0]));
}

/// A real not-append-only rollout: the token route carries the recorded sources, text that
/// never splits a character, and the stream aligned with the recorded full re-render.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerender_diff_and_recorded_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("qwen3");
    std::fs::create_dir_all(&dir).unwrap();
    let (line, think) = viewfix::rerendered_trajectory();
    append(&dir, "trajectories.jsonl", &format!("{line}\n"));
    std::fs::write(
        dir.join("config.yaml"),
        format!("model:\n  dir: {}\n", viewfix::qwen3_dir().display()),
    )
    .unwrap();
    let base = serve(std::slice::from_ref(&dir)).await;
    let (status, t) = get(format!("{base}/api/runs/0/trajectories/0")).await;
    assert_eq!(status, 200, "{t}");
    // The recorded re-render marks the rollout not append-only; the raw arrays stay out of
    // the trajectory object.
    assert_eq!(t["append_only"], false);
    assert!(t["warnings"].to_string().contains("not append-only"), "{t}");
    assert!(t["trajectory"].get("rerender_ids").is_none());
    let tv = &t["tokens"];

    // Sources as recorded: the prompt, then mask 1 exactly on sampled tokens.
    assert_eq!(tv["sources_inferred"], false);
    let prompt = tv["prompt_len"].as_u64().unwrap() as usize;
    let sources = strs(&tv["source"]);
    assert!(sources[..prompt].iter().all(|s| *s == "prompt"));
    for (s, m) in sources[prompt..]
        .iter()
        .zip(tv["mask"].as_array().unwrap()[prompt..].iter())
    {
        assert_eq!(*s == "sampled", m == 1, "{sources:?}");
    }
    assert!(sources.contains(&"template") && sources.contains(&"observation"));

    // Text: the split character is whole on its last token, never U+FFFD.
    let text = strs(&tv["text"]);
    assert!(!tv["partial"].as_array().unwrap().is_empty(), "{tv}");
    assert!(text.iter().all(|s| !s.contains('\u{FFFD}')));
    assert_eq!(
        text.iter()
            .filter(|s| s.contains(viewfix::SPLIT_CHAR))
            .count(),
        4
    );

    // The diff: walking the runs over the stream and taking inserts from the run gives the
    // re-render; what the template dropped is the first turn's empty think block.
    let d = &tv["rerender"];
    assert_eq!(d["aligned"], true, "{d}");
    let stream = u64s(&tv["ids"]);
    let (mut i, mut rebuilt, mut deleted) = (0usize, Vec::new(), Vec::new());
    for run in d["runs"].as_array().unwrap() {
        let n = run["len"].as_u64().unwrap() as usize;
        match run["op"].as_str().unwrap() {
            "equal" => rebuilt.extend_from_slice(&stream[i..i + n]),
            "delete" => deleted.extend_from_slice(&stream[i..i + n]),
            "insert" => {
                rebuilt.extend(u64s(&run["ids"]));
                assert_eq!(run["text"].as_array().unwrap().len(), n);
                continue;
            }
            op => panic!("unknown op {op}"),
        }
        i += n;
    }
    assert_eq!(i, stream.len());
    let recorded = u64s(&line["rerender_ids"]);
    assert_eq!(rebuilt, recorded);
    assert_eq!(d["len"], recorded.len());
    assert_eq!(
        deleted,
        think.iter().map(|x| u64::from(*x)).collect::<Vec<_>>()
    );
    assert_eq!(d["deleted"], think.len());
    assert_eq!(d["inserted"], 0);
}

/// A JSON array of strings, as `&str`s.
fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect()
}

/// A JSON array of unsigned integers.
fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Answers a hostile page gets: a cross-site read, a DNS-rebinding read (a page whose own host
/// name resolves to the viewer, so the browser lets it read the answers), a write method, an
/// over-long URI. Each is refused with a JSON body and its status; before, the runs (absolute
/// paths included) were served to all of them and the framework's rejections were plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pages_get_json_refusals() {
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("secret-run");
        write_run(&dir, 2, 2, |_| true);
        // A run whose config is nested absurdly deep: reading it must not stall a request.
        append(
            &dir,
            "config.yaml",
            &format!("model: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
        );
        let base = serve(std::slice::from_ref(&dir)).await;
        let port = base.rsplit(':').next().unwrap().to_owned();
        let client = reqwest::Client::new();
        let answer = |r: reqwest::Response| async move {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            let body: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
            (status, body)
        };
        let cross_site = client
            .get(format!("{base}/api/runs"))
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        let (status, body) = answer(cross_site).await;
        assert_eq!(status, 403, "{body}");
        assert!(!body.to_string().contains("secret-run"), "{body}");
        let rebound = client
            .get(format!("{base}/api/runs"))
            .header("host", format!("evil.example:{port}"))
            .send()
            .await
            .unwrap();
        let (status, body) = answer(rebound).await;
        assert_eq!(status, 403, "{body}");
        assert!(body["error"].as_str().unwrap().contains("Host"), "{body}");
        let (status, body) = answer(
            client
                .post(format!("{base}/api/runs"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 405, "{body}");
        let long = format!("{base}/api/runs?{}", "x".repeat(20_000));
        let (status, body) = answer(client.get(long).send().await.unwrap()).await;
        assert_eq!(status, 414, "{body}");
        // The operator's own browser (same origin, local host) still reads everything.
        let own = client
            .get(format!("{base}/api/runs/0/trajectories/0"))
            .header("origin", &base)
            .send()
            .await
            .unwrap();
        let (status, body) = answer(own).await;
        assert_eq!(status, 200, "{body}");
    })
    .await
    .unwrap();
}
