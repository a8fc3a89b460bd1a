//! Turning an HTTP answer of a SWE-ReX server into a typed value or a typed error.
//!
//! This is a pure function of status and body, so it is unit-tested, property-tested and fuzzed
//! without a network (`fuzz/fuzz_targets/client_response_decoding.rs`).

use serde::de::DeserializeOwned;
use uniagent_core::retryable_http_status;
use uniagent_core::sandbox::ExceptionPayload;
use uniagent_core::{Error, Result};

/// The largest piece of a non-JSON or unexpected body quoted in an error message.
const QUOTED_BODY_LIMIT: usize = 512;

/// Decodes the answer to one request.
///
/// - `200`: the body must be the JSON of `T`; anything else is [`Error::Protocol`].
/// - `511`: SWE-ReX's exception transfer, `{"swerexception": {...}}`, becomes
///   [`Error::Runtime`] with the class path the server sent; a 511 without that body is
///   [`Error::Protocol`].
/// - `401`/`403`: a rejected token, [`Error::Sandbox`], not retryable.
/// - `422`: the server rejected the request body, [`Error::InvalidInput`] quoting its detail.
/// - `429`, `502`, `503`: the server (or a gateway before it) refused the request without running
///   it: [`Error::Sandbox`] with `retryable: true`.
/// - anything else: [`Error::Protocol`] naming the status.
///
/// Never panics, whatever the bytes.
///
/// ```
/// use uniagent_core::sandbox::{ExceptionClass, IsAliveResponse};
/// use uniagent_core::Error;
/// use uniagent_sandboxes::client::decode_response;
///
/// let ok: IsAliveResponse = decode_response("remote", 200, br#"{"is_alive":true,"message":""}"#).unwrap();
/// assert!(ok.is_alive);
///
/// let body = br#"{"swerexception":{"message":"timeout after 1.0 seconds","class_path":
///     "swerex.exceptions.CommandTimeoutError","traceback":"","extra_info":{}}}"#;
/// match decode_response::<IsAliveResponse>("remote", 511, body).unwrap_err() {
///     Error::Runtime { exception, .. } => assert_eq!(exception.class(), ExceptionClass::CommandTimeout),
///     other => panic!("unexpected {other}"),
/// }
/// ```
pub fn decode_response<T: DeserializeOwned>(backend: &str, status: u16, body: &[u8]) -> Result<T> {
    match status {
        200 => serde_json::from_slice(body).map_err(|e| Error::Protocol {
            message: format!("{backend}: malformed 200 response ({e}): {}", quote(body)),
        }),
        511 => Err(decode_exception(backend, body)),
        401 | 403 => Err(Error::Sandbox {
            backend: backend.to_owned(),
            message: format!(
                "the server rejected the auth token (HTTP {status}): {}",
                detail(body)
            ),
            retryable: false,
            source: None,
        }),
        422 => Err(Error::invalid_input(format!(
            "{backend}: the server rejected the request body (HTTP 422): {}",
            detail(body)
        ))),
        // A command may have run on a 500 or 504: only refusals are retried.
        _ if retryable_http_status(status, false) => Err(Error::Sandbox {
            backend: backend.to_owned(),
            message: format!(
                "the server is unavailable (HTTP {status}): {}",
                detail(body)
            ),
            retryable: true,
            source: None,
        }),
        _ => Err(Error::Protocol {
            message: format!("{backend}: unexpected HTTP {status}: {}", detail(body)),
        }),
    }
}

/// A 511 body: the runtime's exception, or a protocol error when the body is not one.
fn decode_exception(backend: &str, body: &[u8]) -> Error {
    match serde_json::from_slice::<ExceptionPayload>(body) {
        Ok(payload) => Error::Runtime {
            backend: backend.to_owned(),
            exception: Box::new(payload.swerexception),
        },
        Err(e) => Error::Protocol {
            message: format!(
                "{backend}: HTTP 511 without a `swerexception` body ({e}): {}",
                quote(body)
            ),
        },
    }
}

/// FastAPI's `{"detail": ...}` rendered as text, or the quoted body.
fn detail(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(map)) => match map.get("detail") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => truncate(other.to_string()),
            None => quote(body),
        },
        _ => quote(body),
    }
}

/// The body as (lossy) text, cut to [`QUOTED_BODY_LIMIT`] bytes.
fn quote(body: &[u8]) -> String {
    truncate(String::from_utf8_lossy(body).into_owned())
}

