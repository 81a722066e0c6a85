//! [`SlotReceipt`]: an acknowledgement or renewal receipt tagged with its slot.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use crate::source::{AckError, AckReceipt};

use super::slots::SlotKey;

/// Resolves to the slot and the broker's answer.
#[derive(Debug)]
pub(crate) struct SlotReceipt {
    key: SlotKey,
    receipt: AckReceipt,
}

impl SlotReceipt {
    pub(crate) fn new(key: SlotKey, receipt: AckReceipt) -> Self {
        Self { key, receipt }
    }
}

impl Future for SlotReceipt {
    type Output = (SlotKey, Result<(), AckError>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(Pin::new(&mut self.receipt).poll(cx));
        Poll::Ready((self.key, result))
    }
}
