//! The client's defaults, written once: its builder starts from these, and `worker-core` and the
//! binary's TOML model refer to them.

use std::time::Duration;

/// The client id sent to the brokers (`KafkaSourceBuilder::client_id`, `kafka.client-id`).
pub const CLIENT_ID: &str = "share-worker";
/// How long an idle fetch waits at the broker (`KafkaSourceBuilder::max_wait`, `kafka.max-wait`).
pub const MAX_WAIT: Duration = Duration::from_millis(500);
/// How long one broker request may take (`KafkaSourceBuilder::request_timeout`,
/// `kafka.request-timeout`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
