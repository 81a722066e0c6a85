//! An SMS sender: a `#[handler]` fn with a JSON payload and a gateway in its state.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worker_core::handler::{JobError, Json, Meta, State, handler};

/// The job payload: one text message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sms {
    /// The recipient, `+` and 8 to 15 digits.
    pub to: String,
    /// The message.
    pub text: String,
}

/// Why the gateway did not send a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// HTTP 429: try again after this long.
    RateLimited(Duration),
    /// HTTP 400: the number can never be sent to.
    InvalidNumber(String),
}

/// A stand-in for an SMS provider's HTTP API: every call takes `latency`; a number ending in 7 is
/// rate-limited (429, retry after `retry_after`) the first time it is sent to; a malformed number is
/// refused for good.
#[derive(Clone, Debug)]
pub struct FakeGateway {
    latency: Duration,
    retry_after: Duration,
    state: Arc<Mutex<GatewayState>>,
}

#[derive(Debug, Default)]
struct GatewayState {
    sent: Vec<Sms>,
    throttled: HashSet<String>,
}

impl FakeGateway {
    /// A gateway whose calls take `latency` and whose 429s say to wait `retry_after`.
    pub fn new(latency: Duration, retry_after: Duration) -> Self {
        Self {
            latency,
            retry_after,
            state: Arc::default(),
        }
    }

    /// Sends one message.
    pub async fn send(&self, sms: &Sms) -> Result<(), GatewayError> {
        tokio::time::sleep(self.latency).await;
        if !is_valid_number(&sms.to) {
            return Err(GatewayError::InvalidNumber(sms.to.clone()));
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if sms.to.ends_with('7') && state.throttled.insert(sms.to.clone()) {
            return Err(GatewayError::RateLimited(self.retry_after));
        }
        state.sent.push(sms.clone());
        Ok(())
    }

    /// Every message sent so far.
    pub fn sent(&self) -> Vec<Sms> {
        self.state
            .lock()
            .map(|state| state.sent.clone())
            .unwrap_or_default()
    }
}

/// `+` followed by 8 to 15 digits.
pub fn is_valid_number(number: &str) -> bool {
    number.strip_prefix('+').is_some_and(|digits| {
        (8..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Sends one SMS. A 429 is retried after the gateway's delay; an invalid number is rejected (and
/// so dead-lettered with reason `rejected`); a payload that is not an `Sms` never gets here (it is
/// dead-lettered with reason `decode`).
#[handler(topic = "sms", name = "send_sms")]
pub async fn send_sms(
    meta: Meta,
    State(gateway): State<FakeGateway>,
    Json(sms): Json<Sms>,
) -> Result<(), JobError> {
    match gateway.send(&sms).await {
        Ok(()) => Ok(()),
        Err(GatewayError::RateLimited(after)) => Err(JobError::retry_after(
            after,
            format!("429 from the gateway for offset {}", meta.offset()),
        )),
        Err(GatewayError::InvalidNumber(number)) => {
            Err(JobError::permanent(format!("invalid number {number:?}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_checked() {
        assert!(is_valid_number("+4915112345678"));
        assert!(!is_valid_number("4915112345678"));
        assert!(!is_valid_number("+12"));
        assert!(!is_valid_number("+49151x2345678"));
    }
}
