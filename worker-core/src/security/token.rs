//! OAUTHBEARER tokens: where they come from, cached and renewed. PLACEHOLDER on this branch:
//! implemented on the mechanisms branch.

use std::path::PathBuf;
use std::time::SystemTime;

use super::Secret;
use crate::{Error, ErrorKind, Result};

/// Where OAUTHBEARER tokens come from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TokenSource {
    /// One token, used until it expires.
    Static(Secret),
    /// A file holding the token, read again whenever it changes (as a sidecar rotates it).
    File(PathBuf),
    /// The OIDC client-credentials grant against a token endpoint.
    ClientCredentials(OidcClientCredentials),
}

/// The OIDC client-credentials grant (RFC 6749 §4.4): a token endpoint, a client id and secret,
/// and an optional scope.
#[derive(Clone, Debug)]
pub struct OidcClientCredentials {
    /// The token endpoint URL.
    pub token_endpoint: String,
    /// The client id.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// The scope asked for, if any.
    pub scope: Option<String>,
}

/// A token and what is known of it.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) value: Secret,
    /// The principal it names (`sub`), for librdkafka.
    pub(crate) principal: String,
    /// When it expires, if known.
    pub(crate) expires_at: Option<SystemTime>,
}

/// Hands out current tokens from a [`TokenSource`].
#[derive(Debug)]
pub(crate) struct TokenProvider {
    source: TokenSource,
}

impl TokenProvider {
    pub(crate) fn new(source: TokenSource) -> Self {
        Self { source }
    }

    /// A token valid for a while yet.
    pub(crate) async fn token(&self) -> Result<Token> {
        self.token_blocking()
    }

    /// A token valid for a while yet, from a thread that may block (librdkafka's callbacks).
    pub(crate) fn token_blocking(&self) -> Result<Token> {
        let _ = &self.source;
        Err(Error::new(
            ErrorKind::Config,
            "OAUTHBEARER tokens are not built yet",
        ))
    }
}
