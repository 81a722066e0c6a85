//! The broker's own dead-letter queue for a share group (KIP-1191, Kafka 4.4+).
//!
//! A Kafka 4.4 broker writes a share group's records to a dead-letter topic itself when the group
//! names one (`errors.deadletterqueue.topic.name`): every record a consumer REJECTs, and every
//! record it archives at the delivery-count limit. Whether it really does depends on more than the
//! group config, and a broker that cannot write a letter only logs it and archives the record all
//! the same. So this reads everything the broker checks before it writes (Kafka 4.4.0,
//! `ShareGroupDLQStateManager`):
//!
//! - the cluster's `share.version` feature is 2 or more (a cluster upgraded from 4.2/4.3 keeps 1);
//! - the name does not start with `__` and starts with the cluster's
//!   `errors.deadletterqueue.topic.name.prefix` (default `dlq.`; empty: any name);
//! - the topic exists with `errors.deadletterqueue.group.enable = true`, or it does not exist and
//!   `errors.deadletterqueue.auto.create.topics.enable` is on (default off), so the broker
//!   creates it (with that config) on the first letter.
//!
//! A broker older than 4.4 does not know the group config: it leaves it out of its answer, which
//! reads as "no broker dead-letter queue", never as an error.

use std::fmt;

use super::configs::{ConfigResult, config_answer};
use super::{Admin, RESOURCE_BROKER, RESOURCE_GROUP, codes};
use crate::BrokerDeadLetters;
use crate::{Error, ErrorKind, Result};

/// The group config naming the dead-letter topic (blank: none).
pub(crate) const TOPIC_KEY: &str = "errors.deadletterqueue.topic.name";
/// The group config that copies the record's key and value into its letter (default false).
pub(crate) const COPY_KEY: &str = "errors.deadletterqueue.copy.record.enable";
/// The topic config a dead-letter topic needs (default false).
pub(crate) const GROUP_ENABLE_KEY: &str = "errors.deadletterqueue.group.enable";
/// The cluster config letting the broker create a missing dead-letter topic (default false).
pub(crate) const AUTO_CREATE_KEY: &str = "errors.deadletterqueue.auto.create.topics.enable";
/// The cluster config every dead-letter topic name must start with (default `dlq.`).
pub(crate) const PREFIX_KEY: &str = "errors.deadletterqueue.topic.name.prefix";
/// The feature whose level 2 turns the broker's dead-letter writes on.
pub(crate) const SHARE_VERSION: &str = "share.version";
/// The `share.version` from which the broker writes dead letters.
const SHARE_VERSION_WITH_DLQ: i16 = 2;
/// ConfigResource type TOPIC.
const RESOURCE_TOPIC: i8 = 2;

/// A share group's broker-side dead-letter queue as the cluster describes it
/// ([`Admin::broker_dlq`]). [`gap`](Self::gap) says whether the broker writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerDlq {
    /// The share group.
    pub group: String,
    /// The broker that was asked.
    pub node_id: i32,
    /// Its address.
    pub broker: String,
    /// Whether the broker has the group config `errors.deadletterqueue.topic.name` at all: false
    /// before Kafka 4.4.
    pub supported: bool,
    /// The cluster's finalized `share.version` (`None`: the broker names none); the broker writes
    /// dead letters from level 2.
    pub share_version: Option<i16>,
    /// The group's `errors.deadletterqueue.topic.name`; `None` when it is blank or unknown.
    pub topic: Option<String>,
    /// The group's `errors.deadletterqueue.copy.record.enable`: letters carry the record's key
    /// and value (never its headers); without it they carry only the `__dlq.errors.*` headers.
    pub copy_record: bool,
    /// The cluster's `errors.deadletterqueue.topic.name.prefix` (empty: any name).
    pub prefix: String,
    /// The cluster's `errors.deadletterqueue.auto.create.topics.enable`.
    pub auto_create: bool,
    /// The state of [`topic`](Self::topic), when one is named.
    pub topic_state: Option<DlqTopicState>,
}

/// Whether a named dead-letter topic exists, and takes letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DlqTopicState {
    /// It does not exist.
    Missing,
    /// It exists; `group_enable` is its `errors.deadletterqueue.group.enable`.
    Exists {
        /// Whether share groups may write dead letters to it.
        group_enable: bool,
    },
}

