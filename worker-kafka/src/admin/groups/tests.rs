//! Tests of the ShareGroupDescribe and DescribeShareGroupOffsets decoders against the crate's
//! encoders.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsResponse, ShareGroupDescribeResponse,
    describe_share_group_offsets_response as offsets, share_group_describe_response as sgd,
};
use kafka_protocol::protocol::Encodable;

use super::*;
use crate::wire::{put_compact_len, put_compact_string, put_empty_tags, put_uvarint};

pub(crate) fn crate_share_group_describe() -> ShareGroupDescribeResponse {
    let mut tp = sgd::TopicPartitions::default();
    tp.topic_id = Uuid::from_u128(9);
    tp.topic_name = TopicName(StrBytes::from_static_str("jobs"));
    tp.partitions = vec![2, 0];
    let mut assignment = sgd::Assignment::default();
    assignment.topic_partitions = vec![tp];
    let mut member = sgd::Member::default();
    member.member_id = StrBytes::from_static_str("m-1");
    member.rack_id = Some(StrBytes::from_static_str("rack-a"));
    member.member_epoch = 4;
    member.client_id = StrBytes::from_static_str("share-worker");
    member.client_host = StrBytes::from_static_str("/10.0.0.1");
    member.subscribed_topic_names = vec![TopicName(StrBytes::from_static_str("jobs"))];
    member.assignment = assignment;
    let mut idle = sgd::Member::default();
    idle.member_id = StrBytes::from_static_str("m-2");
    let mut group = sgd::DescribedGroup::default();
    group.group_id = GroupId(StrBytes::from_static_str("workers"));
    group.group_state = StrBytes::from_static_str("Stable");
    group.group_epoch = 7;
    group.assignment_epoch = 6;
    group.assignor_name = StrBytes::from_static_str("simple");
    group.members = vec![member, idle];
    let mut missing = sgd::DescribedGroup::default();
    missing.error_code = codes::GROUP_ID_NOT_FOUND;
    missing.error_message = Some(StrBytes::from_static_str("Group gone not found."));
    missing.group_id = GroupId(StrBytes::from_static_str("gone"));
    let mut resp = ShareGroupDescribeResponse::default();
    resp.groups = vec![group, missing];
    resp
}

pub(crate) fn crate_share_group_offsets() -> DescribeShareGroupOffsetsResponse {
    let mut p0 = offsets::DescribeShareGroupOffsetsResponsePartition::default();
    p0.partition_index = 0;
    p0.start_offset = 12;
    p0.leader_epoch = 1;
    let mut p1 = offsets::DescribeShareGroupOffsetsResponsePartition::default();
    p1.partition_index = 1;
    p1.start_offset = -1;
    p1.error_code = codes::UNKNOWN_TOPIC_OR_PARTITION;
    p1.error_message = Some(StrBytes::from_static_str("gone"));
    let mut t = offsets::DescribeShareGroupOffsetsResponseTopic::default();
    t.topic_name = TopicName(StrBytes::from_static_str("jobs"));
    t.topic_id = Uuid::from_u128(5);
    t.partitions = vec![p0, p1];
    let mut g = offsets::DescribeShareGroupOffsetsResponseGroup::default();
    g.group_id = GroupId(StrBytes::from_static_str("workers"));
    g.topics = vec![t];
    let mut resp = DescribeShareGroupOffsetsResponse::default();
    resp.groups = vec![g];
    resp
}

#[test]
fn share_group_describe_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_share_group_describe();
    let mut buf = BytesMut::new();
    resp.encode(&mut buf, 1)?;
    let ours = decode_share_group_describe(buf.freeze())?;
    assert_eq!(ours.len(), resp.groups.len());
    for (ours, theirs) in ours.iter().zip(&resp.groups) {
        assert_eq!(ours.error_code, theirs.error_code);
        assert_eq!(
            ours.error_message.as_deref(),
            theirs.error_message.as_deref()
        );
        assert_eq!(ours.group_id, theirs.group_id.as_str());
        assert_eq!(ours.state, theirs.group_state.as_str());
        assert_eq!(ours.epoch, theirs.group_epoch);
        assert_eq!(ours.assignment_epoch, theirs.assignment_epoch);
        assert_eq!(ours.assignor, theirs.assignor_name.as_str());
        assert_eq!(ours.authorized_operations, theirs.authorized_operations);
        assert_eq!(ours.members.len(), theirs.members.len());
        for (ours, theirs) in ours.members.iter().zip(&theirs.members) {
            assert_eq!(ours.member_id, theirs.member_id.as_str());
            assert_eq!(ours.rack_id.as_deref(), theirs.rack_id.as_deref());
            assert_eq!(ours.member_epoch, theirs.member_epoch);
            assert_eq!(ours.client_id, theirs.client_id.as_str());
            assert_eq!(ours.client_host, theirs.client_host.as_str());
            let subscribed: Vec<&str> = theirs
                .subscribed_topic_names
                .iter()
                .map(|t| t.as_str())
                .collect();
            assert_eq!(ours.subscribed_topics, subscribed);
            let assigned: Vec<AssignedTopic> = theirs
                .assignment
                .topic_partitions
                .iter()
                .map(|tp| AssignedTopic {
                    topic_id: tp.topic_id,
                    topic: tp.topic_name.to_string(),
                    partitions: tp.partitions.clone(),
                })
                .collect();
            assert_eq!(ours.assignment, assigned);
        }
    }
    Ok(())
}

