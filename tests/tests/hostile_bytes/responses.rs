//! Valid responses of every API the client decodes, with random content, encoded with
//! `kafka-protocol` at the versions our decoders accept (or by hand where the crate lacks the
//! version: ShareAcknowledge v2, DescribeShareGroupOffsets v1).

use anyhow::Result;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, CreateTopicsResponse, DescribeConfigsResponse,
    DescribeShareGroupOffsetsResponse, FindCoordinatorResponse, GroupId,
    IncrementalAlterConfigsResponse, ListOffsetsResponse, MetadataResponse,
    ShareAcknowledgeResponse, ShareFetchResponse, ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse, TopicName, api_versions_response, create_topics_response,
    describe_configs_response, describe_share_group_offsets_response as offsets,
    find_coordinator_response, incremental_alter_configs_response, list_offsets_response,
    metadata_response, share_acknowledge_response, share_fetch_response,
    share_group_describe_response as describe, share_group_heartbeat_response,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use rand::Rng;
use rand::rngs::StdRng;
use uuid::Uuid;

/// Writes one valid response body with arrays of up to `scale` elements.
pub(crate) type Sampler = fn(&mut Gen<'_>) -> Result<Vec<u8>>;

/// A sampler for every name in `worker_kafka::test_util::response_decoders()`.
pub(crate) fn samplers() -> Vec<(&'static str, Sampler)> {
    vec![
        ("ShareFetch", share_fetch),
        ("ShareAcknowledge", share_acknowledge),
        ("Metadata", metadata),
        ("FindCoordinator", find_coordinator),
        ("ShareGroupHeartbeat", heartbeat),
        ("ApiVersions", api_versions),
        ("DescribeShareGroupOffsets v0", |g| {
            share_group_offsets(g, 0)
        }),
        ("DescribeShareGroupOffsets v1", |g| {
            share_group_offsets(g, 1)
        }),
        ("ShareGroupDescribe", share_group_describe),
        ("DescribeConfigs", describe_configs),
        ("IncrementalAlterConfigs", incremental_alter_configs),
        ("ListOffsets", list_offsets),
        ("CreateTopics v5", |g| create_topics(g, 5)),
        ("CreateTopics v7", |g| create_topics(g, 7)),
    ]
}

/// Random content: strings, counts and numbers, arrays of up to `scale` elements.
pub(crate) struct Gen<'a> {
    pub(crate) rng: &'a mut StdRng,
    pub(crate) scale: usize,
}

impl Gen<'_> {
    fn count(&mut self) -> usize {
        self.rng.random_range(0..=self.scale)
    }

    fn list<T>(&mut self, mut f: impl FnMut(&mut Self) -> T) -> Vec<T> {
        (0..self.count()).map(|_| f(self)).collect()
    }

    fn text(&mut self) -> StrBytes {
        let len = match self.rng.random_range(0..10) {
            0 => 0,
            1 => self.rng.random_range(100..400),
            _ => self.rng.random_range(1..12),
        };
        // Mostly ASCII, some multi-byte characters.
        let s: String = (0..len)
            .map(|_| {
                if self.rng.random_ratio(1, 16) {
                    'é'
                } else {
                    char::from(self.rng.random_range(b'a'..=b'z'))
                }
            })
            .collect();
        StrBytes::from_string(s)
    }

    /// A topic name: 1 to 249 legal characters, the most Kafka allows (the decoders refuse
    /// longer ones).
    fn topic(&mut self) -> StrBytes {
        let len = match self.rng.random_range(0..10) {
            0 => 249,
            _ => self.rng.random_range(1..40),
        };
        let s: String = (0..len)
            .map(|_| char::from(self.rng.random_range(b'a'..=b'z')))
            .collect();
        StrBytes::from_string(s)
    }

    fn maybe_text(&mut self) -> Option<StrBytes> {
        self.rng.random_bool(0.7).then(|| self.text())
    }

    fn i16(&mut self) -> i16 {
        self.rng.random()
    }

    fn i32(&mut self) -> i32 {
        self.rng.random()
    }

    fn i64(&mut self) -> i64 {
        self.rng.random()
    }

    fn uuid(&mut self) -> Uuid {
        Uuid::from_u128(self.rng.random())
    }
}

fn encode<T: Encodable>(msg: &T, version: i16) -> Result<Vec<u8>> {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)?;
    Ok(buf.to_vec())
}

