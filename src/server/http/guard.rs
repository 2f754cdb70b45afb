//! Checks on each request before rmcp sees it, for answers rmcp gets wrong or cannot give:
//! an oversized `Content-Length` is refused before a byte of the body is read (413); a body
//! that trickles in slower than the body timeout is dropped (408); a body that is not JSON
//! answers 400 with JSON-RPC -32700 (rmcp: 415) and JSON that is no JSON-RPC message 400 with
//! -32600; before protocol 2026-07-28, a standard method whose params do not match its schema
//! answers -32602 (rmcp reads it as an unknown custom method: -32601); `initialize` past the session cap answers 503
//! with the reason; DELETE of an unknown session answers 404 (rmcp: 202).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use serde_json::{json, Value};

use super::sessions::CappedSessions;

/// JSON-RPC error codes (JSON-RPC 2.0 §5.1) and the one this server picks for "busy".
const PARSE_ERROR: i32 = -32700;
const INVALID_REQUEST: i32 = -32600;
const INVALID_PARAMS: i32 = -32602;
const SERVER_BUSY: i32 = -32000;

const SESSION_HEADER: &str = "mcp-session-id";

/// Longest error message sent back: serde quotes offending strings whole, and a client
/// that sent megabytes should not get them echoed.
const MAX_MESSAGE_CHARS: usize = 300;

/// Seconds a client should wait before retrying after the session cap refused it; a guess
/// that matches no timer in particular, only "not immediately".
const RETRY_AFTER_SECS: &str = "5";

/// The first protocol version without sessions (SEP-2567); `initialize` at or after it does
/// not open one, so the session cap does not apply. Versions are ISO dates: they sort as text.
const SESSIONLESS_PROTOCOL: &str = "2026-07-28";

/// What [`guard`] needs.
#[derive(Debug)]
pub struct Guard {
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
    pub sessions: Arc<CappedSessions>,
}

/// Axum middleware; see the module comment.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    match *request.method() {
        Method::POST if is_json(request.headers()) => post(&guard, request, next).await,
        Method::DELETE => match session_id(request.headers()) {
            Some(id) if !guard.sessions.contains(id).await => session_not_found(),
            _ => next.run(request).await,
        },
        _ => next.run(request).await,
    }
}

async fn post(guard: &Guard, request: Request, next: Next) -> Response {
    if let Some(length) = content_length(request.headers()) {
        if length > guard.max_body_bytes as u64 {
            return too_large(guard.max_body_bytes);
        }
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(
        guard.body_timeout,
        axum::body::to_bytes(body, guard.max_body_bytes),
    )
    .await
    {
        Err(_elapsed) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body not received within {} s (--body-timeout-secs)\n",
                    guard.body_timeout.as_secs()
                ),
            )
                .into_response()
        }
        Ok(Err(error)) if is_length_limit(&error) => return too_large(guard.max_body_bytes),
        Ok(Err(error)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {error}\n"),
            )
                .into_response()
        }
        Ok(Ok(bytes)) => bytes,
    };
    if let Some(refusal) = check_message(guard, &parts.headers, &bytes).await {
        return refusal;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `Some(response)` when the body must not reach rmcp.
async fn check_message(guard: &Guard, headers: &HeaderMap, bytes: &Bytes) -> Option<Response> {
    let message = match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(message) => message,
        Err(error) => {
            // Not a message: say whether it is not JSON at all or the wrong shape of JSON.
            // serde_json's messages name a line and column, never the input itself.
            let (code, what) = match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(error) => (PARSE_ERROR, format!("Parse error: {error}")),
                Ok(_) => (
                    INVALID_REQUEST,
                    format!("Invalid Request: not a JSON-RPC 2.0 request, notification or response ({error})"),
                ),
            };
            let id = request_id(bytes);
            return Some(jsonrpc_error(StatusCode::BAD_REQUEST, id, code, what));
        }
    };
    let JsonRpcMessage::Request(request) = &message else {
        return None;
    };
    match &request.request {
        // Sessionless eras validate params and `_meta` themselves, with their own statuses.
        ClientRequest::CustomRequest(custom) if !is_sessionless(headers) => {
            // An unknown session answers 404 first (rmcp), whatever the params.
            if let Some(id) = session_id(headers) {
                if !guard.sessions.contains(id).await {
                    return None;
                }
            }
            let problem = params_problem(&custom.method, custom.params.as_ref())?;
            let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
            Some(jsonrpc_error(StatusCode::OK, id, INVALID_PARAMS, problem))
        }
        ClientRequest::InitializeRequest(initialize)
            if session_id(headers).is_none()
                && initialize.params.protocol_version.as_str() < SESSIONLESS_PROTOCOL
                && guard.sessions.is_full().await =>
        {
            let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
            let cap = guard.sessions.cap();
            let mut response = jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                SERVER_BUSY,
                format!(
                    "session limit reached: {cap} sessions are open (--max-sessions {cap}); \
                     close finished sessions with DELETE, wait for idle ones to expire, or retry later"
                ),
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
            Some(response)
        }
        _ => None,
    }
}

