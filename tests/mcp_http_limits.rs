//! The HTTP limits over loopback with raw requests: half-open connections, oversized and slow
//! bodies, the session cap, unknown sessions, malformed JSON, bad params and CORS.

mod mcp_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mcp_support::{header_value, raw_post, raw_request, spawn_http, INITIALIZE, JSON_POST};

/// Open a connection that sends part of a request's headers and then nothing.
fn half_open(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .write_all(format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .expect("write");
    stream
}

/// `initialize` and return the new session's id.
fn open_session(addr: &str) -> String {
    let (status, head, body) = raw_request(addr, "POST", &JSON_POST, INITIALIZE);
    assert_eq!(status, 200, "{head}\n{body}");
    header_value(&head, "mcp-session-id").expect("session id header")
}

fn with_session(session: &str) -> Vec<(&str, &str)> {
    let mut headers = JSON_POST.to_vec();
    headers.push(("Mcp-Session-Id", session));
    headers.push(("MCP-Protocol-Version", "2025-11-25"));
    headers
}

#[test]
fn half_open_connections_are_closed_and_do_not_starve_requests() {
    let server = spawn_http(&["--max-connections", "4", "--header-timeout-secs", "1"]);
    let mut idle: Vec<TcpStream> = (0..4).map(|_| half_open(&server.addr)).collect();
    // All four slots are held; this request waits until the header timeout frees one.
    let (status, body) = raw_post(&server.addr, &[], INITIALIZE);
    assert_eq!(status, 200, "{body}");
    for stream in &mut idle {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut rest = Vec::new();
        // Closed by the server: EOF (or a reset), never a read timeout.
        match stream.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(error) => assert!(
                !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "half-open connection still open: {error}"
            ),
        }
    }
}