impl BrokerDlq {
    /// Why the broker does not write this group's dead letters, in one line naming the group,
    /// the config and the broker; `None` when it does.
    pub fn gap(&self) -> Option<String> {
        let (group, node, addr) = (&self.group, self.node_id, &self.broker);
        if !self.supported {
            return Some(format!(
                "broker {node} ({addr}) has no group config {TOPIC_KEY}: it is older than Kafka 4.4, which brought dead-letter queues for share groups (KIP-1191)"
            ));
        }
        let Some(topic) = &self.topic else {
            return Some(format!(
                "share group {group} has no broker dead-letter topic: its config {TOPIC_KEY} is not set (broker {node}, {addr})"
            ));
        };
        let level = self.share_version.unwrap_or(0);
        if level < SHARE_VERSION_WITH_DLQ {
            return Some(format!(
                "the cluster's {SHARE_VERSION} is {level} (broker {node}, {addr}): brokers write dead letters for share groups from {SHARE_VERSION} {SHARE_VERSION_WITH_DLQ} (kafka-features.sh upgrade --feature {SHARE_VERSION}={SHARE_VERSION_WITH_DLQ})"
            ));
        }
        if topic.starts_with("__") {
            return Some(format!(
                "the dead-letter topic {topic} of share group {group} ({TOPIC_KEY}) starts with __, which the broker refuses"
            ));
        }
        if !topic.starts_with(&self.prefix) {
            return Some(format!(
                "the dead-letter topic {topic} of share group {group} ({TOPIC_KEY}) does not start with the cluster's {PREFIX_KEY} \"{}\" (broker {node}, {addr}), so the broker refuses to write it",
                self.prefix
            ));
        }
        match self.topic_state {
            Some(DlqTopicState::Exists { group_enable: true }) => None,
            Some(DlqTopicState::Exists {
                group_enable: false,
            }) => Some(format!(
                "the dead-letter topic {topic} of share group {group} lacks the topic config {GROUP_ENABLE_KEY}=true, so the broker refuses to write it"
            )),
            Some(DlqTopicState::Missing) if self.auto_create => None,
            Some(DlqTopicState::Missing) => Some(format!(
                "the dead-letter topic {topic} of share group {group} does not exist and the cluster's {AUTO_CREATE_KEY} is false (broker {node}, {addr}): create it with {GROUP_ENABLE_KEY}=true"
            )),
            None => Some(format!(
                "the state of the dead-letter topic {topic} of share group {group} is unknown"
            )),
        }
    }

    /// Whether the broker writes this group's dead letters.
    pub fn is_on(&self) -> bool {
        self.gap().is_none()
    }

    /// The named dead-letter topic when it does not exist yet but could take letters once
    /// created: its name starts with the cluster's prefix and not with `__`.
    fn creatable_topic(&self) -> Option<&str> {
        let topic = self.topic.as_deref()?;
        let allowed = !topic.starts_with("__") && topic.starts_with(&self.prefix);
        (allowed && self.topic_state == Some(DlqTopicState::Missing)).then_some(topic)
    }
}

impl fmt::Display for BrokerDlq {
    /// One line for people: where the broker writes, or why it does not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.gap(), &self.topic) {
            (None, Some(topic)) => {
                write!(
                    f,
                    "on for share group {}: the broker writes rejected and over-limit records to {topic} ",
                    self.group
                )?;
                if self.copy_record {
                    write!(f, "with their key and value ({COPY_KEY} = true)")?;
                } else {
                    write!(
                        f,
                        "as headers only, without key or value ({COPY_KEY} = false)"
                    )?;
                }
                if self.topic_state == Some(DlqTopicState::Missing) {
                    write!(f, "; it creates the topic on the first letter")?;
                }
                Ok(())
            }
            (Some(gap), _) => write!(f, "off: {gap}"),
            (None, None) => write!(f, "off"),
        }
    }
}

impl From<BrokerDlq> for BrokerDeadLetters {
    fn from(dlq: BrokerDlq) -> Self {
        match (dlq.gap(), dlq.topic) {
            (None, Some(topic)) => BrokerDeadLetters::On {
                topic,
                copy_record: dlq.copy_record,
            },
            (gap, _) => BrokerDeadLetters::Off {
                why: gap.unwrap_or_else(|| "no dead-letter topic".to_owned()),
            },
        }
    }
}

impl Admin {
    /// The broker-side dead-letter queue of `group` (KIP-1191, Kafka 4.4+): the group's
    /// `errors.deadletterqueue.*` configs, the cluster's, the named topic's and the `share.version`
    /// feature, from the lowest-numbered broker. A broker older than 4.4 answers "not supported",
    /// not an error; a refusal to describe is one.
    pub async fn broker_dlq(&self, group: &str) -> Result<BrokerDlq> {
        let (results, node_id, addr) = self
            .describe_group_and_broker(
                group,
                &[TOPIC_KEY, COPY_KEY],
                &[AUTO_CREATE_KEY, PREFIX_KEY],
            )
            .await?;
        let mut dlq = read_configs(group, node_id, &addr, &results)?;
        if !dlq.supported {
            return Ok(dlq);
        }
        dlq.share_version = self.finalized_feature(node_id, SHARE_VERSION).await?.0;
        if let Some(topic) = dlq.topic.clone() {
            let (results, addr) = self
                .describe_configs(node_id, &[(RESOURCE_TOPIC, &topic, &[GROUP_ENABLE_KEY])])
                .await?;
            dlq.topic_state = Some(read_topic_state(&topic, &addr, &results)?);
        }
        Ok(dlq)
    }

