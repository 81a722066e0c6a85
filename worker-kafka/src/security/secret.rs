//! [`Secret`]: a password, client secret or token that never shows in `Debug`, `Display` or logs.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::{Error, ErrorKind, Result};

/// A secret value: a password, a client secret, a token. Cheap to clone; prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(Arc::from(value.into()))
    }

    /// Reads the secret from the file at `path`, trailing line breaks removed (as written by
    /// `echo` or a Kubernetes secret volume). The error names the file, never the content.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("cannot read the secret file {}", path.display()),
            )
            .with_source(err)
        })?;
        Ok(Self::new(text.trim_end_matches(['\r', '\n'])))
    }

    /// Reads the secret from the environment variable `name`. The error names the variable.
    pub fn from_env(name: &str) -> Result<Self> {
        std::env::var(name).map(Self::new).map_err(|_| {
            Error::new(
                ErrorKind::Config,
                format!("the environment variable {name} is not set (or not UTF-8)"),
            )
        })
    }

    /// The secret itself, for the code that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Serializes as `***`, so a printed configuration never holds the secret (the value stays in
/// memory: printing is one way).
impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str("***")
    }
}

/// Reads the secret from a string.
impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Config {
            password: Secret,
        }
        assert!(!format!("{:?}", Config { password: s }).contains("hunter2"));
    }

    #[test]
    fn a_secret_serializes_as_stars_and_deserializes_whole() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Config {
            password: Secret,
        }
        let config: Config = toml::from_str("password = \"hunter2\"").unwrap();
        assert_eq!(config.password.expose(), "hunter2");
        assert_eq!(
            toml::to_string(&config).unwrap().trim(),
            "password = \"***\""
        );
        assert_eq!(config.password.expose(), "hunter2");
    }
}