#[test]
fn oversized_content_length_is_refused_before_the_body_arrives() {
    let server = spawn_http(&[]);
    let mut stream = TcpStream::connect(&server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 2000000000\r\n\r\n{{",
        server.addr
    );
    stream.write_all(head.as_bytes()).expect("write");
    let mut response = [0u8; 512];
    let read = stream
        .read(&mut response)
        .expect("an answer without the body");
    let response = String::from_utf8_lossy(&response[..read]);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
}

#[test]
fn a_body_slower_than_the_body_timeout_is_refused() {
    let server = spawn_http(&["--body-timeout-secs", "1"]);
    let mut stream = TcpStream::connect(&server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
        server.addr
    );
    stream.write_all(head.as_bytes()).expect("write");
    let mut response = [0u8; 512];
    let read = stream.read(&mut response).expect("an answer");
    let response = String::from_utf8_lossy(&response[..read]);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
}

#[test]
fn session_cap_refuses_initialize_with_a_reason_until_a_session_closes() {
    let server = spawn_http(&["--max-sessions", "2"]);
    let first = open_session(&server.addr);
    let _second = open_session(&server.addr);
    let (status, head, body) = raw_request(&server.addr, "POST", &JSON_POST, INITIALIZE);
    assert_eq!(status, 503, "{head}\n{body}");
    assert!(body.contains("-32000"), "{body}");
    assert!(body.contains("--max-sessions 2"), "{body}");
    assert!(header_value(&head, "retry-after").is_some(), "{head}");
    let (status, _, body) = raw_request(&server.addr, "DELETE", &with_session(&first), "");
    assert!((200..300).contains(&status), "{status} {body}");
    open_session(&server.addr);
}

#[test]
fn unknown_sessions_answer_404() {
    let server = spawn_http(&[]);
    let headers = with_session("no-such-session");
    let (status, _, _) = raw_request(&server.addr, "DELETE", &headers, "");
    assert_eq!(status, 404);
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let (status, _, _) = raw_request(&server.addr, "POST", &headers, list);
    assert_eq!(status, 404);
    let bad_call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":5}}"#;
    let (status, _, _) = raw_request(&server.addr, "POST", &headers, bad_call);
    assert_eq!(status, 404);
}

#[test]
fn malformed_json_answers_400_with_a_json_rpc_parse_error() {
    let server = spawn_http(&[]);
    let (status, head, body) = raw_request(&server.addr, "POST", &JSON_POST, "{not json");
    assert_eq!(status, 400, "{head}\n{body}");
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(error["error"]["code"], -32700, "{body}");
    assert_eq!(error["id"], serde_json::Value::Null, "{body}");

    let (status, _, body) = raw_request(
        &server.addr,
        "POST",
        &JSON_POST,
        r#"{"id":7,"hello":"world"}"#,
    );
    assert_eq!(status, 400, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(error["error"]["code"], -32600, "{body}");
    assert_eq!(error["id"], 7, "{body}");
}

#[test]
fn tools_call_with_bad_params_answers_invalid_params_naming_the_field() {
    let server = spawn_http(&[]);
    let session = open_session(&server.addr);
    let headers = with_session(&session);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, _) = raw_request(&server.addr, "POST", &headers, initialized);
    assert_eq!(status, 202);
    let bad_call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}"#;
    let (status, _, body) = raw_request(&server.addr, "POST", &headers, bad_call);
    assert_eq!(status, 200, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(error["error"]["code"], -32602, "{body}");
    assert_eq!(error["id"], 3, "{body}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("tools/call") && message.contains("name"),
        "{body}"
    );
    // A genuinely unknown method still answers -32601.
    let unknown = r#"{"jsonrpc":"2.0","id":4,"method":"no/such","params":{}}"#;
    let (_, _, body) = raw_request(&server.addr, "POST", &headers, unknown);
    assert!(body.contains("-32601"), "{body}");
}

#[test]
fn cors_headers_only_for_explicitly_allowed_origins() {
    let server = spawn_http(&[
        "--allow-origin",
        "https://app.example:443",
        "--token",
        "s3cret",
    ]);
    // A preflight carries no token and is answered.
    let (status, head, _) = raw_request(
        &server.addr,
        "OPTIONS",
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type, mcp-session-id",
            ),
        ],
        "",
    );
    assert_eq!(status, 204, "{head}");
    assert_eq!(
        header_value(&head, "access-control-allow-origin").as_deref(),
        Some("https://app.example")
    );
    assert!(header_value(&head, "access-control-allow-headers")
        .is_some_and(|allowed| allowed.contains("mcp-session-id")));

    let mut headers = JSON_POST.to_vec();
    headers.push(("Authorization", "Bearer s3cret"));
    headers.push(("Origin", "https://app.example"));
    let (status, head, body) = raw_request(&server.addr, "POST", &headers, INITIALIZE);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header_value(&head, "access-control-allow-origin").as_deref(),
        Some("https://app.example")
    );
    assert!(header_value(&head, "access-control-expose-headers")
        .is_some_and(|exposed| exposed.contains("mcp-session-id")));

    // Loopback origins pass the Origin check but get no CORS grant.
    headers.pop();
    headers.push(("Origin", "http://localhost:3000"));
    let (status, head, _) = raw_request(&server.addr, "POST", &headers, INITIALIZE);
    assert_eq!(status, 200);
    assert_eq!(header_value(&head, "access-control-allow-origin"), None);
}

#[test]
fn limits_that_would_refuse_everything_are_rejected_at_start() {
    for (flag, value) in [
        ("--max-sessions", "0"),
        ("--max-connections", "0"),
        ("--header-timeout-secs", "0"),
        ("--allow-origin", "app.example"),
    ] {
        let output = std::process::Command::new(mcp_support::BIN)
            .args(["serve", "--http", "127.0.0.1:0", flag, value])
            .env_remove("MOE_SKILLS_TOKEN")
            .output()
            .expect("run");
        assert!(!output.status.success(), "{flag} {value} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(flag), "{flag}: {stderr}");
    }
}

#[test]
fn a_token_on_the_command_line_draws_a_warning_and_the_environment_does_not() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let first_lines = |token_arg: bool| -> String {
        let mut command = Command::new(mcp_support::BIN);
        command
            .args(["serve", "--http", "127.0.0.1:0"])
            .env("MOE_SKILLS_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if token_arg {
            command
                .args(["--token", "s3cret"])
                .env_remove("MOE_SKILLS_TOKEN");
        } else {
            command.env("MOE_SKILLS_TOKEN", "s3cret");
        }
        let mut child = command.spawn().expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("listening on") {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        seen
    };
    let from_argument = first_lines(true);
    assert!(
        from_argument.contains("process list") && from_argument.contains("MOE_SKILLS_TOKEN"),
        "{from_argument}"
    );
    let from_environment = first_lines(false);
    assert!(
        from_environment.contains("listening on") && !from_environment.contains("process list"),
        "{from_environment}"
    );
}
