//! Tests of the config decoders (against the crate's encoders) and of the delivery-limit
//! decision.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    DescribeConfigsResponse, IncrementalAlterConfigsResponse, describe_configs_response,
    incremental_alter_configs_response,
};
use kafka_protocol::protocol::Encodable;

use super::*;
use crate::wire::{put_compact_string, put_uvarint};

pub(crate) fn crate_describe_configs() -> DescribeConfigsResponse {
    let mut synonym = describe_configs_response::DescribeConfigsSynonym::default();
    synonym.name = StrBytes::from_static_str(BROKER_LIMIT_KEY);
    synonym.value = Some(StrBytes::from_static_str("5"));
    synonym.source = 5;
    let mut limit = describe_configs_response::DescribeConfigsResourceResult::default();
    limit.name = StrBytes::from_static_str(BROKER_LIMIT_KEY);
    limit.value = Some(StrBytes::from_static_str("5"));
    limit.config_source = 5;
    limit.synonyms = vec![synonym];
    limit.config_type = 3;
    limit.documentation = Some(StrBytes::from_static_str(
        "The maximum number of deliveries",
    ));
    let mut secret = describe_configs_response::DescribeConfigsResourceResult::default();
    secret.name = StrBytes::from_static_str("ssl.key.password");
    secret.value = None;
    secret.read_only = true;
    secret.is_sensitive = true;
    let mut broker = describe_configs_response::DescribeConfigsResult::default();
    broker.resource_type = RESOURCE_BROKER;
    broker.resource_name = StrBytes::from_static_str("1");
    broker.error_message = Some(StrBytes::from_static_str(""));
    broker.configs = vec![limit, secret];
    let mut group = describe_configs_response::DescribeConfigsResult::default();
    group.error_code = codes::GROUP_AUTHORIZATION_FAILED;
    group.error_message = None;
    group.resource_type = RESOURCE_GROUP;
    group.resource_name = StrBytes::from_static_str("workers");
    let mut resp = DescribeConfigsResponse::default();
    resp.throttle_time_ms = 2;
    resp.results = vec![broker, group];
    resp
}

pub(crate) fn crate_incremental_alter_configs() -> IncrementalAlterConfigsResponse {
    let mut ok = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
    ok.resource_type = RESOURCE_GROUP;
    ok.resource_name = StrBytes::from_static_str("workers");
    let mut bad = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
    bad.error_code = codes::INVALID_CONFIG;
    bad.error_message = Some(StrBytes::from_static_str(
        "Unknown group config name: share.delivery.count.limit",
    ));
    bad.resource_type = RESOURCE_GROUP;
    bad.resource_name = StrBytes::from_static_str("other");
    let mut resp = IncrementalAlterConfigsResponse::default();
    resp.responses = vec![ok, bad];
    resp
}

#[test]
fn describe_configs_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_describe_configs();
    let mut buf = BytesMut::new();
    resp.encode(&mut buf, 4)?;
    let ours = decode_describe_configs(buf.freeze())?;
    assert_eq!(ours.len(), resp.results.len());
    for (ours, theirs) in ours.iter().zip(&resp.results) {
        assert_eq!(ours.error_code, theirs.error_code);
        assert_eq!(
            ours.error_message.as_deref(),
            theirs.error_message.as_deref()
        );
        assert_eq!(ours.resource_type, theirs.resource_type);
        assert_eq!(ours.resource_name, theirs.resource_name.as_str());
        assert_eq!(ours.configs.len(), theirs.configs.len());
        for (ours, theirs) in ours.configs.iter().zip(&theirs.configs) {
            assert_eq!(ours.name, theirs.name.as_str());
            assert_eq!(ours.value.as_deref(), theirs.value.as_deref());
            assert_eq!(ours.read_only, theirs.read_only);
            assert_eq!(ours.source, theirs.config_source);
            assert_eq!(ours.sensitive, theirs.is_sensitive);
        }
    }
    Ok(())
}

#[test]
fn incremental_alter_configs_decodes_like_the_crate() -> Result<(), Box<dyn std::error::Error>> {
    let resp = crate_incremental_alter_configs();
    let mut buf = BytesMut::new();
    resp.encode(&mut buf, 1)?;
    let ours = decode_incremental_alter_configs(buf.freeze())?;
    assert_eq!(ours.len(), resp.responses.len());
    for (ours, theirs) in ours.iter().zip(&resp.responses) {
        assert_eq!(ours.error_code, theirs.error_code);
        assert_eq!(
            ours.error_message.as_deref(),
            theirs.error_message.as_deref()
        );
        assert_eq!(ours.resource_type, theirs.resource_type);
        assert_eq!(ours.resource_name, theirs.resource_name.as_str());
    }
    Ok(())
}

