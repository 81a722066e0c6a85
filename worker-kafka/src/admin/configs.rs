//! Configs: set a group-level config (IncrementalAlterConfigs) and read the delivery-count limit
//! that applies to a share group (DescribeConfigs).
//!
//! The delivery-count limit is never guessed: the worker reserves the last delivery for the
//! dead-letter hand-off, so a wrong limit lets the broker archive records silently. Either the
//! broker names it, or the call fails.

use bytes::Bytes;
use kafka_protocol::messages::{
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, describe_configs_request,
    incremental_alter_configs_request,
};
use kafka_protocol::protocol::StrBytes;

use super::{
    Admin, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, RESOURCE_BROKER, RESOURCE_GROUP,
    broker_error, call, codes, encode, protocol_error,
};
use crate::wire::{Reader, capacity};
use crate::{Error, ErrorKind, Result};

/// The group-level limit (Kafka 4.3+).
const GROUP_LIMIT_KEY: &str = "share.delivery.count.limit";
/// The broker-wide limit every share group inherits.
const BROKER_LIMIT_KEY: &str = "group.share.delivery.count.limit";
/// IncrementalAlterConfigs operation SET.
const OP_SET: i8 = 0;

/// The delivery-count limit that applies to a share group, and where it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLimit {
    /// The broker archives a record once it has been delivered this many times.
    pub value: u32,
    /// Which config named it.
    pub source: DeliveryLimitSource,
}

/// Where a [`DeliveryLimit`] was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryLimitSource {
    /// The group's `share.delivery.count.limit` (Kafka 4.3+). The broker reports it for every
    /// group: the group's own override, or the broker-wide value the group inherits.
    Group,
    /// The broker's `group.share.delivery.count.limit`, because the broker has no group-level
    /// limit (Kafka 4.2).
    Broker {
        /// The broker that was asked.
        node_id: i32,
    },
}

impl std::fmt::Display for DeliveryLimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Group => write!(f, "group config {GROUP_LIMIT_KEY}"),
            Self::Broker { node_id } => {
                write!(f, "config {BROKER_LIMIT_KEY} of broker {node_id}")
            }
        }
    }
}

/// One config entry of a DescribeConfigs response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigEntry {
    pub(crate) name: String,
    /// `None` for sensitive or unset configs.
    pub(crate) value: Option<String>,
    pub(crate) read_only: bool,
    /// Where the value comes from (5 = default, 8 = group config, ...).
    pub(crate) source: i8,
    pub(crate) sensitive: bool,
}

/// One resource of a DescribeConfigs response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigResult {
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) resource_type: i8,
    pub(crate) resource_name: String,
    pub(crate) configs: Vec<ConfigEntry>,
}

/// Decodes a DescribeConfigs v4 response (the only flexible version).
pub(crate) fn decode_describe_configs(body: Bytes) -> Result<Vec<ConfigResult>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    // Result: error code, error message, resource type, resource name, configs, tags.
    let n = r.compact_array_len(7)?;
    let mut results = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let resource_type = r.i8()?;
        let resource_name = r.compact_string()?;
        // Config: name, value, read-only, source, sensitive, synonyms, type, documentation, tags.
        let n = r.compact_array_len(9)?;
        let mut configs = Vec::with_capacity(capacity(n));
        for _ in 0..n {
            let name = r.compact_string()?;
            let value = r.compact_nullable_string()?;
            let read_only = r.bool()?;
            let source = r.i8()?;
            let sensitive = r.bool()?;
            // Synonym: name, value, source, tags.
            for _ in 0..r.compact_array_len(4)? {
                let _name = r.compact_string()?;
                let _value = r.compact_nullable_string()?;
                let _source = r.i8()?;
                r.skip_tags()?;
            }
            let _config_type = r.i8()?;
            let _documentation = r.compact_nullable_string()?;
            r.skip_tags()?;
            configs.push(ConfigEntry {
                name,
                value,
                read_only,
                source,
                sensitive,
            });
        }
        r.skip_tags()?;
        results.push(ConfigResult {
            error_code,
            error_message,
            resource_type,
            resource_name,
            configs,
        });
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(results)
}

/// One resource of an IncrementalAlterConfigs response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlteredResource {
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    pub(crate) resource_type: i8,
    pub(crate) resource_name: String,
}

/// Decodes an IncrementalAlterConfigs v1 response (the only flexible version).
pub(crate) fn decode_incremental_alter_configs(body: Bytes) -> Result<Vec<AlteredResource>> {
    let mut r = Reader::new(body);
    let _throttle = r.i32()?;
    // Resource: error code, error message, resource type, resource name, tags.
    let n = r.compact_array_len(6)?;
    let mut out = Vec::with_capacity(capacity(n));
    for _ in 0..n {
        let error_code = r.i16()?;
        let error_message = r.compact_nullable_string()?;
        let resource_type = r.i8()?;
        let resource_name = r.compact_string()?;
        r.skip_tags()?;
        out.push(AlteredResource {
            error_code,
            error_message,
            resource_type,
            resource_name,
        });
    }
    r.skip_tags()?;
    r.finish()?;
    Ok(out)
}