fn truncate(mut text: String) -> String {
    if text.len() > QUOTED_BODY_LIMIT {
        let mut cut = QUOTED_BODY_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uniagent_core::sandbox::{
        BashObservation, CommandResponse, ExceptionClass, IsAliveResponse,
    };
    use uniagent_core::ErrorKind;

    use super::*;

    #[test]
    fn observed_swerex_bodies_decode() {
        let obs: BashObservation = decode_response(
            "r",
            200,
            br#"{"output":"hi\n","exit_code":0,"failure_reason":"","expect_string":"SHELLPS1PREFIX","session_type":"bash"}"#,
        )
        .unwrap();
        assert_eq!((obs.output.as_str(), obs.exit_code), ("hi\n", Some(0)));
        let out: CommandResponse =
            decode_response("r", 200, br#"{"stdout":"","stderr":"","exit_code":3}"#).unwrap();
        assert_eq!(out.exit_code, Some(3));
    }

    #[test]
    fn runtime_exceptions_keep_class_and_extra_info() {
        let body = json!({"swerexception": {
            "message": "Error (exit code 2) while checking bash command",
            "class_path": "swerex.exceptions.BashIncorrectSyntaxError",
            "traceback": "Traceback ...",
            "extra_info": {"bash_stdout": "", "bash_stderr": "bash: line 2: syntax error\n"}}});
        let err =
            decode_response::<BashObservation>("r", 511, body.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed);
        assert!(!err.is_retryable());
        let Error::Runtime { exception, .. } = err else {
            panic!("not a runtime error")
        };
        assert_eq!(exception.class(), ExceptionClass::BashIncorrectSyntax);
        assert_eq!(
            exception.extra_info["bash_stderr"],
            "bash: line 2: syntax error\n"
        );
    }

    #[test]
    fn timeouts_and_missing_sessions_map_to_their_kinds() {
        for (class, kind) in [
            ("swerex.exceptions.CommandTimeoutError", ErrorKind::Timeout),
            (
                "swerex.exceptions.SessionDoesNotExistError",
                ErrorKind::NotFound,
            ),
            ("builtins.FileNotFoundError", ErrorKind::NotFound),
            (
                "swerex.exceptions.NonZeroExitCodeError",
                ErrorKind::CommandFailed,
            ),
        ] {
            let body = json!({"swerexception": {"message": "m", "class_path": class, "traceback": "", "extra_info": {}}});
            let err = decode_response::<IsAliveResponse>("r", 511, body.to_string().as_bytes())
                .unwrap_err();
            assert_eq!(err.kind(), kind, "{class}");
        }
    }

    #[test]
    fn http_errors_are_typed() {
        let err = decode_response::<IsAliveResponse>("r", 401, br#"{"detail":"Invalid API Key"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("Invalid API Key"), "{err}");
        assert!(!err.is_retryable());
        let err = decode_response::<IsAliveResponse>(
            "r",
            422,
            br#"{"detail":[{"type":"union_tag_not_found","loc":["body"],"msg":"m","input":{}}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains("union_tag_not_found"), "{err}");
        assert!(decode_response::<IsAliveResponse>("r", 503, b"busy")
            .unwrap_err()
            .is_retryable());
        assert!(!decode_response::<IsAliveResponse>("r", 504, b"")
            .unwrap_err()
            .is_retryable());
        let err = decode_response::<IsAliveResponse>("r", 511, b"<html>proxy</html>").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        let err = decode_response::<IsAliveResponse>("r", 200, b"{\"is_alive\": 1}").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
    }

    #[test]
    fn quoted_bodies_are_bounded_and_cut_on_char_boundaries() {
        let body = "é".repeat(2000);
        let err = decode_response::<IsAliveResponse>("r", 500, body.as_bytes()).unwrap_err();
        assert!(err.to_string().len() < QUOTED_BODY_LIMIT + 100);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_answers_never_panic(status in 100u16..600, body in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let result = decode_response::<BashObservation>("r", status, &body);
            proptest::prop_assert!(status == 200 || result.is_err());
        }

        #[test]
        fn any_exception_round_trips(message in ".*", class_path in "[a-z]{1,8}(\\.[A-Za-z]{1,12}){1,3}", traceback in ".*") {
            let body = json!({"swerexception": {"message": message, "class_path": class_path, "traceback": traceback, "extra_info": {}}});
            let err = decode_response::<BashObservation>("r", 511, body.to_string().as_bytes()).unwrap_err();
            let Error::Runtime { exception, .. } = err else { panic!("not a runtime error") };
            proptest::prop_assert_eq!(exception.message, message);
            proptest::prop_assert_eq!(exception.class_path, class_path);
        }
    }
}
