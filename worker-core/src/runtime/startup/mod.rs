//! What the worker reads of its group before it fetches anything: the delivery-count limit,
//! whether locks can be renewed, and the broker's own dead-letter queue. Each read is one admin
//! request; they run at once.

mod broker_dlq;
mod delivery_limit;
mod renewal;

use crate::Result;
use crate::source::ShareSource;

use super::routes::Routes;
use super::settings::Settings;

/// What the start-up probes found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The group's delivery-count limit (or the assumed one).
    pub(crate) delivery_limit: Option<u16>,
    /// Whether locks can be renewed.
    pub(crate) renewal: bool,
    /// Whether the broker writes the letters of what the worker REJECTs without a sink.
    pub(crate) broker_writes_letters: bool,
}

/// Runs every probe; the first error stops the start.
pub(crate) async fn probe<S: ShareSource, Svc>(
    source: &S,
    settings: &Settings,
    routes: &Routes<Svc>,
) -> Result<Found> {
    let (delivery_limit, renewal, broker_writes_letters) = tokio::try_join!(
        delivery_limit::read(source, &settings.policy),
        renewal::check(source, settings, routes),
        broker_dlq::check(source, &settings.policy, routes),
    )?;
    Ok(Found {
        delivery_limit,
        renewal,
        broker_writes_letters,
    })
}
