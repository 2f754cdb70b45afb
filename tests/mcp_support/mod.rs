//! Helpers shared by the MCP integration tests: fixture paths and a spawned server binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_moe-skills");

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture_arg(name: &str) -> String {
    fixture(name).display().to_string()
}

/// A `moe-skills serve --http` process, killed on drop.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
    pub addr: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the server on a free loopback port and wait for its "listening on" log line.
pub fn spawn_http(extra: &[&str]) -> HttpServer {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--skills-dir",
            &fixture_arg("catalog"),
        ])
        .args(extra)
        .env_remove("MOE_SKILLS_TOKEN")
        .env("MOE_SKILLS_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn moe-skills serve --http");
    let stderr = child.stderr.take().expect("stderr piped");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on ").nth(1) {
                let _ = sender.send(rest.trim().to_owned());
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let url = loop {
        if let Ok(url) = receiver.recv_timeout(Duration::from_millis(100)) {
            break url;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server exited early: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "server did not report its address"
        );
    };
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    HttpServer { child, url, addr }
}

/// Send one raw HTTP/1.1 request and return (status, body).
pub fn raw_post(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// Skills the server should list: the embedded catalog plus the given fixture folders.
pub fn expected_skill_count(fixtures: &[&str]) -> usize {
    moe_skills::catalog::Catalog::load_with_embedded(fixtures.iter().map(|name| fixture(name)))
        .skills()
        .len()
}

/// One raw HTTP/1.1 request with `Connection: close`: (status, response head, body).
pub fn raw_request(
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map(|(head, body)| (head.to_owned(), body.to_owned()))
        .unwrap_or((response, String::new()));
    (status, head, body)
}

/// The value of header `name` in a response head, case-insensitively.
pub fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// Headers of a JSON-RPC POST to the MCP endpoint.
pub const JSON_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// An MCP client of `moe-skills serve` over stdio (a child process).
pub type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

pub async fn stdio_client() -> Client {
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::ServiceExt;
    let command = tokio::process::Command::new(BIN).configure(|command| {
        command.arg("serve").env("MOE_SKILLS_LOG", "warn");
    });
    let transport = TokioChildProcess::new(command).expect("spawn server");
    ().serve(transport).await.expect("initialize")
}

/// `tools/call` with JSON object arguments; a protocol error fails the test, a tool error
/// comes back as the result.
pub async fn call(
    client: &Client,
    tool: &'static str,
    arguments: serde_json::Value,
) -> rmcp::model::CallToolResult {
    let serde_json::Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(rmcp::model::CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .expect("tools/call")
}