/// Parses a delivery-count limit as the broker wrote it.
fn parse_limit(value: Option<&str>, what: &str) -> Result<u32> {
    let value = value.ok_or_else(|| {
        Error::new(
            ErrorKind::Broker,
            format!("{what} has no value (the broker hides it or does not set it)"),
        )
    })?;
    match value.trim().parse::<u32>() {
        Ok(limit) if limit > 0 => Ok(limit),
        _ => Err(Error::new(
            ErrorKind::Protocol,
            format!("{what} is {value:?}, not a delivery count limit"),
        )),
    }
}

impl ConfigResult {
    /// The entry for config `key`, if the broker listed it (a config it does not have is absent).
    pub(crate) fn entry(&self, key: &str) -> Option<&ConfigEntry> {
        self.configs.iter().find(|c| c.name == key)
    }
}

/// The answer for resource `name` (of `resource_type`) in a DescribeConfigs answer from `addr`:
/// a missing one is a protocol error, an error code the broker's error, `what` saying what was
/// being described.
pub(crate) fn config_answer<'a>(
    results: &'a [ConfigResult],
    resource_type: i8,
    name: &str,
    addr: &str,
    what: &str,
) -> Result<&'a ConfigResult> {
    let answer = results
        .iter()
        .find(|r| r.resource_type == resource_type && r.resource_name == name)
        .ok_or_else(|| {
            protocol_error(
                DESCRIBE_CONFIGS,
                addr,
                format_args!("no result for {name} (resource type {resource_type})"),
            )
        })?;
    if answer.error_code != codes::NONE {
        return Err(broker_error(
            what,
            answer.error_code,
            answer.error_message.as_deref(),
        ));
    }
    Ok(answer)
}

/// Picks the delivery-count limit of `group` from a DescribeConfigs answer of broker `node_id`
/// (at `addr`) that covers the group's `share.delivery.count.limit` and the broker's
/// `group.share.delivery.count.limit`.
///
/// A broker without the group-level config (Kafka 4.2) answers the GROUP resource with error 0
/// and leaves the key out of the list, for existing and not-yet-existing groups alike; a 4.3+
/// broker lists it for every group. Only that absence falls through to the broker's value: an
/// error code on the group, a missing resource, a value that is null or not a number, or a broker
/// that does not name its own limit are errors. There is no default.
pub(crate) fn choose_delivery_limit(
    group: &str,
    node_id: i32,
    addr: &str,
    results: &[ConfigResult],
) -> Result<DeliveryLimit> {
    let answer = config_answer(
        results,
        RESOURCE_GROUP,
        group,
        addr,
        &format!("describing {GROUP_LIMIT_KEY} of group {group} on broker {node_id} ({addr})"),
    )?;
    if let Some(entry) = answer.entry(GROUP_LIMIT_KEY) {
        let what = format!("{GROUP_LIMIT_KEY} of group {group} on broker {node_id} ({addr})");
        return Ok(DeliveryLimit {
            value: parse_limit(entry.value.as_deref(), &what)?,
            source: DeliveryLimitSource::Group,
        });
    }
    let answer = config_answer(
        results,
        RESOURCE_BROKER,
        &node_id.to_string(),
        addr,
        &format!("describing {BROKER_LIMIT_KEY} of broker {node_id} ({addr}) for group {group}"),
    )?;
    let what = format!("{BROKER_LIMIT_KEY} of broker {node_id} ({addr})");
    let entry = answer.entry(BROKER_LIMIT_KEY).ok_or_else(|| {
        Error::new(
            ErrorKind::Broker,
            format!(
                "broker {node_id} ({addr}) names no delivery count limit for group {group}: \
                     neither {GROUP_LIMIT_KEY} nor {BROKER_LIMIT_KEY}"
            ),
        )
    })?;
    Ok(DeliveryLimit {
        value: parse_limit(entry.value.as_deref(), &what)?,
        source: DeliveryLimitSource::Broker { node_id },
    })
}

