//! Groups: describe a share group and its members (ShareGroupDescribe) and read its offsets
//! (DescribeShareGroupOffsets), both from the group's coordinator.

use bytes::Bytes;
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, GroupId, ShareGroupDescribeRequest, TopicName,
    describe_share_group_offsets_request,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{
    Admin, DESCRIBE_SHARE_GROUP_OFFSETS, Patience, SHARE_GROUP_DESCRIBE, broker_error, call, codes,
    encode, protocol_error,
};
use crate::wire::{Reader, capacity};
use crate::{Error, ErrorKind, Result};

/// A share group as ShareGroupDescribe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    /// The group's state: `Empty`, `Stable`, `Dead` (the group does not exist), ...
    pub state: String,
    /// The group epoch (-1 when the group does not exist).
    pub epoch: i32,
    /// The current members.
    pub members: Vec<ShareGroupMember>,
}

/// One member of a share group and the partitions assigned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupMember {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// The client id it connected with.
    pub client_id: String,
    /// The host it connected from.
    pub host: String,
    /// Its assigned partitions as (topic, partition), sorted.
    pub assignment: Vec<(String, i32)>,
}

/// A share group's position on one partition (DescribeShareGroupOffsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The share-partition start offset: records before it are all settled. -1 when the group has
    /// no state for the partition yet.
    pub start_offset: i64,
    /// The records not yet settled; -1 when unknown. Where it comes from is `lag_source`.
    pub lag: i64,
    /// Where `lag` comes from.
    pub lag_source: LagSource,
}

/// Where a partition's [`lag`](PartitionOffsets::lag) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagSource {
    /// The broker's own count (DescribeShareGroupOffsets v1).
    Broker,
    /// Worked out from the offsets: the end offset minus the share start offset. An upper bound:
    /// records past the start offset may be settled already.
    Offsets,
    /// The group has no state for the partition yet: what it will start from, per its
    /// `share.auto.offset.reset` — the end minus the log start offset for `earliest` (and, as an
    /// upper bound, for `by_duration`), 0 for `latest`.
    Reset,
    /// Not known (-1).
    Unknown,
}

/// One assigned topic of a member in a ShareGroupDescribe response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssignedTopic {
    pub(crate) topic_id: Uuid,
    pub(crate) topic: String,
    pub(crate) partitions: Vec<i32>,
}

/// One member in a ShareGroupDescribe response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DescribedMember {
    pub(crate) member_id: String,
    pub(crate) rack_id: Option<String>,
    pub(crate) member_epoch: i32,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) subscribed_topics: Vec<String>,
    pub(crate) assignment: Vec<AssignedTopic>,
}

/// One group in a ShareGroupDescribe response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DescribedGroup {
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) group_id: String,
    pub(crate) state: String,
    pub(crate) epoch: i32,
    pub(crate) assignment_epoch: i32,
    pub(crate) assignor: String,
    pub(crate) members: Vec<DescribedMember>,
    pub(crate) authorized_operations: i32,
}

/// Decodes a ShareGroupDescribe v1 response (the only version).
pub(crate) fn decode_share_group_describe(body: Bytes) -> Result<Vec<DescribedGroup>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    // Group: error code, error message, id, state, epoch, assignment epoch, assignor, members,
    // authorized operations, tags.
    let n = r.compact_array_len(20)?;
    let mut groups = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let group_id = r.compact_string()?;
        let state = r.compact_string()?;
        let epoch = r.i32()?;
        let assignment_epoch = r.i32()?;
        let assignor = r.compact_string()?;
        // Member: id, rack, epoch, client id, host, subscribed topics, assignment (topics, tags),
        // tags.
        let n = r.compact_array_len(12)?;
        let mut members = Vec::with_capacity(capacity(n));
        for _ in 0..n {
            let member_id = r.compact_string()?;
            let rack_id = r.compact_nullable_string()?;
            let member_epoch = r.i32()?;
            let client_id = r.compact_string()?;
            let client_host = r.compact_string()?;
            let n = r.compact_array_len(1)?;
            let mut subscribed_topics = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                subscribed_topics.push(r.compact_string()?);
            }
            // Assigned topic: id, name, partitions, tags.
            let n = r.compact_array_len(19)?;
            let mut assignment = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                let topic_id = r.uuid()?;
                let topic = r.compact_string()?;
                let partitions = r.compact_i32_array()?;
                r.skip_tags()?;
                assignment.push(AssignedTopic {
                    topic_id,
                    topic,
                    partitions,
                });
            }
            r.skip_tags()?; // the Assignment struct's
            r.skip_tags()?; // the member's
            members.push(DescribedMember {
                member_id,
                rack_id,
                member_epoch,
                client_id,
                client_host,
                subscribed_topics,
                assignment,
            });
        }
        let authorized_operations = r.i32()?;
        r.skip_tags()?;
        groups.push(DescribedGroup {
            error_code,
            error_message,
            group_id,
            state,
            epoch,
            assignment_epoch,
            assignor,
            members,
            authorized_operations,
        });
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(groups)
}