fn put_uvarint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

fn put_compact_string(buf: &mut BytesMut, value: Option<&str>) {
    match value {
        None => put_uvarint(buf, 0),
        Some(s) => {
            put_uvarint(buf, u32::try_from(s.len() + 1).unwrap_or(u32::MAX));
            buf.put_slice(s.as_bytes());
        }
    }
}

fn put_compact_len(buf: &mut BytesMut, len: usize) {
    put_uvarint(buf, u32::try_from(len + 1).unwrap_or(u32::MAX));
}

fn share_fetch(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ShareFetchResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.error_code = g.i16();
    resp.error_message = g.maybe_text();
    resp.acquisition_lock_timeout_ms = g.i32();
    resp.responses = g.list(|g| {
        let mut topic = share_fetch_response::ShareFetchableTopicResponse::default();
        topic.topic_id = g.uuid();
        topic.partitions = g.list(|g| {
            let mut p = share_fetch_response::PartitionData::default();
            p.partition_index = g.i32();
            p.error_code = g.i16();
            p.error_message = g.maybe_text();
            p.acknowledge_error_code = g.i16();
            p.acknowledge_error_message = g.maybe_text();
            p.current_leader.leader_id = g.i32();
            p.current_leader.leader_epoch = g.i32();
            p.records = g
                .rng
                .random_bool(0.8)
                .then(|| Bytes::from(g.text().as_bytes().to_vec()));
            p.acquired_records = g.list(|g| {
                let mut a = share_fetch_response::AcquiredRecords::default();
                a.first_offset = g.i64();
                a.last_offset = g.i64();
                a.delivery_count = g.i16();
                a
            });
            p
        });
        topic
    });
    resp.node_endpoints = g.list(|g| {
        let mut n = share_fetch_response::NodeEndpoint::default();
        n.node_id = BrokerId(g.i32());
        n.host = g.text();
        n.port = g.i32();
        n.rack = g.maybe_text();
        n
    });
    encode(&resp, 1)
}

/// ShareAcknowledge v2 is v1 with AcquisitionLockTimeoutMs after ErrorMessage.
fn share_acknowledge(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ShareAcknowledgeResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.error_code = g.i16();
    resp.error_message = g.maybe_text();
    resp.responses = g.list(|g| {
        let mut topic = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
        topic.topic_id = g.uuid();
        topic.partitions = g.list(|g| {
            let mut p = share_acknowledge_response::PartitionData::default();
            p.partition_index = g.i32();
            p.error_code = g.i16();
            p.error_message = g.maybe_text();
            p.current_leader.leader_id = g.i32();
            p.current_leader.leader_epoch = g.i32();
            p
        });
        topic
    });
    resp.node_endpoints = g.list(|g| {
        let mut n = share_acknowledge_response::NodeEndpoint::default();
        n.node_id = BrokerId(g.i32());
        n.host = g.text();
        n.port = g.i32();
        n.rack = g.maybe_text();
        n
    });
    let v1 = encode(&resp, 1)?;
    let mut message = BytesMut::new();
    put_compact_string(&mut message, resp.error_message.as_deref());
    let at = 4 + 2 + message.len();
    let mut v2 = v1.get(..at).unwrap_or_default().to_vec();
    v2.extend_from_slice(&g.i32().to_be_bytes());
    v2.extend_from_slice(v1.get(at..).unwrap_or_default());
    Ok(v2)
}

fn metadata(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = MetadataResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.brokers = g.list(|g| {
        let mut b = metadata_response::MetadataResponseBroker::default();
        b.node_id = BrokerId(g.i32());
        b.host = g.text();
        b.port = g.i32();
        b.rack = g.maybe_text();
        b
    });
    resp.cluster_id = g.maybe_text();
    resp.controller_id = BrokerId(g.i32());
    resp.topics = g.list(|g| {
        let mut t = metadata_response::MetadataResponseTopic::default();
        t.error_code = g.i16();
        t.name = g.maybe_text().map(TopicName);
        t.topic_id = g.uuid();
        t.is_internal = g.rng.random();
        t.partitions = g.list(|g| {
            let mut p = metadata_response::MetadataResponsePartition::default();
            p.error_code = g.i16();
            p.partition_index = g.i32();
            p.leader_id = BrokerId(g.i32());
            p.leader_epoch = g.i32();
            p.replica_nodes = g.list(|g| BrokerId(g.i32()));
            p.isr_nodes = g.list(|g| BrokerId(g.i32()));
            p.offline_replicas = g.list(|g| BrokerId(g.i32()));
            p
        });
        t.topic_authorized_operations = g.i32();
        t
    });
    encode(&resp, 12)
}

