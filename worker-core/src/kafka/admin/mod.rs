//! Admin helpers the worker and its tests need: create topics, set share-group configs, read the
//! delivery-count limit and the share group's lag.
//!
//! Requests are encoded and responses decoded with `kafka-protocol` (admin calls are rare and their
//! responses small; the hot-path share RPCs use the bounded hand-written decoders).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    DescribeShareGroupOffsetsRequest, GroupId, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, ListOffsetsRequest, ListOffsetsResponse,
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName, create_topics_request,
    describe_configs_request, describe_share_group_offsets_request,
    incremental_alter_configs_request, list_offsets_request,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::cluster::Cluster;
use super::connection::{ConnectOptions, Connection};
use crate::{Error, ErrorKind, Result};

const CREATE_TOPICS: i16 = 19;
const INCREMENTAL_ALTER_CONFIGS: i16 = 44;
const DESCRIBE_CONFIGS: i16 = 32;
const DESCRIBE_SHARE_GROUP_OFFSETS: i16 = 90;
const LIST_OFFSETS: i16 = 2;
const SHARE_GROUP_DESCRIBE: i16 = 77;
/// ConfigResource type GROUP.
const RESOURCE_GROUP: i8 = 32;
/// ConfigResource type BROKER.
const RESOURCE_BROKER: i8 = 4;

/// Administrative calls against a share-group cluster.
#[derive(Debug)]
pub struct Admin {
    cluster: Cluster,
}

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
    /// The broker's count of records not yet settled (DescribeShareGroupOffsets v1); -1 when unknown.
    pub lag: i64,
}

fn encode<T: Encodable>(msg: &T, version: i16) -> Result<BytesMut> {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .map_err(|e| Error::new(ErrorKind::Protocol, format!("cannot encode request: {e}")))?;
    Ok(buf)
}

fn decode<T: Decodable>(mut body: Bytes, version: i16, what: &str) -> Result<T> {
    T::decode(&mut body, version).map_err(|e| {
        Error::new(
            ErrorKind::Protocol,
            format!("malformed {what} response: {e}"),
        )
    })
}

fn broker_error(what: &str, code: i16, message: Option<&StrBytes>) -> Error {
    let kind = match code {
        29..=31 => ErrorKind::Authorization,
        _ => ErrorKind::Broker,
    };
    Error::new(
        kind,
        format!(
            "{what} failed with error {code}{}",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ),
    )
}

async fn call(
    conn: &mut Connection,
    key: i16,
    ours: (i16, i16),
    body: &BytesMut,
) -> Result<(Bytes, i16)> {
    let v = conn.version(key, ours)?;
    Ok((conn.call(key, v, body, Duration::ZERO).await?, v))
}

