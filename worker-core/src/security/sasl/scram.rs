//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677). PLACEHOLDER on this branch: implemented
//! on the mechanisms branch.

use super::{Exchange, SaslError, ScramMechanism};
use crate::security::Secret;

/// One SCRAM authentication.
pub(crate) struct Scram {
    _hash: ScramMechanism,
}

impl Scram {
    pub(crate) fn new(hash: ScramMechanism, _username: &str, _password: Secret) -> Self {
        Self { _hash: hash }
    }
}

impl Exchange for Scram {
    fn respond(&mut self, _server: Option<&[u8]>) -> Result<Option<Vec<u8>>, SaslError> {
        Err(SaslError("SCRAM is not built yet".into()))
    }
}
