//! The answer to one acknowledgement or renewal, delivered when the broker has replied.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::oneshot;

use super::AckError;

/// Resolves to the broker's answer for one acknowledgement or renewal.
///
/// Dropping it does not cancel anything: the request was queued when the receipt was made.
#[derive(Debug)]
#[must_use = "a receipt says whether the broker took the acknowledgement"]
pub struct AckReceipt {
    state: State,
}

#[derive(Debug)]
enum State {
    Ready(Option<Result<(), AckError>>),
    Waiting(oneshot::Receiver<Result<(), AckError>>),
}

/// The sending half of an [`AckReceipt`], kept by the source until the broker answers.
///
/// Dropping it unanswered resolves the receipt to [`AckError::Closed`]: a receipt never hangs.
#[derive(Debug)]
pub struct AckSender {
    tx: oneshot::Sender<Result<(), AckError>>,
}

impl AckReceipt {
    /// A receipt and the sender that completes it.
    pub fn channel() -> (AckSender, AckReceipt) {
        let (tx, rx) = oneshot::channel();
        (
            AckSender { tx },
            AckReceipt {
                state: State::Waiting(rx),
            },
        )
    }

    /// A receipt that is already answered.
    pub fn ready(result: Result<(), AckError>) -> Self {
        AckReceipt {
            state: State::Ready(Some(result)),
        }
    }
}

impl AckSender {
    /// Completes the receipt. If the receipt was dropped, nothing happens.
    pub fn send(self, result: Result<(), AckError>) {
        let _ = self.tx.send(result);
    }
}

impl Future for AckReceipt {
    type Output = Result<(), AckError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(result) => Poll::Ready(result.take().unwrap_or(Err(AckError::Closed))),
            State::Waiting(rx) => {
                let result = ready!(Pin::new(rx).poll(cx));
                Poll::Ready(result.unwrap_or(Err(AckError::Closed)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_with_the_sent_result() {
        let (tx, rx) = AckReceipt::channel();
        tx.send(Err(AckError::LockLost));
        assert_eq!(rx.await, Err(AckError::LockLost));
    }

    #[tokio::test]
    async fn a_dropped_sender_resolves_closed() {
        let (tx, rx) = AckReceipt::channel();
        drop(tx);
        assert_eq!(rx.await, Err(AckError::Closed));
    }

    #[tokio::test]
    async fn ready_receipts_resolve_at_once() {
        assert_eq!(AckReceipt::ready(Ok(())).await, Ok(()));
    }
}