impl Admin {
    /// Sets a group-level config (IncrementalAlterConfigs on resource type GROUP), e.g.
    /// `share.auto.offset.reset = earliest` or `share.record.lock.duration.ms`. Works before the
    /// group exists.
    pub async fn set_group_config(&self, group: &str, key: &str, value: &str) -> Result<()> {
        let mut c = incremental_alter_configs_request::AlterableConfig::default();
        c.name = StrBytes::from_string(key.to_string());
        c.config_operation = OP_SET;
        c.value = Some(StrBytes::from_string(value.to_string()));
        let mut r = incremental_alter_configs_request::AlterConfigsResource::default();
        r.resource_type = RESOURCE_GROUP;
        r.resource_name = StrBytes::from_string(group.to_string());
        r.configs = vec![c];
        let mut req = IncrementalAlterConfigsRequest::default();
        req.resources = vec![r];
        let mut conn = self.cluster.connect_any().await?;
        let resources = call(
            &mut conn,
            INCREMENTAL_ALTER_CONFIGS,
            |v| encode(&req, v),
            |body, _| decode_incremental_alter_configs(body),
        )
        .await?;
        let ours = resources
            .iter()
            .find(|r| r.resource_type == RESOURCE_GROUP && r.resource_name == group)
            .ok_or_else(|| {
                protocol_error(
                    INCREMENTAL_ALTER_CONFIGS,
                    conn.addr(),
                    format_args!("no result for group {group}"),
                )
            })?;
        if ours.error_code != codes::NONE {
            return Err(broker_error(
                &format!("setting {key} on group {group} on broker {}", conn.addr()),
                ours.error_code,
                ours.error_message.as_deref(),
            ));
        }
        Ok(())
    }

    /// The delivery-count limit that applies to `group`: the group's `share.delivery.count.limit`
    /// (Kafka 4.3+) or else the broker's `group.share.delivery.count.limit`. Never a default: a
    /// limit the broker does not name is an error. See [`Admin::delivery_limit`] for where it came
    /// from.
    pub async fn delivery_count_limit(&self, group: &str) -> Result<u32> {
        Ok(self.delivery_limit(group).await?.value)
    }

    /// The delivery-count limit that applies to `group` and where it was read: the group's
    /// `share.delivery.count.limit` when the broker has that group config (Kafka 4.3+), else the
    /// broker's `group.share.delivery.count.limit`. Both are asked in one DescribeConfigs of the
    /// lowest-numbered broker. Any error, and a limit the broker does not name, is an error.
    pub async fn delivery_limit(&self, group: &str) -> Result<DeliveryLimit> {
        let (results, node_id, addr) = self
            .describe_group_and_broker(group, &[GROUP_LIMIT_KEY], &[BROKER_LIMIT_KEY])
            .await?;
        choose_delivery_limit(group, node_id, &addr, &results)
    }

    /// Describes `group`'s `group_keys` and the lowest-numbered broker's `broker_keys` in one
    /// DescribeConfigs to that broker; returns the results, its node id and its address.
    pub(crate) async fn describe_group_and_broker(
        &self,
        group: &str,
        group_keys: &[&'static str],
        broker_keys: &[&'static str],
    ) -> Result<(Vec<ConfigResult>, i32, String)> {
        let node_id = self.lowest_broker().await?;
        let (results, addr) = self
            .describe_configs(
                node_id,
                &[
                    (RESOURCE_GROUP, group, group_keys),
                    (RESOURCE_BROKER, &node_id.to_string(), broker_keys),
                ],
            )
            .await?;
        Ok((results, node_id, addr))
    }

    /// The lowest node id the cluster names (the broker whose configs stand for the cluster's).
    pub(crate) async fn lowest_broker(&self) -> Result<i32> {
        let meta = self.cluster.metadata(&[]).await?;
        meta.brokers
            .keys()
            .min()
            .copied()
            .ok_or_else(|| Error::new(ErrorKind::Broker, "the cluster named no brokers"))
    }

    /// Describes the `keys` of each (resource type, name) in one DescribeConfigs to broker
    /// `node_id`; returns the results and the broker's address.
    pub(crate) async fn describe_configs(
        &self,
        node_id: i32,
        resources: &[(i8, &str, &[&'static str])],
    ) -> Result<(Vec<ConfigResult>, String)> {
        let mut req = DescribeConfigsRequest::default();
        req.resources = resources
            .iter()
            .map(|(resource_type, name, keys)| {
                let mut r = describe_configs_request::DescribeConfigsResource::default();
                r.resource_type = *resource_type;
                r.resource_name = StrBytes::from_string((*name).to_owned());
                r.configuration_keys =
                    Some(keys.iter().map(|k| StrBytes::from_static_str(k)).collect());
                r
            })
            .collect();
        let mut conn = self.cluster.connect_node(node_id).await?;
        let results = call(
            &mut conn,
            DESCRIBE_CONFIGS,
            |v| encode(&req, v),
            |body, _| decode_describe_configs(body),
        )
        .await?;
        Ok((results, conn.addr().to_string()))
    }
}

#[cfg(test)]
pub(crate) mod tests;
