//! OAUTHBEARER (RFC 7628): the token in one message, `n,,\x01auth=Bearer <token>\x01\x01`.
//!
//! The broker answers an accepted token with an empty message. A refused one gets a JSON error
//! (`{"status":"invalid_token"}`) that the client must acknowledge with a lone `\x01`; the broker
//! then fails the SaslAuthenticate request (error 58) and the connection reports that. The JSON
//! `status` is kept and logged, since the broker's own error text does not repeat it.

use super::{Exchange, SaslError};
use crate::security::Secret;
use crate::security::untrusted::quote;

/// The separator of RFC 7628's key-value pairs (and the client's answer to an error).
const SEP: u8 = 0x01;

/// How much of the broker's error an error message repeats.
const QUOTE_MAX: usize = 200;

/// One OAUTHBEARER authentication.
pub(crate) struct OAuthBearer {
    state: State,
}

enum State {
    Start(Secret),
    /// The token was sent: waiting for the broker's verdict.
    Sent,
    /// The broker refused the token with this status; we acknowledged with `\x01`.
    Refused(String),
    Done,
}

impl OAuthBearer {
    pub(crate) fn new(token: Secret) -> Self {
        Self {
            state: State::Start(token),
        }
    }
}

impl Exchange for OAuthBearer {
    fn respond(&mut self, server: Option<&[u8]>) -> Result<Option<Vec<u8>>, SaslError> {
        match (std::mem::replace(&mut self.state, State::Done), server) {
            (State::Start(token), None) => {
                let token = token.expose();
                // A token with a separator or a space in it would change the message's meaning.
                if token.is_empty() || !token.bytes().all(is_b64token) {
                    return Err(SaslError(
                        "OAUTHBEARER: the token is not a bearer token (RFC 6750 b64token)".into(),
                    ));
                }
                let mut message = Vec::with_capacity(token.len() + 20);
                message.extend_from_slice(b"n,,\x01auth=Bearer ");
                message.extend_from_slice(token.as_bytes());
                message.extend_from_slice(&[SEP, SEP]);
                self.state = State::Sent;
                Ok(Some(message))
            }
            (State::Sent, Some([])) => Ok(None),
            (State::Sent, Some(error)) => {
                let status = refusal(error);
                tracing::warn!(status = %status, "OAUTHBEARER: the broker refused the token");
                self.state = State::Refused(status);
                Ok(Some(vec![SEP]))
            }
            // The broker should have failed the request after our acknowledgement.
            (State::Refused(status), Some(_)) => Err(SaslError(format!(
                "OAUTHBEARER: the broker refused the token: {status}"
            ))),
            (State::Start(_), Some(_)) => Err(SaslError(
                "OAUTHBEARER: the broker spoke before the client's first message".into(),
            )),
            (State::Done, _) => Err(SaslError("OAUTHBEARER: the exchange is over".into())),
            (_, None) => Err(SaslError(
                "OAUTHBEARER: the exchange was already started".into(),
            )),
        }
    }
}

/// RFC 6750 §2.1: `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
/// (the `=` padding checked loosely: anywhere, as Kafka's own client does).
fn is_b64token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// What the broker's error says, for a message: `status` (and `scope`) when it is the JSON of
/// RFC 7628 §3.2.2, else the text itself; quoted and bounded either way.
fn refusal(error: &[u8]) -> String {
    let text = String::from_utf8_lossy(error);
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(&text) else {
        return quote(&text, QUOTE_MAX);
    };
    let field = |name| fields.get(name).and_then(serde_json::Value::as_str);
    match (field("status"), field("scope")) {
        (Some(status), Some(scope)) => format!(
            "status {} (scope {})",
            quote(status, QUOTE_MAX),
            quote(scope, QUOTE_MAX)
        ),
        (Some(status), None) => format!("status {}", quote(status, QUOTE_MAX)),
        _ => quote(&text, QUOTE_MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_in_one_message_and_an_empty_answer_completes() {
        let mut exchange = OAuthBearer::new(Secret::new("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ3In0."));
        assert_eq!(
            exchange.respond(None),
            Ok(Some(
                b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ3In0.\x01\x01".to_vec()
            ))
        );
        assert_eq!(exchange.respond(Some(b"")), Ok(None));
        assert!(exchange.respond(Some(b"")).is_err());
    }

    #[test]
    fn a_json_error_is_acknowledged_and_its_status_kept() {
        let mut exchange = OAuthBearer::new(Secret::new("token"));
        assert!(matches!(exchange.respond(None), Ok(Some(_))));
        let error = br#"{"status":"invalid_token","scope":"kafka","openid-configuration":"x"}"#;
        assert_eq!(exchange.respond(Some(error)), Ok(Some(vec![1])));
        assert_eq!(
            exchange.respond(Some(b"")),
            Err(SaslError(
                "OAUTHBEARER: the broker refused the token: status \"invalid_token\" (scope \"kafka\")"
                    .into()
            ))
        );
    }

    #[test]
    fn refusals_that_are_not_the_expected_json_are_quoted() {
        assert_eq!(
            refusal(br#"{"status":"invalid_token"}"#),
            "status \"invalid_token\""
        );
        assert_eq!(refusal(b"not json\n"), "\"not json\\n\"");
        assert_eq!(refusal(br#"{"status":7}"#), "\"{\\\"status\\\":7}\"");
        assert_eq!(refusal(b"\xff"), "\"\u{fffd}\"");
        assert!(refusal(&[b'x'; 100_000]).len() < 300);
    }

    #[test]
    fn a_token_that_would_break_the_message_is_refused() {
        for token in ["", "tok en", "tok\x01auth=Bearer en", "tok,en", "tök"] {
            let mut exchange = OAuthBearer::new(Secret::new(token));
            let Err(SaslError(why)) = exchange.respond(None) else {
                panic!("sent {token:?}");
            };
            assert!(why.contains("b64token"), "{why}");
            assert!(token.is_empty() || !why.contains(token), "{why}");
        }
    }

    #[test]
    fn messages_out_of_turn_are_errors() {
        let mut exchange = OAuthBearer::new(Secret::new("token"));
        assert!(exchange.respond(Some(b"")).is_err());
        let mut exchange = OAuthBearer::new(Secret::new("token"));
        assert!(matches!(exchange.respond(None), Ok(Some(_))));
        assert!(exchange.respond(None).is_err());
    }
}
