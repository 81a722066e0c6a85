//! Humantime durations (`"30s"`, `"250ms"`, `"5m"`) for serde `with = "duration"`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

const EXPECTED: &str = "a duration string like \"30s\", \"250ms\" or \"5m\"";

struct HumanVisitor;

impl Visitor<'_> for HumanVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        humantime::parse_duration(text.trim())
            .map_err(|err| E::custom(format!("expected {EXPECTED}, found {text:?} ({err})")))
    }
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_str(HumanVisitor)
}

pub(crate) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*value).to_string())
}

/// The same for `Option<Duration>` fields (with `#[serde(default)]`).
pub(crate) mod option {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        d.deserialize_str(HumanVisitor).map(Some)
    }

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::serialize(value, s),
            None => s.serialize_none(),
        }
    }
}