impl Admin {
    /// Connects to `bootstrap` (comma-separated `host:port` list).
    pub async fn connect(bootstrap: impl Into<String>) -> Result<Self> {
        let bootstrap: Vec<String> = bootstrap
            .into()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                "admin bootstrap: expected at least one host:port",
            ));
        }
        let cluster = Cluster::new(
            bootstrap,
            ConnectOptions {
                client_id: "share-worker-admin".into(),
                max_frame: 100 * 1024 * 1024,
                request_timeout: Duration::from_secs(30),
            },
        );
        drop(cluster.connect_any().await?);
        Ok(Self { cluster })
    }

    /// The version range a broker offers for the API `api_key` (from its ApiVersions answer), `None`
    /// when it does not offer that API at all.
    pub async fn offered_versions(&self, api_key: i16) -> Result<Option<(i16, i16)>> {
        Ok(self.cluster.connect_any().await?.offered(api_key))
    }

    /// Fails with [`ErrorKind::Unsupported`] unless the broker offers ShareFetch and
    /// ShareAcknowledge v2: share groups with RENEW and `record_limit` need Kafka 4.2+.
    pub async fn require_share_groups(&self) -> Result<()> {
        self.cluster.connect_any().await?.require_share_v2()
    }

    /// Creates `topic` with `partitions` partitions and replication factor `replication`. A topic that
    /// already exists is not an error.
    pub async fn create_topic(&self, topic: &str, partitions: i32, replication: i16) -> Result<()> {
        let mut t = create_topics_request::CreatableTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.num_partitions = partitions;
        t.replication_factor = replication;
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 30_000;
        let mut conn = self.cluster.connect_any().await?;
        let v = conn.version(CREATE_TOPICS, (5, 7))?;
        let body = encode(&req, v)?;
        let resp = conn.call(CREATE_TOPICS, v, &body, Duration::ZERO).await?;
        let resp: CreateTopicsResponse = decode(resp, v, "CreateTopics")?;
        for t in resp.topics {
            if t.error_code != 0 && t.error_code != 36 {
                return Err(broker_error(
                    &format!("creating topic {topic}"),
                    t.error_code,
                    t.error_message.as_ref(),
                ));
            }
        }
        // Wait until the topic has leaders everywhere.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let meta = self.cluster.metadata(&[topic.to_string()]).await?;
            let ready = meta.topics.iter().any(|t| {
                t.error_code == 0
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

    /// Sets a group-level config (IncrementalAlterConfigs on resource type GROUP), e.g.
    /// `share.auto.offset.reset = earliest` or `share.record.lock.duration.ms`. Works before the
    /// group exists.
    pub async fn set_group_config(&self, group: &str, key: &str, value: &str) -> Result<()> {
        let mut c = incremental_alter_configs_request::AlterableConfig::default();
        c.name = StrBytes::from_string(key.to_string());
        c.config_operation = 0;
        c.value = Some(StrBytes::from_string(value.to_string()));
        let mut r = incremental_alter_configs_request::AlterConfigsResource::default();
        r.resource_type = RESOURCE_GROUP;
        r.resource_name = StrBytes::from_string(group.to_string());
        r.configs = vec![c];
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![r];
        let mut conn = self.cluster.connect_any().await?;
        let v = conn.version(INCREMENTAL_ALTER_CONFIGS, (0, 1))?;
        let (resp, v) = call(
            &mut conn,
            INCREMENTAL_ALTER_CONFIGS,
            (v, v),
            &encode(&req, v)?,
        )
        .await?;
        let resp: IncrementalAlterConfigsResponse = decode(resp, v, "IncrementalAlterConfigs")?;
        for r in resp.responses {
            if r.error_code != 0 {
                return Err(broker_error(
                    &format!("setting {key} on group {group}"),
                    r.error_code,
                    r.error_message.as_ref(),
                ));
            }
        }
        Ok(())
    }

    async fn describe_config(
        &self,
        resource_type: i8,
        name: &str,
        key: &str,
    ) -> Result<Option<String>> {
        let mut r = describe_configs_request::DescribeConfigsResource::default();
        r.resource_type = resource_type;
        r.resource_name = StrBytes::from_string(name.to_string());
        r.configuration_keys = Some(vec![StrBytes::from_string(key.to_string())]);
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![r];
        let mut conn = if resource_type == RESOURCE_BROKER {
            let node: i32 = name
                .parse()
                .map_err(|_| Error::new(ErrorKind::Config, "broker id"))?;
            self.cluster.connect_node(node).await?
        } else {
            self.cluster.connect_any().await?
        };
        let v = conn.version(DESCRIBE_CONFIGS, (1, 4))?;
        let (resp, v) = call(&mut conn, DESCRIBE_CONFIGS, (v, v), &encode(&req, v)?).await?;
        let resp: DescribeConfigsResponse = decode(resp, v, "DescribeConfigs")?;
        for r in resp.results {
            if r.error_code != 0 {
                return Err(broker_error(
                    &format!("describing {key}"),
                    r.error_code,
                    r.error_message.as_ref(),
                ));
            }
            if let Some(c) = r.configs.into_iter().find(|c| c.name.as_str() == key) {
                return Ok(c.value.map(|v| v.to_string()));
            }
        }
        Ok(None)
    }

    /// The member ids of share group `group` (ShareGroupDescribe, sent to its coordinator). A group
    /// that does not exist has no members.
    pub async fn share_group_members(&self, group: &str) -> Result<Vec<String>> {
        let c = self.cluster.find_coordinator(group).await?;
        if c.error_code != 0 {
            return Err(broker_error("FindCoordinator", c.error_code, None));
        }
        let mut conn = Connection::connect(&c.addr, &self.cluster.options).await?;
        let mut req = ShareGroupDescribeRequest::default();
        req.group_ids = vec![GroupId(StrBytes::from_string(group.to_string()))];
        let v = conn.version(SHARE_GROUP_DESCRIBE, (1, 1))?;
        let (resp, v) = call(&mut conn, SHARE_GROUP_DESCRIBE, (v, v), &encode(&req, v)?).await?;
        let resp: ShareGroupDescribeResponse = decode(resp, v, "ShareGroupDescribe")?;
        let mut members = Vec::new();
        for g in resp.groups {
            match g.error_code {
                0 => members.extend(g.members.into_iter().map(|m| m.member_id.to_string())),
                69 => {}
                code => {
                    return Err(broker_error(
                        &format!("describing group {group}"),
                        code,
                        g.error_message.as_ref(),
                    ));
                }
            }
        }
        Ok(members)
    }

    /// Share group `group` as ShareGroupDescribe reports it: state, epoch and members with their
    /// assignments. A group that does not exist is `Dead` with no members.
    pub async fn describe_share_group(&self, group: &str) -> Result<ShareGroupDescription> {
        let mut conn = self.coordinator(group).await?;
        let mut req = ShareGroupDescribeRequest::default();
        req.group_ids = vec![GroupId(StrBytes::from_string(group.to_string()))];
        let v = conn.version(SHARE_GROUP_DESCRIBE, (1, 1))?;
        let (resp, v) = call(&mut conn, SHARE_GROUP_DESCRIBE, (v, v), &encode(&req, v)?).await?;
        let resp: ShareGroupDescribeResponse = decode(resp, v, "ShareGroupDescribe")?;
        let described = resp
            .groups
            .into_iter()
            .find(|g| g.group_id.as_str() == group)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Protocol,
                    format!("ShareGroupDescribe did not answer for group {group}"),
                )
            })?;
        match described.error_code {
            0 => {}
            69 => {
                return Ok(ShareGroupDescription {
                    state: "Dead".into(),
                    epoch: -1,
                    members: Vec::new(),
                });
            }
            code => {
                return Err(broker_error(
                    &format!("describing group {group}"),
                    code,
                    described.error_message.as_ref(),
                ));
            }
        }
        let members = described
            .members
            .into_iter()
            .map(|m| {
                let mut assignment: Vec<(String, i32)> = m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .flat_map(|tp| {
                        let topic = tp.topic_name.to_string();
                        tp.partitions.into_iter().map(move |p| (topic.clone(), p))
                    })
                    .collect();
                assignment.sort();
                ShareGroupMember {
                    member_id: m.member_id.to_string(),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    assignment,
                }
            })
            .collect();
        Ok(ShareGroupDescription {
            state: described.group_state.to_string(),
            epoch: described.group_epoch,
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
        let mut request_topics = Vec::new();
        for topic in topics {
            let info = meta
                .topics
                .iter()
                .find(|t| t.name.as_deref() == Some(*topic))
                .ok_or_else(|| Error::new(ErrorKind::Broker, format!("topic {topic} not found")))?;
            if info.error_code != 0 {
                return Err(broker_error(
                    &format!("metadata of topic {topic}"),
                    info.error_code,
                    None,
                ));
            }
            let mut rt =
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default();
            rt.topic_name = TopicName(StrBytes::from_string((*topic).to_string()));
            rt.partitions = info.partitions.iter().map(|p| p.partition).collect();
            request_topics.push(rt);
        }
        let mut rg =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
        rg.group_id = GroupId(StrBytes::from_string(group.to_string()));
        rg.topics = Some(request_topics);
        let mut req = DescribeShareGroupOffsetsRequest::default();
        req.groups = vec![rg];
        let mut conn = self.coordinator(group).await?;
        let v = conn.version(DESCRIBE_SHARE_GROUP_OFFSETS, (0, 1))?;
        // The v1 request is the v0 one (only the response gained Lag), and kafka-protocol encodes
        // only v0: encode v0, send as v, decode by hand.
        let resp = conn
            .call(
                DESCRIBE_SHARE_GROUP_OFFSETS,
                v,
                &encode(&req, 0)?,
                Duration::ZERO,
            )
            .await?;
        let mut out = decode_share_group_offsets_by_topic(resp, v)?;
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// A connection to `group`'s coordinator.
    async fn coordinator(&self, group: &str) -> Result<Connection> {
        let c = self.cluster.find_coordinator(group).await?;
        if c.error_code != 0 {
            return Err(broker_error("FindCoordinator", c.error_code, None));
        }
        Connection::connect(&c.addr, &self.cluster.options).await
    }

    /// The delivery-count limit that applies to `group`: the group's `share.delivery.count.limit`
    /// (Kafka 4.3+) or else the broker's `group.share.delivery.count.limit`.
    pub async fn delivery_count_limit(&self, group: &str) -> Result<u32> {
        let group_value = self
            .describe_config(RESOURCE_GROUP, group, "share.delivery.count.limit")
            .await
            .ok()
            .flatten();
        let value = match group_value {
            Some(v) => Some(v),
            None => {
                let meta = self.cluster.metadata(&[]).await?;
                let node =
                    meta.brokers.keys().min().copied().ok_or_else(|| {
                        Error::new(ErrorKind::Broker, "the cluster named no brokers")
                    })?;
                self.describe_config(
                    RESOURCE_BROKER,
                    &node.to_string(),
                    "group.share.delivery.count.limit",
                )
                .await?
            }
        };
        let value = value.unwrap_or_else(|| "5".to_string());
        value.parse().map_err(|_| {
            Error::new(
                ErrorKind::Protocol,
                format!("delivery count limit {value:?} is not a number"),
            )
        })
    }

    /// The share group's lag on `topic`: for each partition, the log end offset minus the share
    /// start offset (records not yet acknowledged), summed. 0 means everything was settled.
    pub async fn share_group_lag(&self, group: &str, topic: &str) -> Result<i64> {
        let meta = self.cluster.metadata(&[topic.to_string()]).await?;
        let info = meta
            .topics
            .into_iter()
            .find(|t| t.name.as_deref() == Some(topic) && t.error_code == 0)
            .ok_or_else(|| Error::new(ErrorKind::Broker, format!("topic {topic} not found")))?;
        let mut lag = 0;
        // End offsets, from each leader.
        let mut ends = std::collections::HashMap::new();
        for p in &info.partitions {
            let mut lp = list_offsets_request::ListOffsetsPartition::default();
            lp.partition_index = p.partition;
            lp.timestamp = -1;
            let mut lt = list_offsets_request::ListOffsetsTopic::default();
            lt.name = TopicName(StrBytes::from_string(topic.to_string()));
            lt.partitions = vec![lp];
            let mut req = ListOffsetsRequest::default();
            req.replica_id = kafka_protocol::messages::BrokerId(-1);
            req.topics = vec![lt];
            let mut conn = self.cluster.connect_node(p.leader).await?;
            let v = conn.version(LIST_OFFSETS, (6, 10))?;
            let (resp, v) = call(&mut conn, LIST_OFFSETS, (v, v), &encode(&req, v)?).await?;
            let resp: ListOffsetsResponse = decode(resp, v, "ListOffsets")?;
            for t in resp.topics {
                for rp in t.partitions {
                    if rp.error_code != 0 {
                        return Err(broker_error("ListOffsets", rp.error_code, None));
                    }
                    ends.insert(rp.partition_index, rp.offset);
                }
            }
        }
        // Share start offsets, from the group coordinator.
        let c = self.cluster.find_coordinator(group).await?;
        if c.error_code != 0 {
            return Err(broker_error("FindCoordinator", c.error_code, None));
        }
        let mut conn = Connection::connect(&c.addr, &self.cluster.options).await?;
        let mut rt =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default();
        rt.topic_name = TopicName(StrBytes::from_string(topic.to_string()));
        rt.partitions = info.partitions.iter().map(|p| p.partition).collect();
        let mut rg =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
        rg.group_id = GroupId(StrBytes::from_string(group.to_string()));
        rg.topics = Some(vec![rt]);
        let mut req = DescribeShareGroupOffsetsRequest::default();
        req.groups = vec![rg];
        let v = conn.version(DESCRIBE_SHARE_GROUP_OFFSETS, (0, 1))?;
        let resp = conn
            .call(
                DESCRIBE_SHARE_GROUP_OFFSETS,
                v,
                &encode(&req, 0)?,
                Duration::ZERO,
            )
            .await?;
        let starts = decode_share_group_offsets(resp, v)?;
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

/// Decodes DescribeShareGroupOffsets v0/v1 (v1 adds Lag) into partition → (start offset, lag).
pub(crate) fn decode_share_group_offsets(
    body: Bytes,
    version: i16,
) -> Result<std::collections::HashMap<i32, (i64, i64)>> {
    Ok(decode_share_group_offsets_by_topic(body, version)?
        .into_iter()
        .map(|p| (p.partition, (p.start_offset, p.lag)))
        .collect())
}

/// Decodes DescribeShareGroupOffsets v0/v1 (v1 adds Lag), one entry per topic partition answered
/// (lag -1 under v0). A partition or group error code is an error.
pub(crate) fn decode_share_group_offsets_by_topic(
    body: Bytes,
    version: i16,
) -> Result<Vec<PartitionOffsets>> {
    let mut r = super::wire::Reader::new(body);
    let _throttle = r.i32()?;
    let mut out = Vec::new();
    for _ in 0..r.compact_array_len(4)? {
        let group = r.compact_string()?;
        for _ in 0..r.compact_array_len(19)? {
            let topic = r.compact_string()?;
            let _id = r.uuid()?;
            for _ in 0..r.compact_array_len(20)? {
                let partition = r.i32()?;
                let start = r.i64()?;
                let _epoch = r.i32()?;
                let lag = if version >= 1 { r.i64()? } else { -1 };
                let code = r.i16()?;
                let msg = r.compact_nullable_string()?;
                r.skip_tags()?;
                if code != 0 {
                    return Err(Error::new(
                        ErrorKind::Broker,
                        format!(
                            "share offsets of {topic}-{partition} failed with error {code}{}",
                            msg.map(|m| format!(": {m}")).unwrap_or_default()
                        ),
                    ));
                }
                out.push(PartitionOffsets {
                    topic: topic.clone(),
                    partition,
                    start_offset: start,
                    lag,
                });
            }
            r.skip_tags()?;
        }
        let code = r.i16()?;
        let msg = r.compact_nullable_string()?;
        r.skip_tags()?;
        if code != 0 {
            return Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "describing offsets of {group} failed with error {code}{}",
                    msg.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ));
        }
    }
    r.skip_tags()?;
    Ok(out)
}
