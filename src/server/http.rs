//! Streamable HTTP transport on axum at `/mcp`.
//!
//! Safe defaults for a local server: loopback bind, `Host` allowlist (DNS rebinding),
//! `Origin` validation with 403 for foreign browser origins, a request body limit, and a
//! bearer token that is mandatory when bound to a non-loopback address.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{ServeError, SkillServer};
use crate::catalog::CatalogHandle;

/// Path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";
/// Default largest accepted request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How the HTTP endpoint is exposed.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Bearer token clients must send (`Authorization: Bearer <token>`).
    pub token: Option<String>,
    /// Extra allowed browser origins (`https://app.example:443`, `http://localhost:*`).
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` names (besides loopback names and the bound address).
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
}

impl HttpOptions {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            token: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Refuse configurations that would expose the catalog without authentication.
    pub fn validate(&self) -> Result<(), ServeError> {
        if !self.addr.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(ServeError::Config(format!(
                "--http {} is not a loopback address; set a bearer token with --token or MOE_SKILLS_TOKEN, or bind to 127.0.0.1",
                self.addr
            )));
        }
        Ok(())
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_bearer(State(token): State<Arc<str>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
        })
        .map(str::trim);
    match presented {
        Some(presented) if constant_time_eq(presented.as_bytes(), token.as_bytes()) => {
            next.run(request).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            "missing or wrong bearer token; send `Authorization: Bearer <token>`\n",
        )
            .into_response(),
    }
}

/// The axum router serving MCP at [`MCP_PATH`].
pub fn router(
    server: SkillServer,
    options: &HttpOptions,
    shutdown: &CancellationToken,
) -> axum::Router {
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        options.server_config(shutdown),
    );
    let router = axum::Router::new().nest_service(MCP_PATH, service);
    match options.token.as_deref().filter(|token| !token.is_empty()) {
        Some(token) => router.layer(axum::middleware::from_fn_with_state(
            Arc::<str>::from(token),
            require_bearer,
        )),
        None => router,
    }
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
    tracing::info!("listening on http://{local}{MCP_PATH}");
    let app = router(server, &options, &shutdown);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(ServeError::Http);
    notifier.abort();
    result
}
