//! The JSON routes. Every handler does its file work on the blocking pool; every answer that
//! reads files carries `warnings` (corrupt lines, a line still being written, a missing
//! directory) instead of failing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::ViewError;
use super::query::{ListQuery, Search};
use super::run::Run;
use super::stats::{compare, run_stats};
use super::tokens::token_view;
use super::Viewer;
use crate::report::{table_rows, Report};

type Answer = Result<Json<Value>, ViewError>;
type Params = Result<Query<HashMap<String, String>>, QueryRejection>;
type Ids<T> = Result<Path<T>, PathRejection>;

async fn blocking<F>(viewer: Arc<Viewer>, f: F) -> Answer
where
    F: FnOnce(&Viewer) -> Result<Value, ViewError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f(&viewer))
        .await
        .map_err(|e| ViewError::Io(format!("the request's worker failed: {e}")))?
        .map(Json)
}

fn run(viewer: &Viewer, id: usize) -> Result<&Run, ViewError> {
    viewer.runs.get(id).ok_or_else(|| {
        ViewError::NotFound(format!(
            "no run {id} (the viewer has {} runs)",
            viewer.runs.len()
        ))
    })
}

fn ids<T>(p: Ids<T>) -> Result<T, ViewError> {
    p.map(|Path(p)| p)
        .map_err(|e| ViewError::BadPath(e.body_text()))
}

fn params(p: Params) -> Result<HashMap<String, String>, ViewError> {
    p.map(|Query(p)| p)
        .map_err(|e| ViewError::bad_query("?", e.body_text()))
}

fn run_json(id: usize, run: &Run) -> Result<Value, ViewError> {
    let mut warnings = run.dir_warnings();
    let (summary, bad_summary) = run.summary();
    warnings.extend(bad_summary);
    let (stats, report, has_trajectories, indexing) = {
        let index = run.trajectories()?;
        warnings.extend(index.warnings());
        (
            run_stats(index.entries()),
            Report::build(index.entries().iter().map(|e| &e.row)),
            index.exists(),
            index.is_behind(),
        )
    };
    let metrics = run.metrics()?;
    warnings.extend(metrics.warnings());
    Ok(json!({
        "id": id,
        "name": run.name,
        "dir": run.dir().display().to_string(),
        "has_trajectories": has_trajectories,
        "indexing": indexing,
        "metric_steps": metrics.entries().len(),
        "stats": stats,
        "report_table": table_rows(&[&report]),
        "report": report,
        "summary": summary,
        "warnings": warnings,
    }))
}

/// `GET /api/runs`: every run with its statistics.
pub(super) async fn runs(State(viewer): State<Arc<Viewer>>) -> Answer {
    blocking(viewer, |v| {
        let runs: Result<Vec<Value>, _> = v
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| run_json(i, r))
            .collect();
        Ok(json!({ "runs": runs? }))
    })
    .await
}

/// `GET /api/runs/{run}`: one run with its statistics.
pub(super) async fn one_run(State(viewer): State<Arc<Viewer>>, id: Ids<usize>) -> Answer {
    let id = ids(id)?;
    blocking(viewer, move |v| run_json(id, run(v, id)?)).await
}

/// `GET /api/runs/{run}/trajectories`: filtered, searched, paged summaries.
pub(super) async fn trajectories(
    State(viewer): State<Arc<Viewer>>,
    id: Ids<usize>,
    p: Params,
) -> Answer {
    let id = ids(id)?;
    let query = ListQuery::parse(&params(p)?)?;
    blocking(viewer, move |v| {
        let run = run(v, id)?;
        let mut warnings = run.dir_warnings();
        let index = run.trajectories()?;
        warnings.extend(index.warnings());
        let search = query.q.as_deref().map(Search::new);
        let file = match &search {
            Some(_) if index.exists() => Some(
                std::fs::File::open(index.path())
                    .map_err(|e| ViewError::Io(format!("{}: {e}", index.path().display())))?,
            ),
            _ => None,
        };
        let mut total = 0;
        let mut items = Vec::new();
        let mut buf = Vec::new();
        for (i, e) in index.entries().iter().enumerate() {
            if !query.matches(&e.row) {
                continue;
            }
            if let (Some(s), Some(f)) = (&search, &file) {
                buf.resize(e.len as usize, 0);
                std::os::unix::fs::FileExt::read_exact_at(f, &mut buf, e.offset)
                    .map_err(|err| ViewError::Io(format!("{}: {err}", index.path().display())))?;
                if !s.matches(&buf) {
                    continue;
                }
            }
            if total >= query.offset && items.len() < query.limit {
                let mut row = serde_json::to_value(&e.row).unwrap_or(Value::Null);
                if let Value::Object(o) = &mut row {
                    o.insert("index".into(), i.into());
                    o.insert("line".into(), e.line.into());
                }
                items.push(row);
            }
            total += 1;
        }
        Ok(json!({
            "indexing": index.is_behind(),
            "total": total,
            "offset": query.offset,
            "limit": query.limit,
            "items": items,
            "warnings": warnings,
        }))
    })
    .await
}

