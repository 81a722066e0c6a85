//! The dead-letter topic name template.

use crate::{Error, ErrorKind, Result};

/// A dead-letter topic name with placeholders: `{topic}` (the record's topic) and `{group}` (the
/// share group). The default is `{topic}.dlq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlqTopic {
    template: String,
}

impl Default for DlqTopic {
    fn default() -> Self {
        Self {
            template: "{topic}.dlq".to_owned(),
        }
    }
}

impl DlqTopic {
    /// Checks a template: only `{topic}` and `{group}` may appear in braces, and the rest may only
    /// use the characters Kafka allows in topic names (`a-z A-Z 0-9 . _ -`).
    pub fn new(template: &str) -> Result<Self> {
        Self::checked(template, "dead-letter")
    }

    /// [`new`](Self::new) for a template of `what` topics (named in the error).
    pub(crate) fn checked(template: &str, what: &str) -> Result<Self> {
        let invalid = |why: String| {
            Error::new(
                ErrorKind::Config,
                format!("invalid {what} topic {template:?}: {why}"),
            )
        };
        if template.is_empty() {
            return Err(invalid("it is empty".to_owned()));
        }
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            crate::checks::topic_chars(&rest[..start]).map_err(invalid)?;
            let after = &rest[start + 1..];
            let end = after
                .find('}')
                .ok_or_else(|| invalid("a '{' is never closed".to_owned()))?;
            match &after[..end] {
                "topic" | "group" => {}
                other => {
                    return Err(invalid(format!(
                        "unknown placeholder {{{other}}} (use {{topic}} or {{group}})"
                    )));
                }
            }
            rest = &after[end + 1..];
        }
        crate::checks::topic_chars(rest).map_err(invalid)?;
        Ok(Self {
            template: template.to_owned(),
        })
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The dead-letter topic for records of `topic` in `group`.
    pub fn render(&self, topic: &str, group: &str) -> String {
        self.template
            .replace("{topic}", topic)
            .replace("{group}", group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders() {
        let topic = DlqTopic::new("dead.{group}.{topic}").unwrap();
        assert_eq!(topic.render("sms", "senders"), "dead.senders.sms");
        assert_eq!(DlqTopic::default().render("sms", "g"), "sms.dlq");
    }

    #[test]
    fn rejects_bad_templates() {
        for bad in ["", "{topic", "{partition}.dlq", "sms dlq", "{topic}/dlq"] {
            let err = DlqTopic::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{bad}");
            assert!(
                err.to_string().contains("invalid dead-letter topic"),
                "{err}"
            );
        }
    }
}
