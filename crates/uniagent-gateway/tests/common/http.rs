//! An HTTP request's JSON answer, for the tests that talk to a served gateway directly.

use serde_json::Value;

/// Sends `request` and returns its answer's JSON body.
pub async fn json_body(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}
