//! `moe-skills serve`.

use std::net::SocketAddr;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{CliError, GlobalArgs};
use crate::catalog::{watch::watch_roots, Catalog, CatalogHandle, Severity};
use std::time::Duration;

use crate::server::http::{
    serve_http, HttpOptions, DEFAULT_BODY_TIMEOUT_SECS, DEFAULT_HEADER_TIMEOUT_SECS,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_SECS,
};
use crate::server::serve_stdio;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Serve streamable HTTP at ADDR (path /mcp) instead of stdio, e.g. 127.0.0.1:8931.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send; required when ADDR is not loopback. Prefer the
    /// MOE_SKILLS_TOKEN environment variable: a --token value is visible to every user of the
    /// host in the process list.
    #[arg(long, env = "MOE_SKILLS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Also accept this browser Origin over HTTP (repeatable), e.g. https://app.example:443.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Also accept this Host header over HTTP (repeatable), e.g. skills.internal:8931.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Largest accepted HTTP request body in bytes; a larger Content-Length is refused (413)
    /// before the body is read.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Seconds a client gets to send a request's headers; also how long an idle keep-alive
    /// connection stays open.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_HEADER_TIMEOUT_SECS)]
    pub header_timeout_secs: u64,
    /// Seconds a client gets to send a request body (408 after).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_BODY_TIMEOUT_SECS)]
    pub body_timeout_secs: u64,
    /// Most HTTP connections served at once; more wait to be accepted. Lowered below the
    /// open-files limit (`ulimit -n`) if needed.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most open MCP sessions (protocol versions before 2026-07-28); `initialize` beyond it
    /// answers 503 until sessions close.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,
    /// Seconds after which a session nobody used is closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_SESSION_IDLE_SECS)]
    pub session_idle_secs: u64,
    /// Reload the catalog when files under a --skills-dir change, and notify clients.
    #[arg(long)]
    pub watch: bool,
}

fn report_catalog(catalog: &Catalog) {
    for diagnostic in catalog.diagnostics() {
        let place = match diagnostic.line {
            Some(line) => format!("{}:{line}", diagnostic.file),
            None => diagnostic.file.clone(),
        };
        match diagnostic.severity {
            Severity::Error => tracing::error!("{place}: {}", diagnostic.message),
            Severity::Warning => tracing::warn!("{place}: {}", diagnostic.message),
            Severity::Note => tracing::debug!("{place}: {}", diagnostic.message),
        }
    }
    tracing::info!("{} skills loaded", catalog.skills().len());
}

/// clap reads the token from --token or MOE_SKILLS_TOKEN; only the first shows in `ps`.
fn warn_if_token_on_command_line(token: Option<&str>) {
    let from_env = std::env::var("MOE_SKILLS_TOKEN").ok();
    if token.is_some() && token != from_env.as_deref() {
        tracing::warn!(
            "--token is visible to every user of this host in the process list; pass the token in the MOE_SKILLS_TOKEN environment variable instead"
        );
    }
}

pub fn run(global: &GlobalArgs, args: &ServeArgs) -> Result<(), CliError> {
    // Read the catalog while the transport starts, so `initialize` is answered at once.
    let handle = CatalogHandle::load_in_background(global.roots(), report_catalog);
    let runtime = match args.http {
        // One client, one thread: the cheapest start for stdio.
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(_) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    }
    .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let _watcher = if args.watch {
            if global.skills_dirs.is_empty() {
                tracing::warn!("--watch has nothing to watch: the embedded catalog never changes; add --skills-dir");
                None
            } else {
                Some(watch_roots(handle.clone(), |catalog| {
                    tracing::info!("catalog reloaded: {} skills", catalog.skills().len());
                })?)
            }
        } else {
            None
        };
        match args.http {
            None => serve_stdio(handle).await?,
            Some(addr) => {
                let mut options = HttpOptions::new(addr);
                options.token = args.token.clone();
                options.allowed_origins = args.allow_origins.clone();
                options.allowed_hosts = args.allow_hosts.clone();
                options.max_body_bytes = args.max_body_bytes;
                options.header_timeout = Duration::from_secs(args.header_timeout_secs);
                options.body_timeout = Duration::from_secs(args.body_timeout_secs);
                options.max_connections = args.max_connections;
                options.max_sessions = args.max_sessions;
                options.session_idle = Duration::from_secs(args.session_idle_secs);
                warn_if_token_on_command_line(args.token.as_deref());
                let shutdown = CancellationToken::new();
                let on_signal = shutdown.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        on_signal.cancel();
                    }
                });
                serve_http(handle, options, shutdown).await?;
            }
        }
        Ok(())
    })
}
