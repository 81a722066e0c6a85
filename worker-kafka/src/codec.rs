//! The v2 share RPCs (ShareFetch, ShareAcknowledge) that `kafka-protocol` 0.18 does not have.
//!
//! The top levels are written and read by hand; the nested request structs (topics, partitions,
//! acknowledgement batches) have the same bytes in v1 and v2 and are encoded with the crate at
//! version 1. Responses are decoded by hand with the bounded [`Reader`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    share_acknowledge_request as ack_req, share_fetch_request as fetch_req,
};
use kafka_protocol::protocol::Encodable;
use uuid::Uuid;

use super::acks::AckBatch;
use super::wire::{Reader, capacity, put_compact_len, put_compact_string, put_empty_tags};
use crate::{Error, ErrorKind, Result};

/// API key of ShareFetch.
pub(crate) const SHARE_FETCH: i16 = 78;
/// API key of ShareAcknowledge.
pub(crate) const SHARE_ACKNOWLEDGE: i16 = 79;
/// ShareAcquireMode 1: acquire at most MaxRecords offsets across the request.
pub(crate) const ACQUIRE_RECORD_LIMIT: i8 = 1;

/// Identifies a share session on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionKey<'a> {
    pub(crate) group_id: &'a str,
    pub(crate) member_id: &'a str,
    pub(crate) epoch: i32,
}

/// The fetch-sizing fields of a ShareFetch request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FetchParams {
    pub(crate) max_wait_ms: i32,
    pub(crate) min_bytes: i32,
    pub(crate) max_bytes: i32,
    pub(crate) max_records: i32,
    pub(crate) batch_size: i32,
    pub(crate) acquire_mode: i8,
    pub(crate) is_renew: bool,
}

/// Acknowledgements (possibly none) for one partition of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionAcks {
    pub(crate) partition: i32,
    pub(crate) batches: Vec<AckBatch>,
}

/// The partitions of one topic listed in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicAcks {
    pub(crate) topic_id: Uuid,
    pub(crate) partitions: Vec<PartitionAcks>,
}

fn encode_err(err: anyhow::Error) -> Error {
    Error::new(ErrorKind::Protocol, format!("cannot encode request: {err}"))
}

fn fetch_topic(topic: &TopicAcks) -> fetch_req::FetchTopic {
    let mut t = fetch_req::FetchTopic::default();
    t.topic_id = topic.topic_id;
    t.partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let mut fp = fetch_req::FetchPartition::default();
            fp.partition_index = p.partition;
            fp.acknowledgement_batches = p
                .batches
                .iter()
                .map(|b| {
                    let mut ab = fetch_req::AcknowledgementBatch::default();
                    ab.first_offset = b.first;
                    ab.last_offset = b.last;
                    ab.acknowledge_types = b.types.clone();
                    ab
                })
                .collect();
            fp
        })
        .collect();
    t
}

fn ack_topic(topic: &TopicAcks) -> ack_req::AcknowledgeTopic {
    let mut t = ack_req::AcknowledgeTopic::default();
    t.topic_id = topic.topic_id;
    t.partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let mut ap = ack_req::AcknowledgePartition::default();
            ap.partition_index = p.partition;
            ap.acknowledgement_batches = p
                .batches
                .iter()
                .map(|b| {
                    let mut ab = ack_req::AcknowledgementBatch::default();
                    ab.first_offset = b.first;
                    ab.last_offset = b.last;
                    ab.acknowledge_types = b.types.clone();
                    ab
                })
                .collect();
            ap
        })
        .collect();
    t
}

/// Encodes a ShareFetch v2 request body.
pub(crate) fn encode_share_fetch(
    key: SessionKey<'_>,
    params: FetchParams,
    topics: &[TopicAcks],
    forgotten: &[(Uuid, Vec<i32>)],
) -> Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(128);
    put_compact_string(&mut buf, Some(key.group_id));
    put_compact_string(&mut buf, Some(key.member_id));
    buf.put_i32(key.epoch);
    buf.put_i32(params.max_wait_ms);
    buf.put_i32(params.min_bytes);
    buf.put_i32(params.max_bytes);
    buf.put_i32(params.max_records);
    buf.put_i32(params.batch_size);
    buf.put_i8(params.acquire_mode);
    buf.put_i8(i8::from(params.is_renew));
    put_compact_len(&mut buf, topics.len());
    for topic in topics {
        fetch_topic(topic).encode(&mut buf, 1).map_err(encode_err)?;
    }
    put_compact_len(&mut buf, forgotten.len());
    for (topic_id, partitions) in forgotten {
        let mut f = fetch_req::ForgottenTopic::default();
        f.topic_id = *topic_id;
        f.partitions = partitions.clone();
        f.encode(&mut buf, 1).map_err(encode_err)?;
    }
    put_empty_tags(&mut buf);
    Ok(buf)
}

