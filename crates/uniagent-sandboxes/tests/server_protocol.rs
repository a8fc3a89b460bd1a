//! The HTTP surface over real HTTP: authentication, status codes and bodies of errors, the
//! validation (422) shapes, the replay cache.

#![cfg(feature = "server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server_common;

use serde_json::{json, Value};
use server_common::{class_path, TestServer, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_covers_every_path() {
    let s = TestServer::start().await;
    for path in ["/", "/is_alive", "/nope"] {
        let r = s
            .client
            .get(format!("{}{path}", s.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned()),
            Some("APIKey".into())
        );
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"detail": "Not authenticated"})
        );
    }
    for wrong in ["test-toke", "test-token!", "x", ""] {
        let r = s
            .client
            .get(format!("{}/is_alive", s.url))
            .header("x-api-key", wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{wrong:?}");
        assert!(r.headers().get("www-authenticate").is_none());
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"detail": "Invalid API Key"})
        );
    }
    // Header names are case-insensitive.
    let r = s
        .client
        .get(format!("{}/", s.url))
        .header("x-api-key", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"message": "hello world"})
    );

    let open = TestServer::start_with(|c| {
        c.auth_token = String::new();
        c.insecure_no_auth = true;
    })
    .await;
    let r = open
        .client
        .get(format!("{}/is_alive", open.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.json::<Value>().await.unwrap()),
        (200, json!({"is_alive": true, "message": ""}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_methods_and_bodies() {
    let s = TestServer::start().await;
    assert_eq!(s.get("/nope").await, (404, json!({"detail": "Not Found"})));
    assert_eq!(
        s.get("/execute").await,
        (405, json!({"detail": "Method Not Allowed"}))
    );
    let (st, b) = s.post("/create_session", json!({})).await;
    assert_eq!(st, 422);
    assert_eq!(b["detail"][0]["type"], "union_tag_not_found");
    assert_eq!(
        b["detail"][0]["ctx"],
        json!({"discriminator": "'session_type'"})
    );
    let (st, b) = s
        .post(
            "/run_in_session",
            json!({"action_type": "fish", "command": "ls"}),
        )
        .await;
    assert_eq!(
        (st, b["detail"][0]["type"].clone()),
        (422, json!("union_tag_invalid"))
    );
    let (st, b) = s
        .post("/run_in_session", json!({"action_type": "bash"}))
        .await;
    assert_eq!(st, 422);
    assert_eq!(b["detail"][0]["loc"], json!(["body", "bash", "command"]));
    assert_eq!(b["detail"][0]["msg"], "Field required");
    let (st, b) = s
        .post("/execute", json!({"command": "true", "timeout": "soon"}))
        .await;
    assert_eq!(
        (st, b["detail"][0]["type"].clone()),
        (422, json!("float_parsing"))
    );
    let (st, b) = s.post("/read_file", json!({})).await;
    assert_eq!(
        (st, b["detail"][0]["loc"].clone()),
        (422, json!(["body", "path"]))
    );
    let r = s
        .client
        .post(format!("{}/execute", s.url))
        .header("X-API-Key", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"][0],
        json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null})
    );
    let r = s
        .client
        .post(format!("{}/execute", s.url))
        .header("X-API-Key", TOKEN)
        .body("{\"command\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"][0]["type"],
        "json_invalid"
    );
    // Unknown fields are ignored; lax coercion applies.
    let (st, b) = s
        .post(
            "/execute",
            json!({"command": ["echo", "x"], "surprise": 1, "timeout": "5"}),
        )
        .await;
    assert_eq!(
        (st, b),
        (200, json!({"stdout": "x\n", "stderr": "", "exit_code": 0}))
    );
}

async fn post_with_id(
    s: &TestServer,
    path: &str,
    body: Value,
    id: &str,
    key: &str,
) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}{path}", s.url))
        .header("X-API-Key", key)
        .header("X-Request-ID", id)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_replay_answers_without_rerunning() {
    let s = TestServer::start().await;
    let date = json!({"command": "date +%s%N", "shell": true});
    let first = post_with_id(&s, "/execute", date.clone(), "id-1", TOKEN).await;
    let other = post_with_id(&s, "/execute", date.clone(), "id-2", TOKEN).await;
    assert_ne!(first.1["stdout"], other.1["stdout"]);
    // Many slots: id-1 is still replayed after id-2.
    assert_eq!(
        post_with_id(&s, "/execute", date.clone(), "id-1", TOKEN).await,
        first
    );
    // Authentication comes first: a replay with a wrong key is refused.
    assert_eq!(
        post_with_id(&s, "/execute", date.clone(), "id-1", "wrong")
            .await
            .0,
        401
    );
    // 511 answers are not stored: the command runs again.
    let counter = s.scratch.path().join("count");
    let bump = json!({"command": format!("echo x >> {0}; wc -l < {0}; exit 1", counter.display()), "shell": true, "check": true});
    let (st, b1) = post_with_id(&s, "/execute", bump.clone(), "id-3", TOKEN).await;
    assert_eq!(
        (st, class_path(&b1)),
        (511, "swerex.exceptions.NonZeroExitCodeError")
    );
    let _ = post_with_id(&s, "/execute", bump, "id-3", TOKEN).await;
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().lines().count(),
        2
    );
    // 422 answers are stored (as SWE-ReX does).
    let bad = post_with_id(&s, "/execute", json!({}), "id-4", TOKEN).await;
    assert_eq!(bad.0, 422);
    assert_eq!(post_with_id(&s, "/execute", date, "id-4", TOKEN).await, bad);
}
