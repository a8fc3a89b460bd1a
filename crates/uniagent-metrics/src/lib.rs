#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uniagent_core::telemetry::MetricDef;
use uniagent_http::ServeLimits;

pub use uniagent_core::telemetry::{MetricKind, CATALOGUE as CORE_CATALOGUE};

/// Bucket bounds (seconds) of every `_seconds` histogram: from a fast tool call (1 ms) to a
/// slow SWE rollout (an hour).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// The standard process metrics (`process_resident_memory_bytes`, `process_open_fds`,
/// `process_cpu_seconds_total`, ...) every endpoint also exports, refreshed on each scrape.
pub const PROCESS_METRICS: &[&str] = &[
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_threads",
];

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address is not `HOST:PORT`.
    #[error("--metrics-addr must be HOST:PORT (e.g. 127.0.0.1:9464 or 0.0.0.0:0), got `{0}`")]
    Address(String),
    /// Binding the address failed (in use, not local, no permission).
    #[error("cannot listen for /metrics on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// What the OS said.
        source: io::Error,
    },
    /// Another metrics recorder was installed in this process before ours.
    #[error("a different metrics recorder is installed already: {0}")]
    Recorder(String),
}

/// The recorder this crate installed, or why it could not (cached: a foreign recorder stays).
static INSTALLED: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the Prometheus recorder as this process's `metrics` recorder (once; later calls
/// return the same handle) and registers the help texts of `catalogues`.
///
/// Fails when a recorder that is not ours was installed first.
pub fn install_recorder(catalogues: &[&[MetricDef]]) -> Result<PrometheusHandle, MetricsError> {
    let installed = INSTALLED.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .map_err(|e| e.to_string())?
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
        metrics_process::Collector::default().describe();
        Ok(handle)
    });
    let handle = installed.clone().map_err(MetricsError::Recorder)?;
    for catalogue in catalogues {
        uniagent_core::telemetry::describe(catalogue);
    }
    Ok(handle)
}

/// A running `/metrics` endpoint. Dropping it stops serving at once; [`Exporter::finish`]
/// serves on for a last scrape first.
///
/// ```no_run
/// # async fn demo() -> Result<(), uniagent_metrics::MetricsError> {
/// let exporter = uniagent_metrics::Exporter::start("127.0.0.1:0", &[uniagent_metrics::CORE_CATALOGUE]).await?;
/// eprintln!("metrics on {}", exporter.url());
/// // ... the process works, Prometheus scrapes ...
/// exporter.finish(std::time::Duration::from_secs(15)).await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Exporter {
    addr: SocketAddr,
    scrape: Arc<Scrape>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<io::Result<()>>>,
    upkeep: JoinHandle<()>,
}

impl Exporter {
    /// Installs the recorder (see [`install_recorder`]) and serves `GET /metrics` on `addr`
    /// (`HOST:PORT`; port 0 picks a free one).
    pub async fn start(addr: &str, catalogues: &[&[MetricDef]]) -> Result<Self, MetricsError> {
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(MetricsError::Address(addr.to_owned()));
        }
        let handle = install_recorder(catalogues)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| MetricsError::Bind {
                addr: addr.to_owned(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| MetricsError::Bind {
            addr: addr.to_owned(),
            source,
        })?;
        let scrape = Arc::new(Scrape {
            handle: handle.clone(),
            hooks: Mutex::default(),
        });
        let app = Router::new()
            .route("/metrics", get(serve_scrape))
            .with_state(Arc::clone(&scrape));
        let (stop, stopped) = oneshot::channel::<()>();
        let limits = ServeLimits {
            max_connections: 16,
            header_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(2),
        };
        let server = tokio::spawn(uniagent_http::serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        // Histograms keep raw samples until upkeep folds them into buckets; without scrapes
        // memory would grow, so fold them on a timer too.
        let upkeep_handle = handle.clone();
        let upkeep = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                upkeep_handle.run_upkeep();
            }
        });
        Ok(Self {
            addr: local,
            scrape,
            stop: Some(stop),
            server: Some(server),
            upkeep,
        })
    }

    /// The address bound (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// The exposition a scrape would get now.
    pub fn render(&self) -> String {
        self.scrape.render()
    }

    /// Runs `hook` before every scrape: for gauges read from a state that has no event of
    /// its own (a pool's free slots, a queue's length).
    pub fn on_scrape(&self, hook: impl Fn() + Send + Sync + 'static) {
        if let Ok(mut hooks) = self.scrape.hooks.lock() {
            hooks.push(Box::new(hook));
        }
    }

    /// Serves on for `linger` (so the scraper reads the final values of a short run), then
    /// stops within the server's shutdown grace.
    pub async fn finish(mut self, linger: Duration) {
        tokio::time::sleep(linger).await;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            match tokio::time::timeout(Duration::from_secs(5), server).await {
                Ok(Ok(Err(e))) => tracing::warn!("the /metrics server ended with an error: {e}"),
                Ok(Err(e)) => tracing::warn!("the /metrics server task failed: {e}"),
                Err(_) => tracing::warn!("the /metrics server did not stop within 5 s"),
                Ok(Ok(Ok(()))) => {}
            }
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.upkeep.abort();
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

type Hook = Box<dyn Fn() + Send + Sync>;

/// What a scrape reads: the recorder's handle and the hooks that refresh gauges first.
struct Scrape {
    handle: PrometheusHandle,
    hooks: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Scrape {
    fn render(&self) -> String {
        if let Ok(hooks) = self.hooks.lock() {
            for hook in hooks.iter() {
                hook();
            }
        }
        metrics_process::Collector::default().collect();
        self.handle.render()
    }
}

async fn serve_scrape(
    axum::extract::State(scrape): axum::extract::State<Arc<Scrape>>,
) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        scrape.render(),
    )
}

/// The line a process prints on stderr once its endpoint listens (the scripts' convention).
///
/// ```
/// let line = uniagent_metrics::announce_line("127.0.0.1:9464".parse().unwrap());
/// assert_eq!(line, "metrics on http://127.0.0.1:9464/metrics");
/// ```
pub fn announce_line(addr: SocketAddr) -> String {
    format!("metrics on http://{addr}/metrics")
}

/// Parses one Prometheus text exposition into `(series, value)` pairs, where `series` is the
/// metric name with its labels as written (`name{a="x",b="y"}`). Comment lines are skipped.
/// For tests and the report: it reads what [`Exporter::render`] writes, nothing more.
///
/// ```
/// let text = "# HELP x a counter\nx_total{a=\"1\"} 3\nup 1\n";
/// let values = uniagent_metrics::parse_exposition(text);
/// assert_eq!(values, vec![("x_total{a=\"1\"}".to_owned(), 3.0), ("up".to_owned(), 1.0)]);
/// ```
pub fn parse_exposition(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}