/// Encodes a ShareAcknowledge v2 request body.
pub(crate) fn encode_share_acknowledge(
    key: SessionKey<'_>,
    is_renew: bool,
    topics: &[TopicAcks],
) -> Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(128);
    put_compact_string(&mut buf, Some(key.group_id));
    put_compact_string(&mut buf, Some(key.member_id));
    buf.put_i32(key.epoch);
    buf.put_i8(i8::from(is_renew));
    put_compact_len(&mut buf, topics.len());
    for topic in topics {
        ack_topic(topic).encode(&mut buf, 1).map_err(encode_err)?;
    }
    put_empty_tags(&mut buf);
    Ok(buf)
}

/// A broker endpoint named in a share response (for leader changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEndpoint {
    pub(crate) node_id: i32,
    pub(crate) host: String,
    pub(crate) port: i32,
}

/// One acquired offset range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquiredRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) delivery_count: i16,
}

/// One partition of a ShareFetch response.
#[derive(Debug, Clone, Default)]
pub(crate) struct FetchedPartition {
    pub(crate) partition: i32,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) ack_error_code: i16,
    pub(crate) ack_error_message: Option<String>,
    pub(crate) leader_id: i32,
    pub(crate) records: Option<Bytes>,
    pub(crate) acquired: Vec<AcquiredRange>,
}

/// One partition of a ShareAcknowledge response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AckedPartition {
    pub(crate) partition: i32,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) leader_id: i32,
}

/// A decoded ShareFetch (v1 = v2) or ShareAcknowledge v2 response.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShareResponse<P> {
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    /// -1 when the response does not carry it.
    pub(crate) lock_timeout_ms: i32,
    pub(crate) topics: Vec<(Uuid, Vec<P>)>,
    pub(crate) endpoints: Vec<NodeEndpoint>,
}

fn leader(r: &mut Reader) -> Result<i32> {
    let id = r.i32()?;
    let _epoch = r.i32()?;
    r.skip_tags()?;
    Ok(id)
}

fn endpoints(r: &mut Reader) -> Result<Vec<NodeEndpoint>> {
    let n = r.compact_array_len(11)?;
    let mut out = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let node_id = r.i32()?;
        let host = r.compact_string()?;
        let port = r.i32()?;
        let _rack = r.compact_nullable_string()?;
        r.skip_tags()?;
        out.push(NodeEndpoint {
            node_id,
            host,
            port,
        });
    }
    Ok(out)
}

fn topics<P>(
    r: &mut Reader,
    min: usize,
    part: impl Fn(&mut Reader) -> Result<P>,
) -> Result<Vec<(Uuid, Vec<P>)>> {
    let n = r.compact_array_len(18)?;
    let mut out = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let topic_id = r.uuid()?;
        let np = r.compact_array_len(min)?;
        let mut parts = Vec::with_capacity(capacity(np));
        for _ in 0..np {
            parts.push(part(r)?);
        }
        r.skip_tags()?;
        out.push((topic_id, parts));
    }
    Ok(out)
}

