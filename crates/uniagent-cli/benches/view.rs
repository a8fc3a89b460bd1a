//! Viewer bench: time to the first page of a 100,000-trajectory `trajectories.jsonl`, cold
//! (a fresh viewer indexes the file, then serves page 1 over HTTP), warm (the next page), a
//! deep page, and a full-text search, each against a baseline measured in the same run: a
//! naive reader that parses every line into a `serde_json::Value`, as a viewer without an
//! index would have to. Figures are ratios to that baseline.
//!
//! ```sh
//! cargo bench -p uniagent-cli --bench view
//! UNIAGENT_VIEW_ROLLOUTS=20000 cargo bench -p uniagent-cli --bench view
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uniagent_cli::view::Viewer;

/// A trajectory line of about 2 KB: a short conversation and 200 response tokens.
fn line(i: usize) -> String {
    let n = 200;
    json!({
        "id": format!("task-{}:{}", i % 1000, i / 1000), "task_id": format!("task-{}", i % 1000),
        "sample": i / 1000, "exit_reason": "finished",
        "reward": {"score": (i % 2) as f64, "success": i.is_multiple_of(2)},
        "timings": {"total": 1.0}, "counts": {"turns": 2},
        "messages": [{"role": "user", "content": format!("Find the value of key-{i}")},
                     {"role": "assistant", "content": "cat data.txt"},
                     {"role": "tool", "content": format!("value {}", i * 7)}],
        "prompt_ids": (0..32).collect::<Vec<u32>>(),
        "response_ids": (0..n).map(|k| (k * 31 + i) % 150_000).collect::<Vec<usize>>(),
        "response_mask": (0..n).map(|k| u8::from(k % 4 != 0)).collect::<Vec<u8>>(),
        "response_logprobs": (0..n).map(|k| -((k % 7) as f64) / 3.0).collect::<Vec<f64>>(),
        "weight_versions": (0..n).map(|k| if k % 4 != 0 { Some(i / 1000) } else { None }).collect::<Vec<_>>(),
    })
    .to_string()
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let n: usize = std::env::var("UNIAGENT_VIEW_ROLLOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trajectories.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..n {
        writeln!(f, "{}", line(i)).unwrap();
    }
    f.flush().unwrap();
    drop(f);
    let mb = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
    let rt = tokio::runtime::Runtime::new().unwrap();

    // Baseline: parse every line (what a viewer without an index does for any page).
    let naive = || {
        let start = Instant::now();
        let mut count = 0usize;
        for l in BufReader::new(std::fs::File::open(&path).unwrap()).lines() {
            let v: Value = serde_json::from_str(&l.unwrap()).unwrap();
            count += usize::from(v.get("id").is_some());
        }
        assert_eq!(count, n);
        start.elapsed()
    };
    let _ = naive(); // page cache warm for both sides
    let baseline = median((0..3).map(|_| naive()).collect());

    let (cold, warm, deep, search, full) = rt.block_on(async {
        let mut cold = Vec::new();
        let mut timings = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            let viewer = Viewer::new(std::slice::from_ref(&dir));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let server = tokio::spawn(async move { axum::serve(listener, viewer.router()).await });
            let client = reqwest::Client::new();
            let get = |q: &'static str| {
                let (client, base) = (client.clone(), base.clone());
                async move {
                    let url = format!("{base}/api/runs/0/trajectories?{q}");
                    let start = Instant::now();
                    let v: Value = client.get(url).send().await.unwrap().json().await.unwrap();
                    (start.elapsed(), v)
                }
            };
            let started = Instant::now();
            let (t, v) = get("limit=50").await;
            assert_eq!(v["items"].as_array().unwrap().len(), 50);
            cold.push(t);
            // The background indexer finishes the file.
            loop {
                let (_, v) = get("limit=1").await;
                if v["indexing"] == false {
                    assert_eq!(v["total"], n);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            timings.3.push(started.elapsed());
            timings.0.push(get("offset=50&limit=50").await.0);
            timings.1.push(get("offset=99000&limit=50").await.0);
            let (t, v) = get("q=key-98765&limit=50").await;
            assert_eq!(v["total"], 1);
            timings.2.push(t);
            server.abort();
        }
        (
            median(cold),
            median(timings.0),
            median(timings.1),
            median(timings.2),
            median(timings.3),
        )
    });
    let ratio = |d: Duration| d.as_secs_f64() / baseline.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("view bench: {n} trajectories, {mb:.0} MB, medians of 3");
    println!(
        "  baseline: parse every line        {:>9.1} ms",
        ms(baseline)
    );
    for (what, d) in [
        ("first page, cold (fresh viewer)", cold),
        ("whole file indexed (background)", full),
        ("next page, warm", warm),
        ("deep page (offset 99,000)", deep),
        ("full-text search, one hit", search),
    ] {
        println!("  {what:<33} {:>9.1} ms  ratio {:.4}", ms(d), ratio(d));
    }
}
