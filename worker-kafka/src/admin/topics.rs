//! Topics: create a topic, read partitions' end offsets (ListOffsets) and a share group's lag.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, ListOffsetsRequest, TopicName, create_topics_request,
    list_offsets_request,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{
    Admin, CREATE_TOPICS, LIST_OFFSETS, broker_error, call, codes, encode, protocol_error,
};
use crate::wire::{Reader, capacity};
use crate::{Error, ErrorKind, Result};

/// ListOffsets timestamp -1: the latest offset (the high watermark under read_uncommitted).
pub(super) const LATEST: i64 = -1;
/// ListOffsets timestamp -2: the earliest offset (the log start offset).
pub(super) const EARLIEST: i64 = -2;

/// One topic of a CreateTopics v5–v7 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatedTopic {
    pub(crate) name: String,
    /// The new topic's id (v7+; nil before).
    pub(crate) topic_id: Uuid,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) num_partitions: i32,
    pub(crate) replication_factor: i16,
}

/// Decodes a CreateTopics v5–v7 response (v7 adds each topic's id).
pub(crate) fn decode_create_topics(body: Bytes, version: i16) -> Result<Vec<CreatedTopic>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    // name, error code, error message, partitions, replication, configs, tags (+ id from v7)
    let min_topic = if version >= 7 { 28 } else { 12 };
    let n = r.compact_array_len(min_topic)?;
    let mut topics = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let name = r.compact_string()?;
        let topic_id = if version >= 7 { r.uuid()? } else { Uuid::nil() };
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let num_partitions = r.i32()?;
        let replication_factor = r.i16()?;
        // Configs (nullable): name, value, read-only, source, sensitive, tags.
        for _ in 0..r.compact_array_len(6)? {
            let _name = r.compact_string()?;
            let _value = r.compact_nullable_string()?;
            let _read_only = r.bool()?;
            let _source = r.i8()?;
            let _sensitive = r.bool()?;
            r.skip_tags()?;
        }
        // Tag 0 (TopicConfigErrorCode) is not needed.
        r.skip_tags()?;
        topics.push(CreatedTopic {
            name,
            topic_id,
            error_code,
            error_message,
            num_partitions,
            replication_factor,
        });
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(topics)
}

/// One partition of a ListOffsets v6–v10 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedOffset {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) error_code: i16,
    pub(crate) timestamp: i64,
    pub(crate) offset: i64,
    pub(crate) leader_epoch: i32,
}

/// Decodes a ListOffsets v6–v10 response (the versions share one layout).
pub(crate) fn decode_list_offsets(body: Bytes) -> Result<Vec<ListedOffset>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let mut out = Vec::new();
    // Topic: name, partitions, tags.
    for _ in 0..r.compact_array_len(3)? {
        let topic = r.topic_name()?;
        // Partition: index, error, timestamp, offset, leader epoch, tags.
        let n = r.compact_array_len(27)?;
        out.reserve(capacity(n));
        for _ in 0..n {
            let partition = r.i32()?;
            let error_code = r.i16()?;
            let timestamp = r.i64()?;
            let offset = r.i64()?;
            let leader_epoch = r.i32()?;
            r.skip_tags()?;
            out.push(ListedOffset {
                topic: topic.clone(),
                partition,
                error_code,
                timestamp,
                offset,
                leader_epoch,
            });
        }
        r.skip_tags()?;
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(out)
}

impl Admin {
    /// Creates `topic` with `partitions` partitions and replication factor `replication`. A topic that
    /// already exists is not an error.
    pub async fn create_topic(&self, topic: &str, partitions: i32, replication: i16) -> Result<()> {
        self.create_topic_with_configs(topic, partitions, replication, &[])
            .await
    }

