//! The fleet: how many workers of the share group take each route's records, so that a rate
//! written for the whole group holds for the whole group.
//!
//! A route's `rate` (and the worker-wide one) is the group's total: each worker takes
//! `rate / n`, where `n` counts the members the group's coordinator has assigned a partition of
//! the route's topic (for the worker-wide rate: a partition of anything). Members without an
//! assignment fetch nothing, so they take no share. The membership is read every
//! [`FLEET_REFRESH`](crate::defaults::FLEET_REFRESH) (ShareGroupDescribe, one small request to the
//! coordinator); a worker that joins or leaves changes every other worker's share within that.
//!
//! What holds: at any moment the shares add up to the rate, except for the refresh after a
//! worker joins (the others still take the larger share for up to one refresh: at most the
//! rate × that time in excess) and the time a crashed worker stays a member (the group's
//! session timeout, 45 s by default: its share goes unused until the coordinator drops it; a
//! worker that stops cleanly leaves at once). Per-key limits and `key-concurrency` stay per
//! worker: the records of one key can reach every member that shares its partition, so a key's
//! fleet-wide rate is up to `n` times its per-worker limit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::kafka::Admin;
use crate::{Error, Result};

/// Who takes the group's records: members with an assignment, in all and per topic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetView {
    assigned: u32,
    by_topic: BTreeMap<String, u32>,
}

impl FleetView {
    /// The view of members given as their assignments, (topic, partition) pairs each.
    pub fn from_assignments<'a, M, A>(members: M) -> Self
    where
        M: IntoIterator<Item = A>,
        A: IntoIterator<Item = &'a (String, i32)>,
    {
        let mut view = Self::default();
        for assignment in members {
            let mut topics: Vec<&str> = assignment.into_iter().map(|(t, _)| t.as_str()).collect();
            if topics.is_empty() {
                continue;
            }
            topics.sort_unstable();
            topics.dedup();
            view.assigned += 1;
            for topic in topics {
                *view.by_topic.entry(topic.to_owned()).or_default() += 1;
            }
        }
        view
    }

    /// How many workers share `topic`'s records (`None`: all the group's records); at least 1,
    /// so a worker alone — or one that has not seen itself assigned yet — takes the whole rate.
    pub fn sharing(&self, topic: Option<&str>) -> u32 {
        let n = match topic {
            Some(topic) => self.by_topic.get(topic).copied().unwrap_or(0),
            None => self.assigned,
        };
        n.max(1)
    }
}

/// A worker's view of its fleet, updated as the membership changes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fleet {
    view: watch::Receiver<Arc<FleetView>>,
}

/// Sets the view of a [`Fleet::manual`].
#[derive(Debug)]
pub struct FleetSender {
    view: watch::Sender<Arc<FleetView>>,
}

impl FleetSender {
    /// Makes `view` the fleet every clone of the fleet sees.
    pub fn set(&self, view: FleetView) {
        self.view.send_if_modified(|current| {
            let changed = **current != view;
            if changed {
                *current = Arc::new(view);
            }
            changed
        });
    }
}

impl Fleet {
    /// A fleet that changes only through the returned sender: for tests, or an application that
    /// knows its replicas another way.
    pub fn manual(view: FleetView) -> (Self, FleetSender) {
        let (sender, receiver) = watch::channel(Arc::new(view));
        (Self { view: receiver }, FleetSender { view: sender })
    }

    /// Follows `group`'s membership through `admin`: read once now (an error if it cannot be:
    /// without it the worker would take the whole rate), then every `every`. A later failed read
    /// keeps the last view (logged at warn level once per run of failures). The reading task ends
    /// when the last clone of the fleet is dropped. Needs a tokio runtime.
    pub async fn follow(admin: Admin, group: impl Into<String>, every: Duration) -> Result<Self> {
        let group = group.into();
        let read = async |admin: &Admin, group: &str| {
            admin.describe_share_group(group).await.map(|described| {
                FleetView::from_assignments(described.members.iter().map(|m| &m.assignment))
            })
        };
        let first = read(&admin, &group).await.map_err(|err| {
            let err = Error::from(err);
            Error::new(
                err.kind(),
                format!(
                    "reading share group {group}'s membership to share the rate limits: {}",
                    err.message()
                ),
            )
        })?;
        let (fleet, sender) = Self::manual(first);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::select! {
                    () = sender.view.closed() => return,
                    () = tokio::time::sleep(every) => {}
                }
                match read(&admin, &group).await {
                    Ok(view) => {
                        if failing {
                            tracing::info!(group = %group, "the group's membership is read again");
                        }
                        failing = false;
                        sender.set(view);
                    }
                    Err(err) if !failing => {
                        failing = true;
                        tracing::warn!(
                            group = %group,
                            error = %err,
                            "cannot read the group's membership: the rate limits keep the last shares"
                        );
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(fleet)
    }

    /// The fleet now.
    pub fn view(&self) -> Arc<FleetView> {
        self.view.borrow().clone()
    }

    /// The fleet if it changed since this clone last looked.
    pub(crate) fn changed(&mut self) -> Option<Arc<FleetView>> {
        self.view
            .has_changed()
            .unwrap_or(false)
            .then(|| self.view.borrow_and_update().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(list: &[(&str, i32)]) -> Vec<(String, i32)> {
        list.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
    }

    #[test]
    fn members_count_per_topic_they_are_assigned() {
        let a = parts(&[("sms", 0), ("sms", 1), ("email", 0)]);
        let b = parts(&[("sms", 2)]);
        let idle = parts(&[]);
        let view = FleetView::from_assignments([&a, &b, &idle]);
        assert_eq!(view.sharing(Some("sms")), 2);
        assert_eq!(view.sharing(Some("email")), 1);
        assert_eq!(
            view.sharing(None),
            2,
            "a member with no partition takes no share"
        );
        assert_eq!(
            view.sharing(Some("push")),
            1,
            "nobody assigned: the whole rate"
        );
        assert_eq!(FleetView::default().sharing(None), 1);
    }

    #[tokio::test]
    async fn a_clone_sees_each_change_once() {
        let (mut fleet, sender) = Fleet::manual(FleetView::default());
        assert!(fleet.changed().is_none());
        let a = parts(&[("sms", 0)]);
        sender.set(FleetView::from_assignments([&a, &a]));
        assert_eq!(fleet.changed().map(|v| v.sharing(Some("sms"))), Some(2));
        assert!(fleet.changed().is_none());
        sender.set(FleetView::from_assignments([&a, &a]));
        assert!(fleet.changed().is_none(), "the same view is no change");
    }
}
