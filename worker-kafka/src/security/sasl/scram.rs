//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): the password never crosses the wire and
//! the broker proves it knows the credential too.
//!
//! Three messages: client-first `n,,n=<name>,r=<nonce>`, client-final `c=biws,r=<nonce>,p=<proof>`
//! and, from the broker, server-final `v=<signature>`, checked before the exchange completes. The
//! password is used as its UTF-8 bytes without SASLprep, as Kafka's own clients and broker do.
//!
//! Everything the broker sends is checked: a nonce that does not extend ours, a salt that is not
//! base64, an iteration count outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`], a missing
//! attribute or a wrong signature ends the exchange with an error, never a panic.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{EagerHash, Hmac, KeyInit, Mac};
use rand::Rng as _;
use rand::distr::Alphanumeric;

use super::{Exchange, SaslError, ScramMechanism};
use crate::security::Secret;
use crate::security::untrusted::quote;

/// The fewest PBKDF2 iterations accepted: RFC 7677's minimum, and Kafka's for both mechanisms. A
/// broker asking for fewer is weakening the stored credential (or is not the broker).
pub(crate) const MIN_ITERATIONS: u32 = 4096;

/// The most PBKDF2 iterations accepted. Kafka stores at most 16,384; a hostile broker could ask
/// for billions and pin a CPU for hours, so anything above a million (about a second of SHA-512
/// here) is refused.
pub(crate) const MAX_ITERATIONS: u32 = 1_000_000;

/// Random characters in our nonce: 32 alphanumerics carry about 190 bits.
const NONCE_LEN: usize = 32;

/// How much of the broker's own text (an `e=` error) an error message repeats.
const QUOTE_MAX: usize = 200;

/// The hash a SCRAM exchange runs on (SHA-1 only for RFC 5802's test vector).
#[derive(Clone, Copy, Debug)]
enum Hash {
    Sha256,
    Sha512,
    #[cfg(test)]
    Sha1,
}

impl Hash {
    fn name(self) -> &'static str {
        match self {
            Hash::Sha256 => "SCRAM-SHA-256",
            Hash::Sha512 => "SCRAM-SHA-512",
            #[cfg(test)]
            Hash::Sha1 => "SCRAM-SHA-1",
        }
    }
}

/// One SCRAM authentication.
pub(crate) struct Scram {
    hash: Hash,
    state: State,
}

enum State {
    /// Nothing sent yet.
    Start {
        username: String,
        password: Secret,
        nonce: String,
    },
    /// Client-first sent: waiting for server-first.
    First {
        password: Secret,
        nonce: String,
        client_first_bare: String,
    },
    /// Client-final sent: waiting for the broker's signature.
    Final { server_signature: Vec<u8> },
    /// Complete, or failed: nothing more to say.
    Done,
}

impl Scram {
    pub(crate) fn new(hash: ScramMechanism, username: &str, password: Secret) -> Self {
        let nonce = rand::rng()
            .sample_iter(Alphanumeric)
            .take(NONCE_LEN)
            .map(char::from)
            .collect();
        let hash = match hash {
            ScramMechanism::Sha256 => Hash::Sha256,
            ScramMechanism::Sha512 => Hash::Sha512,
        };
        Self::with_nonce(hash, username, password, nonce)
    }

    fn with_nonce(hash: Hash, username: &str, password: Secret, nonce: String) -> Self {
        Self {
            hash,
            state: State::Start {
                username: username.to_owned(),
                password,
                nonce,
            },
        }
    }

    fn error(&self, why: impl std::fmt::Display) -> SaslError {
        SaslError(format!("{}: {why}", self.hash.name()))
    }

    /// Server-first in, client-final out; remembers the signature the broker must send back.
    fn client_final(
        &self,
        server_first: &[u8],
        password: &Secret,
        nonce: &str,
        client_first_bare: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), SaslError> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| self.error("the server-first message is not UTF-8"))?;
        let ServerFirst {
            nonce: combined,
            salt,
            iterations,
        } = ServerFirst::parse(server_first, nonce).map_err(|why| self.error(why))?;
        let without_proof = format!("c=biws,r={combined}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let keys = self.hash.keys(
            password.expose().as_bytes(),
            &salt,
            iterations,
            auth_message.as_bytes(),
        );
        let message = format!("{without_proof},p={}", STANDARD.encode(keys.proof));
        Ok((message.into_bytes(), keys.server_signature))
    }

    /// Checks server-final: the broker's signature, or its `e=` error.
    fn check_final(&self, server_final: &[u8], expected: &[u8]) -> Result<(), SaslError> {
        let server_final = std::str::from_utf8(server_final)
            .map_err(|_| self.error("the server-final message is not UTF-8"))?;
        let first = server_final.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Err(self.error(format_args!("the broker says {}", quote(error, QUOTE_MAX))));
        }
        let signature = first
            .strip_prefix("v=")
            .ok_or_else(|| self.error("the server-final message has no signature (v=)"))?;
        let signature = STANDARD
            .decode(signature)
            .map_err(|_| self.error("the server signature is not base64"))?;
        if !constant_time_eq(&signature, expected) {
            return Err(self.error(
                "the broker's signature is wrong: it does not know this user's credential",
            ));
        }
        Ok(())
    }
}

