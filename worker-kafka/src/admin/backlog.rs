//! A share group's backlog per partition from its first second: the broker's own lag where it
//! reports one, and where it does not (a group that has settled nothing yet, a broker without
//! DescribeShareGroupOffsets v1) the lag worked out from the offsets, so a new group's backlog is
//! known before its first worker fetched anything.

use std::collections::{BTreeSet, HashMap};

use super::configs::{ConfigResult, config_answer};
use super::groups::{LagSource, PartitionOffsets};
use super::topics::{EARLIEST, LATEST};
use super::{Admin, RESOURCE_GROUP, codes};
use crate::config::OffsetReset;
use crate::{Error, ErrorKind, Result};

/// The group config that says where a share group starts on a partition it has no state for.
const OFFSET_RESET_KEY: &str = "share.auto.offset.reset";
/// Group configs a share group's operator sets: one set on the group itself makes it known.
const GROUP_KEYS: &[&str] = &[
    OFFSET_RESET_KEY,
    "share.record.lock.duration.ms",
    "share.delivery.count.limit",
];
/// DescribeConfigs' source of a config set on the group itself (GROUP_CONFIG).
const SOURCE_GROUP_CONFIG: i8 = 8;

impl Admin {
    /// `group`'s start offset and lag on every partition of `topics`, like
    /// [`share_group_offsets`](Self::share_group_offsets), with every lag the broker does not
    /// report worked out ([`LagSource`]): one ListOffsets per leader for the partitions without
    /// it, plus the group's `share.auto.offset.reset` when it has no state on some.
    pub async fn share_group_backlog(
        &self,
        group: &str,
        topics: &[&str],
    ) -> Result<Vec<PartitionOffsets>> {
        let mut offsets = self.share_group_offsets(group, topics).await?;
        let unknown: BTreeSet<&str> = offsets
            .iter()
            .filter(|p| p.lag < 0)
            .map(|p| p.topic.as_str())
            .collect();
        if unknown.is_empty() {
            return Ok(offsets);
        }
        let wanted: Vec<String> = unknown.iter().map(|t| (*t).to_owned()).collect();
        let unstarted = offsets.iter().any(|p| p.lag < 0 && p.start_offset < 0);
        let reset = if unstarted {
            Some(self.share_offset_reset(group).await?)
        } else {
            None
        };
        let meta = self.cluster.metadata(&wanted).await?;
        let mut ends: HashMap<(String, i32), (i64, i64)> = HashMap::new();
        for topic in &meta.topics {
            let Some(name) = topic.name.as_deref() else {
                continue;
            };
            if topic.error_code != codes::NONE {
                continue;
            }
            let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
            for p in &topic.partitions {
                by_leader.entry(p.leader).or_default().push(p.partition);
            }
            for (leader, partitions) in by_leader {
                let latest = self.list_offsets(leader, name, &partitions, LATEST).await?;
                let earliest = if reset.is_some() {
                    self.list_offsets(leader, name, &partitions, EARLIEST)
                        .await?
                } else {
                    HashMap::new()
                };
                for (partition, end) in latest {
                    let start = earliest.get(&partition).copied().unwrap_or(0);
                    ends.insert((name.to_owned(), partition), (start, end));
                }
            }
        }
        for p in offsets.iter_mut().filter(|p| p.lag < 0) {
            let Some(&(log_start, end)) = ends.get(&(p.topic.clone(), p.partition)) else {
                continue;
            };
            let (lag, source) = estimate(p.start_offset, log_start, end, reset);
            p.lag = lag;
            p.lag_source = source;
        }
        Ok(offsets)
    }

    /// Whether share group `group` is known to the cluster: a member has joined it (the
    /// coordinator describes it), or it has group configs of its own (`share.auto.offset.reset`
    /// or the lock duration, as `share-worker setup` writes them before any worker runs).
    pub async fn share_group_known(&self, group: &str) -> Result<bool> {
        if self.described_group(group).await?.is_some() {
            return Ok(true);
        }
        let (answer, _, _) = self.group_configs(group, GROUP_KEYS).await?;
        Ok(GROUP_KEYS.iter().any(|key| {
            answer
                .entry(key)
                .is_some_and(|entry| entry.source == SOURCE_GROUP_CONFIG)
        }))
    }

    /// Where `group` starts on a partition it has no state for: its `share.auto.offset.reset`,
    /// `latest` (Kafka's default) when it has none. A `by_duration:` reset reads as `earliest`:
    /// the backlog worked out from it is an upper bound.
    pub async fn share_offset_reset(&self, group: &str) -> Result<OffsetReset> {
        let (answer, node_id, addr) = self.group_configs(group, &[OFFSET_RESET_KEY]).await?;
        match answer
            .entry(OFFSET_RESET_KEY)
            .and_then(|e| e.value.as_deref())
        {
            None | Some("latest") => Ok(OffsetReset::Latest),
            Some("earliest") => Ok(OffsetReset::Earliest),
            Some(other) if other.starts_with("by_duration:") => Ok(OffsetReset::Earliest),
            Some(other) => Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "{OFFSET_RESET_KEY} of group {group} on broker {node_id} ({addr}) is {other:?}: expected earliest, latest or by_duration:<duration>"
                ),
            )),
        }
    }
}

impl Admin {
    /// `group`'s `keys` as the lowest-numbered broker describes them, with its id and address.
    async fn group_configs(
        &self,
        group: &str,
        keys: &[&'static str],
    ) -> Result<(ConfigResult, i32, String)> {
        let node_id = self.lowest_broker().await?;
        let (results, addr) = self
            .describe_configs(node_id, &[(RESOURCE_GROUP, group, keys)])
            .await?;
        let answer = config_answer(
            &results,
            RESOURCE_GROUP,
            group,
            &addr,
            &format!("describing the configs of group {group} on broker {node_id} ({addr})"),
        )?
        .clone();
        Ok((answer, node_id, addr))
    }
}

/// The lag of a partition the broker gives none for: from the share start offset when the group
/// has one, else from where the group will start (`reset`, with the log's start and end).
fn estimate(start: i64, log_start: i64, end: i64, reset: Option<OffsetReset>) -> (i64, LagSource) {
    if start >= 0 {
        return ((end - start).max(0), LagSource::Offsets);
    }
    match reset {
        Some(OffsetReset::Earliest) => ((end - log_start.max(0)).max(0), LagSource::Reset),
        Some(OffsetReset::Latest) => (0, LagSource::Reset),
        None => (-1, LagSource::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lag_is_worked_out_from_the_start_offset_or_from_where_the_group_will_start() {
        assert_eq!(estimate(40, 0, 100, None), (60, LagSource::Offsets));
        assert_eq!(
            estimate(120, 0, 100, None),
            (0, LagSource::Offsets),
            "never negative"
        );
        assert_eq!(
            estimate(-1, 10, 100, Some(OffsetReset::Earliest)),
            (90, LagSource::Reset),
            "from the log's start"
        );
        assert_eq!(
            estimate(-1, 10, 100, Some(OffsetReset::Latest)),
            (0, LagSource::Reset),
            "only what comes next"
        );
        assert_eq!(estimate(-1, 0, 100, None), (-1, LagSource::Unknown));
    }
}
