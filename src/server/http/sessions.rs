//! Legacy-protocol sessions with a cap: rmcp's in-memory session manager, refusing new
//! sessions past a limit so that a client opening sessions in a loop cannot exhaust memory
//! (each session costs about 55 KB; sessions idle for the keep-alive are closed by rmcp).

use std::time::Duration;

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionLimitError {
    #[error(
        "session limit reached: {cap} sessions are open (--max-sessions {cap}); close finished \
         sessions with DELETE, wait for idle ones to expire, or raise --max-sessions"
    )]
    Full { cap: usize },
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// [`LocalSessionManager`] with at most `cap` open sessions.
#[derive(Debug)]
pub struct CappedSessions {
    inner: LocalSessionManager,
    cap: usize,
    /// Serialises "count, then insert" so concurrent `initialize` calls cannot overshoot.
    creating: tokio::sync::Mutex<()>,
}

impl CappedSessions {
    /// `idle` closes a session nobody used for that long (rmcp's keep-alive).
    pub fn new(cap: usize, idle: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        Self {
            inner,
            cap,
            creating: tokio::sync::Mutex::new(()),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Sessions open now.
    pub async fn len(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    pub async fn is_full(&self) -> bool {
        self.len().await >= self.cap
    }

    pub async fn contains(&self, id: &str) -> bool {
        self.inner.sessions.read().await.contains_key(id)
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionLimitError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _creating = self.creating.lock().await;
        if self.is_full().await {
            return Err(SessionLimitError::Full { cap: self.cap });
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(&self) -> Option<std::sync::Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}
