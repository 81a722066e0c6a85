//! Stopping a worker: [`ShutdownHandle`] and the process signals.

use tokio_util::sync::CancellationToken;

/// Asks a running [`Worker`](super::Worker) to stop gracefully. Cheap to clone.
///
/// The worker stops fetching, lets running handlers finish within the shutdown grace period,
/// acknowledges what finished, cancels and releases the rest, then closes its source.
#[derive(Clone, Debug, Default)]
pub struct ShutdownHandle {
    token: CancellationToken,
}

impl ShutdownHandle {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Starts the graceful shutdown. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// Whether shutdown has been asked for.
    pub fn is_shutdown(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// Resolves on ctrl-c or (on Unix) SIGTERM. A signal that cannot be listened for is logged and
/// ignored.
pub(crate) async fn signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("ctrl-c: shutting down"),
        _ = term => tracing::info!("SIGTERM: shutting down"),
    }
}