/// Why the params of a standard method do not parse, or `None` for a method rmcp does not
/// know (a genuine custom method: the server answers -32601 for it, which is right).
fn params_problem(method: &str, params: Option<&Value>) -> Option<String> {
    use rmcp::model::{
        CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams,
        GetSkillRequestParams, InitializeRequestParams, ReadResourceDirectoryRequestParams,
        ReadResourceRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
    };
    fn explain<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> String {
        let value = params.cloned().unwrap_or(Value::Null);
        match serde_path_to_error::deserialize::<_, T>(value) {
            Err(error) if error.path().iter().next().is_some() => {
                format!("`{}`: {}", error.path(), error.inner())
            }
            Err(error) => error.inner().to_string(),
            // Parses alone but not inside the request: a `_meta` or shape problem.
            Ok(_) => "the request does not match its schema".to_owned(),
        }
    }
    let detail = match method {
        "tools/call" => explain::<CallToolRequestParams>(params),
        "resources/read" => explain::<ReadResourceRequestParams>(params),
        "prompts/get" => explain::<GetPromptRequestParams>(params),
        "completion/complete" => explain::<CompleteRequestParams>(params),
        "initialize" => explain::<InitializeRequestParams>(params),
        "resources/subscribe" => explain::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => explain::<UnsubscribeRequestParams>(params),
        "skills/get" => explain::<GetSkillRequestParams>(params),
        "resources/directory/read" => explain::<ReadResourceDirectoryRequestParams>(params),
        "ping"
        | "server/discover"
        | "tools/list"
        | "prompts/list"
        | "resources/list"
        | "resources/templates/list"
        | "skills/list"
        | "subscriptions/listen"
        | "tasks/get"
        | "tasks/update"
        | "tasks/cancel" => "the params do not match its schema".to_owned(),
        _ => return None,
    };
    Some(format!("Invalid params for `{method}`: {detail}"))
}

fn jsonrpc_error(status: StatusCode, id: Value, code: i32, message: String) -> Response {
    let message = shorten(message);
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// `message` cut to [`MAX_MESSAGE_CHARS`] characters, marked when cut.
fn shorten(message: String) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}… (truncated)", &message[..cut]),
        None => message,
    }
}

/// The `id` of a JSON object that is not a valid message, if it has a usable one.
fn request_id(bytes: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct WithId {
        id: Option<Value>,
    }
    match serde_json::from_slice::<WithId>(bytes) {
        Ok(WithId {
            id: Some(id @ (Value::String(_) | Value::Number(_))),
        }) => id,
        _ => Value::Null,
    }
}

fn too_large(limit: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Payload Too Large: request body exceeds {limit} bytes (--max-body-bytes)\n"),
    )
        .into_response()
}

fn session_not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found\n").into_response()
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = current.source();
    }
    false
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the request names a protocol version without sessions in its header.
fn is_sessionless(headers: &HeaderMap) -> bool {
    headers
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|version| version >= SESSIONLESS_PROTOCOL)
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::{params_problem, shorten, MAX_MESSAGE_CHARS};

    #[test]
    fn bad_params_name_the_method_and_field_without_echoing_the_input() {
        let huge = "x".repeat(100_000);
        let params = serde_json::json!({ "name": "list_skills", "arguments": huge });
        let problem = params_problem("tools/call", Some(&params)).unwrap();
        assert!(
            problem.contains("tools/call") && problem.contains("arguments"),
            "{problem}"
        );
        let sent = shorten(problem);
        assert!(sent.chars().count() <= MAX_MESSAGE_CHARS + 20, "{sent}");
        assert!(params_problem("no/such", Some(&params)).is_none());
    }
}
