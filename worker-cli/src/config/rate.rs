//! Rates (`"100/s"`, `"1/min"`) for serde `with = "rate::option"`.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

use worker_core::runtime::RateLimit;

struct RateVisitor;

impl Visitor<'_> for RateVisitor {
    type Value = RateLimit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a rate like \"100/s\" or \"1/min\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<RateLimit, E> {
        text.parse().map_err(E::custom)
    }
}

/// `Option<RateLimit>` fields (with `#[serde(default)]`), written as `"COUNT/PERIOD"`.
pub(crate) mod option {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<RateLimit>, D::Error> {
        d.deserialize_str(RateVisitor).map(Some)
    }

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<RateLimit>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(rate) => s.serialize_str(&format!(
                "{}/{}",
                rate.count(),
                humantime::format_duration(rate.period())
            )),
            None => s.serialize_none(),
        }
    }
}