    /// Creates the dead-letter topic `dlq` names when it is missing, with the topic config
    /// without which the broker refuses to write share groups' letters to it
    /// (`errors.deadletterqueue.group.enable=true`). Returns the topic created, `None` when there
    /// was nothing to create: no topic named, it exists, or the broker would refuse its name.
    pub async fn create_broker_dlq_topic(
        &self,
        dlq: &BrokerDlq,
        partitions: i32,
        replication: i16,
    ) -> Result<Option<String>> {
        let Some(topic) = dlq.creatable_topic() else {
            return Ok(None);
        };
        self.create_topic_with_configs(
            topic,
            partitions,
            replication,
            &[(GROUP_ENABLE_KEY, "true")],
        )
        .await?;
        Ok(Some(topic.to_owned()))
    }
}

/// The group's and the cluster's dead-letter configs from a DescribeConfigs answer of broker
/// `node_id` (at `addr`); the feature level and the topic's state are left unknown.
pub(crate) fn read_configs(
    group: &str,
    node_id: i32,
    addr: &str,
    results: &[ConfigResult],
) -> Result<BrokerDlq> {
    let what =
        |name: &str| format!("describing the configs of {name} on broker {node_id} ({addr})");
    let group_answer = config_answer(results, RESOURCE_GROUP, group, addr, &what(group))?;
    let broker_name = node_id.to_string();
    let broker_answer = config_answer(
        results,
        RESOURCE_BROKER,
        &broker_name,
        addr,
        &what(&broker_name),
    )?;
    let value = |answer: &ConfigResult, key: &str| {
        answer
            .entry(key)
            .map(|e| e.value.clone().unwrap_or_default())
    };
    let flag = |answer: &ConfigResult, key: &str, owner: &str| -> Result<bool> {
        match value(answer, key).as_deref().map(str::trim) {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "{key} of {owner} on broker {node_id} ({addr}) is {v:?}, not true or false"
                ),
            )),
        }
    };
    let topic = value(group_answer, TOPIC_KEY);
    let owner = format!("share group {group}");
    Ok(BrokerDlq {
        group: group.to_owned(),
        node_id,
        broker: addr.to_owned(),
        supported: topic.is_some(),
        share_version: None,
        topic: topic.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()),
        copy_record: flag(group_answer, COPY_KEY, &owner)?,
        prefix: value(broker_answer, PREFIX_KEY).unwrap_or_else(|| "dlq.".to_owned()),
        auto_create: flag(broker_answer, AUTO_CREATE_KEY, &format!("broker {node_id}"))?,
        topic_state: None,
    })
}

