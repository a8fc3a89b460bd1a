//! Progress bars on stderr: rollouts done, success rate, exit-reason counts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

#[derive(Debug, Default)]
struct State {
    running: u64,
    finished: u64,
    succeeded: u64,
    reasons: BTreeMap<String, u64>,
}

/// A progress display shared by the runner's callbacks and the output sink.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    state: Arc<Mutex<State>>,
}

impl Progress {
    /// A bar over `total` rollouts to run (`already` done before); hidden when `visible` is
    /// false or stderr is not a terminal.
    pub(crate) fn new(total: u64, already: u64, visible: bool) -> Self {
        let bar = visible.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} rollouts {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            if already > 0 {
                bar.println(format!("resuming: {already} rollouts already finished"));
            }
            bar
        });
        Self {
            bar,
            state: Arc::default(),
        }
    }

    /// A rollout started.
    pub(crate) fn started(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.running += 1;
        }
        self.redraw(false);
    }

    /// A rollout finished and was written (`line` is its JSON record).
    pub(crate) fn finished(&self, line: &Value) {
        if let Ok(mut s) = self.state.lock() {
            s.running = s.running.saturating_sub(1);
            s.finished += 1;
            if line
                .get("reward")
                .and_then(|r| r.get("success"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                s.succeeded += 1;
            }
            let reason = line
                .get("exit_reason")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            *s.reasons.entry(reason.to_owned()).or_default() += 1;
        }
        self.redraw(true);
    }

    fn redraw(&self, tick: bool) {
        let Some(bar) = &self.bar else { return };
        if tick {
            bar.inc(1);
        }
        if let Ok(s) = self.state.lock() {
            bar.set_message(message(&s));
        }
    }

    /// The run ended.
    pub(crate) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

fn message(s: &State) -> String {
    let rate = if s.finished > 0 {
        100.0 * s.succeeded as f64 / s.finished as f64
    } else {
        0.0
    };
    let reasons: Vec<String> = s.reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "| solved {}/{} ({rate:.0}%) | running {} | {}",
        s.succeeded,
        s.finished,
        s.running,
        reasons.join(", ")
    )
}
