//! Streamable HTTP transport on axum at `/mcp`.
//!
//! Safe defaults for a local server: loopback bind, `Host` allowlist (DNS rebinding),
//! `Origin` validation with 403 for foreign browser origins (CORS only for origins named with
//! `--allow-origin`), a bearer token that is mandatory when bound to a non-loopback address,
//! and limits that keep one client from taking the server down: request body size and read
//! time, header read time, connections and sessions.
//!
//! Layers, outermost first: `cors` (a preflight carries no token), `auth`, `guard` (checks
//! rmcp answers wrongly), then rmcp's service with the capped session manager.

mod auth;
mod cors;
mod guard;
mod listener;
mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use self::cors::OriginPattern;
pub use self::listener::MAX_CONNECTIONS_CEILING;
use self::listener::{open_files_limit, serve_connections, ConnectionLimits};
use self::sessions::CappedSessions;
use super::{ServeError, SkillServer};
use crate::catalog::CatalogHandle;

/// Path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";
/// Default largest accepted request body: the largest honest input (a launch script or a
/// recipe file) is tens of KB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default time a client gets to send a request's headers, and that an idle keep-alive
/// connection stays open: clients send headers in milliseconds, so 10 s only cuts off
/// connections that send nothing, which would otherwise hold a connection slot forever.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
/// Default time a client gets to send a request body: the largest body at 35 KB/s.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
/// Default most connections served at once; more wait in the accept queue. Each holds a
/// file descriptor and a task, and agents keep a few each.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default most open legacy-protocol sessions: each costs about 55 KB, so the cap bounds
/// sessions to about 56 MB; a client that never closes its sessions hits it, not the host.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;
/// Default seconds before a session nobody used is closed (rmcp's default keep-alive).
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 300;
/// File descriptors kept free for the catalog, the watcher and logging when the open-files
/// limit lowers the connection limit.
const RESERVED_FILES: usize = 64;

/// How the HTTP endpoint is exposed.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Bearer token clients must send (`Authorization: Bearer <token>`).
    pub token: Option<String>,
    /// Extra allowed browser origins (`https://app.example:443`, `http://localhost:*`); they
    /// also get CORS headers.
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` names (besides loopback names and the bound address).
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub max_sessions: usize,
    pub session_idle: Duration,
}

impl HttpOptions {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            token: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECS),
        }
    }

    /// Refuse configurations that would expose the catalog without authentication, and
    /// limits that would refuse everything.
    pub fn validate(&self) -> Result<(), ServeError> {
        if !self.addr.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(ServeError::Config(format!(
                "--http {} is not a loopback address; set a bearer token with the MOE_SKILLS_TOKEN environment variable (or --token, which other users can read in the process list), or bind to 127.0.0.1",
                self.addr
            )));
        }
        for (flag, value) in [
            ("--max-connections", self.max_connections),
            ("--max-sessions", self.max_sessions),
            ("--max-body-bytes", self.max_body_bytes),
        ] {
            if value == 0 {
                return Err(ServeError::Config(format!(
                    "{flag} 0 would refuse every request; give a positive number"
                )));
            }
        }
        for (flag, value) in [
            ("--header-timeout-secs", self.header_timeout),
            ("--body-timeout-secs", self.body_timeout),
            ("--session-idle-secs", self.session_idle),
        ] {
            if value.is_zero() {
                return Err(ServeError::Config(format!(
                    "{flag} 0 would time out every request; give a positive number of seconds"
                )));
            }
        }
        if self.max_connections > MAX_CONNECTIONS_CEILING {
            return Err(ServeError::Config(format!(
                "--max-connections {} is above {MAX_CONNECTIONS_CEILING}; no host has that many file descriptors",
                self.max_connections
            )));
        }
        if let Some(bad) = self
            .allowed_origins
            .iter()
            .find(|origin| OriginPattern::parse(origin).is_none() && origin.as_str() != "null")
        {
            return Err(ServeError::Config(format!(
                "--allow-origin {bad}: expected scheme://host[:port] or scheme://host:*, e.g. https://app.example:443"
            )));
        }
        Ok(())
    }

    /// The connection limit, lowered below the open-files limit so that accepting never
    /// fails for lack of descriptors (other requests would then fail instead).
    fn effective_max_connections(&self) -> usize {
        match open_files_limit() {
            Some(files) if files < self.max_connections.saturating_add(RESERVED_FILES) => {
                let lowered = files.saturating_sub(RESERVED_FILES).max(1);
                tracing::warn!(
                    "--max-connections {} lowered to {lowered}: the open-files limit is {files} (raise it with `ulimit -n`)",
                    self.max_connections
                );
                lowered
            }
            _ => self.max_connections,
        }
    }

    fn server_config(&self, shutdown: &CancellationToken) -> StreamableHttpServerConfig {
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        if !self.addr.ip().is_unspecified() && !self.addr.ip().is_loopback() {
            hosts.push(self.addr.ip().to_string());
        }
        hosts.extend(self.allowed_hosts.iter().cloned());
        let mut origins: Vec<String> =
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .into_iter()
                .map(str::to_owned)
                .collect();
        origins.extend(self.allowed_origins.iter().cloned());
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(self.max_body_bytes)
            .with_cancellation_token(shutdown.child_token())
    }
}

/// The axum router serving MCP at [`MCP_PATH`].
pub fn router(
    server: SkillServer,
    options: &HttpOptions,
    shutdown: &CancellationToken,
) -> axum::Router {
    let sessions = Arc::new(CappedSessions::new(
        options.max_sessions,
        options.session_idle,
    ));
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        sessions.clone(),
        options.server_config(shutdown),
    );
    let checks = Arc::new(guard::Guard {
        max_body_bytes: options.max_body_bytes,
        body_timeout: options.body_timeout,
        sessions,
    });
    let mut router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(checks, guard::guard));
    if let Some(token) = options.token.as_deref().filter(|token| !token.is_empty()) {
        router = router.layer(axum::middleware::from_fn_with_state(
            Arc::<str>::from(token),
            auth::require_bearer,
        ));
    }
    let cors_origins: Arc<[OriginPattern]> = options
        .allowed_origins
        .iter()
        .filter_map(|origin| OriginPattern::parse(origin))
        .collect();
    if !cors_origins.is_empty() {
        router = router.layer(axum::middleware::from_fn_with_state(
            cors_origins,
            cors::cors,
        ));
    }
    router
}

/// Serve until `shutdown` is cancelled. Logs the bound address (useful with port 0).
pub async fn serve_http(
    catalog: CatalogHandle,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    options.validate()?;
    let server = SkillServer::new(catalog);
    let notifier = server.spawn_change_notifier();
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(ServeError::Http)?;
    let limits = ConnectionLimits {
        max_connections: options.effective_max_connections(),
        header_timeout: options.header_timeout,
    };
    tracing::info!("listening on http://{local}{MCP_PATH}");
    let app = router(server, &options, &shutdown);
    serve_connections(listener, app, limits, shutdown).await;
    notifier.abort();
    Ok(())
}