    /// [`create_topic`](Self::create_topic) with topic configs (`key`, `value`) set at creation;
    /// a topic that already exists keeps the configs it has.
    pub async fn create_topic_with_configs(
        &self,
        topic: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let mut t = create_topics_request::CreatableTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.num_partitions = partitions;
        t.replication_factor = replication;
        t.configs = configs
            .iter()
            .map(|(key, value)| {
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string((*key).to_owned()))
                    .with_value(Some(StrBytes::from_string((*value).to_owned())))
            })
            .collect();
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 30_000;
        let mut conn = self.cluster.connect_any().await?;
        let topics = call(
            &mut conn,
            CREATE_TOPICS,
            |v| encode(&req, v),
            decode_create_topics,
        )
        .await?;
        let ours = topics.iter().find(|t| t.name == topic).ok_or_else(|| {
            protocol_error(
                CREATE_TOPICS,
                conn.addr(),
                format_args!("no result for topic {topic}"),
            )
        })?;
        if ours.error_code != codes::NONE && ours.error_code != codes::TOPIC_ALREADY_EXISTS {
            return Err(broker_error(
                &format!("creating topic {topic} on broker {}", conn.addr()),
                ours.error_code,
                ours.error_message.as_deref(),
            ));
        }
        // Wait until the topic has leaders everywhere.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let meta = self.cluster.metadata(&[topic.to_string()]).await?;
            let ready = meta.topics.iter().any(|t| {
                t.error_code == codes::NONE
                    && t.partitions.len() == usize::try_from(partitions).unwrap_or(0)
                    && t.partitions.iter().all(|p| p.leader >= 0)
            });
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Broker,
                    format!("topic {topic} has no leaders after 30s"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The offset at `timestamp` ([`LATEST`]: the high watermark, [`EARLIEST`]: the log start) of
    /// each of `partitions` of `topic`, asked from `leader`.
    pub(super) async fn list_offsets(
        &self,
        leader: i32,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<HashMap<i32, i64>> {
        let mut lt = list_offsets_request::ListOffsetsTopic::default();
        lt.name = TopicName(StrBytes::from_string(topic.to_string()));
        lt.partitions = partitions
            .iter()
            .map(|&p| {
                let mut lp = list_offsets_request::ListOffsetsPartition::default();
                lp.partition_index = p;
                lp.timestamp = timestamp;
                lp
            })
            .collect();
        let mut req = ListOffsetsRequest::default();
        req.replica_id = BrokerId(-1);
        req.topics = vec![lt];
        let mut conn = self.cluster.connect_node(leader).await?;
        let listed = call(
            &mut conn,
            LIST_OFFSETS,
            |v| encode(&req, v),
            |body, _| decode_list_offsets(body),
        )
        .await?;
        let mut ends = HashMap::with_capacity(partitions.len());
        for &partition in partitions {
            let answer = listed
                .iter()
                .find(|o| o.topic == topic && o.partition == partition)
                .ok_or_else(|| {
                    protocol_error(
                        LIST_OFFSETS,
                        conn.addr(),
                        format_args!("no offset for {topic}-{partition}"),
                    )
                })?;
            if answer.error_code != codes::NONE {
                return Err(broker_error(
                    &format!(
                        "listing the offsets of {topic}-{partition} on broker {}",
                        conn.addr()
                    ),
                    answer.error_code,
                    None,
                ));
            }
            ends.insert(partition, answer.offset);
        }
        Ok(ends)
    }

    /// The share group's lag on `topic`: for each partition, the log end offset minus the share
    /// start offset (records not yet acknowledged), summed. 0 means everything was settled.
    pub async fn share_group_lag(&self, group: &str, topic: &str) -> Result<i64> {
        let meta = self.cluster.metadata(&[topic.to_string()]).await?;
        let info = meta
            .topics
            .into_iter()
            .find(|t| t.name.as_deref() == Some(topic) && t.error_code == codes::NONE)
            .ok_or_else(|| Error::new(ErrorKind::Broker, format!("topic {topic} not found")))?;
        // End offsets, one request per leader.
        let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
        for p in &info.partitions {
            by_leader.entry(p.leader).or_default().push(p.partition);
        }
        let mut ends = HashMap::new();
        for (leader, partitions) in by_leader {
            ends.extend(
                self.list_offsets(leader, topic, &partitions, LATEST)
                    .await?,
            );
        }
        // Share start offsets (and, from v1, the broker's own lag), from the group coordinator.
        let partitions: Vec<i32> = info.partitions.iter().map(|p| p.partition).collect();
        let starts: HashMap<i32, (i64, i64)> = self
            .group_offsets(group, &[(topic.to_string(), partitions)])
            .await?
            .into_iter()
            .map(|p| (p.partition, (p.start_offset, p.lag)))
            .collect();
        let mut lag = 0;
        for (partition, end) in ends {
            let (start, broker_lag) = starts.get(&partition).copied().unwrap_or((-1, -1));
            if broker_lag >= 0 {
                // v1: the broker's own count of records not yet settled.
                lag += broker_lag;
            } else {
                // Unknown (v0, or no persisted state yet): everything from the share start offset
                // (or the beginning) to the end counts.
                lag += (end - start.max(0)).max(0);
            }
        }
        Ok(lag)
    }
}

#[cfg(test)]
pub(crate) mod tests;
