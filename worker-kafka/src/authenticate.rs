//! SASL on a broker connection: SaslHandshake (v1) names the mechanism, then SaslAuthenticate (v2)
//! carries the mechanism's messages until the exchange completes. The last answer says how long
//! the session lasts; the connection authenticates again before then (KIP-368).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::connection::Connection;
use super::error_codes as codes;
use super::wire::{Reader, put_empty_tags, put_uvarint};
use crate::security::SaslConfig;
use crate::{Error, ErrorKind, Result};

/// API key of SaslHandshake.
pub(crate) const SASL_HANDSHAKE: i16 = 17;
/// API key of SaslAuthenticate.
pub(crate) const SASL_AUTHENTICATE: i16 = 36;

/// Runs one authentication with `sasl` on `conn`. Returns how long the session lasts, when the
/// broker limits it.
pub(crate) async fn authenticate(
    conn: &mut Connection,
    sasl: &SaslConfig,
) -> Result<Option<Duration>> {
    let mechanism = sasl.mechanism_name();
    let addr = conn.addr().to_owned();
    let refused = |why: String| {
        Error::new(
            ErrorKind::Authentication,
            format!("SASL {mechanism} authentication with broker {addr} failed: {why}"),
        )
    };
    conn.version(SASL_HANDSHAKE, (1, 1))?;
    conn.version(SASL_AUTHENTICATE, (2, 2))?;
    let handshake = conn
        .request(
            SASL_HANDSHAKE,
            1,
            &encode_handshake(mechanism),
            Duration::ZERO,
        )
        .await?;
    let (code, offered) = decode_handshake(handshake)?;
    match code {
        codes::NONE => {}
        codes::UNSUPPORTED_SASL_MECHANISM => {
            return Err(refused(format!(
                "the broker does not offer it (it offers {})",
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        code => {
            return Err(refused(format!(
                "SaslHandshake answered error {}",
                codes::describe(code)
            )));
        }
    }
    let mut exchange = sasl.exchange().await?;
    let mut server: Option<Bytes> = None;
    let mut lifetime = None;
    loop {
        let next = exchange
            .respond(server.as_deref())
            .map_err(|e| refused(e.to_string()))?;
        let Some(message) = next else {
            return Ok(lifetime);
        };
        let answer = conn
            .request(
                SASL_AUTHENTICATE,
                2,
                &encode_authenticate(&message),
                Duration::ZERO,
            )
            .await?;
        let answer = decode_authenticate(answer)?;
        if answer.error_code != codes::NONE {
            let said = answer
                .error_message
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| codes::describe(answer.error_code));
            return Err(refused(format!("the broker says: {said}")));
        }
        lifetime = u64::try_from(answer.session_lifetime_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        server = Some(answer.auth_bytes);
    }
}

/// SaslHandshake v1: the mechanism as a (non-compact) string.
fn encode_handshake(mechanism: &str) -> BytesMut {
    let mut buf = BytesMut::with_capacity(2 + mechanism.len());
    buf.put_i16(i16::try_from(mechanism.len()).unwrap_or(i16::MAX));
    buf.put_slice(mechanism.as_bytes());
    buf
}

/// The error code and the mechanisms the broker offers.
fn decode_handshake(body: Bytes) -> Result<(i16, Vec<String>)> {
    let mut r = Reader::new(body);
    let code = r.i16()?;
    let n = r.array_len(2)?;
    let mut offered = Vec::with_capacity(super::wire::capacity(n));
    for _ in 0..n {
        offered.push(r.string()?);
    }
    r.finish()?;
    Ok((code, offered))
}

/// SaslAuthenticate v2: the mechanism's message as compact bytes.
fn encode_authenticate(message: &[u8]) -> BytesMut {
    let mut buf = BytesMut::with_capacity(message.len() + 8);
    put_uvarint(
        &mut buf,
        u32::try_from(message.len() + 1).unwrap_or(u32::MAX),
    );
    buf.put_slice(message);
    put_empty_tags(&mut buf);
    buf
}

/// A decoded SaslAuthenticate v2 response.
#[derive(Debug, PartialEq, Eq)]
struct Authenticated {
    error_code: i16,
    error_message: Option<String>,
    auth_bytes: Bytes,
    session_lifetime_ms: i64,
}

fn decode_authenticate(body: Bytes) -> Result<Authenticated> {
    let mut r = Reader::new(body);
    let error_code = r.i16()?;
    let error_message = r.compact_nullable_string()?;
    let auth_bytes = r.compact_nullable_bytes()?.unwrap_or_default();
    let session_lifetime_ms = r.i64()?;
    r.skip_tags()?;
    r.finish()?;
    Ok(Authenticated {
        error_code,
        error_message,
        auth_bytes,
        session_lifetime_ms,
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    #[test]
    fn requests_are_what_the_crate_encodes() -> std::result::Result<(), Box<dyn std::error::Error>>
    {
        let mut theirs = BytesMut::new();
        let mut req = SaslHandshakeRequest::default();
        req.mechanism = StrBytes::from_static_str("SCRAM-SHA-512");
        req.encode(&mut theirs, 1)?;
        assert_eq!(&encode_handshake("SCRAM-SHA-512")[..], &theirs[..]);
        let mut theirs = BytesMut::new();
        let mut req = SaslAuthenticateRequest::default();
        req.auth_bytes = Bytes::from_static(b"n,,n=worker,r=abc");
        req.encode(&mut theirs, 2)?;
        assert_eq!(&encode_authenticate(b"n,,n=worker,r=abc")[..], &theirs[..]);
        Ok(())
    }

    #[test]
    fn responses_decode_like_the_crate() -> std::result::Result<(), Box<dyn std::error::Error>> {
        let mut resp = SaslHandshakeResponse::default();
        resp.error_code = codes::UNSUPPORTED_SASL_MECHANISM;
        resp.mechanisms = vec![
            StrBytes::from_static_str("PLAIN"),
            StrBytes::from_static_str("SCRAM-SHA-256"),
        ];
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 1)?;
        assert_eq!(
            decode_handshake(buf.freeze())?,
            (
                codes::UNSUPPORTED_SASL_MECHANISM,
                vec!["PLAIN".to_owned(), "SCRAM-SHA-256".to_owned()]
            )
        );
        let mut resp = SaslAuthenticateResponse::default();
        resp.error_code = codes::SASL_AUTHENTICATION_FAILED;
        resp.error_message = Some(StrBytes::from_static_str(
            "Authentication failed: Invalid username or password",
        ));
        resp.auth_bytes = Bytes::from_static(b"v=abc");
        resp.session_lifetime_ms = 10_000;
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 2)?;
        assert_eq!(
            decode_authenticate(buf.freeze())?,
            Authenticated {
                error_code: codes::SASL_AUTHENTICATION_FAILED,
                error_message: Some("Authentication failed: Invalid username or password".into()),
                auth_bytes: Bytes::from_static(b"v=abc"),
                session_lifetime_ms: 10_000,
            }
        );
        Ok(())
    }

    #[test]
    fn a_huge_mechanism_list_is_refused_before_allocating() {
        let mut buf = BytesMut::new();
        buf.put_i16(0);
        buf.put_i32(i32::MAX);
        assert!(decode_handshake(buf.freeze()).is_err());
    }
}
