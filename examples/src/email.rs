//! A bulk e-mail sender: a `#[handler(batch(...))]` fn that hands up to 50 messages per call to
//! a bulk API, which answers per message; each message is then accepted, retried or
//! dead-lettered on its own.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worker_core::handler::{JobError, Json, State, handler};

/// The job payload: one e-mail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Email {
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    pub subject: String,
}

/// What the bulk API says of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for delivery.
    Sent,
    /// The receiving server greylisted it: try again later.
    TryLater(Duration),
    /// Not an address: it never will be sent.
    Invalid,
}

/// A stand-in for a provider's bulk send endpoint: every call takes `latency` whatever its size;
/// an address without `@` is invalid; an address at `greylist.example` is refused once, with a
/// retry-after, and accepted after.
#[derive(Clone, Debug)]
pub struct FakeBulkApi {
    latency: Duration,
    state: Arc<Mutex<BulkState>>,
}

#[derive(Debug, Default)]
struct BulkState {
    calls: Vec<usize>,
    sent: Vec<Email>,
    greylisted: HashSet<String>,
}

impl FakeBulkApi {
    /// An endpoint whose calls take `latency`.
    pub fn new(latency: Duration) -> Self {
        Self {
            latency,
            state: Arc::default(),
        }
    }

    /// Sends `emails` in one call: one answer per message, in order.
    pub async fn send(&self, emails: &[Email]) -> Vec<Delivery> {
        tokio::time::sleep(self.latency).await;
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.calls.push(emails.len());
        emails
            .iter()
            .map(|email| match email.to.split_once('@') {
                None => Delivery::Invalid,
                Some((_, "greylist.example")) if state.greylisted.insert(email.to.clone()) => {
                    Delivery::TryLater(Duration::from_millis(300))
                }
                Some(_) => {
                    state.sent.push(email.clone());
                    Delivery::Sent
                }
            })
            .collect()
    }

    /// Every message sent so far.
    pub fn sent(&self) -> Vec<Email> {
        self.state
            .lock()
            .map(|state| state.sent.clone())
            .unwrap_or_default()
    }

    /// The size of each call so far.
    pub fn calls(&self) -> Vec<usize> {
        self.state
            .lock()
            .map(|state| state.calls.clone())
            .unwrap_or_default()
    }
}

/// Sends a batch of e-mails in one call to the bulk API: a greylisted message is retried after
/// the delay the API gives, an invalid address is rejected (dead-lettered), a payload that is
/// not an `Email` never gets here (dead-lettered with reason `decode`).
#[handler(
    topic = "emails",
    name = "send_emails",
    batch(max = 50, linger = "100ms")
)]
pub async fn send_emails(
    State(api): State<FakeBulkApi>,
    emails: Vec<Json<Email>>,
) -> Vec<Result<(), JobError>> {
    let emails: Vec<Email> = emails.into_iter().map(|Json(email)| email).collect();
    api.send(&emails)
        .await
        .into_iter()
        .zip(&emails)
        .map(|(delivery, email)| match delivery {
            Delivery::Sent => Ok(()),
            Delivery::TryLater(after) => Err(JobError::retry_after(
                after,
                format!("{} greylisted us", email.to),
            )),
            Delivery::Invalid => Err(JobError::permanent(format!(
                "invalid address {:?}",
                email.to
            ))),
        })
        .collect()
}
