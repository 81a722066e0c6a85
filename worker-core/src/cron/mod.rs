//! Periodic jobs: a [`CronJob`] enqueues one record on each tick of its [`Schedule`], fired
//! exactly once per tick across the whole fleet by a [`CronScheduler`] (with the `rdkafka`
//! feature), with nothing but Kafka.

mod job;
mod schedule;
#[cfg(feature = "rdkafka")]
mod scheduler;

pub use job::{CronJob, MAX_NAME};
pub use schedule::{CatchUp, MIN_INTERVAL, Schedule, due, millis};
#[cfg(feature = "rdkafka")]
pub use scheduler::{CronScheduler, Firings};
