//! Whether a rendered dead-letter topic name is one Kafka accepts, checked before any write: the
//! template is checked when it is made, but `{topic}` and `{group}` come from outside.

/// The longest topic name Kafka accepts.
pub(super) const MAX_TOPIC_LEN: usize = 249;

/// `Ok` when Kafka accepts `name` as a topic name (`[a-zA-Z0-9._-]`, 1 to 249 characters, not `.`
/// or `..`); otherwise why not.
pub(super) fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is reserved"));
    }
    if name.len() > MAX_TOPIC_LEN {
        return Err(format!(
            "it is {} bytes long, Kafka allows at most {MAX_TOPIC_LEN}",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(format!("{c:?} is not allowed (only a-z A-Z 0-9 . _ -)")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_kafka_accepts() {
        for good in ["sms.dlq", "a", "A-b_c.9", "...", &"x".repeat(MAX_TOPIC_LEN)] {
            assert_eq!(check_topic_name(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn rejects_what_kafka_rejects() {
        for (bad, why) in [
            ("", "empty"),
            (".", "reserved"),
            ("..", "reserved"),
            ("team/sms.dlq", "'/' is not allowed"),
            ("sms dlq", "' ' is not allowed"),
            ("sms\0.dlq", "'\\0' is not allowed"),
            ("smś.dlq", "'ś' is not allowed"),
            (&"x".repeat(MAX_TOPIC_LEN + 1), "250 bytes long"),
        ] {
            let err = check_topic_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
