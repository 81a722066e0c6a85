//! PLAIN (RFC 4616): `authzid NUL authcid NUL password`, in one message.

use super::{Exchange, SaslError};
use crate::security::Secret;

/// One PLAIN authentication.
pub(crate) struct Plain {
    message: Option<Vec<u8>>,
}

impl Plain {
    pub(crate) fn new(username: &str, password: Secret) -> Self {
        let mut message = Vec::with_capacity(2 + username.len() + password.expose().len());
        message.push(0);
        message.extend_from_slice(username.as_bytes());
        message.push(0);
        message.extend_from_slice(password.expose().as_bytes());
        Self {
            message: Some(message),
        }
    }
}

impl Exchange for Plain {
    fn respond(&mut self, server: Option<&[u8]>) -> Result<Option<Vec<u8>>, SaslError> {
        match server {
            None => self
                .message
                .take()
                .map(Some)
                .ok_or_else(|| SaslError("PLAIN: the exchange was already started".into())),
            // The broker answers with an empty message when it accepts.
            Some(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_nul_separated_and_sent_once() {
        let mut plain = Plain::new("worker", Secret::new("s3cret"));
        assert_eq!(plain.respond(None), Ok(Some(b"\0worker\0s3cret".to_vec())));
        assert_eq!(plain.respond(Some(b"")), Ok(None));
        assert!(plain.respond(None).is_err());
    }
}