fn find_coordinator(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = FindCoordinatorResponse::default();
    resp.throttle_time_ms = g.i32();
    // Our decoder needs at least one coordinator: an empty list is an error, not a sample.
    let n = g.count().max(1);
    resp.coordinators = (0..n)
        .map(|_| {
            let mut c = find_coordinator_response::Coordinator::default();
            c.key = g.text();
            c.node_id = BrokerId(g.i32());
            c.host = g.text();
            c.port = g.i32();
            c.error_code = g.i16();
            c.error_message = g.maybe_text();
            c
        })
        .collect();
    let version = g.rng.random_range(4..=6);
    encode(&resp, version)
}

fn heartbeat(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ShareGroupHeartbeatResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.error_code = g.i16();
    resp.error_message = g.maybe_text();
    resp.member_id = g.maybe_text();
    resp.member_epoch = g.i32();
    resp.heartbeat_interval_ms = g.i32();
    resp.assignment = g.rng.random_bool(0.7).then(|| {
        let mut a = share_group_heartbeat_response::Assignment::default();
        a.topic_partitions = g.list(|g| {
            let mut tp = share_group_heartbeat_response::TopicPartitions::default();
            tp.topic_id = g.uuid();
            tp.partitions = g.list(Gen::i32);
            tp
        });
        a
    });
    encode(&resp, 1)
}

fn api_versions(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ApiVersionsResponse::default();
    // A non-zero error code is an error by design, not a sample.
    resp.error_code = 0;
    resp.api_keys = g.list(|g| {
        let mut v = api_versions_response::ApiVersion::default();
        v.api_key = g.i16();
        v.min_version = g.i16();
        v.max_version = g.i16();
        v
    });
    resp.throttle_time_ms = g.i32();
    // Tagged fields (v3+): what our decoder skips.
    resp.supported_features = g.list(|g| {
        let mut f = api_versions_response::SupportedFeatureKey::default();
        f.name = g.text();
        f.min_version = g.i16();
        f.max_version = g.i16();
        f
    });
    resp.finalized_features_epoch = g.i64();
    encode(&resp, 3)
}

fn share_group_offsets(g: &mut Gen<'_>, version: i16) -> Result<Vec<u8>> {
    let mut resp = DescribeShareGroupOffsetsResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.groups = g.list(|g| {
        let mut group = offsets::DescribeShareGroupOffsetsResponseGroup::default();
        group.group_id = GroupId(g.text());
        group.topics = g.list(|g| {
            let mut t = offsets::DescribeShareGroupOffsetsResponseTopic::default();
            t.topic_name = TopicName(g.topic());
            t.topic_id = g.uuid();
            t.partitions = g.list(|g| {
                let mut p = offsets::DescribeShareGroupOffsetsResponsePartition::default();
                p.partition_index = g.i32();
                p.start_offset = g.i64();
                p.leader_epoch = g.i32();
                p.error_code = g.i16();
                p.error_message = g.maybe_text();
                p
            });
            t
        });
        group.error_code = g.i16();
        group.error_message = g.maybe_text();
        group
    });
    if version == 0 {
        return encode(&resp, 0);
    }
    // v1 (not in kafka-protocol 0.18) adds Lag after LeaderEpoch.
    let mut buf = BytesMut::new();
    buf.put_i32(resp.throttle_time_ms);
    put_compact_len(&mut buf, resp.groups.len());
    for group in &resp.groups {
        put_compact_string(&mut buf, Some(group.group_id.as_str()));
        put_compact_len(&mut buf, group.topics.len());
        for t in &group.topics {
            put_compact_string(&mut buf, Some(t.topic_name.as_str()));
            buf.put_u128(t.topic_id.as_u128());
            put_compact_len(&mut buf, t.partitions.len());
            for p in &t.partitions {
                buf.put_i32(p.partition_index);
                buf.put_i64(p.start_offset);
                buf.put_i32(p.leader_epoch);
                buf.put_i64(g.i64());
                buf.put_i16(p.error_code);
                put_compact_string(&mut buf, p.error_message.as_deref());
                put_uvarint(&mut buf, 0);
            }
            put_uvarint(&mut buf, 0);
        }
        buf.put_i16(group.error_code);
        put_compact_string(&mut buf, group.error_message.as_deref());
        put_uvarint(&mut buf, 0);
    }
    put_uvarint(&mut buf, 0);
    Ok(buf.to_vec())
}

