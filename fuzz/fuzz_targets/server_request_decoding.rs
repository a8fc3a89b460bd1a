//! Fuzzes the sandbox server's request decoding: every JSON body model (FastAPI/pydantic-style
//! validation and coercion, then the shared protocol types) and the `/upload` multipart decoder.
//! Neither may panic; bad input must come back as a typed `ServerError`.
//!
//! The first byte picks the decoder; the rest is the body.

#![no_main]

use std::sync::OnceLock;

use axum::extract::{FromRequest, Multipart};
use libfuzzer_sys::fuzz_target;
use uniagent_core::sandbox::{
    Action, CloseSessionRequest, Command, CreateSessionRequest, ReadFileRequest, WriteFileRequest,
};
use uniagent_sandboxes::fuzzing::read_form;
use uniagent_sandboxes::fuzzing::{
    parse_body, ACTION, CLOSE_SESSION, COMMAND, CREATE_SESSION, READ_FILE, WRITE_FILE,
};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

fn staging() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::temp_dir().join(format!("uniagent-fuzz-upload-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    match selector % 7 {
        0 => drop(parse_body::<Action>(body, &ACTION)),
        1 => drop(parse_body::<CreateSessionRequest>(body, &CREATE_SESSION)),
        2 => drop(parse_body::<CloseSessionRequest>(body, &CLOSE_SESSION)),
        3 => drop(parse_body::<Command>(body, &COMMAND)),
        4 => drop(parse_body::<ReadFileRequest>(body, &READ_FILE)),
        5 => drop(parse_body::<WriteFileRequest>(body, &WRITE_FILE)),
        _ => {
            let request = axum::http::Request::builder()
                .method("POST")
                .uri("/upload")
                .header("content-type", "multipart/form-data; boundary=X")
                .body(axum::body::Body::from(body.to_vec()))
                .expect("request");
            runtime().block_on(async {
                if let Ok(multipart) = Multipart::from_request(request, &()).await {
                    if let Ok(form) = read_form(multipart, staging()).await {
                        let _ = std::fs::remove_file(&form.staged);
                    }
                }
            });
        }
    }
});
