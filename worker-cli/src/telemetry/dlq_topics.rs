//! Whether the dead-letter topics exist, looked up in the background every interval and cached
//! for `/readyz`: a probe never makes the worker open a Kafka connection.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use worker_core::security::Security;

use crate::topics;

/// The last answer of the dead-letter topic check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DlqTopics {
    /// The first check has not finished yet.
    Unchecked,
    /// Every dead-letter topic exists (or none is configured).
    Present,
    /// These dead-letter topics do not exist.
    Missing(Vec<String>),
    /// The cluster's topics could not be read: why.
    Unreachable(String),
}

impl DlqTopics {
    /// `Ok` when the dead-letter topics are known to exist; otherwise why not.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        match self {
            Self::Present => Ok(()),
            Self::Unchecked => Err("the dead-letter topics have not been checked yet".to_owned()),
            Self::Missing(topics) => match topics.as_slice() {
                [one] => Err(format!("dead-letter topic {one} does not exist")),
                many => Err(format!(
                    "dead-letter topics {} do not exist",
                    many.join(", ")
                )),
            },
            Self::Unreachable(why) => Err(format!("cannot check the dead-letter topics: {why}")),
        }
    }

    fn of(wanted: &[String], existing: anyhow::Result<impl Fn(&str) -> bool>) -> Self {
        match existing {
            Err(err) => Self::Unreachable(format!("{err:#}")),
            Ok(exists) => {
                let missing: Vec<String> = wanted.iter().filter(|t| !exists(t)).cloned().collect();
                if missing.is_empty() {
                    Self::Present
                } else {
                    Self::Missing(missing)
                }
            }
        }
    }
}

/// Checks that `wanted` exist at `bootstrap` (connecting as `security` says) now and then every
/// `every`; the receiver sees the last result. No task when there is nothing to check.
pub(crate) fn spawn_check(
    bootstrap: String,
    security: Security,
    wanted: Vec<String>,
    every: Duration,
) -> (watch::Receiver<DlqTopics>, Option<JoinHandle<()>>) {
    if wanted.is_empty() {
        return (watch::channel(DlqTopics::Present).1, None);
    }
    let (sender, receiver) = watch::channel(DlqTopics::Unchecked);
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let existing = topics::existing(&bootstrap, &security)
                .await
                .map(|topics| move |t: &str| topics.contains_key(t));
            let now = DlqTopics::of(&wanted, existing);
            if *sender.borrow() != now {
                match now.readiness() {
                    Ok(()) => tracing::info!("the dead-letter topics exist"),
                    Err(why) => tracing::warn!(reason = %why, "/readyz: not ready"),
                }
            }
            if sender.send(now).is_err() {
                return;
            }
        }
    });
    (receiver, Some(task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_what_is_missing_or_why_it_is_unknown() {
        let wanted = ["a.dlq".to_owned(), "b.dlq".to_owned()];
        let only_a = |t: &str| t == "a.dlq";
        assert_eq!(
            DlqTopics::of(&wanted, Ok(only_a)),
            DlqTopics::Missing(vec!["b.dlq".into()])
        );
        assert_eq!(
            DlqTopics::of(&wanted, Ok(|_: &str| true)),
            DlqTopics::Present
        );
        let unreachable = DlqTopics::of(
            &wanted,
            Err::<fn(&str) -> bool, _>(anyhow::anyhow!("timed out")),
        );
        assert_eq!(
            unreachable.readiness(),
            Err("cannot check the dead-letter topics: timed out".to_owned())
        );
        assert_eq!(
            DlqTopics::Missing(wanted.to_vec()).readiness(),
            Err("dead-letter topics a.dlq, b.dlq do not exist".to_owned())
        );
    }
}