/// One partition in a DescribeShareGroupOffsets response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub(crate) topic: String,
    pub(crate) topic_id: Uuid,
    pub(crate) partition: i32,
    pub(crate) start_offset: i64,
    pub(crate) leader_epoch: i32,
    /// -1 under v0.
    pub(crate) lag: i64,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
}

/// One group in a DescribeShareGroupOffsets response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupOffsets {
    pub(crate) group_id: String,
    pub(crate) partitions: Vec<OffsetEntry>,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
}

/// Decodes a DescribeShareGroupOffsets v0/v1 response (v1 adds Lag).
pub(crate) fn decode_share_group_offsets(body: Bytes, version: i16) -> Result<Vec<GroupOffsets>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    // Group: id, topics, error code, error message, tags.
    let n = r.compact_array_len(6)?;
    let mut groups = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let group_id = r.compact_string()?;
        let mut partitions = Vec::new();
        // Topic: name, id, partitions, tags.
        for _ in 0..r.compact_array_len(19)? {
            let topic = r.topic_name()?;
            let topic_id = r.uuid()?;
            // Partition: index, start offset, leader epoch, (lag,) error code, message, tags.
            let n = r.compact_array_len(if version >= 1 { 28 } else { 20 })?;
            partitions.reserve(capacity(n));
            for _ in 0..n {
                let partition = r.i32()?;
                let start_offset = r.i64()?;
                let leader_epoch = r.i32()?;
                let lag = if version >= 1 { r.i64()? } else { -1 };
                let error_code = r.i16()?;
                let error_message = r.compact_nullable_string()?;
                r.skip_tags()?;
                partitions.push(OffsetEntry {
                    topic: topic.clone(),
                    topic_id,
                    partition,
                    start_offset,
                    leader_epoch,
                    lag,
                    error_code,
                    error_message,
                });
            }
            r.skip_tags()?;
        }
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        r.skip_tags()?;
        groups.push(GroupOffsets {
            group_id,
            partitions,
            error_code,
            error_message,
        });
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(groups)
}

impl Admin {
    /// `group` as its coordinator describes it; `None` when the group does not exist
    /// (GROUP_ID_NOT_FOUND).
    pub(super) async fn described_group(&self, group: &str) -> Result<Option<DescribedGroup>> {
        let mut patience = Patience::new(self.cluster.options.request_timeout);
        loop {
            let mut conn = self.coordinator(group).await?;
            let mut req = ShareGroupDescribeRequest::default();
            req.group_ids = vec![GroupId(StrBytes::from_string(group.to_string()))];
            let groups = call(
                &mut conn,
                SHARE_GROUP_DESCRIBE,
                |v| encode(&req, v),
                |body, _| decode_share_group_describe(body),
            )
            .await?;
            let described = groups
                .into_iter()
                .find(|g| g.group_id == group)
                .ok_or_else(|| {
                    protocol_error(
                        SHARE_GROUP_DESCRIBE,
                        conn.addr(),
                        format_args!("no result for group {group}"),
                    )
                })?;
            match described.error_code {
                codes::NONE => return Ok(Some(described)),
                codes::GROUP_ID_NOT_FOUND => return Ok(None),
                code if patience.wait_if_not_ready(code).await => continue,
                code => {
                    return Err(broker_error(
                        &format!("describing group {group} on broker {}", conn.addr()),
                        code,
                        described.error_message.as_deref(),
                    ));
                }
            }
        }
    }

    /// The member ids of share group `group` (ShareGroupDescribe, sent to its coordinator). A group
    /// that does not exist has no members.
    pub async fn share_group_members(&self, group: &str) -> Result<Vec<String>> {
        Ok(self
            .described_group(group)
            .await?
            .map(|g| g.members.into_iter().map(|m| m.member_id).collect())
            .unwrap_or_default())
    }

