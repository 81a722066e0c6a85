//! A member's presence record on the control topic, as written and read: key `member/{id}`,
//! value a small JSON object. Anyone who can write the topic can write one, so every field is
//! bounded and checked before the ledger counts it.

use serde::{Deserialize, Serialize};

/// The key prefix of presence records: `member/{worker id}`.
pub(crate) const PREFIX: &str = "member/";
/// The largest presence value read; a larger one is refused unread.
const MAX_VALUE_BYTES: usize = 4096;
/// The longest worker id accepted.
const MAX_ID_CHARS: usize = 64;
/// The most rates one member may claim.
const MAX_CLAIMS: usize = 32;
/// The longest claim: a topic name (Kafka's own limit) with a `/partition`, or `*` for the
/// worker-wide rate.
const MAX_CLAIM_CHARS: usize = 249 + 12;
/// The longest nonce accepted.
const MAX_NONCE_CHARS: usize = 32;
/// The version of the value format this worker writes and reads.
const VERSION: u32 = 1;
/// The claim of the worker-wide rate.
pub(crate) const WORKER_WIDE: &str = "*";

/// One presence record's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Heartbeat {
    v: u32,
    command: String,
    /// Which life of the member this is: it grows each time the member's lease lapsed and it
    /// joins again.
    pub(crate) epoch: u64,
    /// Counts the member's records, so it recognises its own when it reads them back.
    pub(crate) seq: u64,
    /// Random per process: a record under the member's key without it was not written by it.
    pub(crate) nonce: String,
    /// The offset of the control topic through which the member's rates are applied: its
    /// acknowledgement of every member that joined up to there.
    pub(crate) seen: i64,
    /// The rates it takes a share of: route topics, `{topic}/{partition}` for a partition's
    /// per-key rates, and `*` for the worker-wide rate.
    pub(crate) rates: Vec<String>,
    /// It stopped starting rate-limited records and leaves: the others take its share.
    #[serde(default)]
    pub(crate) leaving: bool,
}

impl Heartbeat {
    pub(crate) fn new(
        epoch: u64,
        seq: u64,
        nonce: &str,
        seen: i64,
        rates: &[String],
        leaving: bool,
    ) -> Self {
        Self {
            v: VERSION,
            command: "member".to_owned(),
            epoch,
            seq,
            nonce: nonce.to_owned(),
            seen,
            rates: rates.to_vec(),
            leaving,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// The worker id in a presence key, or why the key is not one.
pub(crate) fn id_of(key: &[u8]) -> Result<&str, String> {
    let key = std::str::from_utf8(key).map_err(|_| "a key that is not UTF-8".to_owned())?;
    let id = key
        .strip_prefix(PREFIX)
        .ok_or_else(|| format!("a key not starting with {PREFIX:?}"))?;
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS || !id.chars().all(id_char) {
        return Err(format!(
            "a member id that is not 1 to {MAX_ID_CHARS} letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(id)
}

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The presence key of worker `id`.
pub(crate) fn key_of(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// A presence value, checked; or why it is refused.
pub(crate) fn decode(value: &[u8]) -> Result<Heartbeat, String> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "a member value of {} bytes (at most {MAX_VALUE_BYTES})",
            value.len()
        ));
    }
    let beat: Heartbeat = serde_json::from_slice(value)
        .map_err(|err| format!("a member value that is not valid: {err}"))?;
    if beat.v != VERSION || beat.command != "member" {
        return Err(format!(
            "a member value of version {} and command {:?} (expected {VERSION} and \"member\")",
            beat.v,
            crate::checks::one_line(&beat.command, 32)
        ));
    }
    if beat.nonce.is_empty() || beat.nonce.chars().count() > MAX_NONCE_CHARS {
        return Err(format!(
            "a nonce of 1 to {MAX_NONCE_CHARS} characters expected"
        ));
    }
    if beat.seen < -1 {
        return Err(format!("a seen offset of {} (at least -1)", beat.seen));
    }
    if beat.rates.len() > MAX_CLAIMS {
        return Err(format!(
            "{} rates claimed (at most {MAX_CLAIMS})",
            beat.rates.len()
        ));
    }
    if let Some(bad) = beat.rates.iter().find(|claim| {
        claim.is_empty()
            || claim.chars().count() > MAX_CLAIM_CHARS
            || claim.chars().any(char::is_control)
    }) {
        return Err(format!(
            "a rate claim {:?} that is no topic name",
            crate::checks::one_line(bad, 32)
        ));
    }
    Ok(beat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_round_trips_and_junk_is_refused_with_why() {
        let beat = Heartbeat::new(2, 7, "00ff", 41, &["sms".to_owned(), "*".to_owned()], false);
        assert_eq!(decode(&beat.encode()), Ok(beat));
        assert_eq!(id_of(b"member/abc-1"), Ok("abc-1"));
        for key in [&b"member/"[..], b"pause/x", b"member/a b", &[0xff, 0xfe]] {
            assert!(id_of(key).is_err(), "{key:?}");
        }
        assert!(id_of(format!("member/{}", "a".repeat(65)).as_bytes()).is_err());
        let bad = |text: &str| decode(text.as_bytes()).expect_err(text);
        assert!(bad("{").contains("not valid"));
        assert!(bad(r#"{"v":1,"command":"member","epoch":0,"seq":0,"nonce":"a","seen":0,"rates":[],"x":1}"#).contains("not valid"));
        assert!(
            bad(r#"{"v":2,"command":"member","epoch":0,"seq":0,"nonce":"a","seen":0,"rates":[]}"#)
                .contains("version 2")
        );
        assert!(
            bad(r#"{"v":1,"command":"member","epoch":0,"seq":0,"nonce":"","seen":0,"rates":[]}"#)
                .contains("nonce")
        );
        assert!(
            bad(r#"{"v":1,"command":"member","epoch":0,"seq":0,"nonce":"a","seen":-5,"rates":[]}"#)
                .contains("seen")
        );
        assert!(bad(r#"{"v":1,"command":"member","epoch":0,"seq":0,"nonce":"a","seen":0,"rates":["a\nb"]}"#).contains("no topic"));
        assert!(
            decode(&vec![b' '; 5000])
                .expect_err("big")
                .contains("5000 bytes")
        );
    }
}
