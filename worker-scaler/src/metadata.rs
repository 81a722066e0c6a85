//! A scaled object's trigger metadata, read and checked: which group, which topics, and how many
//! waiting records one replica is for. Everything here comes from a Kubernetes object, so every
//! value is bounded and a bad one is an error that names the key.

use std::collections::HashMap;

/// Waiting records per replica when `lagThreshold` is not given.
pub const DEFAULT_LAG_THRESHOLD: i64 = 100;
/// The most topics one trigger may name (routes and delay topics together).
const MAX_TOPICS: usize = 100;
/// Kafka's longest group id the scaler accepts, in bytes.
const MAX_GROUP_BYTES: usize = 255;
/// Kafka's longest topic name.
const MAX_TOPIC_CHARS: usize = 249;

/// What a trigger asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Query {
    /// The share group.
    pub(crate) group: String,
    /// The routes' topics, then the delay topics, sorted and without repeats.
    pub(crate) topics: Vec<String>,
    /// Waiting records per replica: KEDA runs `ceil(backlog / lagThreshold)` replicas.
    pub(crate) lag_threshold: i64,
    /// Active (at least one replica) while more than this many records wait.
    pub(crate) activation: i64,
}

/// What is read for a query: its group and topics. Queries that differ only in thresholds share
/// one read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    /// The share group.
    pub(crate) group: String,
    /// Its topics, sorted and without repeats.
    pub(crate) topics: Vec<String>,
}

impl Query {
    /// What is read to answer this query.
    pub(crate) fn target(&self) -> Target {
        Target {
            group: self.group.clone(),
            topics: self.topics.clone(),
        }
    }

    /// Reads `metadata`: `group` and `topics` (comma-separated) required; `delayTopics`
    /// (comma-separated), `lagThreshold` (≥ 1, default 100) and `activationLagThreshold` (≥ 0,
    /// default 0) optional. Other keys (KEDA's own, such as `scalerAddress`) are left alone.
    /// `Err` names the key and what is wrong with it.
    pub(crate) fn parse(metadata: &HashMap<String, String>) -> Result<Self, String> {
        let group = metadata
            .get("group")
            .map(String::as_str)
            .filter(|g| !g.trim().is_empty())
            .ok_or("`group`: the share group is required")?;
        if group.len() > MAX_GROUP_BYTES || group.chars().any(char::is_control) {
            return Err(format!(
                "`group`: expected at most {MAX_GROUP_BYTES} bytes without control characters"
            ));
        }
        let mut topics = topic_list(metadata, "topics")?;
        if topics.is_empty() {
            return Err("`topics`: at least one topic (comma-separated) is required".to_owned());
        }
        topics.extend(topic_list(metadata, "delayTopics")?);
        topics.sort();
        topics.dedup();
        if topics.len() > MAX_TOPICS {
            return Err(format!(
                "`topics` and `delayTopics`: {} topics, at most {MAX_TOPICS}",
                topics.len()
            ));
        }
        let lag_threshold = number(metadata, "lagThreshold", DEFAULT_LAG_THRESHOLD, 1)?;
        let activation = number(metadata, "activationLagThreshold", 0, 0)?;
        Ok(Self {
            group: group.to_owned(),
            topics,
            lag_threshold,
            activation,
        })
    }

    /// The metric's name: `share-group-lag-{group}`, the group reduced to what a Kubernetes
    /// metric name allows (lower-case letters, digits, `-` and `.`).
    pub(crate) fn metric_name(&self) -> String {
        let group: String = self
            .group
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' | '.' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .take(200)
            .collect();
        format!("share-group-lag-{group}")
    }
}

/// The comma-separated topics of `key` (none when it is absent), each a valid topic name.
fn topic_list(metadata: &HashMap<String, String>, key: &str) -> Result<Vec<String>, String> {
    let Some(list) = metadata.get(key) else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|topic| {
            let valid = topic.len() <= MAX_TOPIC_CHARS
                && topic != "."
                && topic != ".."
                && topic
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if valid {
                Ok(topic.to_owned())
            } else {
                Err(format!(
                    "`{key}`: {:?} is not a topic name (1 to {MAX_TOPIC_CHARS} of a-z A-Z 0-9 . _ -)",
                    topic.chars().take(64).collect::<String>()
                ))
            }
        })
        .collect()
}

/// The integer of `key`, at least `least`; `default` when absent.
fn number(
    metadata: &HashMap<String, String>,
    key: &str,
    default: i64,
    least: i64,
) -> Result<i64, String> {
    let Some(text) = metadata.get(key) else {
        return Ok(default);
    };
    match text.trim().parse::<i64>() {
        Ok(n) if n >= least => Ok(n),
        _ => Err(format!(
            "`{key}`: expected a whole number of at least {least}, found {:?}",
            text.chars().take(32).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_trigger_names_its_group_topics_and_thresholds() {
        let query = Query::parse(&meta(&[
            ("group", "sms-workers"),
            ("topics", "sms, emails"),
            ("delayTopics", "sms.delay,sms"),
            ("lagThreshold", "50"),
            ("scalerAddress", "scaler:9090"),
        ]))
        .expect("valid");
        assert_eq!(query.topics, ["emails", "sms", "sms.delay"]);
        assert_eq!((query.lag_threshold, query.activation), (50, 0));
        assert_eq!(query.metric_name(), "share-group-lag-sms-workers");
        let defaults = Query::parse(&meta(&[("group", "G_1"), ("topics", "t")])).expect("valid");
        assert_eq!(defaults.lag_threshold, DEFAULT_LAG_THRESHOLD);
        assert_eq!(defaults.metric_name(), "share-group-lag-g-1");
    }

    #[test]
    fn bad_metadata_names_the_key() {
        for (pairs, says) in [
            (vec![("topics", "t")], "`group`"),
            (vec![("group", " "), ("topics", "t")], "`group`"),
            (vec![("group", "g")], "`topics`"),
            (vec![("group", "g"), ("topics", " , ")], "`topics`"),
            (vec![("group", "g"), ("topics", "a/b")], "not a topic name"),
            (vec![("group", "g"), ("topics", "..")], "not a topic name"),
            (
                vec![("group", "g"), ("topics", "t"), ("lagThreshold", "0")],
                "`lagThreshold`",
            ),
            (
                vec![("group", "g"), ("topics", "t"), ("lagThreshold", "lots")],
                "`lagThreshold`",
            ),
            (
                vec![
                    ("group", "g"),
                    ("topics", "t"),
                    ("activationLagThreshold", "-1"),
                ],
                "`activationLagThreshold`",
            ),
            (vec![("group", "g\n"), ("topics", "t")], "`group`"),
        ] {
            let err = Query::parse(&meta(&pairs)).expect_err("refused");
            assert!(err.contains(says), "{err} (expected {says})");
        }
        let many: String = (0..=MAX_TOPICS).map(|n| format!("t{n},")).collect();
        let err = Query::parse(&meta(&[("group", "g"), ("topics", &many)])).expect_err("too many");
        assert!(err.contains("at most"), "{err}");
    }
}
