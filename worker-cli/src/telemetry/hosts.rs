//! Which `Host` a listener answers: its `allowed-hosts`, IP literals and `localhost`.
//!
//! The check is against DNS rebinding: a page of another site whose name the attacker points at
//! this address makes the visitor's browser send that name as `Host`, and read the answer as
//! that site's. A browser sends an IP literal only for a URL that names the IP, whose origin no
//! other site shares, and no other site's name resolves as `localhost`; so those are always
//! answered, on every listener. That keeps the kubelet's probes (`Host: <pod IP>:<port>`),
//! scrapes by pod IP, Service IPs and port-forwards working with no setting, and a name (an
//! Ingress, a Service's DNS name) is answered only when listed.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A refused `Host` is logged at most this often (a client can send any number).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// The host names one listener answers.
#[derive(Clone, Debug)]
pub(crate) struct AllowedHosts {
    /// The key naming them, for messages: `telemetry.allowed-hosts` or `ui.allowed-hosts`.
    key: &'static str,
    /// Lowercase, without a trailing dot.
    names: Arc<[String]>,
    last_logged: Arc<Mutex<Option<Instant>>>,
}

impl AllowedHosts {
    pub(crate) fn new(key: &'static str, names: &[String]) -> Self {
        Self {
            key,
            names: names.iter().map(|name| normal(name)).collect(),
            last_logged: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether a request with this `Host` value is answered.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let Some(name) = name_of(host) else {
            return false;
        };
        if name.parse::<IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let name = normal(name);
        self.names.contains(&name)
    }

    /// Why `host` is refused (the answer's body), logged at most every [`REFUSAL_LOG_EVERY`].
    pub(crate) fn refusal(&self, host: &str) -> String {
        let why = format!(
            "refused: this listener does not answer Host {host:?}: add its name to `{}` (IP literals and localhost are always answered)\n",
            self.key
        );
        let mut last = self
            .last_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(key = self.key, "{}", why.trim_end());
        }
        why
    }
}

fn normal(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The name of a `Host` value: without its port and an IPv6 literal's brackets; `None` when it
/// is malformed (a port that is no number, an unclosed bracket, nothing).
fn name_of(host: &str) -> Option<&str> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        name.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (name, port)
    } else if let Some((name, port)) = host.rsplit_once(':') {
        (name, Some(port))
    } else {
        (host, None)
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_and_localhost_are_always_answered_and_names_when_listed() {
        let none = AllowedHosts::new("telemetry.allowed-hosts", &[]);
        for host in [
            "10.1.2.3:9464",
            "10.1.2.3",
            "127.0.0.1:9400",
            "localhost:9400",
            "LOCALHOST",
            "[::1]:9400",
            "[fd00::7]",
            "[::ffff:10.0.0.1]:80",
        ] {
            assert!(none.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:9464",
            "worker-7.example.com",
            "localhost.evil.example",
            "",
            ":9464",
            "10.1.2.3:port",
            "[::1",
            "[::1]x",
            "[evil.example]:80",
            "10.1.2.3:",
        ] {
            assert!(!none.allows(host), "{host:?}");
        }
        let listed = AllowedHosts::new(
            "ui.allowed-hosts",
            &["Worker-7.example.com".to_owned(), "ops.".to_owned()],
        );
        for host in [
            "worker-7.example.com",
            "worker-7.EXAMPLE.com:443",
            "worker-7.example.com.",
            "ops",
            "ops:9400",
            "10.1.2.3",
        ] {
            assert!(listed.allows(host), "{host}");
        }
        for host in ["evil.example", "example.com", "x.worker-7.example.com"] {
            assert!(!listed.allows(host), "{host}");
        }
    }

    #[test]
    fn a_refusal_names_the_key_to_set() {
        let hosts = AllowedHosts::new("ui.allowed-hosts", &[]);
        let why = hosts.refusal("evil.example:9400");
        assert!(
            why.contains("Host \"evil.example:9400\"") && why.contains("`ui.allowed-hosts`"),
            "{why}"
        );
    }
}
