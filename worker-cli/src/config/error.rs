//! [`ConfigError`]: what is wrong, where (file and line, or environment variable) and under which
//! key.

use std::fmt;
use std::path::PathBuf;

use figment::error::Kind;

use super::locate;
use worker_core::{Error, ErrorKind};

/// An invalid configuration: names the source (file and line, or environment variable), the key
/// and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    origin: Origin,
    line: Option<usize>,
    key: String,
    message: String,
}

/// Where a bad value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    File(Option<PathBuf>),
    Env(String),
}

/// The metadata name of an environment-variable override starts with this.
pub(crate) const ENV_SOURCE: &str = "environment variable ";

/// The text of the file being loaded and where it is, for locating keys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<'a> {
    pub(crate) text: &'a str,
    pub(crate) file: Option<&'a std::path::Path>,
    /// The key paths set by environment variables, with the variable's name.
    pub(crate) env: &'a [(Vec<String>, String)],
}

impl ConfigError {
    /// The key, e.g. `worker.concurrency` or `route[1].url`; empty for a file that cannot be read
    /// or parsed.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The 1-based line of the file the key is on, when it is in the file.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// What was expected.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// An error at `path` (TOML key segments), located in `source`.
    pub(crate) fn at(source: &Source<'_>, path: &[String], message: impl Into<String>) -> Self {
        if let Some((_, var)) = source
            .env
            .iter()
            .find(|(env_path, _)| path.starts_with(env_path))
        {
            return Self {
                origin: Origin::Env(var.clone()),
                line: None,
                key: display_key(path),
                message: message.into(),
            };
        }
        Self {
            origin: Origin::File(source.file.map(PathBuf::from)),
            line: locate::line(source.text, path),
            key: display_key(path),
            message: message.into(),
        }
    }

    /// A TOML syntax error, at the line toml_edit points to.
    pub(crate) fn syntax(source: &Source<'_>, err: &toml_edit::TomlError) -> Self {
        let line = err
            .span()
            .and_then(|span| source.text.get(..span.start))
            .map(|upto| upto.matches('\n').count() + 1);
        Self {
            origin: Origin::File(source.file.map(PathBuf::from)),
            line,
            key: String::new(),
            message: format!("invalid TOML: {}", err.message().trim()),
        }
    }

    /// Translates figment's error (its first one) into an error located in `source`.
    pub(crate) fn from_figment(source: &Source<'_>, err: figment::Error) -> Self {
        let env_var = err
            .metadata
            .as_ref()
            .and_then(|m| m.name.strip_prefix(ENV_SOURCE))
            .map(str::to_owned);
        let mut path = err.path.clone();
        let message = match &err.kind {
            Kind::UnknownField(field, expected) => {
                if path.last() != Some(field) {
                    path.push(field.clone());
                }
                format!("unknown key; expected one of: {}", expected.join(", "))
            }
            Kind::MissingField(field) => {
                let message = format!("missing required key `{field}`");
                if path.last().map(String::as_str) == Some(field.as_ref()) {
                    path.pop();
                }
                let mut error = Self::at(source, &path, message);
                path.push(field.to_string());
                error.key = display_key(&path);
                return error;
            }
            Kind::InvalidType(actual, expected) => format!("expected {expected}, found {actual}"),
            Kind::InvalidValue(actual, expected) => format!("expected {expected}, found {actual}"),
            Kind::UnknownVariant(found, expected) => {
                format!(
                    "unknown value {found:?}; expected one of: {}",
                    expected.join(", ")
                )
            }
            Kind::Message(message) => message.clone(),
            other => other.to_string(),
        };
        match env_var {
            Some(var) => Self {
                origin: Origin::Env(var),
                line: None,
                key: display_key(&path),
                message,
            },
            None => Self::at(source, &path, message),
        }
    }
}

/// `["route", "1", "url"]` → `route[1].url`.
fn display_key(path: &[String]) -> String {
    let mut key = String::new();
    for segment in path {
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            key.push('[');
            key.push_str(segment);
            key.push(']');
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::Env(var) => write!(f, "{ENV_SOURCE}{var}: ")?,
            Origin::File(file) => {
                match file {
                    Some(file) => write!(f, "{}", file.display())?,
                    None => f.write_str("config")?,
                }
                match self.line {
                    Some(line) => write!(f, ":{line}: ")?,
                    None => f.write_str(": ")?,
                }
            }
        }
        if !self.key.is_empty() {
            write!(f, "`{}`: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for Error {
    fn from(err: ConfigError) -> Self {
        Error::new(ErrorKind::Config, err.to_string())
    }
}
