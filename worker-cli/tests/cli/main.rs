//! The built `share-worker` binary against the real broker (`KAFKA_BOOTSTRAP`, default
//! 127.0.0.1:9092; `scripts/kafka.sh start` runs one), and its dashboard in headless Chromium
//! ([`ui`]). Each test uses its own topics and group.

mod fake_http;
mod support;

mod batches;
mod breaker;
mod broker_dlq;
mod cancel;
mod check;
mod control;
mod cron;
mod fleet_rates;
mod handlers;
mod https;
mod image;
mod jobs;
mod lanes;
mod mounted;
mod rates;
mod replay;
mod run;
mod scaler;
mod security;
mod status;
mod telemetry;
mod ui;
mod untrusted;
