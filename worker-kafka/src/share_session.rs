//! The bookkeeping of one share session, without I/O: its epoch, the partitions it holds, and
//! what a fetch must list (new partitions, acknowledgements) and forget.
//!
//! The broker keeps the session's partition set between requests (KIP-932's incremental
//! ShareFetch): a request lists only partitions new to the session or carrying
//! acknowledgements, and names in `forgotten` those the session should drop. Epoch 0 opens a
//! session (listing everything), each answered request moves the epoch on, and -1 closes it.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::ack_queue::{Listed, PendingAck, ack_topics};

/// A topic-partition by topic id.
pub(crate) type Partition = (Uuid, i32);

/// What one ShareFetch lists and forgets.
#[derive(Debug, Default)]
pub(crate) struct FetchPlan {
    /// Partitions to list, each with the acknowledgements riding on the request.
    pub(crate) listed: Listed,
    /// Partitions the session should drop.
    pub(crate) forgotten: Vec<(Uuid, Vec<i32>)>,
}

/// The session's epoch and partition set, as the broker knows them.
#[derive(Debug, Default)]
pub(crate) struct ShareSession {
    epoch: i32,
    partitions: BTreeSet<Partition>,
}

impl ShareSession {
    /// The epoch the next request carries: 0 while no session is open.
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether a session is open (acknowledgements can only go to an open one).
    pub(crate) fn is_open(&self) -> bool {
        self.epoch != 0
    }

    /// Forgets the session: the next request opens a new one at epoch 0.
    pub(crate) fn reset(&mut self) {
        self.epoch = 0;
        self.partitions.clear();
    }

    /// Splits `acks` into those that ride on a fetch of `wanted` and those that must go alone
    /// first: listing a partition that is not wanted (a paused topic, a revoked partition) would
    /// add it to the session and acquire records nobody asked for.
    pub(crate) fn split_acks(
        wanted: &BTreeSet<Partition>,
        mut acks: Vec<PendingAck>,
    ) -> (Vec<PendingAck>, Vec<PendingAck>) {
        let alone = acks
            .extract_if(.., |ack| !wanted.contains(&(ack.topic_id, ack.partition)))
            .collect();
        (acks, alone)
    }

    /// What a fetch of `wanted` carrying `riding` must list and forget.
    pub(crate) fn plan_fetch(
        &self,
        wanted: &BTreeSet<Partition>,
        riding: &[PendingAck],
    ) -> FetchPlan {
        let mut listed: Listed = wanted
            .iter()
            .filter(|tp| !self.is_open() || !self.partitions.contains(tp))
            .map(|tp| (*tp, Vec::new()))
            .collect();
        ack_topics(riding, &mut listed);
        let mut forgotten: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        if self.is_open() {
            for (t, p) in self.partitions.difference(wanted) {
                if !listed.contains_key(&(*t, *p)) {
                    forgotten.entry(*t).or_default().push(*p);
                }
            }
        }
        FetchPlan {
            listed,
            forgotten: forgotten.into_iter().collect(),
        }
    }

    /// The broker answered a fetch that listed `listed` and forgot `forgotten`.
    pub(crate) fn fetched<'a>(
        &mut self,
        listed: impl IntoIterator<Item = &'a Partition>,
        forgotten: &[(Uuid, Vec<i32>)],
    ) {
        self.epoch = next_epoch(self.epoch);
        self.partitions.extend(listed);
        for (t, ps) in forgotten {
            for p in ps {
                self.partitions.remove(&(*t, *p));
            }
        }
    }

    /// The broker answered a ShareAcknowledge sent at the current epoch.
    pub(crate) fn acknowledged(&mut self) {
        if self.is_open() {
            self.epoch = next_epoch(self.epoch);
        }
    }
}

/// The epoch after `epoch`: it wraps to 1, never to 0 (which would open a new session).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(topic_id: Uuid, partition: i32, offset: i64) -> PendingAck {
        PendingAck {
            topic_id,
            partition,
            first: offset,
            last: offset,
            kind: 1,
            generation: 1,
            reply: None,
        }
    }

    fn set(parts: &[Partition]) -> BTreeSet<Partition> {
        parts.iter().copied().collect()
    }

    #[test]
    fn epochs_count_up_and_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn a_new_session_lists_everything_then_only_what_changed() {
        let t = Uuid::from_u128(7);
        let mut s = ShareSession::default();
        let wanted = set(&[(t, 0), (t, 1)]);
        let plan = s.plan_fetch(&wanted, &[]);
        assert_eq!(
            plan.listed.keys().copied().collect::<Vec<_>>(),
            vec![(t, 0), (t, 1)]
        );
        assert!(plan.forgotten.is_empty());
        s.fetched(plan.listed.keys(), &plan.forgotten);
        assert_eq!(s.epoch(), 1);

        // Same partitions: nothing listed but the partition an acknowledgement rides for.
        let plan = s.plan_fetch(&wanted, &[ack(t, 1, 5)]);
        assert_eq!(
            plan.listed.keys().copied().collect::<Vec<_>>(),
            vec![(t, 1)]
        );
        assert_eq!(plan.listed[&(t, 1)], vec![(5, 5, 1)]);
        s.fetched(plan.listed.keys(), &plan.forgotten);

        // Partition 1 revoked, 2 assigned: 2 listed, 1 forgotten.
        let plan = s.plan_fetch(&set(&[(t, 0), (t, 2)]), &[]);
        assert_eq!(
            plan.listed.keys().copied().collect::<Vec<_>>(),
            vec![(t, 2)]
        );
        assert_eq!(plan.forgotten, vec![(t, vec![1])]);
        s.fetched(plan.listed.keys(), &plan.forgotten);
        assert_eq!(s.epoch(), 3);
        assert_eq!(s.partitions, set(&[(t, 0), (t, 2)]));
    }

    #[test]
    fn acknowledgements_for_partitions_not_fetched_go_alone() {
        let t = Uuid::from_u128(1);
        let (riding, alone) =
            ShareSession::split_acks(&set(&[(t, 0)]), vec![ack(t, 0, 1), ack(t, 3, 2)]);
        assert_eq!(riding.len(), 1);
        assert_eq!(riding[0].partition, 0);
        assert_eq!(alone.len(), 1);
        assert_eq!(alone[0].partition, 3);
    }

    #[test]
    fn a_reset_session_reopens_at_epoch_zero_and_acks_move_only_open_sessions() {
        let t = Uuid::from_u128(1);
        let mut s = ShareSession::default();
        s.acknowledged();
        assert_eq!(s.epoch(), 0);
        s.fetched([(t, 0)].iter(), &[]);
        s.acknowledged();
        assert_eq!(s.epoch(), 2);
        s.reset();
        assert!(!s.is_open());
        let plan = s.plan_fetch(&set(&[(t, 0)]), &[]);
        assert_eq!(
            plan.listed.len(),
            1,
            "a new session lists its partitions again"
        );
    }
}
