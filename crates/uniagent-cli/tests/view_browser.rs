//! The viewer in a real headless Chromium, driven through the DevTools protocol (a minimal
//! client over a websocket): open the runs page, a run's list, a trajectory, its token view
//! and the learning curves; check what is shown; see a new rollout appear without a reload;
//! toggle the diff of a not-append-only rollout against its full re-render.
//! Screenshots go to `target/tmp/view-browser/`.
//!
//! Chromium comes from `scripts/setup/60-chromium.sh` (`$UNIAGENT_CHROMIUM` or `chromium` on
//! PATH). Without it the test skips loudly, unless `UNIAGENT_REQUIRE_BROWSER` is set: then it
//! fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod viewfix;

use std::path::Path;

use serde_json::json;
use viewfix::cdp::{chromium, launch};
use viewfix::{append, qwen_dir, serve, write_run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_trajectory_tokens_and_curves_in_chromium() {
    let Some(exe) = chromium() else {
        assert!(
            std::env::var_os("UNIAGENT_REQUIRE_BROWSER").is_none(),
            "UNIAGENT_REQUIRE_BROWSER is set but no chromium was found (run scripts/setup/60-chromium.sh)"
        );
        eprintln!("\n\n!!! SKIPPED view_browser: no chromium on PATH and UNIAGENT_REQUIRE_BROWSER unset !!!\n");
        return;
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view-browser");
    std::fs::create_dir_all(&shots).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("before"), tmp.path().join("after"));
    write_run(&a, 20, 10, |i| i % 10 < 4);
    write_run(&b, 20, 10, |i| i % 10 < 7);
    std::fs::write(
        a.join("config.yaml"),
        format!("model:\n  dir: {}\n", qwen_dir().display()),
    )
    .unwrap();
    append(&a, "trajectories.jsonl", "{\"corrupt\n");
    let metrics: String = (1..=10)
        .map(|s| {
            let f = s as f64;
            format!(
                "{}\n",
                // No KL loss: `kl` is absent from the lines, as train writes them.
                json!({"step": s, "mean_reward": f / 10.0, "success_rate": f / 12.0,
                       "entropy": 1.0 - f / 20.0, "pg_clipfrac": 3e-8 * f, "staleness": s % 3})
            )
        })
        .collect();
    append(&a, "metrics.jsonl", &metrics);
    let base = serve(&[a.clone(), b]).await;
    let (_browser, mut page) = launch(&exe).await;

    // Runs page: both runs with their success rates, the corrupt line as a warning.
    page.go(&format!("{base}/#/")).await;
    page.wait_for("document.querySelectorAll('#runs-table .run-row').length === 2")
        .await;
    let success = page
        .eval("[...document.querySelectorAll('#runs-table .success')].map(e => e.textContent)")
        .await;
    assert_eq!(success, json!(["40.0%", "70.0%"]));
    let warning = page
        .eval("document.getElementById('warnings').innerText")
        .await;
    assert!(
        warning.as_str().unwrap().contains("line 21: skipped"),
        "{warning}"
    );
    assert_eq!(
        page.eval("document.querySelectorAll('svg.hist rect').length")
            .await,
        json!(20)
    );
    page.screenshot(&shots, "1-runs.png").await;

    // Compare: 3 tasks gained, none lost.
    page.go(&format!("{base}/#/compare?a=0&b=1")).await;
    page.wait_for("document.getElementById('compare-summary')")
        .await;
    let summary = page
        .eval("document.getElementById('compare-summary').innerText")
        .await;
    assert!(
        summary.as_str().unwrap().contains("▲ 3 gained"),
        "{summary}"
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#compare-table tr.gained').length")
            .await,
        json!(3)
    );
    page.screenshot(&shots, "2-compare.png").await;

    // The list of the first run, then a new rollout appears without a reload.
    page.go(&format!("{base}/#/")).await;
    page.wait_for("document.querySelector('#runs-table .open-run')")
        .await;
    page.eval("document.querySelector('#runs-table .open-run').click()")
        .await;
    page.wait_for("document.querySelectorAll('#traj-list .traj-row').length === 20")
        .await;
    // The run's report on top: the rows `uniagent report` prints. The fixture is a training
    // run (lines carry phases): its 10 `rl` rollouts count, 4 of them solved.
    let report = page
        .eval(
            "Object.fromEntries([...document.querySelectorAll('#report-table tr')]\
             .map(r => [r.querySelector('th').textContent, r.querySelector('td').textContent]))",
        )
        .await;
    assert_eq!(report["source"], "train (rl phase)", "{report}");
    assert_eq!(report["rollouts"], "10", "{report}");
    assert_eq!(report["strict success rate"], "40.0%", "{report}");
    assert_eq!(report["infrastructure failures"], "2", "{report}");
    assert_eq!(report["policy failures"], "4", "{report}");
    assert_eq!(report["sandbox_error"], "2", "{report}");
    assert_eq!(
        report["learning curve (rl success by step)"], "0: 40.0%",
        "{report}"
    );
    page.screenshot_of(&shots, "report-table.png", "#report")
        .await;
    append(
        &a,
        "trajectories.jsonl",
        &format!("{}\n", viewfix::trajectory(20, 10, true)),
    );
    page.wait_for("document.querySelectorAll('#traj-list .traj-row').length === 21")
        .await;
    assert!(page
        .eval("document.getElementById('list-status').textContent")
        .await
        .as_str()
        .unwrap()
        .contains("of 21"));
    page.screenshot(&shots, "3-list.png").await;

    // Search narrows the list.
    page.eval("{ const f = document.getElementById('filters'); f.q.value = 'key-13'; f.requestSubmit(); }").await;
    page.wait_for("document.querySelectorAll('#traj-list .traj-row').length === 1")
        .await;

    // A trajectory: the chat with the tool call and the folded-or-not observation, reward tests.
    page.eval("document.querySelector('#traj-list .open-traj').click()")
        .await;
    page.wait_for("document.querySelectorAll('#chat .msg').length === 4")
        .await;
    assert_eq!(
        page.eval("document.getElementById('traj-title').textContent")
            .await,
        json!("task-3:1")
    );
    let chat = page.eval("document.getElementById('chat').innerText").await;
    let chat = chat.as_str().unwrap();
    assert!(
        chat.contains("bash") && chat.contains("grep key-13 data.txt") && chat.contains("value 91"),
        "{chat}"
    );
    let tests = page
        .eval("document.querySelector('table.tests').innerText")
        .await;
    assert!(tests.as_str().unwrap().contains("test_b"), "{tests}");
    page.screenshot(&shots, "4-trajectory.png").await;

    // A long tool output is folded.
    page.go(&format!("{base}/#/traj/0/11")).await;
    page.wait_for(
        "document.getElementById('traj-title').textContent === 'task-1:1' \
         && document.querySelectorAll('#chat .msg').length === 4",
    )
    .await;
    assert_eq!(
        page.eval("[...document.querySelectorAll('#chat details.fold')].map(d => d.open)")
            .await,
        json!([false])
    );
    let folded = page
        .eval("document.querySelector('#chat .msg.tool').innerText")
        .await;
    let folded = folded.as_str().unwrap();
    assert!(
        folded.contains("log line 7")
            && !folded.contains("log line 79")
            && folded.contains("80 lines"),
        "{folded}"
    );
    page.eval("document.querySelector('#chat details.fold summary').click()")
        .await;
    page.wait_for("document.querySelector('#chat .msg.tool').innerText.includes('log line 79')")
        .await;
    page.go(&format!("{base}/#/traj/0/13")).await;
    page.wait_for("document.getElementById('traj-title').textContent === 'task-3:1'")
        .await;

    // The token view: decoded with the run's tokenizer, sources, mask, a turn boundary.
    page.eval("document.getElementById('tab-tokens').click()")
        .await;
    page.wait_for("document.querySelectorAll('#tokens .tok').length === 17")
        .await;
    let toks = page
        .eval("[...document.querySelectorAll('#tokens .tok')].map(e => e.textContent).join('').replaceAll('↵', '')")
        .await;
    assert_eq!(toks, json!("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello world<|im_end|>\n<|im_start|>user\nok"));
    assert_eq!(
        page.eval("document.querySelectorAll('#tokens .tok.src-sampled.m1').length")
            .await,
        json!(3)
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#tokens .tok.src-observation').length")
            .await,
        json!(1)
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#tokens .turn-mark').length")
            .await,
        json!(1)
    );
    let tip = page
        .eval("document.querySelectorAll('#tokens .tok')[10].title")
        .await;
    assert!(tip.as_str().unwrap().contains("logprob -3.500"), "{tip}");
    page.screenshot(&shots, "5-tokens.png").await;
    // Logprob heat.
    page.eval("document.querySelector('#token-modes input[value=logprob]').click()")
        .await;
    page.wait_for("document.querySelectorAll('#tokens .tok')[10].style.background !== ''")
        .await;
    page.screenshot(&shots, "6-tokens-logprob.png").await;

    // Learning curves: SVG with title, axis labels, legend and one line per metric.
    page.go(&format!("{base}/#/metrics/0")).await;
    page.wait_for("document.querySelectorAll('#charts svg.chart').length >= 4")
        .await;
    let legend = page
        .eval("[...document.querySelectorAll('#charts .legend text')].map(e => e.textContent)")
        .await;
    // An absent metric gets no line (and no zeros): the KL chart shows the entropy alone.
    assert!(
        !legend.as_array().unwrap().contains(&json!("kl")),
        "{legend}"
    );
    for key in [
        "mean_reward",
        "success_rate",
        "entropy",
        "pg_clipfrac",
        "staleness",
    ] {
        assert!(
            legend.as_array().unwrap().contains(&json!(key)),
            "{key} not in {legend}"
        );
    }
    let labels = page
        .eval("[...document.querySelectorAll('#charts .label')].map(e => e.textContent)")
        .await;
    assert!(
        labels.as_array().unwrap().contains(&json!("step")),
        "{labels}"
    );
    let points = page
        .eval("document.querySelector('polyline[data-key=mean_reward]').getAttribute('points').split(' ').length")
        .await;
    assert_eq!(points, json!(10));
    // Tiny values get readable tick labels (the clip fraction here is 3e-8 · step), never a
    // fixed-point string cut off at the axis.
    let ticks = page
        .eval("[...document.querySelectorAll('svg.chart[aria-label=\"Clip fraction\"] text[text-anchor=end]')].map(e => e.textContent)")
        .await;
    assert_eq!(ticks, json!(["0", "1e-7", "2e-7", "3e-7"]));
    let labels = page
        .eval(
            "[0, 6e-8, 1.5e-7, 0.25, 0.1 + 0.2, 1234.5, 2e5, -3e-9, 100].map((v, i) =>\
             tickLabel(v, [1, 2e-8, 5e-8, 0.05, 0.1, 0.5, 1e5, 1e-9, 20][i]))",
        )
        .await;
    assert_eq!(
        labels,
        json!(["0", "6e-8", "1.5e-7", "0.25", "0.3", "1234.5", "2e5", "-3e-9", "100"])
    );
    page.screenshot(&shots, "7-curves.png").await;

    // A not-append-only rollout (its own run, over Qwen3): toggle the diff vs. the full
    // re-render; the first turn's empty think block is struck out.
    let q = tmp.path().join("qwen3");
    std::fs::create_dir_all(&q).unwrap();
    let (line, think) = viewfix::rerendered_trajectory();
    append(&q, "trajectories.jsonl", &format!("{line}\n"));
    std::fs::write(
        q.join("config.yaml"),
        format!("model:\n  dir: {}\n", viewfix::qwen3_dir().display()),
    )
    .unwrap();
    let base_q = serve(&[q]).await;
    page.go(&format!("{base_q}/#/traj/0/0?view=tokens")).await;
    page.wait_for("document.getElementById('diff-box')").await;
    assert_eq!(
        page.eval("document.querySelectorAll('#tokens .tok.del').length")
            .await,
        json!(0)
    );
    page.eval("document.getElementById('diff-box').click()")
        .await;
    page.wait_for("document.getElementById('diff-summary')")
        .await;
    assert_eq!(
        page.eval("document.querySelectorAll('#tokens .tok.del').length")
            .await,
        json!(think.len())
    );
    let struck = page
        .eval("[...document.querySelectorAll('#tokens .tok.del')].map(e => e.textContent).join('')")
        .await;
    assert!(struck.as_str().unwrap().starts_with("<think>"), "{struck}");
    let summary = page
        .eval("document.getElementById('diff-summary').innerText")
        .await;
    assert!(
        summary
            .as_str()
            .unwrap()
            .contains("only in the recorded stream"),
        "{summary}"
    );
    // The split character is shown whole, never as U+FFFD.
    let shown = page
        .eval("document.getElementById('tokens').innerText")
        .await;
    let shown = shown.as_str().unwrap();
    assert!(
        shown.contains(viewfix::SPLIT_CHAR) && !shown.contains('\u{FFFD}'),
        "{shown}"
    );
    page.screenshot(&shots, "8-tokens-rerender-diff.png").await;
    eprintln!("screenshots in {}", shots.display());
}
