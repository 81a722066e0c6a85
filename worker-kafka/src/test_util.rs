//! Test support (feature `test-util`, not a stable API): a raw record-batch encoder and a raw
//! produce call, to feed a real broker batches no well-behaved producer writes, and every decoder
//! of network bytes, for the workspace's hostile-input harness.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName, produce_request};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::cluster::Cluster;
use super::codec::{self, AcquiredRange};
use super::connection::{self, ConnectOptions};
use super::records::{self, InflateBudget, InflateLimits};
use super::{admin, messages};
use crate::Header;
use crate::{Error, ErrorKind, Result};

pub use super::records::encode::{RawCompression, RawHeader, RawRecordSpec, encode_batch};

const PRODUCE: i16 = 0;

/// Writes `batch` (one or more encoded record batches) as they are to `topic`/`partition` with
/// a ProduceRequest (acks=all), bypassing every client-side check. Returns the base offset the
/// broker assigned. The broker validates CRCs and framing itself; it accepts, for example,
/// header keys that are not UTF-8.
pub async fn produce_raw(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    batch: Bytes,
) -> Result<i64> {
    let cluster = Cluster::new(
        bootstrap.split(',').map(str::to_owned).collect(),
        ConnectOptions {
            client_id: "share-worker-test-util".into(),
            max_frame: 16 << 20,
            request_timeout: Duration::from_secs(30),
            security: crate::security::Prepared::default(),
        },
    );
    let meta = cluster.metadata(&[topic.to_owned()]).await?;
    let leader = meta
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(topic))
        .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
        .map(|p| p.leader)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Broker,
                format!("no leader for {topic}-{partition}"),
            )
        })?;
    let mut conn = cluster.connect_node(leader).await?;
    let version = conn.version(PRODUCE, (9, 12))?;
    let mut data = produce_request::PartitionProduceData::default();
    data.index = partition;
    data.records = Some(batch);
    let mut topic_data = produce_request::TopicProduceData::default();
    topic_data.name = TopicName(StrBytes::from_string(topic.to_owned()));
    topic_data.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = 30_000;
    request.topic_data = vec![topic_data];
    let mut body = BytesMut::new();
    request
        .encode(&mut body, version)
        .map_err(|e| Error::new(ErrorKind::Protocol, format!("encoding Produce: {e}")))?;
    let mut answer = conn.call(PRODUCE, version, &body, Duration::ZERO).await?;
    // Test support against a local broker: the crate's decoder is fine here.
    let response = ProduceResponse::decode(&mut answer, version)
        .map_err(|e| Error::new(ErrorKind::Protocol, format!("decoding Produce: {e}")))?;
    let part = response
        .responses
        .iter()
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == partition)
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "Produce answered no partition"))?;
    if part.error_code != 0 {
        return Err(Error::new(
            ErrorKind::Broker,
            format!(
                "Produce to {topic}-{partition} failed with error {}: {:?}",
                part.error_code, part.error_message
            ),
        ));
    }
    Ok(part.base_offset)
}

/// An unsecured JWT (header `{"alg":"none"}`, empty signature, a trailing dot) naming `sub` and
/// expiring `lifetime` from now (`iat` and `exp` in seconds): what a Kafka broker accepts for
/// OAUTHBEARER with its default, unsecured validator (no `listener.name.*.oauthbearer` JWKS set),
/// as in the workspace's broker tests. Use it with `TokenSource::Static`.
pub fn unsecured_jwt(sub: &str, lifetime: Duration) -> String {
    // Capped at a century, so that no lifetime overflows the clock.
    let lifetime = lifetime.min(Duration::from_secs(100 * 365 * 24 * 3600));
    let expires_at = std::time::SystemTime::now() + lifetime;
    crate::security::token::unsecured_jwt(sub, expires_at)
}

/// What [`decode_records`] made of a partition's bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedRecords {
    /// Offsets delivered as records.
    pub records: Vec<i64>,
    /// Offsets delivered as undecodable.
    pub undecodable: Vec<i64>,
    /// Offset ranges acknowledged as GAP.
    pub gaps: Vec<(i64, i64)>,
    /// Offset ranges released.
    pub releases: Vec<(i64, i64)>,
}

