//! [`SaslConfig`]: which SASL mechanism authenticates the worker, and the exchanges that run it.
//!
//! An [`Exchange`] is one authentication as a pure message loop — the connection sends what it
//! returns (each in a SaslAuthenticate request) and hands it the broker's answers — so every
//! mechanism is tested without a broker.

mod oauthbearer;
mod plain;
mod scram;

use std::fmt;
use std::sync::Arc;

use super::Secret;
use super::token::{TokenProvider, TokenSource};
use crate::Result;

pub(crate) use oauthbearer::OAuthBearer;
pub(crate) use plain::Plain;
pub(crate) use scram::Scram;

/// The hash of a SCRAM mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (RFC 7677).
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramMechanism {
    /// The mechanism name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }
}

/// How the worker authenticates with SASL. Cheap to clone; `Debug` shows no secret.
#[derive(Clone)]
pub struct SaslConfig {
    mechanism: Mechanism,
}

#[derive(Clone)]
enum Mechanism {
    Plain {
        username: String,
        password: Secret,
    },
    Scram {
        hash: ScramMechanism,
        username: String,
        password: Secret,
    },
    OAuthBearer(Arc<TokenProvider>),
}

impl SaslConfig {
    /// PLAIN: username and password sent as they are (use it over TLS only).
    pub fn plain(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            mechanism: Mechanism::Plain {
                username: username.into(),
                password: password.into(),
            },
        }
    }

    /// SCRAM-SHA-256: the password never crosses the wire.
    pub fn scram_sha256(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::scram(ScramMechanism::Sha256, username, password)
    }

    /// SCRAM-SHA-512: the password never crosses the wire.
    pub fn scram_sha512(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self::scram(ScramMechanism::Sha512, username, password)
    }

    /// SCRAM with `hash`.
    pub fn scram(
        hash: ScramMechanism,
        username: impl Into<String>,
        password: impl Into<Secret>,
    ) -> Self {
        Self {
            mechanism: Mechanism::Scram {
                hash,
                username: username.into(),
                password: password.into(),
            },
        }
    }

    /// OAUTHBEARER with tokens from `source` (a static token, a token file, or the OIDC
    /// client-credentials grant). Tokens are cached and renewed before they expire; clones of
    /// this config share the cache.
    pub fn oauthbearer(source: TokenSource) -> Self {
        Self {
            mechanism: Mechanism::OAuthBearer(Arc::new(TokenProvider::new(source))),
        }
    }

    /// The mechanism's name as brokers know it: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or
    /// `OAUTHBEARER`.
    pub fn mechanism_name(&self) -> &'static str {
        match &self.mechanism {
            Mechanism::Plain { .. } => "PLAIN",
            Mechanism::Scram { hash, .. } => hash.as_str(),
            Mechanism::OAuthBearer(_) => "OAUTHBEARER",
        }
    }

    /// The username, for PLAIN and SCRAM.
    pub fn username(&self) -> Option<&str> {
        match &self.mechanism {
            Mechanism::Plain { username, .. } | Mechanism::Scram { username, .. } => Some(username),
            Mechanism::OAuthBearer(_) => None,
        }
    }

    /// The password, for PLAIN and SCRAM (for clients configured by name, as librdkafka is).
    pub fn password(&self) -> Option<&Secret> {
        match &self.mechanism {
            Mechanism::Plain { password, .. } | Mechanism::Scram { password, .. } => Some(password),
            Mechanism::OAuthBearer(_) => None,
        }
    }

    /// The token provider, for OAUTHBEARER.
    pub fn token_provider(&self) -> Option<&Arc<TokenProvider>> {
        match &self.mechanism {
            Mechanism::OAuthBearer(provider) => Some(provider),
            _ => None,
        }
    }

    /// A new exchange for one authentication (for OAUTHBEARER, with a current token).
    pub(crate) async fn exchange(&self) -> Result<Box<dyn Exchange>> {
        Ok(match &self.mechanism {
            Mechanism::Plain { username, password } => {
                Box::new(Plain::new(username, password.clone()))
            }
            Mechanism::Scram {
                hash,
                username,
                password,
            } => Box::new(Scram::new(*hash, username, password.clone())),
            Mechanism::OAuthBearer(provider) => {
                Box::new(OAuthBearer::new(provider.token().await?.value))
            }
        })
    }
}

impl fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("SaslConfig");
        d.field("mechanism", &self.mechanism_name());
        if let Some(username) = self.username() {
            d.field("username", &username).field("password", &"***");
        }
        if let Some(provider) = self.token_provider() {
            d.field("token", provider);
        }
        d.finish()
    }
}

/// What went wrong in an exchange, on our side (the broker's refusals come as error codes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SaslError(pub(crate) String);

/// One SASL authentication, as a message loop.
pub(crate) trait Exchange: Send {
    /// The next message for the broker given its last one (`None` before the first message):
    /// `Ok(None)` once the exchange is complete and the broker's last message checked out.
    fn respond(&mut self, server: Option<&[u8]>)
    -> std::result::Result<Option<Vec<u8>>, SaslError>;
}
