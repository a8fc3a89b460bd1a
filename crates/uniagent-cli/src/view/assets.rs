//! The UI, embedded in the binary: one HTML page, its stylesheet and its script.

use axum::extract::Path;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use super::error::ViewError;

const INDEX: &str = include_str!("../../assets/view/index.html");
const APP_JS: &str = include_str!("../../assets/view/app.js");
const STYLE_CSS: &str = include_str!("../../assets/view/style.css");

/// `GET /`: the single page (it routes on the URL fragment).
pub(super) async fn index() -> Html<&'static str> {
    Html(INDEX)
}

/// `GET /assets/{file}`.
pub(super) async fn file(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE_CSS, "text/css; charset=utf-8"),
        _ => return ViewError::NotFound(format!("no asset {name:?}")).into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
