//! Load test of the HTTP transport (not a criterion bench): starts `moe-skills serve --http`
//! on loopback, fires N concurrent mixed tool calls at once from several MCP sessions (cheap
//! reads: `list_skills`, `read_skill`; heavy cost-model calls: `plan_layouts`, `size_cp`),
//! and reports errors, latency percentiles per kind, sequential keep-alive throughput, and
//! the server's peak and settled RSS. While the burst runs, a probe session sends one cheap
//! read every `PROBE_INTERVAL` and times it: the latency a user's cheap call sees while heavy
//! calls run (the burst's own cheap calls also measure how fast 800 queued reads drain). Optionally floods `initialize` to check the session cap.
//!
//! ```text
//! cargo bench --bench http_load -- [--calls 1000] [--sessions 20] [--heavy-every 5]
//!                                  [--session-flood 0] [--half-open 0] [--serve-arg ARG]...
//! ```

#[path = "../tests/mcp_support/mod.rs"]
mod mcp_support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};

/// A call that takes longer than this counts as an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Sequential calls on one session for the keep-alive throughput figure.
const SEQUENTIAL_CALLS: usize = 200;
/// Gap between two probe calls (each waits for the previous answer).
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// How long the server is left idle before its settled RSS is read.
const SETTLE: Duration = Duration::from_secs(5);

struct Options {
    calls: usize,
    sessions: usize,
    heavy_every: usize,
    session_flood: usize,
    half_open: usize,
    serve_args: Vec<String>,
}

fn options() -> Options {
    let mut options = Options {
        calls: 1000,
        sessions: 20,
        heavy_every: 5,
        session_flood: 0,
        half_open: 0,
        serve_args: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            args.next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--calls" => options.calls = number("--calls"),
            "--sessions" => options.sessions = number("--sessions").max(1),
            "--heavy-every" => options.heavy_every = number("--heavy-every"),
            "--session-flood" => options.session_flood = number("--session-flood"),
            "--half-open" => options.half_open = number("--half-open"),
            "--serve-arg" => options
                .serve_args
                .push(args.next().expect("--serve-arg needs a value")),
            // `cargo bench` passes --bench; anything else is a typo worth knowing about.
            "--bench" => {}
            other => eprintln!("ignoring unknown argument {other}"),
        }
    }
    options
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Cheap,
    Heavy,
}

fn call_for(index: usize, heavy_every: usize, skills: &[String]) -> (Kind, &'static str, Value) {
    let skill = skills
        .get(index % skills.len().max(1))
        .cloned()
        .unwrap_or_default();
    if heavy_every > 0 && index.is_multiple_of(heavy_every) {
        if (index / heavy_every).is_multiple_of(2) {
            (
                Kind::Heavy,
                "plan_layouts",
                json!({"model": "deepseek-v3", "hardware": "h100", "num_gpus": 1024,
                       "seq_length": 262_144, "top_k": 5}),
            )
        } else {
            (
                Kind::Heavy,
                "size_cp",
                json!({"model": "deepseek-v3", "hardware": "h100", "num_gpus": 256,
                       "seq_length": 131_072}),
            )
        }
    } else if index.is_multiple_of(2) {
        (Kind::Cheap, "list_skills", json!({}))
    } else {
        (Kind::Cheap, "read_skill", json!({ "name": skill }))
    }
}

async fn call(peer: &Peer<RoleClient>, tool: &'static str, arguments: Value) -> Result<(), String> {
    let Value::Object(arguments) = arguments else {
        return Err("arguments must be an object".into());
    };
    let request = peer.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments));
    match tokio::time::timeout(CALL_TIMEOUT, request).await {
        Err(_) => Err(format!("{tool}: no answer in {CALL_TIMEOUT:?}")),
        Ok(Err(error)) => Err(format!("{tool}: {error}")),
        Ok(Ok(result)) if result.is_error == Some(true) => {
            Err(format!("{tool}: tool error {:?}", result.content))
        }
        Ok(Ok(_)) => Ok(()),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(name: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{name:>6}: {:>5} calls  p50 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms",
        times.len(),
        percentile(&times, 50.0).as_secs_f64() * 1e3,
        percentile(&times, 99.0).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

/// `VmHWM` (peak) and `VmRSS` (now) of a process, in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Open `count` connections that send half a request head and stop, then time one normal
/// request: it must be answered once the header timeout frees slots, not time out.
fn half_open_phase(addr: &str, count: usize) {
    use std::io::Write;
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        match std::net::TcpStream::connect(addr) {
            Ok(mut stream) => {
                let _ =
                    stream.write_all(format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n").as_bytes());
                idle.push(stream);
            }
            Err(error) => {
                println!("half-open: connect {} failed: {error}", idle.len());
                break;
            }
        }
    }
    let started = Instant::now();
    let (status, _) = mcp_support::raw_post(addr, &[], mcp_support::INITIALIZE);
    println!(
        "half-open: {} idle connections open; a normal initialize answered {status} after {:.1} s",
        idle.len(),
        started.elapsed().as_secs_f64()
    );
}

async fn connect(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url))
        .await
        .expect("initialize over HTTP")
}