/// `GET /api/runs/{run}/trajectories/{index}`: the whole trajectory and its token view.
pub(super) async fn trajectory(
    State(viewer): State<Arc<Viewer>>,
    id: Ids<(usize, usize)>,
) -> Answer {
    let (id, n) = ids(id)?;
    blocking(viewer, move |v| {
        let run = run(v, id)?;
        let (bytes, line) = {
            let index = run.trajectories()?;
            let e = index.entries().get(n).ok_or_else(|| {
                ViewError::NotFound(format!(
                    "run {id} has no trajectory {n} ({} indexed)",
                    index.entries().len()
                ))
            })?;
            let bytes = index
                .read(e)
                .map_err(|err| ViewError::Io(format!("{}: {err}", index.path().display())))?;
            (bytes, e.line)
        };
        let mut warnings = Vec::new();
        let mut t: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ViewError::Io(format!("line {line} changed since it was indexed: {e}")))?;
        let has_tokens = t.get("response_ids").is_some() || t.get("prompt_ids").is_some();
        let tokens = if has_tokens {
            let codec = match run.codec() {
                Ok(c) => Some(c),
                Err(note) => {
                    warnings.push(note);
                    None
                }
            };
            Some(token_view(&t, codec.as_deref()))
        } else {
            None
        };
        // The codec's verdict where the writer recorded it (the gateway does, under
        // `extra_fields.gateway`): `false` means a turn was re-tokenized differently from a
        // full render, so the trace is not a prefix-extension of its re-render.
        // A recorded re-render is written only for rollouts that are not append-only.
        let append_only = ["/extra_fields/gateway/append_only", "/extra_fields/append_only"]
            .iter()
            .find_map(|p| t.pointer(p).and_then(Value::as_bool))
            .or_else(|| t.get("rerender_ids").map(|_| false));
        if append_only == Some(false) {
            warnings.push(
                "the codec flagged this rollout as not append-only: a turn's tokens differ from a full re-render"
                    .into(),
            );
        }
        if let Value::Object(o) = &mut t {
            // Token fields move into the token view (not repeated in the trajectory).
            for k in uniagent_core::AgentLoopOutput::TOKEN_FIELDS {
                o.remove(k);
            }
        }
        Ok(json!({
            "run": id,
            "index": n,
            "line": line,
            "trajectory": t,
            "tokens": tokens,
            "append_only": append_only,
            "warnings": warnings,
        }))
    })
    .await
}

/// `GET /api/compare?a=RUN&b=RUN`: the two runs task by task, flipped tasks first.
pub(super) async fn compare_runs(State(viewer): State<Arc<Viewer>>, p: Params) -> Answer {
    let p = params(p)?;
    let pick = |key: &str| -> Result<usize, ViewError> {
        let v = p
            .get(key)
            .ok_or_else(|| ViewError::bad_query(key, "missing (a run id)"))?;
        v.parse()
            .map_err(|e| ViewError::bad_query(key, format!("{v:?}: {e}")))
    };
    let (a, b) = (pick("a")?, pick("b")?);
    blocking(viewer, move |v| {
        let (ra, rb) = (run(v, a)?, run(v, b)?);
        let mut warnings = ra.dir_warnings();
        warnings.extend(rb.dir_warnings());
        let ia = ra.trajectories()?;
        warnings.extend(ia.warnings());
        // The same run twice would lock one index twice.
        let c = if a == b {
            compare(ia.entries(), ia.entries())
        } else {
            let ib = rb.trajectories()?;
            warnings.extend(ib.warnings());
            compare(ia.entries(), ib.entries())
        };
        let mut out = serde_json::to_value(c).unwrap_or(Value::Null);
        if let Value::Object(o) = &mut out {
            o.insert("a".into(), json!({"id": a, "name": ra.name}));
            o.insert("b".into(), json!({"id": b, "name": rb.name}));
            o.insert("warnings".into(), json!(warnings));
        }
        Ok(out)
    })
    .await
}

/// `GET /api/runs/{run}/metrics`: every numeric field of `metrics.jsonl` as a series over
/// `step` (the line number where a line has no step).
pub(super) async fn metrics(State(viewer): State<Arc<Viewer>>, id: Ids<usize>) -> Answer {
    let id = ids(id)?;
    blocking(viewer, move |v| {
        let run = run(v, id)?;
        let mut warnings = run.dir_warnings();
        let index = run.metrics()?;
        warnings.extend(index.warnings());
        let mut steps = Vec::new();
        let mut series: serde_json::Map<String, Value> = serde_json::Map::new();
        for (i, e) in index.entries().iter().enumerate() {
            let step = e.row.get("step").and_then(Value::as_f64);
            steps.push(step.unwrap_or(e.line as f64));
            for (k, val) in &e.row {
                if k == "step" {
                    continue;
                }
                let s = series.entry(k.clone()).or_insert_with(|| json!([]));
                if let Value::Array(a) = s {
                    // Keep the arrays aligned with `steps` for fields that appear late.
                    a.resize(i, Value::Null);
                    a.push(val.clone());
                }
            }
        }
        for s in series.values_mut() {
            if let Value::Array(a) = s {
                a.resize(steps.len(), Value::Null);
            }
        }
        Ok(json!({ "steps": steps, "series": series, "warnings": warnings }))
    })
    .await
}
