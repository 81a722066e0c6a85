//! Why a record was dead-lettered.

use std::fmt;
use std::str::FromStr;

/// Why a record went to the dead-letter topic; written as the `share.dlq.reason` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DlqReason {
    /// The handler failed on its last allowed attempt.
    HandlerError,
    /// The payload did not decode into what the handler takes; the handler was not called.
    Decode,
    /// The handler ran past its job timeout on its last allowed attempt.
    Timeout,
    /// The handler panicked on its last allowed attempt.
    Panic,
    /// The record arrived with the group's last delivery left: earlier attempts never finished
    /// (crashes, lost locks), so it is set aside without running the handler.
    DeliveryLimit,
    /// The handler rejected it explicitly.
    Rejected,
    /// Its `share.not-before` is further ahead than the worker's `max_delay`, or it could not
    /// wait for it (no room to hold it, no delay topic, and a release would spend its last
    /// delivery); the handler was not called.
    NotBefore,
}

impl DlqReason {
    /// Every reason, in declaration order.
    pub const ALL: [DlqReason; 7] = [
        DlqReason::HandlerError,
        DlqReason::Decode,
        DlqReason::Timeout,
        DlqReason::Panic,
        DlqReason::DeliveryLimit,
        DlqReason::Rejected,
        DlqReason::NotBefore,
    ];

    /// The header value: `handler_error`, `decode`, `timeout`, `panic`, `delivery_limit`,
    /// `rejected` or `not_before`.
    pub fn as_str(self) -> &'static str {
        match self {
            DlqReason::HandlerError => "handler_error",
            DlqReason::Decode => "decode",
            DlqReason::Timeout => "timeout",
            DlqReason::Panic => "panic",
            DlqReason::DeliveryLimit => "delivery_limit",
            DlqReason::Rejected => "rejected",
            DlqReason::NotBefore => "not_before",
        }
    }
}

impl fmt::Display for DlqReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not one of the reasons.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dead-letter reason {0:?} (expected one of handler_error, decode, timeout, panic, delivery_limit, rejected, not_before)"
)]
pub struct UnknownReason(String);

impl FromStr for DlqReason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DlqReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for reason in DlqReason::ALL {
            assert_eq!(reason.as_str().parse::<DlqReason>(), Ok(reason));
        }
        assert!("nope".parse::<DlqReason>().is_err());
    }
}