/// Whether `topic` exists and takes dead letters, from a DescribeConfigs answer from `addr`. A
/// topic the broker does not know is [`DlqTopicState::Missing`]; any other error is an error.
pub(crate) fn read_topic_state(
    topic: &str,
    addr: &str,
    results: &[ConfigResult],
) -> Result<DlqTopicState> {
    if let Some(answer) = results
        .iter()
        .find(|r| r.resource_type == RESOURCE_TOPIC && r.resource_name == topic)
        && answer.error_code == codes::UNKNOWN_TOPIC_OR_PARTITION
    {
        return Ok(DlqTopicState::Missing);
    }
    let answer = config_answer(
        results,
        RESOURCE_TOPIC,
        topic,
        addr,
        &format!("describing {GROUP_ENABLE_KEY} of topic {topic} on broker {addr}"),
    )?;
    let group_enable = match answer
        .entry(GROUP_ENABLE_KEY)
        .and_then(|e| e.value.as_deref())
        .map(str::trim)
    {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("{GROUP_ENABLE_KEY} of topic {topic} ({addr}) is {v:?}, not true or false"),
            ));
        }
    };
    Ok(DlqTopicState::Exists { group_enable })
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

    fn result(resource_type: i8, name: &str, configs: Vec<ConfigEntry>) -> ConfigResult {
        ConfigResult {
            error_code: 0,
            error_message: None,
            resource_type,
            resource_name: name.to_owned(),
            configs,
        }
    }

    /// A Kafka 4.4 answer: the group names `topic` ("" for none).
    fn kafka_4_4(topic: &str, copy: &str) -> Vec<ConfigResult> {
        vec![
            result(
                RESOURCE_GROUP,
                "g",
                vec![entry(COPY_KEY, copy), entry(TOPIC_KEY, topic)],
            ),
            result(
                RESOURCE_BROKER,
                "1",
                vec![entry(AUTO_CREATE_KEY, "false"), entry(PREFIX_KEY, "dlq.")],
            ),
        ]
    }

    fn on_4_4(topic: &str, state: Option<DlqTopicState>) -> BrokerDlq {
        let mut dlq = read_configs("g", 1, "b:9092", &kafka_4_4(topic, "true")).unwrap();
        dlq.share_version = Some(2);
        dlq.topic_state = state;
        dlq
    }

    #[test]
    fn an_older_broker_has_no_broker_dlq_and_that_is_no_error() {
        // Kafka 4.2 / 4.3: the keys are unknown, so the answer leaves them out.
        let dlq = read_configs(
            "g",
            1,
            "b:9092",
            &[
                result(RESOURCE_GROUP, "g", vec![]),
                result(RESOURCE_BROKER, "1", vec![]),
            ],
        )
        .unwrap();
        assert!(!dlq.supported && dlq.topic.is_none());
        let gap = dlq.gap().unwrap();
        assert!(
            gap.contains("older than Kafka 4.4") && gap.contains("b:9092"),
            "{gap}"
        );
        assert!(gap.contains(TOPIC_KEY), "{gap}");
    }

    #[test]
    fn a_blank_topic_is_no_broker_dlq() {
        let mut dlq = read_configs("g", 1, "b:9092", &kafka_4_4(" ", "false")).unwrap();
        dlq.share_version = Some(2);
        assert!(dlq.supported && dlq.topic.is_none());
        let gap = dlq.gap().unwrap();
        assert!(
            gap.contains("share group g") && gap.contains(TOPIC_KEY),
            "{gap}"
        );
    }

    #[test]
    fn the_broker_writes_only_what_it_would_accept() {
        let enabled = Some(DlqTopicState::Exists { group_enable: true });
        let on = on_4_4("dlq.sms", enabled);
        assert!(on.is_on(), "{:?}", on.gap());
        assert!(on.copy_record);
        assert!(on.to_string().contains("with their key and value"), "{on}");

        let cases: [(BrokerDlq, &str); 5] = [
            (
                BrokerDlq {
                    share_version: Some(1),
                    ..on.clone()
                },
                "share.version is 1",
            ),
            (on_4_4("sms.dlq", enabled), PREFIX_KEY),
            (
                on_4_4(
                    "dlq.sms",
                    Some(DlqTopicState::Exists {
                        group_enable: false,
                    }),
                ),
                GROUP_ENABLE_KEY,
            ),
            (
                on_4_4("dlq.sms", Some(DlqTopicState::Missing)),
                AUTO_CREATE_KEY,
            ),
            (on_4_4("__dlq", enabled), "starts with __"),
        ];
        for (dlq, says) in cases {
            let gap = dlq.gap().unwrap_or_default();
            assert!(gap.contains(says), "{gap:?} should say {says}");
            assert!(dlq.to_string().starts_with("off: "), "{dlq}");
        }
        let created = BrokerDlq {
            auto_create: true,
            ..on_4_4("dlq.sms", Some(DlqTopicState::Missing))
        };
        assert!(created.is_on());
        assert!(
            created.to_string().contains("creates the topic"),
            "{created}"
        );
        let any_name = BrokerDlq {
            prefix: String::new(),
            ..on_4_4("sms.dlq", enabled)
        };
        assert!(any_name.is_on());
    }

    #[test]
    fn unreadable_values_and_refusals_are_errors() {
        assert!(read_configs("g", 1, "b:9092", &kafka_4_4("dlq.x", "maybe")).is_err());
        let mut refused = kafka_4_4("dlq.x", "true");
        refused[0].error_code = codes::GROUP_AUTHORIZATION_FAILED;
        assert!(read_configs("g", 1, "b:9092", &refused).is_err());

        let missing = ConfigResult {
            error_code: codes::UNKNOWN_TOPIC_OR_PARTITION,
            ..result(RESOURCE_TOPIC, "dlq.x", vec![])
        };
        assert_eq!(
            read_topic_state("dlq.x", "b:9092", &[missing]).unwrap(),
            DlqTopicState::Missing
        );
        let denied = ConfigResult {
            error_code: codes::TOPIC_AUTHORIZATION_FAILED,
            ..result(RESOURCE_TOPIC, "dlq.x", vec![])
        };
        assert!(read_topic_state("dlq.x", "b:9092", &[denied]).is_err());
        let plain = result(RESOURCE_TOPIC, "dlq.x", vec![]);
        assert_eq!(
            read_topic_state("dlq.x", "b:9092", &[plain]).unwrap(),
            DlqTopicState::Exists {
                group_enable: false
            }
        );
    }
}
