//! What a token says about itself when it is a JWT (RFC 7519): its subject and expiry, read
//! without checking the signature — the broker checks it; we only need to know whom the token
//! names (for librdkafka) and when to renew it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};

/// base64url, with or without padding (RFC 7515 forbids it; some issuers pad anyway).
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Expiry times past this (the year 10000) are nonsense and treated as unknown.
const MAX_EXP_SECS: f64 = 253_402_300_800.0;

/// The claims of a JWT that matter here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claims {
    /// `sub`: whom the token names.
    pub(crate) subject: Option<String>,
    /// `exp`: when it expires.
    pub(crate) expires_at: Option<SystemTime>,
}

impl Claims {
    /// The claims of `token` if it is a JWS in compact form (`header.claims.signature`, the
    /// signature possibly empty, as in unsecured JWTs) whose header and claims are JSON objects;
    /// `None` for anything else (an opaque token).
    pub(crate) fn of(token: &str) -> Option<Self> {
        let mut parts = token.split('.');
        let (header, claims, _signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: serde_json::Value =
            serde_json::from_slice(&BASE64URL.decode(header).ok()?).ok()?;
        let claims: serde_json::Value =
            serde_json::from_slice(&BASE64URL.decode(claims).ok()?).ok()?;
        let (serde_json::Value::Object(_), serde_json::Value::Object(claims)) = (header, claims)
        else {
            return None;
        };
        Some(Self {
            subject: claims
                .get("sub")
                .and_then(serde_json::Value::as_str)
                .filter(|sub| !sub.is_empty())
                .map(str::to_owned),
            expires_at: claims
                .get("exp")
                .and_then(serde_json::Value::as_f64)
                .filter(|exp| (0.0..MAX_EXP_SECS).contains(exp))
                .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs_f64(exp))),
        })
    }
}

/// An unsecured JWT (`{"alg":"none"}`, empty signature, RFC 7519 §6) naming `subject` and
/// expiring at `expires_at`, issued now: what Kafka's default OAUTHBEARER validator accepts
/// (`sub`, and `iat`/`exp` in seconds).
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn unsecured(subject: &str, expires_at: SystemTime) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64URL_NOPAD;
    let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "sub": subject,
        "iat": seconds(SystemTime::now()),
        "exp": seconds(expires_at),
    });
    format!(
        "{}.{}.",
        BASE64URL_NOPAD.encode(br#"{"alg":"none"}"#),
        BASE64URL_NOPAD.encode(claims.to_string())
    )
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::{self, URL_SAFE_NO_PAD};

    use super::*;

    fn b64(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn a_signed_jwt_gives_its_subject_and_expiry() {
        let token = format!(
            "{}.{}.c2lnbmF0dXJl",
            b64(r#"{"alg":"RS256","typ":"JWT"}"#),
            b64(r#"{"sub":"worker-1","exp":1900000000,"iat":1,"scope":"kafka"}"#)
        );
        assert_eq!(
            Claims::of(&token),
            Some(Claims {
                subject: Some("worker-1".into()),
                expires_at: Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000)),
            })
        );
    }

    #[test]
    fn an_unsecured_jwt_has_an_empty_signature() {
        let expires_at = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let token = unsecured("sms \"sender\"", expires_at);
        assert!(token.ends_with('.'));
        assert!(token.starts_with("eyJhbGciOiJub25lIn0."), "{token}");
        assert_eq!(
            Claims::of(&token),
            Some(Claims {
                subject: Some("sms \"sender\"".into()),
                expires_at: Some(expires_at),
            })
        );
    }

    #[test]
    fn padding_and_fractional_expiry_are_tolerated() {
        let padded = general_purpose::URL_SAFE.encode(r#"{"sub":"a","exp":10.5}"#);
        let token = format!("{}.{padded}.", b64(r#"{"alg":"none"}"#));
        assert_eq!(
            Claims::of(&token).and_then(|c| c.expires_at),
            Some(UNIX_EPOCH + Duration::from_millis(10_500))
        );
    }

    #[test]
    fn claims_that_are_missing_or_odd_are_unknown() {
        let header = b64(r#"{"alg":"none"}"#);
        for claims in [
            r#"{}"#,
            r#"{"sub":7,"exp":"tomorrow"}"#,
            r#"{"sub":"","exp":-5}"#,
            r#"{"exp":1e300}"#,
            r#"{"exp":null}"#,
        ] {
            assert_eq!(
                Claims::of(&format!("{header}.{}.", b64(claims))),
                Some(Claims::default()),
                "{claims}"
            );
        }
    }

    #[test]
    fn anything_else_is_not_a_jwt() {
        let header = b64(r#"{"alg":"none"}"#);
        let claims = b64(r#"{"sub":"a"}"#);
        for token in [
            String::new(),
            "opaque-token-2YotnFZFEjr1zCsicMWpAA".into(),
            format!("{header}.{claims}"),
            format!("{header}.{claims}.sig.extra"),
            format!("{header}.!!!not base64!!!."),
            format!("{header}.{}.", b64("not json")),
            format!("{header}.{}.", b64("[1,2]")),
            format!("{}.{claims}.", b64("\"alg\"")),
            "...".into(),
            "\u{1}.\u{2}.\u{3}".into(),
        ] {
            assert_eq!(Claims::of(&token), None, "{token}");
        }
    }
}
