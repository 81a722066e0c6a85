//! Whether the group lets the worker renew locks, read once at start: Kafka 4.3 can turn RENEW
//! off per group (`share.renew.acknowledge.enable = false`). Without it a handler that outlives
//! its lock loses the record to another delivery, so the worker refuses a job timeout the lock
//! cannot cover and sends no RENEW (which would only fail and cancel the handler).

use crate::source::{Renewal, ShareSource};
use crate::{Error, ErrorKind, Result};

use super::super::routes::Routes;
use super::super::settings::Settings;

/// `Ok(true)` when locks can be renewed, `Ok(false)` when they cannot and every job timeout fits
/// in the lock, an error when one does not.
pub(crate) async fn check<S: ShareSource, Svc>(
    source: &S,
    config: &Settings,
    routes: &Routes<Svc>,
) -> Result<bool> {
    let lock = match source.renewal().await {
        Ok(Renewal::Disabled { lock }) => lock,
        Ok(_) => return Ok(true),
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether the group allows renewing locks: assuming it does");
            return Ok(true);
        }
    };
    let group = source.group().unwrap_or("(unnamed)");
    let longest = routes.longest_timeout(config.job_timeout);
    if longest >= lock {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "share group {group} does not allow renewing locks (share.renew.acknowledge.enable = false), so a record is delivered again {lock:?} after it was acquired, but a job may run for {longest:?}: set the job timeout below {lock:?} (`job_timeout`, `Route::timeout`; TOML `job-timeout`), or enable renewal on the group"
            ),
        ));
    }
    tracing::warn!(
        group,
        lock = ?lock,
        job_timeout = ?longest,
        "the group does not allow renewing locks: no RENEW is sent; a record held for a retry backoff past its lock is delivered again when the lock runs out"
    );
    Ok(false)
}