/// Decodes a ShareFetch v1/v2 response body.
pub(crate) fn decode_share_fetch(body: Bytes) -> Result<ShareResponse<FetchedPartition>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let error_code = r.i16()?;
    let error_message = r.compact_nullable_string()?;
    let lock_timeout_ms = r.i32()?;
    let topics = topics(&mut r, 22, |r| {
        let partition = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let ack_error_code = r.i16()?;
        let ack_error_message = r.compact_nullable_string()?;
        let leader_id = leader(r)?;
        let records = r.compact_nullable_bytes()?;
        let n = r.compact_array_len(19)?;
        let mut acquired = Vec::with_capacity(capacity(n));
        for _ in 0..n {
            let first = r.i64()?;
            let last = r.i64()?;
            let delivery_count = r.i16()?;
            r.skip_tags()?;
            acquired.push(AcquiredRange {
                first,
                last,
                delivery_count,
            });
        }
        r.skip_tags()?;
        Ok(FetchedPartition {
            partition,
            error_code,
            error_message,
            ack_error_code,
            ack_error_message,
            leader_id,
            records,
            acquired,
        })
    })?;
    let endpoints = endpoints(&mut r)?;
    r.skip_tags()?;
    r.finish()?;
    Ok(ShareResponse {
        error_code,
        error_message,
        lock_timeout_ms,
        topics,
        endpoints,
    })
}

