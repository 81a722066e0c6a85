//! Tests of the CreateTopics and ListOffsets decoders against the crate's encoders.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    CreateTopicsResponse, ListOffsetsResponse, create_topics_response, list_offsets_response,
};
use kafka_protocol::protocol::Encodable;

use super::*;
use crate::wire::{put_compact_string, put_uvarint};

pub(crate) fn crate_create_topics() -> CreateTopicsResponse {
    let mut config = create_topics_response::CreatableTopicConfigs::default();
    config.name = StrBytes::from_static_str("cleanup.policy");
    config.value = Some(StrBytes::from_static_str("delete"));
    config.config_source = 5;
    let mut created = create_topics_response::CreatableTopicResult::default();
    created.name = TopicName(StrBytes::from_static_str("jobs"));
    created.topic_id = Uuid::from_u128(7);
    created.num_partitions = 3;
    created.replication_factor = 1;
    created.configs = Some(vec![config]);
    let mut exists = create_topics_response::CreatableTopicResult::default();
    exists.name = TopicName(StrBytes::from_static_str("old"));
    exists.error_code = codes::TOPIC_ALREADY_EXISTS;
    exists.error_message = Some(StrBytes::from_static_str("Topic 'old' already exists."));
    exists.topic_config_error_code = 40;
    exists.configs = None;
    let mut resp = CreateTopicsResponse::default();
    resp.throttle_time_ms = 1;
    resp.topics = vec![created, exists];
    resp
}

pub(crate) fn crate_list_offsets() -> ListOffsetsResponse {
    let mut p0 = list_offsets_response::ListOffsetsPartitionResponse::default();
    p0.partition_index = 0;
    p0.offset = 42;
    p0.leader_epoch = 3;
    let mut p1 = list_offsets_response::ListOffsetsPartitionResponse::default();
    p1.partition_index = 1;
    p1.error_code = codes::NOT_LEADER_OR_FOLLOWER;
    let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
    t.name = TopicName(StrBytes::from_static_str("jobs"));
    t.partitions = vec![p0, p1];
    let mut resp = ListOffsetsResponse::default();
    resp.topics = vec![t];
    resp
}

#[test]
fn create_topics_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_create_topics();
    for version in 5..=7 {
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, version)?;
        let ours = decode_create_topics(buf.freeze(), version)?;
        assert_eq!(ours.len(), resp.topics.len());
        for (ours, theirs) in ours.iter().zip(&resp.topics) {
            assert_eq!(ours.name, theirs.name.as_str());
            let id = if version >= 7 {
                theirs.topic_id
            } else {
                Uuid::nil()
            };
            assert_eq!(ours.topic_id, id);
            assert_eq!(ours.error_code, theirs.error_code);
            assert_eq!(
                ours.error_message.as_deref(),
                theirs.error_message.as_deref()
            );
            assert_eq!(ours.num_partitions, theirs.num_partitions);
            assert_eq!(ours.replication_factor, theirs.replication_factor);
        }
    }
    Ok(())
}

#[test]
fn list_offsets_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_list_offsets();
    for version in 6..=10 {
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, version)?;
        let ours = decode_list_offsets(buf.freeze())?;
        let theirs: Vec<_> = resp.topics[0].partitions.iter().collect();
        assert_eq!(ours.len(), theirs.len());
        for (ours, theirs) in ours.iter().zip(theirs) {
            assert_eq!(ours.topic, "jobs");
            assert_eq!(ours.partition, theirs.partition_index);
            assert_eq!(ours.error_code, theirs.error_code);
            assert_eq!(ours.timestamp, theirs.timestamp);
            assert_eq!(ours.offset, theirs.offset);
            assert_eq!(ours.leader_epoch, theirs.leader_epoch);
        }
    }
    Ok(())
}

/// A throttle time, then an array that claims 2^32 - 2 elements in a few bytes.
fn huge_array() -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    put_uvarint(&mut buf, u32::MAX);
    buf.put_slice(&[0; 16]);
    buf.freeze()
}

#[test]
fn huge_array_lengths_are_rejected_before_allocating() {
    for version in 5..=7 {
        let err = decode_create_topics(huge_array(), version).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert!(err.message().contains("array of"), "{err}");
    }
    let err = decode_list_offsets(huge_array()).unwrap_err();
    assert!(err.message().contains("array of"), "{err}");
    // The inner array too: one topic whose partition array lies.
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    put_uvarint(&mut buf, 2);
    put_compact_string(&mut buf, Some("jobs"));
    put_uvarint(&mut buf, u32::MAX);
    buf.put_slice(&[0; 32]);
    let err = decode_list_offsets(buf.freeze()).unwrap_err();
    assert!(err.message().contains("array of"), "{err}");
}

#[test]
fn trailing_bytes_are_an_error() -> Result<(), Box<dyn std::error::Error>> {
    let mut buf = BytesMut::new();
    crate_list_offsets().encode(&mut buf, 10)?;
    buf.put_u8(0);
    assert!(decode_list_offsets(buf.freeze()).is_err());
    Ok(())
}
