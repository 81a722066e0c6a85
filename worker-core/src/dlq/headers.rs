//! The provenance headers every dead letter carries, next to the record's own headers.
//!
//! | header | value |
//! |---|---|
//! | `share.dlq.topic` | the source topic |
//! | `share.dlq.partition` | the source partition, decimal |
//! | `share.dlq.offset` | the source offset, decimal |
//! | `share.dlq.group` | the share group |
//! | `share.dlq.delivery.count` | the delivery count of the last delivery, decimal |
//! | `share.dlq.reason` | a [`DlqReason`](super::DlqReason) name |
//! | `share.dlq.error` | the last error, at most [`MAX_ERROR_LEN`] bytes |
//! | `share.dlq.failed.at` | when it was given up on, RFC 3339 UTC with milliseconds |
//! | `share.dlq.worker` | the worker (client id) that wrote it |
//! | `share.dlq.handler` | the handler (route) that failed on it |
//! | `share.dlq.truncated` | `true`, only on a letter cut to fit the dead-letter topic |
//! | `share.dlq.original.size` | the record's value size in bytes before the cut, decimal (only with `share.dlq.truncated`) |
//!
//! A truncated letter keeps a prefix of the value; when even an empty value does not fit, the
//! record's own headers are dropped (never the provenance ones) and then the key is cut. Such a
//! letter is not the record any more: replay refuses it.

use super::DeadLetter;

/// Prefix shared by every provenance header; replay strips headers with it.
pub const PREFIX: &str = "share.dlq.";
/// The source topic.
pub const TOPIC: &str = "share.dlq.topic";
/// The source partition.
pub const PARTITION: &str = "share.dlq.partition";
/// The source offset.
pub const OFFSET: &str = "share.dlq.offset";
/// The share group.
pub const GROUP: &str = "share.dlq.group";
/// The delivery count of the last delivery.
pub const DELIVERY_COUNT: &str = "share.dlq.delivery.count";
/// Why it was dead-lettered.
pub const REASON: &str = "share.dlq.reason";
/// The last error message.
pub const ERROR: &str = "share.dlq.error";
/// When it was given up on.
pub const FAILED_AT: &str = "share.dlq.failed.at";
/// The worker that wrote it.
pub const WORKER: &str = "share.dlq.worker";
/// The handler that failed on it.
pub const HANDLER: &str = "share.dlq.handler";

/// Set to `true` on a letter whose value (and, when even that did not suffice, headers and key)
/// was cut to fit the dead-letter topic.
pub const TRUNCATED: &str = "share.dlq.truncated";
/// The size in bytes of the record's value before it was cut (only with [`TRUNCATED`]).
pub const ORIGINAL_SIZE: &str = "share.dlq.original.size";

/// The most bytes of an error message kept in `share.dlq.error`.
pub const MAX_ERROR_LEN: usize = 1024;

/// Whether `key` is one of the provenance headers (or any other `share.dlq.` header).
pub fn is_provenance(key: &str) -> bool {
    key.starts_with(PREFIX)
}

/// The provenance headers of `letter`, in the order of the table above.
pub(crate) fn provenance(
    letter: &DeadLetter,
    group: &str,
    worker: &str,
) -> [(&'static str, String); 10] {
    let id = &letter.delivery.id;
    [
        (TOPIC, id.topic.to_string()),
        (PARTITION, id.partition.to_string()),
        (OFFSET, id.offset.to_string()),
        (GROUP, group.to_owned()),
        (DELIVERY_COUNT, letter.delivery.delivery_count.to_string()),
        (REASON, letter.reason.as_str().to_owned()),
        (ERROR, truncate(&letter.error, MAX_ERROR_LEN).to_owned()),
        (
            FAILED_AT,
            humantime::format_rfc3339_millis(letter.failed_at).to_string(),
        ),
        (WORKER, worker.to_owned()),
        (HANDLER, letter.handler.to_string()),
    ]
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(
            truncate(&"x".repeat(2000), MAX_ERROR_LEN).len(),
            MAX_ERROR_LEN
        );
    }

    #[test]
    fn recognises_provenance_keys() {
        assert!(is_provenance(REASON));
        assert!(!is_provenance("traceparent"));
    }
}