/// Decodes a ShareAcknowledge v2 response body.
pub(crate) fn decode_share_acknowledge(body: Bytes) -> Result<ShareResponse<AckedPartition>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let error_code = r.i16()?;
    let error_message = r.compact_nullable_string()?;
    let lock_timeout_ms = r.i32()?;
    let topics = topics(&mut r, 16, |r| {
        let partition = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let leader_id = leader(r)?;
        r.skip_tags()?;
        Ok(AckedPartition {
            partition,
            error_code,
            error_message,
            leader_id,
        })
    })?;
    let endpoints = endpoints(&mut r)?;
    r.skip_tags()?;
    r.finish()?;
    Ok(ShareResponse {
        error_code,
        error_message,
        lock_timeout_ms,
        topics,
        endpoints,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use kafka_protocol::messages::{
        GroupId, share_acknowledge_response as ack_resp, share_fetch_response as fetch_resp,
    };
    use kafka_protocol::messages::{
        ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn sample_topics() -> Vec<TopicAcks> {
        vec![TopicAcks {
            topic_id: Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788),
            partitions: vec![
                PartitionAcks {
                    partition: 0,
                    batches: vec![AckBatch {
                        first: 5,
                        last: 9,
                        types: vec![1],
                    }],
                },
                PartitionAcks {
                    partition: 3,
                    batches: vec![],
                },
            ],
        }]
    }

    #[test]
    fn share_fetch_v2_is_v1_with_mode_and_renew_after_batch_size()
    -> Result<(), Box<dyn std::error::Error>> {
        let key = SessionKey {
            group_id: "g",
            member_id: "member-1",
            epoch: 7,
        };
        let params = FetchParams {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            max_records: 42,
            batch_size: 42,
            acquire_mode: ACQUIRE_RECORD_LIMIT,
            is_renew: false,
        };
        let forgotten = vec![(Uuid::from_u128(9), vec![1, 2])];
        let ours = encode_share_fetch(key, params, &sample_topics(), &forgotten)?;

        let mut v1 = ShareFetchRequest::default();
        v1.group_id = Some(GroupId(StrBytes::from_static_str("g")));
        v1.member_id = Some(StrBytes::from_static_str("member-1"));
        v1.share_session_epoch = 7;
        v1.max_wait_ms = 500;
        v1.min_bytes = 1;
        v1.max_bytes = 1 << 20;
        v1.max_records = 42;
        v1.batch_size = 42;
        v1.topics = sample_topics().iter().map(fetch_topic).collect();
        let mut f = fetch_req::ForgottenTopic::default();
        f.topic_id = Uuid::from_u128(9);
        f.partitions = vec![1, 2];
        v1.forgotten_topics_data = vec![f];
        let mut crate_bytes = BytesMut::new();
        v1.encode(&mut crate_bytes, 1)?;
        // GroupId (1 + 1) + MemberId (1 + 8) + six int32 fields.
        let at = 2 + 9 + 24;
        let mut expected = crate_bytes[..at].to_vec();
        expected.extend_from_slice(&[ACQUIRE_RECORD_LIMIT as u8, 0]);
        expected.extend_from_slice(&crate_bytes[at..]);
        assert_eq!(&ours[..], &expected[..]);
        Ok(())
    }

    #[test]
    fn share_acknowledge_v2_is_v1_with_renew_after_epoch() -> Result<(), Box<dyn std::error::Error>>
    {
        let key = SessionKey {
            group_id: "grp",
            member_id: "m",
            epoch: 3,
        };
        let ours = encode_share_acknowledge(key, true, &sample_topics())?;
        let mut v1 = ShareAcknowledgeRequest::default();
        v1.group_id = Some(GroupId(StrBytes::from_static_str("grp")));
        v1.member_id = Some(StrBytes::from_static_str("m"));
        v1.share_session_epoch = 3;
        v1.topics = sample_topics().iter().map(ack_topic).collect();
        let mut crate_bytes = BytesMut::new();
        v1.encode(&mut crate_bytes, 1)?;
        let at = 4 + 2 + 4;
        let mut expected = crate_bytes[..at].to_vec();
        expected.push(1);
        expected.extend_from_slice(&crate_bytes[at..]);
        assert_eq!(&ours[..], &expected[..]);
        Ok(())
    }

    pub(crate) fn crate_fetch_response() -> ShareFetchResponse {
        let mut resp = ShareFetchResponse::default();
        resp.acquisition_lock_timeout_ms = 30_000;
        let mut part = fetch_resp::PartitionData::default();
        part.partition_index = 2;
        part.acknowledge_error_code = 121;
        part.current_leader.leader_id = 1;
        part.records = Some(Bytes::from_static(b"not really records"));
        let mut acq = fetch_resp::AcquiredRecords::default();
        acq.first_offset = 10;
        acq.last_offset = 19;
        acq.delivery_count = 2;
        part.acquired_records = vec![acq];
        let mut topic = fetch_resp::ShareFetchableTopicResponse::default();
        topic.topic_id = Uuid::from_u128(77);
        topic.partitions = vec![part];
        resp.responses = vec![topic];
        let mut node = fetch_resp::NodeEndpoint::default();
        node.node_id = kafka_protocol::messages::BrokerId(1);
        node.host = StrBytes::from_static_str("localhost");
        node.port = 9092;
        resp.node_endpoints = vec![node];
        resp
    }

    #[test]
    fn share_fetch_response_decodes_like_the_crate_v1() -> Result<(), Box<dyn std::error::Error>> {
        let mut buf = BytesMut::new();
        crate_fetch_response().encode(&mut buf, 1)?;
        let ours = decode_share_fetch(buf.freeze())?;
        assert_eq!(ours.lock_timeout_ms, 30_000);
        let (topic_id, parts) = &ours.topics[0];
        assert_eq!(*topic_id, Uuid::from_u128(77));
        assert_eq!(parts[0].partition, 2);
        assert_eq!(parts[0].ack_error_code, 121);
        assert_eq!(parts[0].leader_id, 1);
        assert_eq!(
            parts[0].records.as_deref(),
            Some(&b"not really records"[..])
        );
        assert_eq!(
            parts[0].acquired,
            vec![AcquiredRange {
                first: 10,
                last: 19,
                delivery_count: 2
            }]
        );
        assert_eq!(ours.endpoints[0].host, "localhost");
        Ok(())
    }

    #[test]
    fn share_acknowledge_v2_response_decodes() -> Result<(), Box<dyn std::error::Error>> {
        let mut resp = ShareAcknowledgeResponse::default();
        resp.error_code = 0;
        let mut part = ack_resp::PartitionData::default();
        part.partition_index = 4;
        part.error_code = 121;
        part.error_message = Some(StrBytes::from_static_str("lost"));
        let mut topic = ack_resp::ShareAcknowledgeTopicResponse::default();
        topic.topic_id = Uuid::from_u128(5);
        topic.partitions = vec![part];
        resp.responses = vec![topic];
        let mut v1 = BytesMut::new();
        resp.encode(&mut v1, 1)?;
        // v2 inserts AcquisitionLockTimeoutMs after ErrorMessage (throttle 4 + code 2 + null 1).
        let at = 7;
        let mut v2 = v1[..at].to_vec();
        v2.extend_from_slice(&15_000i32.to_be_bytes());
        v2.extend_from_slice(&v1[at..]);
        let ours = decode_share_acknowledge(Bytes::from(v2))?;
        assert_eq!(ours.lock_timeout_ms, 15_000);
        assert_eq!(
            ours.topics,
            vec![(
                Uuid::from_u128(5),
                vec![AckedPartition {
                    partition: 4,
                    error_code: 121,
                    error_message: Some("lost".into()),
                    leader_id: 0,
                }]
            )]
        );
        Ok(())
    }
}