    /// Share group `group` as ShareGroupDescribe reports it: state, epoch and members with their
    /// assignments. A group that does not exist is `Dead` with no members.
    pub async fn describe_share_group(&self, group: &str) -> Result<ShareGroupDescription> {
        let Some(described) = self.described_group(group).await? else {
            return Ok(ShareGroupDescription {
                state: "Dead".into(),
                epoch: -1,
                members: Vec::new(),
            });
        };
        let members = described
            .members
            .into_iter()
            .map(|m| {
                let mut assignment: Vec<(String, i32)> = m
                    .assignment
                    .into_iter()
                    .flat_map(|t| {
                        let topic = t.topic;
                        t.partitions.into_iter().map(move |p| (topic.clone(), p))
                    })
                    .collect();
                assignment.sort();
                ShareGroupMember {
                    member_id: m.member_id,
                    client_id: m.client_id,
                    host: m.client_host,
                    assignment,
                }
            })
            .collect();
        Ok(ShareGroupDescription {
            state: described.state,
            epoch: described.epoch,
            members,
        })
    }

    /// Share group `group`'s start offset and lag on every partition of `topics`
    /// (DescribeShareGroupOffsets, v1 when offered), sorted by topic and partition. A partition the
    /// group has no state for has start offset and lag -1.
    pub async fn share_group_offsets(
        &self,
        group: &str,
        topics: &[&str],
    ) -> Result<Vec<PartitionOffsets>> {
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<String> = topics.iter().map(|t| (*t).to_string()).collect();
        let meta = self.cluster.metadata(&wanted).await?;
        let mut asked = Vec::new();
        for topic in topics {
            let info = meta
                .topics
                .iter()
                .find(|t| t.name.as_deref() == Some(*topic))
                .ok_or_else(|| Error::new(ErrorKind::Broker, format!("topic {topic} not found")))?;
            if info.error_code != codes::NONE {
                return Err(broker_error(
                    &format!("metadata of topic {topic}"),
                    info.error_code,
                    None,
                ));
            }
            let partitions = info.partitions.iter().map(|p| p.partition).collect();
            asked.push(((*topic).to_string(), partitions));
        }
        let mut out = self.group_offsets(group, &asked).await?;
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// DescribeShareGroupOffsets of `group` for `topics` (name, partitions), from the group's
    /// coordinator. A coordinator that is not ready, or a partition whose state is moving (its
    /// share coordinator died), is waited for within the request timeout; any other group or
    /// partition error code is an error.
    pub(super) async fn group_offsets(
        &self,
        group: &str,
        topics: &[(String, Vec<i32>)],
    ) -> Result<Vec<PartitionOffsets>> {
        let mut rg =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
        rg.group_id = GroupId(StrBytes::from_string(group.to_string()));
        rg.topics = Some(
            topics
                .iter()
                .map(|(topic, partitions)| {
                    let mut rt = describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default();
                    rt.topic_name = TopicName(StrBytes::from_string(topic.clone()));
                    rt.partitions = partitions.clone();
                    rt
                })
                .collect(),
        );
        let mut req = DescribeShareGroupOffsetsRequest::default();
        req.groups = vec![rg];
        let mut patience = Patience::new(self.cluster.options.request_timeout);
        let (conn, ours) = loop {
            let mut conn = self.coordinator(group).await?;
            // The v1 request is the v0 one (only the response gained Lag), and kafka-protocol
            // encodes only v0: encode v0 whatever the version sent.
            let groups = call(
                &mut conn,
                DESCRIBE_SHARE_GROUP_OFFSETS,
                |_| encode(&req, 0),
                decode_share_group_offsets,
            )
            .await?;
            let ours = groups
                .into_iter()
                .find(|g| g.group_id == group)
                .ok_or_else(|| {
                    protocol_error(
                        DESCRIBE_SHARE_GROUP_OFFSETS,
                        conn.addr(),
                        format_args!("no result for group {group}"),
                    )
                })?;
            if patience.wait_if_not_ready(ours.error_code).await {
                continue;
            }
            let moving = ours
                .partitions
                .iter()
                .map(|p| p.error_code)
                .find(|code| *code != codes::NONE);
            if let Some(code) = moving
                && patience.wait_if_moving(code).await
            {
                continue;
            }
            break (conn, ours);
        };
        if ours.error_code != codes::NONE {
            return Err(broker_error(
                &format!(
                    "describing offsets of group {group} on broker {}",
                    conn.addr()
                ),
                ours.error_code,
                ours.error_message.as_deref(),
            ));
        }
        let mut out = Vec::with_capacity(ours.partitions.len());
        for p in ours.partitions {
            if p.error_code != codes::NONE {
                return Err(broker_error(
                    &format!(
                        "share offsets of {}-{} in group {group} on broker {}",
                        p.topic,
                        p.partition,
                        conn.addr()
                    ),
                    p.error_code,
                    p.error_message.as_deref(),
                ));
            }
            out.push(PartitionOffsets {
                topic: p.topic,
                partition: p.partition,
                start_offset: p.start_offset,
                lag: p.lag,
                lag_source: if p.lag >= 0 {
                    LagSource::Broker
                } else {
                    LagSource::Unknown
                },
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests;
