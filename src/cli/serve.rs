//! `moe-skills serve`.

use std::net::SocketAddr;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{CliError, GlobalArgs};
use crate::catalog::{watch::watch_roots, Catalog, CatalogHandle, Severity};
use crate::server::http::{serve_http, HttpOptions, DEFAULT_MAX_BODY_BYTES};
use crate::server::serve_stdio;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Serve streamable HTTP at ADDR (path /mcp) instead of stdio, e.g. 127.0.0.1:8931.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send; required when ADDR is not loopback.
    #[arg(long, env = "MOE_SKILLS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Also accept this browser Origin over HTTP (repeatable), e.g. https://app.example:443.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Also accept this Host header over HTTP (repeatable), e.g. skills.internal:8931.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Largest accepted HTTP request body in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
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
