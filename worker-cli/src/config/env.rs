//! Environment overrides: `SHARE_WORKER__WORKER__CONCURRENCY=64` sets `worker.concurrency`.
//!
//! After the prefix, `__` separates keys and `_` stands for `-` (so
//! `SHARE_WORKER__WORKER__MAX_POLL_RECORDS` sets `worker.max-poll-records`). Values are parsed like
//! figment's `Env` provider does (numbers, booleans, else strings), except under `[kafka]`, where
//! every value is taken as text (`SHARE_WORKER__KAFKA__SASL__PASSWORD=0123` is the password
//! "0123"). Tables only: `[[route]]` entries cannot be overridden.

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::error::ENV_SOURCE;

/// The prefix of overriding variables.
pub const ENV_PREFIX: &str = "SHARE_WORKER__";

/// One overriding variable, as a figment provider (its metadata names the variable).
#[derive(Debug)]
pub(crate) struct EnvOverride {
    pub(crate) var: String,
    pub(crate) path: Vec<String>,
    value: String,
}

impl EnvOverride {
    /// The override for `var`, if it has the prefix and names a key.
    pub(crate) fn parse(var: &str, value: &str) -> Option<Self> {
        let rest = var.strip_prefix(ENV_PREFIX)?;
        let path: Vec<String> = rest
            .split("__")
            .map(|s| s.to_ascii_lowercase().replace('_', "-"))
            .collect();
        if path.iter().any(String::is_empty) {
            return None;
        }
        Some(Self {
            var: var.to_owned(),
            path,
            value: value.to_owned(),
        })
    }
}

impl Provider for EnvOverride {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("{ENV_SOURCE}{}", self.var))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        // Every `[kafka]` key is text: a password "0123" must not become the number 123.
        let value: Value = if self.path.first().is_some_and(|t| t == "kafka") {
            Value::from(self.value.clone())
        } else {
            self.value
                .parse()
                .unwrap_or_else(|_| Value::from(self.value.clone()))
        };
        let key = self.path.join(".");
        let dict = figment::util::nest(&key, value)
            .into_dict()
            .ok_or_else(|| figment::Error::from(format!("{}: not a key", self.var)))?;
        Ok(Profile::Default.collect(dict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_names_to_kebab_keys() {
        let o = EnvOverride::parse("SHARE_WORKER__WORKER__MAX_POLL_RECORDS", "7").unwrap();
        assert_eq!(o.path, ["worker", "max-poll-records"]);
        assert!(EnvOverride::parse("OTHER__WORKER__X", "1").is_none());
        assert!(EnvOverride::parse("SHARE_WORKER__WORKER__", "1").is_none());
    }
}
