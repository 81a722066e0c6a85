//! The acknowledgement queue of one share session, shared by the source (which queues) and the
//! session driver (which sends and answers). Every queued acknowledgement gets an answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::acks;
use super::codec::{PartitionAcks, TopicAcks};
use super::error_codes as codes;
use crate::{AckError, AckSender};

/// The most acknowledgements nobody waits for (GAP, releases of what a fetch could not use) that
/// may wait at once. The runtime's own acknowledgements are bounded by its slots; these come from
/// broker responses, so a broker that claims absurd acquisitions cannot grow the queue past this:
/// beyond it they are dropped (logged) and the broker's lock timeout settles them.
pub(crate) const MAX_UNANSWERED: usize = 1 << 16;

/// One acknowledgement or renewal of offsets `first..=last` waiting to be sent.
#[derive(Debug)]
pub(crate) struct PendingAck {
    pub(crate) topic_id: Uuid,
    pub(crate) partition: i32,
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) kind: i8,
    /// The session generation that acquired the record.
    pub(crate) generation: u32,
    /// `None` for acknowledgements nobody waits for (GAP).
    pub(crate) reply: Option<AckSender>,
}

impl PendingAck {
    fn answer(self, result: Result<(), AckError>) {
        if let Some(reply) = self.reply {
            reply.send(result);
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct AckQueue {
    pub(crate) acks: Vec<PendingAck>,
    pub(crate) renews: Vec<PendingAck>,
    pub(crate) closed: bool,
    /// How many queued entries nobody waits for.
    pub(crate) unanswered: usize,
    /// The records of the current session still being handled.
    pub(crate) out: Outstanding,
}

/// Records a session delivered whose acknowledgement has not been queued yet, and until when the
/// last of their locks holds. While some are out their acknowledgements may come at any moment,
/// and a broker answers one request per connection at a time: a fetch sent then must not hold the
/// connection for a long poll. A record whose lock ran out without an acknowledgement (a lost
/// lock) stops counting when it does.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    records: u64,
    locked_until: Option<Instant>,
}

impl Outstanding {
    /// `count` records were delivered, locked until `until`.
    pub(crate) fn delivered(&mut self, count: usize, until: Instant) {
        if count == 0 {
            return;
        }
        self.records = self.records.saturating_add(count as u64);
        self.extend(until);
    }

    /// Locks were renewed until `until`.
    pub(crate) fn extend(&mut self, until: Instant) {
        self.locked_until = Some(self.locked_until.map_or(until, |at| at.max(until)));
    }

    fn settled(&mut self) {
        self.records = self.records.saturating_sub(1);
    }

    /// Whether records are out and their locks still hold at `now`.
    pub(crate) fn busy(&self, now: Instant) -> bool {
        self.records > 0 && self.locked_until.is_some_and(|until| until > now)
    }
}

impl AckQueue {
    /// Takes the queued acknowledgements (or renewals).
    pub(crate) fn take(&mut self, renew: bool) -> Vec<PendingAck> {
        let taken = std::mem::take(if renew {
            &mut self.renews
        } else {
            &mut self.acks
        });
        if !renew {
            self.unanswered = 0;
        }
        taken
    }
}

/// The part of a session the source touches directly.
#[derive(Debug)]
pub(crate) struct SessionShared {
    pub(crate) node: i32,
    pub(crate) generation: AtomicU32,
    pub(crate) queue: Mutex<AckQueue>,
    pub(crate) wake: Notify,
    /// Set to make the driver drop its connection (tests of session loss).
    pub(crate) disconnect: AtomicBool,
}

impl SessionShared {
    /// The generation of the current share session; leases of older ones cannot be acknowledged.
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Queues an acknowledgement (or a renewal) and wakes the driver. Returns `false` when an
    /// acknowledgement nobody waits for was dropped because [`MAX_UNANSWERED`] already wait.
    pub(crate) fn enqueue(&self, ack: PendingAck, renew: bool) -> bool {
        let Ok(mut q) = self.queue.lock() else {
            ack.answer(Err(AckError::Closed));
            return true;
        };
        if q.closed {
            drop(q);
            ack.answer(Err(AckError::Closed));
            return true;
        }
        if ack.generation != self.generation() {
            drop(q);
            ack.answer(Err(AckError::SessionLost));
            return true;
        }
        if renew {
            q.renews.push(ack);
        } else {
            if ack.reply.is_none() {
                if q.unanswered >= MAX_UNANSWERED {
                    return false;
                }
                q.unanswered += 1;
            } else {
                q.out.settled();
            }
            q.acks.push(ack);
        }
        drop(q);
        self.wake.notify_one();
        true
    }

    /// Makes the driver drop its connection (and with it the share session) before its next step.
    #[cfg(feature = "test-util")]
    pub(crate) fn disconnect(&self) {
        self.disconnect.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether records of this session are still being handled (see [`Outstanding`]).
    pub(crate) fn busy(&self, now: Instant) -> bool {
        self.queue.lock().map(|q| q.out.busy(now)).unwrap_or(false)
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.queue
            .lock()
            .map(|q| !q.acks.is_empty() || !q.renews.is_empty())
            .unwrap_or(false)
    }
}

/// Maps a partition-level acknowledgement error to what the runtime is told.
pub(crate) fn ack_error(code: i16, message: Option<&str>) -> AckError {
    match code {
        codes::INVALID_RECORD_STATE => AckError::LockLost,
        c if codes::leader_moved(c) => AckError::LeaderMoved,
        c if codes::ends_session(c) => AckError::SessionLost,
        code => AckError::Broker {
            code,
            message: message
                .map(str::to_string)
                .unwrap_or_else(|| format!("error code {code}")),
        },
    }
}

/// Answers each acknowledgement from per-partition results; a partition the broker did not answer
/// for is a failure, never a silent success.
pub(crate) fn answer_all(
    taken: Vec<PendingAck>,
    results: &HashMap<(Uuid, i32), (i16, Option<String>)>,
) {
    for ack in taken {
        let result = match results.get(&(ack.topic_id, ack.partition)) {
            Some((0, _)) => Ok(()),
            Some((code, msg)) => Err(ack_error(*code, msg.as_deref())),
            None => Err(AckError::Broker {
                code: -1,
                message: "the broker did not answer for the partition".into(),
            }),
        };
        ack.answer(result);
    }
}

pub(crate) fn fail_all(taken: Vec<PendingAck>, err: &AckError) {
    for ack in taken {
        ack.answer(Err(err.clone()));
    }
}

/// Answers at once every acknowledgement that overlaps an earlier one of the same flush for the
/// same partition, with [`AckError::Duplicate`]: a request carries one type per offset, so only
/// the first is sent and only the first may be answered by the broker's result. Returns the rest,
/// in queue order.
pub(crate) fn drop_duplicates(taken: Vec<PendingAck>) -> Vec<PendingAck> {
    let mut seen: HashMap<(Uuid, i32), BTreeMap<i64, i64>> = HashMap::new();
    let mut kept = Vec::with_capacity(taken.len());
    for ack in taken {
        let ranges = seen.entry((ack.topic_id, ack.partition)).or_default();
        let before = ranges.range(..=ack.last).next_back();
        if before.is_some_and(|(_, last)| *last >= ack.first) {
            ack.answer(Err(AckError::Duplicate));
            continue;
        }
        ranges.insert(ack.first, ack.last);
        kept.push(ack);
    }
    kept
}

/// The partitions of one request, each with its `(first, last, type)` acknowledgement ranges.
pub(crate) type Listed = BTreeMap<(Uuid, i32), Vec<(i64, i64, i8)>>;

/// Groups acknowledgements into per-partition ranges.
pub(crate) fn ack_topics(taken: &[PendingAck], listed: &mut Listed) {
    for ack in taken {
        listed
            .entry((ack.topic_id, ack.partition))
            .or_default()
            .push((ack.first, ack.last, ack.kind));
    }
}

pub(crate) fn to_topics(listed: Listed) -> Vec<TopicAcks> {
    let mut topics: Vec<TopicAcks> = Vec::new();
    for ((topic_id, partition), offsets) in listed {
        let part = PartitionAcks {
            partition,
            batches: acks::merge(offsets),
        };
        match topics.last_mut() {
            Some(t) if t.topic_id == topic_id => t.partitions.push(part),
            _ => topics.push(TopicAcks {
                topic_id,
                partitions: vec![part],
            }),
        }
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AckReceipt;

    #[test]
    fn ack_errors_say_what_happened() {
        assert_eq!(ack_error(121, None), AckError::LockLost);
        assert_eq!(ack_error(6, None), AckError::LeaderMoved);
        assert_eq!(ack_error(74, None), AckError::LeaderMoved);
        assert_eq!(ack_error(3, None), AckError::LeaderMoved);
        // SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED
        for code in [122, 123, 133] {
            assert_eq!(ack_error(code, None), AckError::SessionLost);
        }
        assert!(matches!(
            ack_error(42, Some("bad")),
            AckError::Broker { code: 42, .. }
        ));
    }

    #[test]
    fn acks_are_merged_per_partition_in_topic_order() {
        let t = Uuid::from_u128(1);
        let pending = |partition, offset, kind| PendingAck {
            topic_id: t,
            partition,
            first: offset,
            last: offset,
            kind,
            generation: 1,
            reply: None,
        };
        let taken = vec![
            pending(1, 5, 1),
            pending(0, 2, 1),
            pending(1, 4, 1),
            pending(0, 3, 2),
        ];
        let mut listed = BTreeMap::new();
        ack_topics(&taken, &mut listed);
        let topics = to_topics(listed);
        assert_eq!(topics.len(), 1);
        assert_eq!(topics[0].partitions[0].partition, 0);
        assert_eq!(topics[0].partitions[0].batches[0].types, vec![1, 2]);
        assert_eq!(topics[0].partitions[1].batches[0].first, 4);
        assert_eq!(topics[0].partitions[1].batches[0].types, vec![1]);
    }

    #[tokio::test]
    async fn unanswered_partitions_fail_instead_of_succeeding() {
        let (tx, rx) = AckReceipt::channel();
        let ack = PendingAck {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            first: 1,
            last: 1,
            kind: 1,
            generation: 1,
            reply: Some(tx),
        };
        answer_all(vec![ack], &HashMap::new());
        assert!(matches!(rx.await, Err(AckError::Broker { code: -1, .. })));
    }

    #[tokio::test]
    async fn an_offset_acknowledged_twice_in_one_flush_is_answered_once() {
        let ack = |first, last| {
            let (tx, rx) = AckReceipt::channel();
            let ack = PendingAck {
                topic_id: Uuid::from_u128(1),
                partition: 0,
                first,
                last,
                kind: 1,
                generation: 1,
                reply: Some(tx),
            };
            (ack, rx)
        };
        let (a, ra) = ack(5, 5);
        let (b, rb) = ack(1, 9);
        let (c, rc) = ack(5, 5);
        let (d, rd) = ack(10, 10);
        let kept = drop_duplicates(vec![a, b, c, d]);
        assert_eq!(kept.len(), 2);
        assert_eq!(rb.await, Err(AckError::Duplicate));
        assert_eq!(rc.await, Err(AckError::Duplicate));
        answer_all(kept, &HashMap::from([((Uuid::from_u128(1), 0), (0, None))]));
        assert_eq!((ra.await, rd.await), (Ok(()), Ok(())));
    }

    #[test]
    fn acknowledgements_nobody_waits_for_are_bounded() {
        let shared = SessionShared {
            node: 1,
            generation: AtomicU32::new(1),
            queue: Mutex::new(AckQueue::default()),
            wake: Notify::new(),
            disconnect: AtomicBool::new(false),
        };
        let gap = |offset| PendingAck {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            first: offset,
            last: offset,
            kind: 0,
            generation: 1,
            reply: None,
        };
        for offset in 0..MAX_UNANSWERED as i64 {
            assert!(shared.enqueue(gap(offset), false));
        }
        assert!(!shared.enqueue(gap(-1), false));
        let taken = shared
            .queue
            .lock()
            .map(|mut q| q.take(false))
            .unwrap_or_default();
        assert_eq!(taken.len(), MAX_UNANSWERED);
        assert!(shared.enqueue(gap(0), false), "room again once flushed");
    }

    #[tokio::test]
    async fn acks_for_an_old_session_fail_at_once() {
        let shared = SessionShared {
            node: 1,
            generation: AtomicU32::new(2),
            queue: Mutex::new(AckQueue::default()),
            wake: Notify::new(),
            disconnect: AtomicBool::new(false),
        };
        let (tx, rx) = AckReceipt::channel();
        let ack = PendingAck {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            first: 1,
            last: 1,
            kind: 1,
            generation: 1,
            reply: Some(tx),
        };
        shared.enqueue(ack, false);
        assert_eq!(rx.await, Err(AckError::SessionLost));
    }
}
