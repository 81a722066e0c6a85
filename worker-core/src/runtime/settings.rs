//! The runtime's validated settings.

use std::sync::Arc;
use std::time::Duration;

use super::rate::RateLimit;
use crate::delay::{DelaySink, DelayTopic};
use crate::policy::PolicyConfig;
use crate::{Error, ErrorKind, Result};
use crate::{checks, defaults};

/// Where long waits go: the delay sink and the topics it writes.
#[derive(Clone, Debug)]
pub(crate) struct DelayConfig {
    pub(crate) sink: Arc<dyn DelaySink>,
    pub(crate) topic: DelayTopic,
}

/// Settings of one [`Worker`](super::Worker), checked once by the builder.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Handlers running at most; unfinished records held at most, with up to as many again
    /// per partition leader fetched ahead of fast handlers when there is one route.
    pub(crate) concurrency: usize,
    /// The most records one fetch asks for per request it sends (one per partition leader).
    pub(crate) max_poll_records: u32,
    /// When to renew a lock, as a fraction of the lock duration, and how often after that.
    pub(crate) renew_at: f64,
    /// How long one handler may run.
    pub(crate) job_timeout: Duration,
    /// How long shutdown waits for running handlers.
    pub(crate) shutdown_grace: Duration,
    /// Retries, backoff and the dead-letter sink.
    pub(crate) policy: PolicyConfig,
    /// How often the group's delivery-count limit is read again.
    pub(crate) limit_refresh: Duration,
    /// Whether locks are renewed: `false` when the group refuses RENEW (read at start).
    pub(crate) renewal: bool,
    /// The delay topics, when long waits move there.
    pub(crate) delay: Option<DelayConfig>,
    /// The longest wait held in the worker when a delay sink is configured.
    pub(crate) max_hold: Duration,
    /// The furthest ahead a record may ask to wait; one due later is dead-lettered at once.
    pub(crate) max_delay: Duration,
    /// How often records may start, over all routes.
    pub(crate) rate_limit: Option<RateLimit>,
    /// Whether the broker writes the letters of records REJECTed without a sink (broker mode, or
    /// no sink and a broker dead-letter queue; read at start).
    pub(crate) broker_writes_letters: bool,
    /// The group's fleet-wide controls, when the worker follows them.
    pub(crate) controls: Option<crate::control::Controls>,
    /// The fleet the rate limits are shared with, when they are.
    pub(crate) fleet: Option<crate::fleet::Fleet>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            concurrency: defaults::CONCURRENCY,
            max_poll_records: defaults::MAX_POLL_RECORDS,
            renew_at: defaults::RENEW_AT,
            job_timeout: defaults::JOB_TIMEOUT,
            shutdown_grace: defaults::SHUTDOWN_GRACE,
            policy: PolicyConfig::default(),
            limit_refresh: defaults::DELIVERY_LIMIT_REFRESH,
            renewal: true,
            delay: None,
            max_hold: defaults::MAX_HOLD,
            max_delay: defaults::MAX_DELAY,
            rate_limit: None,
            broker_writes_letters: false,
            controls: None,
            fleet: None,
        }
    }
}

impl Settings {
    /// Checks every setting; the error names the setting and what was expected.
    pub(crate) fn validate(&self) -> Result<()> {
        let named =
            |name: &str, why: String| Error::new(ErrorKind::Config, format!("`{name}`: {why}"));
        checks::concurrency(self.concurrency).map_err(|why| named("concurrency", why))?;
        checks::max_poll_records(self.max_poll_records)
            .map_err(|why| named("max_poll_records", why))?;
        checks::renew_at(self.renew_at).map_err(|why| named("renew_at", why))?;
        checks::above_zero(self.job_timeout).map_err(|why| named("job_timeout", why))?;
        checks::delivery_limit_refresh(self.limit_refresh)
            .map_err(|why| named("delivery_limit_refresh", why))?;
        checks::above_zero(self.max_hold).map_err(|why| named("max_hold", why))?;
        checks::above_zero(self.max_delay).map_err(|why| named("max_delay", why))?;
        if let Some(rate) = &self.rate_limit {
            rate.quota("rate_limit")?;
        }
        self.policy.validate()
    }

    /// Records of one key that may wait in the worker (for the key, or its rate limit) before more
    /// move to the delay topic: an eighth of the concurrency, at least 2.
    pub(crate) fn max_waiting_per_key(&self) -> usize {
        (self.concurrency / 8).max(2)
    }

    /// Records that may wait for a key or a key's limit, over all keys: half the concurrency.
    pub(crate) fn max_waiting_for_keys(&self) -> usize {
        (self.concurrency / 2).max(1)
    }

    /// Records held for a backoff at most: `max_held`, or half the concurrency (at least 1).
    pub(crate) fn max_held(&self) -> usize {
        self.policy
            .max_held
            .unwrap_or_else(|| (self.concurrency / 2).max(1))
    }

    /// How often to renew a lock of `lock` duration; `None` when the source reports no lock or
    /// the group refuses renewal.
    pub(crate) fn renew_every(&self, lock: Duration) -> Option<Duration> {
        let every = lock.mul_f64(self.renew_at);
        (self.renewal && !every.is_zero()).then_some(every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_setting() {
        let bad = [
            Settings {
                concurrency: 0,
                ..Settings::default()
            },
            Settings {
                max_poll_records: 0,
                ..Settings::default()
            },
            Settings {
                renew_at: 1.0,
                ..Settings::default()
            },
            Settings {
                renew_at: f64::NAN,
                ..Settings::default()
            },
            Settings {
                job_timeout: Duration::ZERO,
                ..Settings::default()
            },
        ];
        for (config, key) in bad.iter().zip([
            "concurrency",
            "max_poll_records",
            "renew_at",
            "renew_at",
            "job_timeout",
        ]) {
            let err = config.validate().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            assert!(err.message().contains(key), "{err}");
        }
    }

    #[test]
    fn renewals_run_at_a_fraction_of_the_lock() {
        let config = Settings::default();
        assert_eq!(
            config.renew_every(Duration::from_secs(1)),
            Some(Duration::from_millis(500))
        );
        assert_eq!(config.renew_every(Duration::ZERO), None);
    }
}