#[test]
fn huge_array_lengths_are_rejected_before_allocating() {
    let mut top = BytesMut::new();
    top.put_i32(0);
    put_uvarint(&mut top, u32::MAX);
    top.put_slice(&[0; 16]);
    let err = decode_describe_configs(top.clone().freeze()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    assert!(err.message().contains("array of"), "{err}");
    let err = decode_incremental_alter_configs(top.freeze()).unwrap_err();
    assert!(err.message().contains("array of"), "{err}");
    // One result whose config list lies.
    let mut inner = BytesMut::new();
    inner.put_i32(0);
    put_uvarint(&mut inner, 2);
    inner.put_i16(0);
    put_compact_string(&mut inner, None);
    inner.put_i8(RESOURCE_GROUP);
    put_compact_string(&mut inner, Some("workers"));
    put_uvarint(&mut inner, u32::MAX);
    inner.put_slice(&[0; 16]);
    let err = decode_describe_configs(inner.freeze()).unwrap_err();
    assert!(err.message().contains("array of"), "{err}");
}

fn entry(name: &str, value: Option<&str>, source: i8) -> ConfigEntry {
    ConfigEntry {
        name: name.to_string(),
        value: value.map(str::to_string),
        read_only: false,
        source,
        sensitive: false,
    }
}

fn result(
    resource_type: i8,
    name: &str,
    error_code: i16,
    configs: Vec<ConfigEntry>,
) -> ConfigResult {
    ConfigResult {
        error_code,
        // What a 4.2.2 broker sends on success: an empty string, not null.
        error_message: Some(String::new()),
        resource_type,
        resource_name: name.to_string(),
        configs,
    }
}

/// What a 4.2.2 broker answers: the group resource without the key, the broker's value.
fn kafka_4_2(broker_value: Option<&str>) -> Vec<ConfigResult> {
    vec![
        result(RESOURCE_GROUP, "g", 0, vec![]),
        result(
            RESOURCE_BROKER,
            "1",
            0,
            vec![entry(BROKER_LIMIT_KEY, broker_value, 5)],
        ),
    ]
}

fn choose(results: &[ConfigResult]) -> Result<DeliveryLimit> {
    choose_delivery_limit("g", 1, "b1:9092", results)
}

#[test]
fn a_broker_without_the_group_config_gives_its_own_limit() -> Result<()> {
    assert_eq!(
        choose(&kafka_4_2(Some("5")))?,
        DeliveryLimit {
            value: 5,
            source: DeliveryLimitSource::Broker { node_id: 1 }
        }
    );
    assert_eq!(choose(&kafka_4_2(Some("3")))?.value, 3);
    Ok(())
}

#[test]
fn the_group_config_wins_when_the_broker_has_it() -> Result<()> {
    for source in [5, 8] {
        let mut results = kafka_4_2(Some("5"));
        results[0]
            .configs
            .push(entry(GROUP_LIMIT_KEY, Some("3"), source));
        assert_eq!(
            choose(&results)?,
            DeliveryLimit {
                value: 3,
                source: DeliveryLimitSource::Group
            }
        );
    }
    // The broker part is not needed then: its error does not matter.
    let results = vec![
        result(
            RESOURCE_GROUP,
            "g",
            0,
            vec![entry(GROUP_LIMIT_KEY, Some("4"), 8)],
        ),
        result(
            RESOURCE_BROKER,
            "1",
            codes::CLUSTER_AUTHORIZATION_FAILED,
            vec![],
        ),
    ];
    assert_eq!(choose(&results)?.value, 4);
    Ok(())
}

#[test]
fn a_group_error_is_an_error_never_a_fallback() {
    let mut results = kafka_4_2(Some("5"));
    results[0].error_code = codes::GROUP_AUTHORIZATION_FAILED;
    results[0].error_message = Some("denied".into());
    let err = choose(&results).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Authorization);
    for part in [
        "group g",
        "broker 1",
        "b1:9092",
        "30 (GROUP_AUTHORIZATION_FAILED)",
        "denied",
    ] {
        assert!(err.message().contains(part), "{part} missing: {err}");
    }
    results[0].error_code = codes::INVALID_REQUEST;
    let err = choose(&results).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Broker);
    assert!(err.message().contains("42 (INVALID_REQUEST)"), "{err}");
}

#[test]
fn a_missing_value_is_an_error_never_a_default() {
    // The broker does not name its limit.
    let mut results = kafka_4_2(Some("5"));
    results[1].configs.clear();
    let err = choose(&results).unwrap_err();
    assert!(
        err.message().contains("names no delivery count limit"),
        "{err}"
    );
    // ... or hides its value.
    let err = choose(&kafka_4_2(None)).unwrap_err();
    assert!(err.message().contains("has no value"), "{err}");
    // A group entry without a value does not fall back either.
    let mut results = kafka_4_2(Some("5"));
    results[0].configs.push(entry(GROUP_LIMIT_KEY, None, 8));
    assert!(choose(&results).is_err());
    // Nonsense values.
    for bad in ["", "five", "-1", "0", "99999999999"] {
        let err = choose(&kafka_4_2(Some(bad))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol, "{bad:?}");
    }
}

#[test]
fn a_broker_error_or_a_missing_resource_is_an_error() {
    let mut results = kafka_4_2(Some("5"));
    results[1].error_code = codes::CLUSTER_AUTHORIZATION_FAILED;
    let err = choose(&results).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Authorization);
    assert!(err.message().contains("for group g"), "{err}");
    // An answer for another group or broker is no answer.
    let mut results = kafka_4_2(Some("5"));
    results[0].resource_name = "other".into();
    let err = choose(&results).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    assert!(
        err.message()
            .contains("DescribeConfigs response from broker b1:9092"),
        "{err}"
    );
    let mut results = kafka_4_2(Some("5"));
    results[1].resource_name = "2".into();
    assert_eq!(choose(&results).unwrap_err().kind(), ErrorKind::Protocol);
    assert_eq!(choose(&[]).unwrap_err().kind(), ErrorKind::Protocol);
}
