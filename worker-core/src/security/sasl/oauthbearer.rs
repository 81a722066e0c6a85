//! OAUTHBEARER (RFC 7628). PLACEHOLDER on this branch: implemented on the mechanisms branch.

use super::{Exchange, SaslError};
use crate::security::Secret;

/// One OAUTHBEARER authentication.
pub(crate) struct OAuthBearer {
    _token: Secret,
}

impl OAuthBearer {
    pub(crate) fn new(token: Secret) -> Self {
        Self { _token: token }
    }
}

impl Exchange for OAuthBearer {
    fn respond(&mut self, _server: Option<&[u8]>) -> Result<Option<Vec<u8>>, SaslError> {
        Err(SaslError("OAUTHBEARER is not built yet".into()))
    }
}