#[tokio::main]
async fn main() {
    let options = options();
    let serve_args: Vec<&str> = options.serve_args.iter().map(String::as_str).collect();
    let server = mcp_support::spawn_http(&serve_args);
    let pid = server.child.id();
    let (_, idle_rss) = rss_mib(pid);
    println!(
        "server pid {pid} at {}; idle RSS {idle_rss:.1} MiB",
        server.url
    );

    let clients: Vec<_> = {
        let mut clients = Vec::new();
        for _ in 0..options.sessions {
            clients.push(connect(&server.url).await);
        }
        clients
    };
    let skills: Vec<String> = clients[0]
        .list_all_skills()
        .await
        .expect("skills/list")
        .into_iter()
        .filter_map(|skill| rmcp::model::skill_name_from_uri(&skill.uri).map(str::to_owned))
        .collect();
    // Warm the catalog's lazy parts so the first calls do not pay for them.
    let warm = &clients[0];
    for skill in &skills {
        let _ = warm
            .read_resource(ReadResourceRequestParams::new(format!(
                "skill://{skill}/SKILL.md"
            )))
            .await;
    }

    let probe_client = connect(&server.url).await;
    let heavy_in_flight = Arc::new(AtomicUsize::new(0));
    let burst_done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..options.calls {
        let (kind, tool, arguments) = call_for(index, options.heavy_every, &skills);
        let peer = clients[index % clients.len()].peer().clone();
        let in_flight = heavy_in_flight.clone();
        if kind == Kind::Heavy {
            in_flight.fetch_add(1, Ordering::AcqRel);
        }
        tasks.spawn(async move {
            let start = Instant::now();
            let result = call(&peer, tool, arguments).await;
            if kind == Kind::Heavy {
                in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            (kind, start.elapsed(), result)
        });
    }
    let probe = {
        let peer = probe_client.peer().clone();
        let skill = skills.first().cloned().unwrap_or_default();
        let (heavy_in_flight, burst_done) = (heavy_in_flight.clone(), burst_done.clone());
        tokio::spawn(async move {
            let (mut during_heavy, mut errors) = (Vec::new(), 0usize);
            let mut turn = 0usize;
            while !burst_done.load(Ordering::Acquire) {
                tokio::time::sleep(PROBE_INTERVAL).await;
                let heavy_running = heavy_in_flight.load(Ordering::Acquire) > 0;
                let (tool, arguments) = if turn.is_multiple_of(2) {
                    ("list_skills", json!({}))
                } else {
                    ("read_skill", json!({ "name": skill }))
                };
                turn += 1;
                let start = Instant::now();
                let result = call(&peer, tool, arguments).await;
                if result.is_err() {
                    errors += 1;
                }
                if heavy_running && heavy_in_flight.load(Ordering::Acquire) > 0 {
                    during_heavy.push(start.elapsed());
                }
            }
            (during_heavy, errors)
        })
    };
    let (mut cheap, mut heavy, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((kind, elapsed, result)) => {
                if let Err(error) = result {
                    errors.push(error);
                }
                match kind {
                    Kind::Cheap => cheap.push(elapsed),
                    Kind::Heavy => heavy.push(elapsed),
                }
            }
            Err(error) => errors.push(format!("task: {error}")),
        }
    }
    let wall = started.elapsed();
    burst_done.store(true, Ordering::Release);
    let (probes, probe_errors) = probe.await.unwrap_or_default();
    let _ = probe_client.cancel().await;
    println!(
        "{} concurrent calls over {} sessions in {:.2} s ({:.0} calls/s); errors: {}",
        options.calls,
        options.sessions,
        wall.as_secs_f64(),
        options.calls as f64 / wall.as_secs_f64(),
        errors.len()
    );
    for error in errors.iter().take(5) {
        println!("  error: {error}");
    }
    summary("cheap", cheap);
    summary("heavy", heavy);
    println!("probe: one cheap call every {PROBE_INTERVAL:?} on its own session while heavy calls ran ({probe_errors} errors)");
    summary("probe", probes);

    let one = &clients[0];
    let started = Instant::now();
    let mut sequential_errors = 0;
    for _ in 0..SEQUENTIAL_CALLS {
        if call(one.peer(), "list_skills", json!({})).await.is_err() {
            sequential_errors += 1;
        }
    }
    let wall = started.elapsed();
    println!(
        "sequential list_skills on one session: {:.0} calls/s ({sequential_errors} errors)",
        SEQUENTIAL_CALLS as f64 / wall.as_secs_f64()
    );

    for client in clients {
        let _ = client.cancel().await;
    }

    if options.session_flood > 0 {
        let (mut opened, mut refused, mut other) = (0usize, 0usize, 0usize);
        let started = Instant::now();
        for _ in 0..options.session_flood {
            match mcp_support::raw_post(&server.addr, &[], mcp_support::INITIALIZE).0 {
                200 => opened += 1,
                503 => refused += 1,
                _ => other += 1,
            }
        }
        println!(
            "session flood: {} initialize in {:.1} s: {opened} opened, {refused} refused (503), {other} other",
            options.session_flood,
            started.elapsed().as_secs_f64()
        );
    }

    if options.half_open > 0 {
        half_open_phase(&server.addr, options.half_open);
    }

    let (peak, _) = rss_mib(pid);
    tokio::time::sleep(SETTLE).await;
    let (_, settled) = rss_mib(pid);
    println!(
        "server RSS: idle {idle_rss:.1} MiB, peak {peak:.1} MiB, {settled:.1} MiB after {SETTLE:?} idle"
    );
}
