//! Control-plane messages: Metadata, FindCoordinator and ShareGroupHeartbeat.
//!
//! Requests are encoded with `kafka-protocol`; responses are decoded by hand with the bounded
//! [`Reader`] because they come from the network.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    GroupId, MetadataRequest, ShareGroupHeartbeatRequest, TopicName, metadata_request,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use uuid::Uuid;

use super::wire::{Reader, capacity, put_compact_len, put_compact_string, put_empty_tags};
use crate::{Error, ErrorKind, Result};

/// API key of Metadata.
pub(crate) const METADATA: i16 = 3;
/// The Metadata version we speak.
pub(crate) const METADATA_VERSION: i16 = 12;
/// API key of FindCoordinator.
pub(crate) const FIND_COORDINATOR: i16 = 10;
/// API key of ShareGroupHeartbeat.
pub(crate) const SHARE_GROUP_HEARTBEAT: i16 = 76;

fn encode<T: Encodable>(msg: &T, version: i16) -> Result<BytesMut> {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .map_err(|e| Error::new(ErrorKind::Protocol, format!("cannot encode request: {e}")))?;
    Ok(buf)
}

/// A Metadata v12 request for `topics` by name.
pub(crate) fn encode_metadata(topics: &[String]) -> Result<BytesMut> {
    let mut req = MetadataRequest::default();
    req.topics = Some(
        topics
            .iter()
            .map(|name| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(name.clone())));
                t
            })
            .collect(),
    );
    req.allow_auto_topic_creation = false;
    encode(&req, METADATA_VERSION)
}

/// One partition in a Metadata response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionInfo {
    pub(crate) partition: i32,
    pub(crate) leader: i32,
    pub(crate) error_code: i16,
}

/// One topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub(crate) error_code: i16,
    pub(crate) name: Option<String>,
    pub(crate) id: Uuid,
    pub(crate) partitions: Vec<PartitionInfo>,
}

/// A decoded Metadata response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Metadata {
    /// node id → "host:port"
    pub(crate) brokers: HashMap<i32, String>,
    pub(crate) topics: Vec<TopicInfo>,
}

/// Decodes a Metadata v12 response.
pub(crate) fn decode_metadata(body: Bytes) -> Result<Metadata> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let n = r.compact_array_len(11)?;
    let mut brokers = HashMap::with_capacity(capacity(n));
    for _ in 0..n {
        let node = r.i32()?;
        let host = r.compact_string()?;
        let port = r.i32()?;
        let _rack = r.compact_nullable_string()?;
        r.skip_tags()?;
        brokers.insert(node, format!("{host}:{port}"));
    }
    let _cluster = r.compact_nullable_string()?;
    let _controller = r.i32()?;
    let n = r.compact_array_len(26)?;
    let mut topics = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let error_code = r.i16()?;
        let name = r.compact_nullable_string()?;
        let id = r.uuid()?;
        let _internal = r.bool()?;
        let np = r.compact_array_len(22)?;
        let mut partitions = Vec::with_capacity(capacity(np));
        for _ in 0..np {
            let error_code = r.i16()?;
            let partition = r.i32()?;
            let leader = r.i32()?;
            let _epoch = r.i32()?;
            let _replicas = r.compact_i32_array()?;
            let _isr = r.compact_i32_array()?;
            let _offline = r.compact_i32_array()?;
            r.skip_tags()?;
            partitions.push(PartitionInfo {
                partition,
                leader,
                error_code,
            });
        }
        let _ops = r.i32()?;
        r.skip_tags()?;
        topics.push(TopicInfo {
            error_code,
            name,
            id,
            partitions,
        });
    }
    r.skip_tags()?;
    Ok(Metadata { brokers, topics })
}

/// A FindCoordinator v4+ request for one key of `key_type`.
pub(crate) fn encode_find_coordinator(key_type: i8, key: &str) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_i8(key_type);
    put_compact_len(&mut buf, 1);
    put_compact_string(&mut buf, Some(key));
    put_empty_tags(&mut buf);
    buf
}

/// The coordinator named by a FindCoordinator response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Coordinator {
    pub(crate) node_id: i32,
    pub(crate) addr: String,
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
}

/// Decodes a FindCoordinator v4+ response (one key).
pub(crate) fn decode_find_coordinator(body: Bytes) -> Result<Coordinator> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let n = r.compact_array_len(16)?;
    let mut first = None;
    for _ in 0..n {
        let _key = r.compact_string()?;
        let node_id = r.i32()?;
        let host = r.compact_string()?;
        let port = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        r.skip_tags()?;
        first.get_or_insert(Coordinator {
            node_id,
            addr: format!("{host}:{port}"),
            error_code,
            error_message,
        });
    }
    r.skip_tags()?;
    first.ok_or_else(|| super::wire::malformed("FindCoordinator named no coordinator"))
}