/// One decoded record's fields, as a handler would see them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordFields {
    /// The record's offset.
    pub offset: i64,
    /// The key, `None` for null.
    pub key: Option<Bytes>,
    /// The value, `None` for null.
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

/// One share-fetch partition as the client decodes it, unconverted: a test can measure
/// [`decode_partition`] alone and inspect the result afterwards.
#[derive(Debug)]
pub struct DecodedPartition(records::PartitionRecords);

impl DecodedPartition {
    /// The offsets: delivered, undecodable, gaps and releases.
    pub fn summary(&self) -> DecodedRecords {
        let out = &self.0;
        let (undecodable, records): (Vec<_>, Vec<_>) =
            out.records.iter().partition(|r| r.undecodable.is_some());
        DecodedRecords {
            records: records.iter().map(|r| r.offset).collect(),
            undecodable: undecodable.iter().map(|r| r.offset).collect(),
            gaps: out.gaps.clone(),
            releases: out.releases.clone(),
        }
    }

    /// The records delivered as decoded (not undecodable), in offset order.
    pub fn records(&self) -> Vec<RecordFields> {
        self.0
            .records
            .iter()
            .filter(|r| r.undecodable.is_none())
            .map(|r| RecordFields {
                offset: r.offset,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
            })
            .collect()
    }
}

/// Decodes `data` as one share-fetch partition with offsets `first..=last` acquired, a batch cap
/// of `max_batch_bytes` and a response budget of `budget` bytes, as the client does.
pub fn decode_partition(
    data: Bytes,
    first: i64,
    last: i64,
    max_batch_bytes: usize,
    budget: usize,
) -> DecodedPartition {
    let (ranges, _) = records::acquired::normalise(&[AcquiredRange {
        first,
        last,
        delivery_count: 1,
    }]);
    DecodedPartition(records::decode_partition(
        Some(data),
        &ranges,
        InflateLimits { max_batch_bytes },
        &mut InflateBudget::new(budget),
    ))
}

/// Decodes `data` as one share-fetch partition with offsets `first..=last` acquired, a batch cap
/// of `max_batch_bytes` and a response budget of `budget` bytes.
pub fn decode_records(
    data: Bytes,
    first: i64,
    last: i64,
    max_batch_bytes: usize,
    budget: usize,
) -> DecodedRecords {
    decode_partition(data, first, last, max_batch_bytes, budget).summary()
}

/// A decoder of one response type, by name: `true` when the bytes decoded.
pub type Decoder = fn(Bytes) -> bool;

/// Every decoder the client runs on response bodies, by API name.
pub fn response_decoders() -> Vec<(&'static str, Decoder)> {
    vec![
        ("ShareFetch", |b| codec::decode_share_fetch(b).is_ok()),
        ("ShareAcknowledge", |b| {
            codec::decode_share_acknowledge(b).is_ok()
        }),
        ("Metadata", |b| messages::decode_metadata(b).is_ok()),
        ("FindCoordinator", |b| {
            messages::decode_find_coordinator(b).is_ok()
        }),
        ("ShareGroupHeartbeat", |b| {
            messages::decode_heartbeat(b).is_ok()
        }),
        ("ApiVersions", |b| {
            connection::decode_api_versions(b).is_ok()
        }),
        ("DescribeShareGroupOffsets v0", |b| {
            admin::decode_share_group_offsets(b, 0).is_ok()
        }),
        ("DescribeShareGroupOffsets v1", |b| {
            admin::decode_share_group_offsets(b, 1).is_ok()
        }),
        ("ShareGroupDescribe", |b| {
            admin::decode_share_group_describe(b).is_ok()
        }),
        ("DescribeConfigs", |b| {
            admin::decode_describe_configs(b).is_ok()
        }),
        ("IncrementalAlterConfigs", |b| {
            admin::decode_incremental_alter_configs(b).is_ok()
        }),
        ("ListOffsets", |b| admin::decode_list_offsets(b).is_ok()),
        ("CreateTopics v5", |b| {
            admin::decode_create_topics(b, 5).is_ok()
        }),
        ("CreateTopics v7", |b| {
            admin::decode_create_topics(b, 7).is_ok()
        }),
    ]
}
