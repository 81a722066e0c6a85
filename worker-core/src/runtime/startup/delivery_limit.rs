//! The group's delivery-count limit at start: read, never guessed (a guess above the real limit
//! would let retries run into the broker's archive).

use crate::policy::PolicyConfig;
use crate::source::ShareSource;
use crate::{Error, ErrorKind, Result};

/// The limit at start-up. An error unless the limit was read, or an assumed one is configured.
pub(crate) async fn read<S: ShareSource>(source: &S, config: &PolicyConfig) -> Result<Option<u16>> {
    match (source.delivery_limit().await, config.assumed_limit) {
        (Ok(Some(limit)), _) => {
            tracing::info!(
                delivery_limit = limit,
                "read the group's delivery-count limit"
            );
            Ok(Some(limit))
        }
        (Ok(None), assumed) => Ok(assumed),
        (Err(err), Some(assumed)) => {
            tracing::warn!(error = %err, assumed, "cannot read the group's delivery-count limit: assuming the configured one");
            Ok(Some(assumed))
        }
        (Err(err), None) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "cannot read the group's delivery-count limit ({err}); it decides how many attempts a record gets before the broker archives it, so the worker does not guess it: grant DescribeConfigs, or set `assume_delivery_limit` (TOML `retry.assume-delivery-limit`) to the group's real limit"
            ),
        )),
    }
}