/// A ShareGroupHeartbeat v1 request.
pub(crate) fn encode_heartbeat(
    group: &str,
    member_id: &str,
    epoch: i32,
    topics: Option<&[String]>,
) -> Result<BytesMut> {
    let mut req = ShareGroupHeartbeatRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.member_id = StrBytes::from_string(member_id.to_string());
    req.member_epoch = epoch;
    req.rack_id = None;
    req.subscribed_topic_names = topics.map(|t| {
        t.iter()
            .map(|name| TopicName(StrBytes::from_string(name.clone())))
            .collect()
    });
    encode(&req, 1)
}

/// A decoded ShareGroupHeartbeat v1 response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Heartbeat {
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) member_epoch: i32,
    pub(crate) interval_ms: i32,
    /// `None` when unchanged.
    pub(crate) assignment: Option<Vec<(Uuid, Vec<i32>)>>,
}

/// Decodes a ShareGroupHeartbeat v1 response.
pub(crate) fn decode_heartbeat(body: Bytes) -> Result<Heartbeat> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    let error_code = r.i16()?;
    let error_message = r.compact_nullable_string()?;
    let _member_id = r.compact_nullable_string()?;
    let member_epoch = r.i32()?;
    let interval_ms = r.i32()?;
    let assignment = if r.i8()? == 1 {
        let n = r.compact_array_len(18)?;
        let mut topics = Vec::with_capacity(capacity(n));
        for _ in 0..n {
            let id = r.uuid()?;
            let parts = r.compact_i32_array()?;
            r.skip_tags()?;
            topics.push((id, parts));
        }
        r.skip_tags()?;
        Some(topics)
    } else {
        None
    };
    r.skip_tags()?;
    Ok(Heartbeat {
        error_code,
        error_message,
        member_epoch,
        interval_ms,
        assignment,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::{
        FindCoordinatorResponse, MetadataResponse, ShareGroupHeartbeatResponse,
        find_coordinator_response, metadata_response, share_group_heartbeat_response,
    };
    use kafka_protocol::protocol::Encodable;

    use super::*;

    #[test]
    fn metadata_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
        let mut resp = MetadataResponse::default();
        let mut b = metadata_response::MetadataResponseBroker::default();
        b.node_id = kafka_protocol::messages::BrokerId(1);
        b.host = StrBytes::from_static_str("h");
        b.port = 9092;
        resp.brokers = vec![b];
        let mut t = metadata_response::MetadataResponseTopic::default();
        t.name = Some(TopicName(StrBytes::from_static_str("jobs")));
        t.topic_id = Uuid::from_u128(3);
        let mut p = metadata_response::MetadataResponsePartition::default();
        p.partition_index = 0;
        p.leader_id = kafka_protocol::messages::BrokerId(1);
        p.replica_nodes = vec![kafka_protocol::messages::BrokerId(1)];
        t.partitions = vec![p];
        resp.topics = vec![t];
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 12)?;
        let m = decode_metadata(buf.freeze())?;
        assert_eq!(m.brokers[&1], "h:9092");
        assert_eq!(m.topics[0].name.as_deref(), Some("jobs"));
        assert_eq!(
            m.topics[0].partitions[0],
            PartitionInfo {
                partition: 0,
                leader: 1,
                error_code: 0
            }
        );
        Ok(())
    }

    #[test]
    fn heartbeat_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
        let mut resp = ShareGroupHeartbeatResponse::default();
        resp.member_epoch = 4;
        resp.heartbeat_interval_ms = 5000;
        let mut tp = share_group_heartbeat_response::TopicPartitions::default();
        tp.topic_id = Uuid::from_u128(8);
        tp.partitions = vec![0, 1];
        let mut a = share_group_heartbeat_response::Assignment::default();
        a.topic_partitions = vec![tp];
        resp.assignment = Some(a);
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 1)?;
        let hb = decode_heartbeat(buf.freeze())?;
        assert_eq!(hb.member_epoch, 4);
        assert_eq!(hb.assignment, Some(vec![(Uuid::from_u128(8), vec![0, 1])]));
        Ok(())
    }

    #[test]
    fn find_coordinator_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
        let mut resp = FindCoordinatorResponse::default();
        let mut c = find_coordinator_response::Coordinator::default();
        c.key = StrBytes::from_static_str("g");
        c.node_id = kafka_protocol::messages::BrokerId(2);
        c.host = StrBytes::from_static_str("b2");
        c.port = 9093;
        resp.coordinators = vec![c];
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 4)?;
        let c = decode_find_coordinator(buf.freeze())?;
        assert_eq!((c.node_id, c.addr.as_str()), (2, "b2:9093"));
        Ok(())
    }
}