fn share_group_describe(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ShareGroupDescribeResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.groups = g.list(|g| {
        let mut group = describe::DescribedGroup::default();
        group.error_code = g.i16();
        group.error_message = g.maybe_text();
        group.group_id = GroupId(g.text());
        group.group_state = g.text();
        group.group_epoch = g.i32();
        group.assignment_epoch = g.i32();
        group.assignor_name = g.text();
        group.members = g.list(|g| {
            let mut m = describe::Member::default();
            m.member_id = g.text();
            m.rack_id = g.maybe_text();
            m.member_epoch = g.i32();
            m.client_id = g.text();
            m.client_host = g.text();
            m.subscribed_topic_names = g.list(|g| TopicName(g.text()));
            m.assignment.topic_partitions = g.list(|g| {
                let mut tp = describe::TopicPartitions::default();
                tp.topic_id = g.uuid();
                tp.topic_name = TopicName(g.text());
                tp.partitions = g.list(Gen::i32);
                tp
            });
            m
        });
        group.authorized_operations = g.i32();
        group
    });
    encode(&resp, 1)
}

fn describe_configs(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = DescribeConfigsResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.results = g.list(|g| {
        let mut r = describe_configs_response::DescribeConfigsResult::default();
        r.error_code = g.i16();
        r.error_message = g.maybe_text();
        r.resource_type = g.rng.random();
        r.resource_name = g.text();
        r.configs = g.list(|g| {
            let mut c = describe_configs_response::DescribeConfigsResourceResult::default();
            c.name = g.text();
            c.value = g.maybe_text();
            c.read_only = g.rng.random();
            c.config_source = g.rng.random();
            c.is_sensitive = g.rng.random();
            c.synonyms = g.list(|g| {
                let mut s = describe_configs_response::DescribeConfigsSynonym::default();
                s.name = g.text();
                s.value = g.maybe_text();
                s.source = g.rng.random();
                s
            });
            c.config_type = g.rng.random();
            c.documentation = g.maybe_text();
            c
        });
        r
    });
    encode(&resp, 4)
}

fn incremental_alter_configs(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = IncrementalAlterConfigsResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.responses = g.list(|g| {
        let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.error_code = g.i16();
        r.error_message = g.maybe_text();
        r.resource_type = g.rng.random();
        r.resource_name = g.text();
        r
    });
    encode(&resp, 1)
}

fn list_offsets(g: &mut Gen<'_>) -> Result<Vec<u8>> {
    let mut resp = ListOffsetsResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.topics = g.list(|g| {
        let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
        t.name = TopicName(g.topic());
        t.partitions = g.list(|g| {
            let mut p = list_offsets_response::ListOffsetsPartitionResponse::default();
            p.partition_index = g.i32();
            p.error_code = g.i16();
            p.timestamp = g.i64();
            p.offset = g.i64();
            p.leader_epoch = g.i32();
            p
        });
        t
    });
    // v6–v10 share one layout.
    let version = g.rng.random_range(6..=10);
    encode(&resp, version)
}

fn create_topics(g: &mut Gen<'_>, version: i16) -> Result<Vec<u8>> {
    let mut resp = CreateTopicsResponse::default();
    resp.throttle_time_ms = g.i32();
    resp.topics = g.list(|g| {
        let mut t = create_topics_response::CreatableTopicResult::default();
        t.name = TopicName(g.text());
        t.topic_id = g.uuid();
        t.error_code = g.i16();
        t.error_message = g.maybe_text();
        t.topic_config_error_code = g.i16();
        t.num_partitions = g.i32();
        t.replication_factor = g.i16();
        t.configs = g.rng.random_bool(0.7).then(|| {
            g.list(|g| {
                let mut c = create_topics_response::CreatableTopicConfigs::default();
                c.name = g.text();
                c.value = g.maybe_text();
                c.read_only = g.rng.random();
                c.config_source = g.rng.random();
                c.is_sensitive = g.rng.random();
                c
            })
        });
        t
    });
    encode(&resp, version)
}
