//! `uniagent view`: a web viewer over output directories of `run`, `train` and the gateway.
//!
//! Each directory is a run. `trajectories.jsonl` and `metrics.jsonl` are indexed by byte
//! offset (`index::JsonlIndex`) and followed as they grow, so a run still writing shows new
//! rollouts on the next request; pages read only the lines they show. The UI (HTML, CSS,
//! framework-free JS) is embedded in the binary.
//!
//! JSON routes:
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /api/runs` | every run: statistics, the [`Report`](crate::report::Report) and its table rows, `summary.json`, warnings |
//! | `GET /api/runs/{run}` | one run |
//! | `GET /api/runs/{run}/trajectories?task&exit_reason&success&reward_min&reward_max&step&phase&version&q&offset&limit` | a page of trajectory summaries and the `total` matching |
//! | `GET /api/runs/{run}/trajectories/{index}` | one trajectory (messages, reward, timings) and its token view (`tokens.rerender`: the stream aligned with the recorded full re-render, when there is one) |
//! | `GET /api/runs/{run}/metrics` | `metrics.jsonl` as series over `step` |
//! | `GET /api/compare?a=RUN&b=RUN` | two runs task by task: which tasks flipped, which way |
//!
//! Errors are JSON `{"error": ...}` with status 400 (bad parameter) or 404 (no such run or
//! trajectory); 403 for a request from another site or to a `Host` that is not local or
//! allowed, 405 and 414 likewise as JSON. A corrupt line, a line still being written or a missing directory is a
//! `warnings` entry, never an error.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use uniagent_cli::view::Viewer;
//!
//! let viewer = Viewer::new(&["runs/a".into(), "runs/b".into()]);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on http://{}", listener.local_addr()?);
//! axum::serve(listener, viewer.router()).await
//! # }
//! ```

mod assets;
mod decode;
mod diff;
mod error;
mod index;
mod query;
mod rerender;
mod routes;
mod row;
mod run;
mod stats;
mod tokens;

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use uniagent_http::{error_body, Hardening, SitePolicy};

pub use diff::{edit_script, DiffOp};
pub(crate) use error::ViewError;
pub use row::{read_rows, TrajRow};
use run::Run;

/// The runs being viewed.
#[derive(Debug)]
pub struct Viewer {
    /// One per directory, in the order given; the run id is the position.
    pub runs: Vec<Run>,
}

impl Viewer {
    /// A viewer over `dirs` (missing ones included: they show a warning until they appear).
    pub fn new(dirs: &[PathBuf]) -> Arc<Self> {
        let mut names: Vec<String> = Vec::new();
        let runs = dirs
            .iter()
            .map(|d| {
                let base = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| d.display().to_string());
                let mut name = base.clone();
                let mut k = 2;
                while names.contains(&name) {
                    name = format!("{base} ({k})");
                    k += 1;
                }
                names.push(name.clone());
                Run::new(name, d)
            })
            .collect();
        let viewer = Arc::new(Self { runs });
        spawn_indexer(Arc::downgrade(&viewer));
        viewer
    }

    /// The HTTP routes: the UI at `/`, its assets, the JSON API under `/api`, `/healthz`,
    /// answering local hosts only (see [`router_for`](Self::router_for)).
    pub fn router(self: &Arc<Self>) -> Router {
        self.router_for(SitePolicy::local())
    }

    /// The routes behind `site`'s `Host` and `Origin` checks: a DNS-rebinding page cannot read
    /// the runs (which hold absolute paths, prompts and rewards), and every rejection is JSON
    /// (`{"error": ...}`) with its status.
    pub fn router_for(self: &Arc<Self>, site: SitePolicy) -> Router {
        let routes = Router::new()
            .route("/", get(assets::index))
            .route("/assets/{file}", get(assets::file))
            .route("/healthz", get(|| async { "ok" }))
            .route("/api/runs", get(routes::runs))
            .route("/api/runs/{run}", get(routes::one_run))
            .route("/api/runs/{run}/trajectories", get(routes::trajectories))
            .route(
                "/api/runs/{run}/trajectories/{index}",
                get(routes::trajectory),
            )
            .route("/api/runs/{run}/metrics", get(routes::metrics))
            .route("/api/compare", get(routes::compare_runs))
            .fallback(|| async { ViewError::NotFound("no such page or route".into()) })
            .with_state(Arc::clone(self));
        Hardening::new(site, error_body).apply(routes)
    }
}

/// Bytes the background indexer reads per file between lock releases.
const BACKGROUND_CHUNK: u64 = 8 << 20;

/// Indexes every run's files in the background, chunk by chunk, then keeps following them;
/// the thread ends once the viewer is dropped.
fn spawn_indexer(viewer: Weak<Viewer>) {
    let work = move || loop {
        let Some(v) = viewer.upgrade() else {
            return;
        };
        // Every run gets its chunk (no short-circuit).
        let mut caught_up = true;
        for run in &v.runs {
            caught_up &= run.index_some(BACKGROUND_CHUNK);
        }
        drop(v);
        if caught_up {
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    // Without the thread, requests still index (a budget at a time).
    let _ = std::thread::Builder::new()
        .name("view-indexer".into())
        .spawn(work);
}