impl Exchange for Scram {
    fn respond(&mut self, server: Option<&[u8]>) -> Result<Option<Vec<u8>>, SaslError> {
        // Any error leaves the exchange done: it is never resumed.
        match (std::mem::replace(&mut self.state, State::Done), server) {
            (
                State::Start {
                    username,
                    password,
                    nonce,
                },
                None,
            ) => {
                let client_first_bare = format!("n={},r={nonce}", sasl_name(&username));
                let message = format!("n,,{client_first_bare}").into_bytes();
                self.state = State::First {
                    password,
                    nonce,
                    client_first_bare,
                };
                Ok(Some(message))
            }
            (
                State::First {
                    password,
                    nonce,
                    client_first_bare,
                },
                Some(server_first),
            ) => {
                let (message, server_signature) =
                    self.client_final(server_first, &password, &nonce, &client_first_bare)?;
                self.state = State::Final { server_signature };
                Ok(Some(message))
            }
            (State::Final { server_signature }, Some(server_final)) => {
                self.check_final(server_final, &server_signature)?;
                Ok(None)
            }
            (State::Start { .. }, Some(_)) => {
                Err(self.error("the broker spoke before the client-first message"))
            }
            (State::Done, _) => Err(self.error("the exchange is over")),
            (_, None) => Err(self.error("the exchange was already started")),
        }
    }
}

/// The username as a SCRAM `saslname`: `=` and `,` escaped (RFC 5802 §5.1).
fn sasl_name(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

/// A parsed server-first message: `[m=…,]r=<nonce>,s=<salt>,i=<iterations>[,extensions]`.
#[derive(Debug)]
struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

impl<'a> ServerFirst<'a> {
    /// Parses and checks `message` against our `client_nonce`; the error says what is wrong.
    fn parse(message: &'a str, client_nonce: &str) -> Result<Self, String> {
        let mut attributes = message.split(',');
        let mut next = |name: &str| -> Result<&'a str, String> {
            let attribute = attributes.next().unwrap_or_default();
            if attribute.starts_with("m=") {
                return Err(
                    "the broker requires an extension (m=) this client does not know".into(),
                );
            }
            attribute
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
                .ok_or_else(|| format!("the server-first message has no {name}= where expected"))
        };
        let nonce = next("r")?;
        let salt = next("s")?;
        let iterations = next("i")?;
        if nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce) {
            return Err("the broker's nonce does not extend ours".into());
        }
        if !nonce.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the broker's nonce has characters outside printable ASCII".into());
        }
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| "the salt is not base64".to_owned())?;
        if salt.is_empty() {
            return Err("the salt is empty".into());
        }
        let iterations = iterations
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| iterations.parse::<u32>().ok())
            .flatten()
            .filter(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(i))
            .ok_or_else(|| {
                format!(
                    "the iteration count {} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}",
                    quote(iterations, 20)
                )
            })?;
        Ok(Self {
            nonce,
            salt,
            iterations,
        })
    }
}

/// The client proof and the signature the broker must answer with.
struct Keys {
    proof: Vec<u8>,
    server_signature: Vec<u8>,
}

impl Hash {
    fn keys(self, password: &[u8], salt: &[u8], iterations: u32, auth_message: &[u8]) -> Keys {
        match self {
            Hash::Sha256 => keys::<sha2::Sha256>(password, salt, iterations, auth_message),
            Hash::Sha512 => keys::<sha2::Sha512>(password, salt, iterations, auth_message),
            #[cfg(test)]
            Hash::Sha1 => keys::<sha1::Sha1>(password, salt, iterations, auth_message),
        }
    }
}

