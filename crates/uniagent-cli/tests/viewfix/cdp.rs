//! A minimal Chrome DevTools Protocol client over a websocket: start headless Chromium,
//! evaluate JavaScript in its page, wait for conditions, take screenshots.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// The Chromium binary: `$UNIAGENT_CHROMIUM`, else `chromium` / `chromium-browser` on PATH.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UNIAGENT_CHROMIUM").map(PathBuf::from) {
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
        .find(|p| p.is_file())
}

/// The browser process, killed and reaped on drop (also when an assertion fails).
pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One page's DevTools connection.
pub struct Page {
    ws: Ws,
    next_id: u64,
}

impl Page {
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(WsMessage::Text(msg.to_string().into()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer in 30 s"))
                .expect("the browser closed the connection")
                .unwrap();
            let WsMessage::Text(text) = frame else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates `js` in the page (promises awaited) and returns its value.
    pub async fn eval(&mut self, js: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": js, "awaitPromise": true, "returnByValue": true}),
            )
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{js}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits until `js` is truthy (up to 20 s).
    pub async fn wait_for(&mut self, js: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if self.eval(&format!("!!({js})")).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let body = self.eval("document.body.innerText").await;
        panic!("timed out waiting for {js}; page shows: {body}");
    }

    pub async fn screenshot(&mut self, dir: &Path, name: &str) {
        self.capture(dir, name, json!({"format": "png"})).await;
    }

    /// A screenshot of the first element matching `selector` only (with an 8 px margin).
    pub async fn screenshot_of(&mut self, dir: &Path, name: &str, selector: &str) {
        let rect = self
            .eval(&format!(
                "(() => {{ const r = document.querySelector({}).getBoundingClientRect(); \
                 return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; }})()",
                json!(selector)
            ))
            .await;
        let v: Vec<f64> = rect
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let clip = json!({"x": (v[0] - 8.0).max(0.0), "y": (v[1] - 8.0).max(0.0),
                          "width": v[2] + 16.0, "height": v[3] + 16.0, "scale": 1});
        self.capture(dir, name, json!({"format": "png", "clip": clip}))
            .await;
    }

    async fn capture(&mut self, dir: &Path, name: &str, params: Value) {
        let r = self.call("Page.captureScreenshot", params).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name} is not a PNG");
        std::fs::write(dir.join(name), png).unwrap();
    }

    pub async fn go(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
    }
}

/// Starts Chromium on `about:blank` and connects to its page.
pub async fn launch(exe: &Path) -> (Browser, Page) {
    let profile = tempfile::tempdir().unwrap();
    let child = Command::new(exe)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let browser = Browser {
        child,
        _profile: profile,
    };
    // Chromium writes its port to DevToolsActivePort in the profile once it listens.
    let port_file = browser._profile.path().join("DevToolsActivePort");
    let start = Instant::now();
    let port = loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            if let Some(p) = text
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<u16>().ok())
            {
                break p;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "chromium did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let targets: Value = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ws_url = targets
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "page")
        .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        .unwrap()
        .to_owned();
    let (ws, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    (browser, Page { ws, next_id: 0 })
}
