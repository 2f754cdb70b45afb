//! The accept loop: at most `max_connections` connections at once (more wait in the kernel's
//! accept queue instead of taking file descriptors), `TCP_NODELAY` on every socket (without
//! it keep-alive clients stall ~40 ms per response on delayed ACKs), and a header-read
//! timeout that also closes idle keep-alive connections, so half-open connections cannot
//! hold the slots. axum's `serve` sets neither the timeout nor a limit.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long open connections get to finish after shutdown is requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after an accept error that is not about one connection (e.g. out of file
/// descriptors), so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Largest accepted `--max-connections`: well above any open-files limit.
pub const MAX_CONNECTIONS_CEILING: usize = 1 << 20;

/// Connection-level limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// Serve `app` on `listener` until `shutdown` is cancelled.
pub async fn serve_connections(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    // Far above any descriptor limit; clamped so `Semaphore::new` and `acquire_many` accept it.
    let max = limits.max_connections.clamp(1, MAX_CONNECTIONS_CEILING);
    let slots = Arc::new(Semaphore::new(max));
    loop {
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) if is_connection_error(&error) => continue,
                Err(error) => {
                    tracing::warn!(%error, "accept failed; pausing");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, %peer, "TCP_NODELAY not set");
        }
        let service = TowerToHyperService::new(app.clone());
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.as_mut().await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, %peer, "connection ended with an error");
            }
            drop(slot);
        });
    }
    // Every slot back means every connection closed.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::info!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
    }
}

/// Errors about one connection that died before it was accepted; the next accept is fine.
fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// The soft limit on open files of this process, from `/proc/self/limits` (Linux); `None`
/// elsewhere or when unlimited.
pub fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