/// RFC 5802 §3: SaltedPassword = Hi(password, salt, i); ClientProof = ClientKey XOR
/// HMAC(H(ClientKey), AuthMessage); ServerSignature = HMAC(HMAC(SaltedPassword, "Server Key"),
/// AuthMessage).
fn keys<D: EagerHash>(password: &[u8], salt: &[u8], iterations: u32, auth_message: &[u8]) -> Keys {
    let mut salted = vec![0; <D as hmac::digest::Digest>::output_size()];
    pbkdf2::pbkdf2_hmac::<D>(password, salt, iterations, &mut salted);
    let client_key = hmac::<D>(&salted, b"Client Key");
    let stored_key = D::digest(&client_key);
    let client_signature = hmac::<D>(&stored_key, auth_message);
    let proof = client_key
        .iter()
        .zip(&client_signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let server_key = hmac::<D>(&salted, b"Server Key");
    Keys {
        proof,
        server_signature: hmac::<D>(&server_key, auth_message),
    }
}

fn hmac<D: EagerHash>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length (longer ones are hashed), so this never falls back.
    let Ok(mut mac) = <Hmac<D> as KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Equality that takes as long whatever the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(hash: Hash, user: &str, password: &str, nonce: &str) -> Scram {
        Scram::with_nonce(hash, user, Secret::new(password), nonce.to_owned())
    }

    /// Runs a whole exchange: the client messages it sent, and how it took server-final.
    fn run(
        mut scram: Scram,
        server_first: &str,
        server_final: &str,
    ) -> Result<(String, String), SaslError> {
        let first = scram.respond(None)?.unwrap_or_default();
        let last = scram
            .respond(Some(server_first.as_bytes()))?
            .unwrap_or_default();
        assert_eq!(scram.respond(Some(server_final.as_bytes()))?, None);
        Ok((
            String::from_utf8_lossy(&first).into_owned(),
            String::from_utf8_lossy(&last).into_owned(),
        ))
    }

    const RFC7677_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    fn rfc7677() -> Scram {
        exchange(Hash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    }

    #[test]
    fn rfc7677_sha256_vector() -> Result<(), SaslError> {
        let (first, last) = run(
            rfc7677(),
            RFC7677_FIRST,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        )?;
        assert_eq!(first, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        Ok(())
    }

    #[test]
    fn rfc5802_sha1_vector_proves_the_generic_algorithm() -> Result<(), SaslError> {
        let (first, last) = run(
            exchange(Hash::Sha1, "user", "pencil", "fyko+d2lbbFgONRv9qkxdawL"),
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
        )?;
        assert_eq!(first, "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL");
        assert_eq!(
            last,
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
        );
        Ok(())
    }

    /// Computed independently with Python's standard library:
    ///
    /// ```python
    /// sp = hashlib.pbkdf2_hmac("sha512", pw.encode(), salt, i)
    /// ck = hmac.new(sp, b"Client Key", "sha512").digest()
    /// cs = hmac.new(hashlib.sha512(ck).digest(), auth_message, "sha512").digest()
    /// proof = bytes(a ^ b for a, b in zip(ck, cs))
    /// ss = hmac.new(hmac.new(sp, b"Server Key", "sha512").digest(), auth_message, "sha512").digest()
    /// ```
    ///
    /// with auth_message = client-first-bare "," server-first "," client-final-without-proof.
    #[test]
    fn sha512_vectors() -> Result<(), SaslError> {
        // RFC 7677's inputs with SHA-512.
        let (_, last) = run(
            exchange(Hash::Sha512, "user", "pencil", "rOprNGfwEbeRWgbNEkqO"),
            RFC7677_FIRST,
            "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==",
        )?;
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ=="
        );
        // A name that needs escaping, a non-ASCII password, 8192 iterations.
        let (first, last) = run(
            exchange(Hash::Sha512, "us=er,x", "pen,cil=é", "rOprNGfwEbeRWgbNEkqO"),
            "r=rOprNGfwEbeRWgbNEkqO3rfcNHYJY1ZVvWVs7j,s=c2FsdC1mb3Itc2hhNTEyLXRlc3Q=,i=8192",
            "v=JDufpCjtDkb6Uyiwv3BEbP1DlTxLJ2n6SbCaAH5EslP/2KXP9iXV2lIHR1EWZmFnRaeu58Bzkbzkynb8+DcKaw==",
        )?;
        assert_eq!(first, "n,,n=us=3Der=2Cx,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO3rfcNHYJY1ZVvWVs7j,\
             p=ukmR7+SgxuMbyLtOETWG3GocFWjpJTPCNLc6jP7VqE4PU/HPmgRRA66pacePZxTO0opSmLgPHtn7nMDjc2G2Lw=="
        );
        Ok(())
    }

    #[test]
    fn the_real_nonce_is_random_printable_and_long() -> Result<(), SaslError> {
        let mut a = Scram::new(ScramMechanism::Sha512, "worker", Secret::new("pw"));
        let mut b = Scram::new(ScramMechanism::Sha512, "worker", Secret::new("pw"));
        let a = String::from_utf8_lossy(&a.respond(None)?.unwrap_or_default()).into_owned();
        let b = String::from_utf8_lossy(&b.respond(None)?.unwrap_or_default()).into_owned();
        let nonce = a.strip_prefix("n,,n=worker,r=").unwrap_or_default();
        assert!(nonce.len() >= 24, "{a}");
        assert!(nonce.bytes().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
        Ok(())
    }

    /// The error for `server_first` after a proper client-first.
    fn first_error(server_first: &[u8]) -> String {
        let mut scram = rfc7677();
        assert!(matches!(scram.respond(None), Ok(Some(_))));
        match scram.respond(Some(server_first)) {
            Err(SaslError(why)) => why,
            Ok(message) => panic!(
                "accepted {:?}",
                String::from_utf8_lossy(&message.unwrap_or_default())
            ),
        }
    }

    #[test]
    fn hostile_server_first_messages_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "no r="),
            (b"r=rOprNGfwEbeRWgbNEkqO", "no s="),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==",
                "no i=",
            ),
            (
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOxyz,i=4096",
                "no r=",
            ),
            (
                b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "extension",
            ),
            (
                b"r=someoneElsesNonce1234567,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "nonce",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "nonce",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOx y,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "printable",
            ),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64!,i=4096", "base64"),
            (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096", "salt is empty"),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095",
                "4096..=1000000",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000001",
                "outside",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4000000000",
                "outside",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999999",
                "outside",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=+4096",
                "outside",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=",
                "outside",
            ),
            (
                b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1",
                "outside",
            ),
            (b"\xff\xfe", "UTF-8"),
        ];
        for (message, expected) in cases {
            let why = first_error(message);
            assert!(why.starts_with("SCRAM-SHA-256: "), "{why}");
            assert!(
                why.contains(expected),
                "{:?}: {why}",
                String::from_utf8_lossy(message)
            );
        }
    }

    #[test]
    fn extensions_after_the_iterations_are_ignored() {
        let mut scram = rfc7677();
        assert!(matches!(scram.respond(None), Ok(Some(_))));
        let first = format!("{RFC7677_FIRST},x=future");
        assert!(matches!(scram.respond(Some(first.as_bytes())), Ok(Some(_))));
    }

    /// The error for `server_final` after RFC 7677's first two messages.
    fn final_error(server_final: &[u8]) -> String {
        let mut scram = rfc7677();
        assert!(matches!(scram.respond(None), Ok(Some(_))));
        assert!(matches!(
            scram.respond(Some(RFC7677_FIRST.as_bytes())),
            Ok(Some(_))
        ));
        match scram.respond(Some(server_final)) {
            Err(SaslError(why)) => why,
            Ok(_) => panic!("accepted {:?}", String::from_utf8_lossy(server_final)),
        }
    }

    #[test]
    fn hostile_server_final_messages_are_errors() {
        // One bit off in the last byte of RFC 7677's signature.
        let wrong = final_error(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G8=");
        assert!(wrong.contains("signature is wrong"), "{wrong}");
        assert!(final_error(b"v=6rriTRBi23WpRR").contains("not base64"));
        assert!(final_error(b"v=AAAA").contains("signature is wrong"));
        assert!(final_error(b"").contains("no signature"));
        assert!(
            final_error(b"x=1,v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .contains("no signature")
        );
        assert!(final_error(b"\xc3").contains("UTF-8"));
        let error = final_error(b"e=invalid-proof");
        assert_eq!(error, "SCRAM-SHA-256: the broker says \"invalid-proof\"");
        let flood = format!("e={}\n", "x".repeat(10_000));
        let error = final_error(flood.as_bytes());
        assert!(error.len() < 300 && error.ends_with("…\""), "{error}");
    }

    #[test]
    fn messages_out_of_turn_are_errors() {
        let mut scram = rfc7677();
        assert!(scram.respond(Some(b"r=x")).is_err());
        assert!(
            scram.respond(None).is_err(),
            "a failed exchange stays failed"
        );
        let mut scram = rfc7677();
        assert!(matches!(scram.respond(None), Ok(Some(_))));
        assert!(scram.respond(None).is_err());
        let mut scram = rfc7677();
        assert!(matches!(scram.respond(None), Ok(Some(_))));
        assert!(matches!(
            scram.respond(Some(RFC7677_FIRST.as_bytes())),
            Ok(Some(_))
        ));
        assert_eq!(
            scram.respond(Some(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")),
            Ok(None)
        );
        assert!(scram.respond(Some(b"")).is_err());
    }

    #[test]
    fn the_password_is_never_sent() -> Result<(), SaslError> {
        let (first, last) = run(
            rfc7677(),
            RFC7677_FIRST,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        )?;
        assert!(!first.contains("pencil") && !last.contains("pencil"));
        Ok(())
    }
}
