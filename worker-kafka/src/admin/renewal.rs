//! Whether a share group's locks can be renewed, and how long they last.
//!
//! Kafka 4.3 added the group config `share.renew.acknowledge.enable` (default true): with it off,
//! the broker answers RENEW with INVALID_RECORD_STATE and a lock runs out after
//! `share.record.lock.duration.ms` whatever the worker does. The worker must know at start, so it
//! can refuse a job timeout the lock cannot cover instead of losing locks silently.

use std::time::Duration;

use super::configs::{ConfigResult, config_answer};
use super::{Admin, RESOURCE_BROKER, RESOURCE_GROUP};
use crate::{Error, ErrorKind, Result};

/// The group config that turns RENEW off (Kafka 4.3+).
const RENEW_KEY: &str = "share.renew.acknowledge.enable";
/// The group's lock duration.
const GROUP_LOCK_KEY: &str = "share.record.lock.duration.ms";
/// The broker-wide lock duration every group inherits.
const BROKER_LOCK_KEY: &str = "group.share.record.lock.duration.ms";

/// Whether a share group's acquisition locks can be renewed, and how long one lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRenewal {
    /// `false` when the group has `share.renew.acknowledge.enable = false` (Kafka 4.3+); brokers
    /// without that config always allow RENEW.
    pub enabled: bool,
    /// The group's `share.record.lock.duration.ms`, or the broker's
    /// `group.share.record.lock.duration.ms` it inherits.
    pub lock: Duration,
}

impl Admin {
    /// Whether `group`'s locks can be renewed and how long they last, read in one DescribeConfigs.
    pub async fn renewal(&self, group: &str) -> Result<GroupRenewal> {
        let (results, node_id, addr) = self
            .describe_group_and_broker(group, &[RENEW_KEY, GROUP_LOCK_KEY], &[BROKER_LOCK_KEY])
            .await?;
        choose_renewal(group, node_id, &addr, &results)
    }
}

/// Reads a [`GroupRenewal`] out of a DescribeConfigs answer of broker `node_id` (at `addr`). A
/// config the broker does not have is absent from its answer: no renew switch means RENEW is on;
/// no group lock falls back to the broker's. Errors and unreadable values are errors.
pub(crate) fn choose_renewal(
    group: &str,
    node_id: i32,
    addr: &str,
    results: &[ConfigResult],
) -> Result<GroupRenewal> {
    let find = |resource_type: i8, name: &str| {
        let what = format!("describing the configs of {name} on broker {node_id} ({addr})");
        config_answer(results, resource_type, name, addr, &what)
    };
    let value = |result: &ConfigResult, key: &str| {
        result
            .entry(key)
            .map(|c| c.value.clone().unwrap_or_default())
    };
    let group_answer = find(RESOURCE_GROUP, group)?;
    let enabled = match value(group_answer, RENEW_KEY).as_deref().map(str::trim) {
        None => true,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("{RENEW_KEY} of group {group} on broker {node_id} ({addr}) is {v:?}"),
            ));
        }
    };
    let (lock, what) = match value(group_answer, GROUP_LOCK_KEY) {
        Some(v) => (v, format!("{GROUP_LOCK_KEY} of group {group}")),
        None => {
            let broker = find(RESOURCE_BROKER, &node_id.to_string())?;
            let v = value(broker, BROKER_LOCK_KEY).ok_or_else(|| {
                Error::new(
                    ErrorKind::Broker,
                    format!(
                        "broker {node_id} ({addr}) names no lock duration for group {group}: \
                         neither {GROUP_LOCK_KEY} nor {BROKER_LOCK_KEY}"
                    ),
                )
            })?;
            (v, format!("{BROKER_LOCK_KEY} of broker {node_id}"))
        }
    };
    let lock = match lock.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("{what} ({addr}) is {lock:?}, not a lock duration in milliseconds"),
            ));
        }
    };
    Ok(GroupRenewal { enabled, lock })
}

#[cfg(test)]
mod tests {
    use super::super::configs::ConfigEntry;
    use super::*;

    fn entry(name: &str, value: &str) -> ConfigEntry {
        ConfigEntry {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            read_only: false,
            source: 5,
            sensitive: false,
        }
    }

    fn answer(group: Vec<ConfigEntry>, broker: Vec<ConfigEntry>) -> Vec<ConfigResult> {
        vec![
            ConfigResult {
                error_code: 0,
                error_message: None,
                resource_type: RESOURCE_GROUP,
                resource_name: "g".to_owned(),
                configs: group,
            },
            ConfigResult {
                error_code: 0,
                error_message: None,
                resource_type: RESOURCE_BROKER,
                resource_name: "1".to_owned(),
                configs: broker,
            },
        ]
    }

    #[test]
    fn a_broker_without_the_switch_renews_with_its_own_lock() {
        // Kafka 4.2: neither group key is known; the broker names its lock.
        let got = choose_renewal(
            "g",
            1,
            "b:9092",
            &answer(vec![], vec![entry(BROKER_LOCK_KEY, "30000")]),
        )
        .unwrap();
        assert_eq!(
            got,
            GroupRenewal {
                enabled: true,
                lock: Duration::from_secs(30)
            }
        );
    }

    #[test]
    fn the_group_switch_and_lock_win() {
        let got = choose_renewal(
            "g",
            1,
            "b:9092",
            &answer(
                vec![entry(RENEW_KEY, "false"), entry(GROUP_LOCK_KEY, "15000")],
                vec![entry(BROKER_LOCK_KEY, "30000")],
            ),
        )
        .unwrap();
        assert_eq!(
            got,
            GroupRenewal {
                enabled: false,
                lock: Duration::from_secs(15)
            }
        );
    }

    #[test]
    fn unreadable_values_and_errors_are_errors() {
        for (group, broker) in [
            (
                vec![entry(RENEW_KEY, "maybe")],
                vec![entry(BROKER_LOCK_KEY, "1")],
            ),
            (vec![entry(GROUP_LOCK_KEY, "-5")], vec![]),
            (vec![], vec![]),
        ] {
            assert!(choose_renewal("g", 1, "b:9092", &answer(group, broker)).is_err());
        }
        let mut refused = answer(vec![], vec![entry(BROKER_LOCK_KEY, "1")]);
        refused[0].error_code = super::super::codes::GROUP_AUTHORIZATION_FAILED;
        let err = choose_renewal("g", 1, "b:9092", &refused).unwrap_err();
        assert!(err.to_string().contains("b:9092"), "{err}");
    }
}
