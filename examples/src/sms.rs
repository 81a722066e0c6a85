//! An SMS sender: a `#[handler]` fn with a JSON payload and a gateway in its state, and the
//! producing side: [`enqueue_demo`] enqueues its jobs with the typed enqueue `#[handler]`
//! generates (`send_sms::enqueue_with`), keyed by phone number so that the worker's
//! `rate-per-key` (one message per second per number) and delayed sends go by it. [`sms_lanes`]
//! sends one-time passwords ahead of marketing messages through the same handler.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worker_core::Route;
use worker_core::handler::{JobDefinition, JobError, Json, Meta, State, handler};
use worker_core::produce::{EnqueueOptions, JobProducer};

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

/// One-time passwords and marketing messages through one gateway, as lanes of one handler: the
/// passwords' topic has priority 0, so while it has messages the marketing lane keeps only its
/// floor of the worker's slots, and a password never waits behind a marketing blast.
pub fn sms_lanes(gateway: &FakeGateway, passwords: &str, marketing: &str) -> [Route; 2] {
    let sender = send_sms.into_service(gateway.clone());
    [
        Route::new(passwords, sender.clone()).priority(0),
        Route::new(marketing, sender).priority(1),
    ]
}

/// One demo job: a message, or (to show the dead-letter path) a payload that is not JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoJob {
    /// A message; every 100th has a malformed number (rejected).
    Sms(Sms),
    /// Not JSON (dead-lettered with reason `decode`).
    NotJson,
}

/// `count` demo jobs: every 250th payload is not JSON (from job 5), every 100th number is
/// malformed (from job 13), the rest valid; about a tenth of the numbers end in 7 (the gateway
/// rate-limits those once).
pub fn demo_jobs(count: usize) -> Vec<DemoJob> {
    (0..count)
        .map(|i| match i {
            i if i % 250 == 5 => DemoJob::NotJson,
            i if i % 100 == 13 => DemoJob::Sms(Sms {
                to: format!("+{i}"),
                text: "hi".into(),
            }),
            i => DemoJob::Sms(Sms {
                to: format!("+4915{i:08}"),
                text: format!("hello {i}"),
            }),
        })
        .collect()
}

/// Enqueues `jobs` on `topic`, in order within a partition: messages with the job's typed
/// enqueue (the payload type is `send_sms`'s, checked at compile time), keyed by their number;
/// the broken payloads as raw bytes. Returns once the broker confirmed every one.
pub async fn enqueue_demo(
    producer: &JobProducer,
    topic: &str,
    jobs: &[DemoJob],
) -> worker_core::Result<()> {
    let writes = jobs.iter().map(|job| async move {
        let to_topic = EnqueueOptions::new().topic(topic);
        match job {
            DemoJob::Sms(sms) => {
                send_sms::enqueue_with(producer, sms, to_topic.key(sms.to.clone())).await
            }
            DemoJob::NotJson => {
                producer
                    .send(topic, Some("not json".into()), to_topic)
                    .await
            }
        }
    });
    // Polled in order, so queued in order; the idempotent producer keeps that order.
    futures::future::try_join_all(writes).await?;
    Ok(())
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