/// A DescribeShareGroupOffsets v1 response: `crate_share_group_offsets` with Lag 30 + index.
/// (kafka-protocol 0.18 knows only v0.)
pub(crate) fn share_group_offsets_v1() -> Bytes {
    let resp = crate_share_group_offsets();
    let mut buf = BytesMut::new();
    buf.put_i32(resp.throttle_time_ms);
    put_compact_len(&mut buf, resp.groups.len());
    for g in &resp.groups {
        put_compact_string(&mut buf, Some(g.group_id.as_str()));
        put_compact_len(&mut buf, g.topics.len());
        for t in &g.topics {
            put_compact_string(&mut buf, Some(t.topic_name.as_str()));
            buf.put_u128(t.topic_id.as_u128());
            put_compact_len(&mut buf, t.partitions.len());
            for p in &t.partitions {
                buf.put_i32(p.partition_index);
                buf.put_i64(p.start_offset);
                buf.put_i32(p.leader_epoch);
                buf.put_i64(30 + i64::from(p.partition_index));
                buf.put_i16(p.error_code);
                put_compact_string(&mut buf, p.error_message.as_deref());
                put_empty_tags(&mut buf);
            }
            put_empty_tags(&mut buf);
        }
        buf.put_i16(g.error_code);
        put_compact_string(&mut buf, g.error_message.as_deref());
        put_empty_tags(&mut buf);
    }
    put_empty_tags(&mut buf);
    buf.freeze()
}

#[test]
fn share_group_offsets_decode_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_share_group_offsets();
    let mut v0 = BytesMut::new();
    resp.encode(&mut v0, 0)?;
    for (version, body) in [(0, v0.freeze()), (1, share_group_offsets_v1())] {
        let ours = decode_share_group_offsets(body, version)?;
        assert_eq!(ours.len(), 1);
        let (ours, theirs) = (&ours[0], &resp.groups[0]);
        assert_eq!(ours.group_id, theirs.group_id.as_str());
        assert_eq!(ours.error_code, theirs.error_code);
        let expected: Vec<OffsetEntry> = theirs
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| OffsetEntry {
                    topic: t.topic_name.to_string(),
                    topic_id: t.topic_id,
                    partition: p.partition_index,
                    start_offset: p.start_offset,
                    leader_epoch: p.leader_epoch,
                    lag: if version >= 1 {
                        30 + i64::from(p.partition_index)
                    } else {
                        -1
                    },
                    error_code: p.error_code,
                    error_message: p.error_message.as_ref().map(|m| m.to_string()),
                })
            })
            .collect();
        assert_eq!(ours.partitions, expected);
    }
    Ok(())
}

#[test]
fn huge_array_lengths_are_rejected_before_allocating() {
    let mut top = BytesMut::new();
    top.put_i32(0);
    put_uvarint(&mut top, u32::MAX);
    top.put_slice(&[0; 32]);
    let err = decode_share_group_describe(top.clone().freeze()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    assert!(err.message().contains("array of"), "{err}");
    for version in [0, 1] {
        let err = decode_share_group_offsets(top.clone().freeze(), version).unwrap_err();
        assert!(err.message().contains("array of"), "{err}");
    }
    // A group whose member list lies.
    let mut inner = BytesMut::new();
    inner.put_i32(0);
    put_compact_len(&mut inner, 1);
    inner.put_i16(0);
    put_compact_string(&mut inner, None);
    put_compact_string(&mut inner, Some("workers"));
    put_compact_string(&mut inner, Some("Stable"));
    inner.put_i32(1);
    inner.put_i32(1);
    put_compact_string(&mut inner, Some("simple"));
    put_uvarint(&mut inner, u32::MAX);
    inner.put_slice(&[0; 32]);
    let err = decode_share_group_describe(inner.freeze()).unwrap_err();
    assert!(err.message().contains("array of"), "{err}");
}
