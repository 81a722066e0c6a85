//! Who a request's client is: the connection's peer, or, when the peer is one of the trusted
//! proxies (`ui.trusted-proxies`), the address the proxies say they forwarded for
//! (`X-Forwarded-For`), and the unit a client is counted in (its address, an IPv6 client's /64).
//!
//! The walk starts at the peer and goes right to left through the `X-Forwarded-For` entries
//! (every such header, in order, their comma lists joined): each entry was written by the hop to
//! its right, so only entries written by trusted hops are believed. The first entry that is not
//! itself trusted is the client; when every entry is trusted, the left-most is. An entry that is
//! not an address, or a walk longer than [`MAX_ENTRIES`] entries, stops the walk at the last
//! trusted hop: a client can only write entries to the left of the ones its proxy appends, so
//! what stops the walk is never the client's choice, and the answer is an address the
//! configuration trusts, not one a header made up.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;

/// The header proxies name the client in.
pub(crate) const FORWARDED_FOR: &str = "x-forwarded-for";
/// Entries read at most, from the right: more trusted hops than this is no real chain.
pub(crate) const MAX_ENTRIES: usize = 16;
/// An entry longer than this is not an address (the longest IPv6 text with a port is 53 bytes).
const MAX_ENTRY_BYTES: usize = 64;

/// An address range, `10.0.0.0/8` or `::1/128`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    fn parse(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "expected address ranges like \"10.0.0.0/8\" or \"::1/128\" (an address and a prefix length), found {text:?}"
            )
        };
        let (address, prefix) = text.split_once('/').ok_or_else(expected)?;
        let network: IpAddr = address.parse().map_err(|_| expected())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max && !prefix.starts_with('+'))
            .ok_or_else(|| format!("{}: the prefix length must be 0 to {max}", expected()))?;
        let cidr = Self { network, prefix };
        if cidr.masked(network) != network {
            return Err(format!(
                "{text:?} has bits set past its /{prefix}: write the range's first address, {}/{prefix}",
                cidr.masked(network)
            ));
        }
        Ok(cidr)
    }

    /// `address` with the bits past the prefix cleared.
    fn masked(self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }

    fn contains(self, address: IpAddr) -> bool {
        self.network.is_ipv4() == address.is_ipv4() && self.masked(address) == self.network
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The proxies whose `X-Forwarded-For` is believed (`ui.trusted-proxies`); none by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// The ranges of `ui.trusted-proxies`, or why one is not a range (naming it).
    pub(crate) fn parse(ranges: &[String]) -> Result<Self, String> {
        ranges
            .iter()
            .map(|range| Cidr::parse(range.trim()))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `address` (IPv4-mapped IPv6 as the IPv4 address) is in a trusted range.
    pub(crate) fn contains(&self, address: IpAddr) -> bool {
        let canonical = address.to_canonical();
        self.0
            .iter()
            .any(|range| range.contains(address) || range.contains(canonical))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, range) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            range.fmt(f)?;
        }
        Ok(())
    }
}

/// A request's client: the peer, or the address trusted proxies forwarded for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Client {
    /// The client's address: what sign-ins are throttled by and connection slots counted by.
    pub(crate) ip: IpAddr,
    /// The connection's peer.
    pub(crate) peer: SocketAddr,
    /// `ip` came from `X-Forwarded-For` (the peer is a trusted proxy).
    pub(crate) forwarded: bool,
}

impl Client {
    /// The client of a request from `peer` with `headers`, as `trusted` says.
    pub(crate) fn resolve(peer: SocketAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> Self {
        let direct = Self {
            ip: peer.ip(),
            peer,
            forwarded: false,
        };
        if trusted.is_empty() || !trusted.contains(peer.ip()) {
            return direct;
        }
        let mut hop = direct;
        let mut read = 0;
        for value in headers.get_all(FORWARDED_FOR).iter().rev() {
            let Ok(text) = value.to_str() else {
                tracing::debug!(
                    %peer, client = %hop.ip,
                    "X-Forwarded-For: a value that is not visible ASCII; the client is the last trusted hop"
                );
                return hop;
            };
            for entry in text.rsplit(',') {
                if read == MAX_ENTRIES {
                    tracing::debug!(
                        %peer, client = %hop.ip,
                        "X-Forwarded-For: more than {MAX_ENTRIES} trusted hops; the client is the last one read"
                    );
                    return hop;
                }
                read += 1;
                let Some(address) = parse_entry(entry) else {
                    let shown: String = entry.chars().take(MAX_ENTRY_BYTES).collect();
                    tracing::debug!(
                        %peer, client = %hop.ip, entry = ?shown,
                        "X-Forwarded-For: an entry that is not an address; the client is the last trusted hop"
                    );
                    return hop;
                };
                hop = Self {
                    ip: address,
                    peer,
                    forwarded: true,
                };
                if !trusted.contains(address) {
                    return hop;
                }
            }
        }
        // Every entry trusted: the left-most (or the peer itself, without the header).
        hop
    }
}

impl fmt::Display for Client {
    /// `peer` (address and port) for a direct client, `ip via peer` for a forwarded one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.forwarded {
            write!(f, "{} via {}", self.ip, self.peer)
        } else {
            self.peer.fmt(f)
        }
    }
}

/// One `X-Forwarded-For` entry: `192.0.2.1`, `2001:db8::1`, or either with a port
/// (`192.0.2.1:443`, `[2001:db8::1]:443`); anything else (`unknown`, a name) is `None`.
fn parse_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if entry.is_empty() || entry.len() > MAX_ENTRY_BYTES {
        return None;
    }
    if let Ok(address) = entry.parse::<IpAddr>() {
        return Some(address);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':');
        if !after.is_empty() && port.is_none_or(|p| p.parse::<u16>().is_err()) {
            return None;
        }
        return address.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    entry
        .parse::<std::net::SocketAddrV4>()
        .ok()
        .map(|socket| IpAddr::V4(*socket.ip()))
}

/// What a client is counted as, for connection slots and failed sign-ins: its IPv4 address
/// (IPv4-mapped IPv6 included), or the /64 of its IPv6 address (one host holds a whole /64).
pub(crate) fn counted_as(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn trusted(ranges: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&ranges.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>())
            .expect("ranges")
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                FORWARDED_FOR,
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        headers
    }

    fn client_of(peer: &str, values: &[&str], proxies: &TrustedProxies) -> String {
        let peer: SocketAddr = peer.parse().expect("a peer");
        Client::resolve(peer, &forwarded(values), proxies).to_string()
    }

    #[test]
    fn ranges_parse_and_a_bad_one_is_named() {
        let proxies = trusted(&["10.0.0.0/8", "::1/128", " 192.0.2.7/32 ", "0.0.0.0/0"]);
        assert_eq!(
            proxies.to_string(),
            "10.0.0.0/8, ::1/128, 192.0.2.7/32, 0.0.0.0/0"
        );
        let only = trusted(&["10.0.0.0/8", "2001:db8::/32"]);
        for (address, inside) in [
            ("10.255.0.1", true),
            ("11.0.0.1", false),
            ("::ffff:10.1.2.3", true),
            ("2001:db8:ffff::1", true),
            ("2001:db9::1", false),
            ("::a00:1", false),
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(only.contains(ip), inside, "{address}");
        }
        for (bad, says) in [
            ("10.0.0.0", "expected address ranges like"),
            ("10.0.0.0/33", "the prefix length must be 0 to 32"),
            ("::1/129", "the prefix length must be 0 to 128"),
            ("10.0.0.0/+8", "the prefix length must be 0 to 32"),
            ("10.0.0.0/", "the prefix length must be 0 to 32"),
            ("proxy.internal/32", "found \"proxy.internal/32\""),
            (
                "10.1.2.3/8",
                "\"10.1.2.3/8\" has bits set past its /8: write the range's first address, 10.0.0.0/8",
            ),
            ("2001:db8::1/64", "2001:db8::/64"),
        ] {
            let err =
                TrustedProxies::parse(&["127.0.0.1/32".to_owned(), bad.to_owned()]).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert!(TrustedProxies::parse(&[]).unwrap().is_empty());
    }

    #[test]
    fn without_a_trusted_peer_the_header_changes_nothing() {
        let forged = ["203.0.113.9"];
        assert_eq!(
            client_of("10.0.0.5:4000", &forged, &TrustedProxies::default()),
            "10.0.0.5:4000"
        );
        let proxies = trusted(&["10.0.0.0/8"]);
        assert_eq!(
            client_of("192.0.2.1:4000", &forged, &proxies),
            "192.0.2.1:4000"
        );
        // A trusted peer without the header is its own client.
        assert_eq!(client_of("10.0.0.5:4000", &[], &proxies), "10.0.0.5:4000");
    }

    #[test]
    fn the_client_is_the_right_most_untrusted_entry_of_every_header_joined() {
        let proxies = trusted(&["10.0.0.0/8", "::1/128"]);
        let peer = "10.0.0.5:4000";
        // Entries the client wrote itself are left of what its proxy appended: ignored.
        assert_eq!(
            client_of(peer, &["1.1.1.1, 203.0.113.9"], &proxies),
            "203.0.113.9 via 10.0.0.5:4000"
        );
        assert_eq!(
            client_of(peer, &["1.1.1.1, 203.0.113.9, 10.0.0.7"], &proxies),
            "203.0.113.9 via 10.0.0.5:4000"
        );
        // Several headers are one list, in order.
        assert_eq!(
            client_of(peer, &["198.51.100.1", "203.0.113.9,10.0.0.7"], &proxies),
            "203.0.113.9 via 10.0.0.5:4000"
        );
        assert_eq!(
            client_of(peer, &["198.51.100.1", "10.0.0.8", "10.0.0.7"], &proxies),
            "198.51.100.1 via 10.0.0.5:4000"
        );
        // Every entry trusted: the left-most.
        assert_eq!(
            client_of(peer, &["10.0.0.9, 10.0.0.8"], &proxies),
            "10.0.0.9 via 10.0.0.5:4000"
        );
        // Ports and IPv6, and an IPv4-mapped peer.
        assert_eq!(
            client_of(peer, &["[2001:db8::1]:443"], &proxies),
            "2001:db8::1 via 10.0.0.5:4000"
        );
        assert_eq!(
            client_of("[::ffff:10.0.0.5]:4000", &["192.0.2.1:80, ::1"], &proxies),
            "192.0.2.1 via [::ffff:10.0.0.5]:4000"
        );
    }

    #[test]
    fn a_malformed_entry_or_too_long_a_chain_stops_at_the_last_trusted_hop() {
        let proxies = trusted(&["10.0.0.0/8"]);
        let peer = "10.0.0.5:4000";
        for (values, client) in [
            (
                vec!["203.0.113.9, garbage, 10.0.0.8"],
                "10.0.0.8 via 10.0.0.5:4000",
            ),
            (vec!["203.0.113.9, unknown"], "10.0.0.5:4000"),
            (vec!["203.0.113.9", ""], "10.0.0.5:4000"),
            (vec!["203.0.113.9,,10.0.0.8"], "10.0.0.8 via 10.0.0.5:4000"),
            (vec!["[2001:db8::1]x"], "10.0.0.5:4000"),
            (vec!["192.0.2.1:99999"], "10.0.0.5:4000"),
            (vec!["203.0.113.9", "proxy.internal"], "10.0.0.5:4000"),
        ] {
            assert_eq!(client_of(peer, &values, &proxies), client, "{values:?}");
        }
        let long = "1".repeat(MAX_ENTRY_BYTES + 1);
        assert_eq!(client_of(peer, &[&long], &proxies), "10.0.0.5:4000");
        let mut headers = forwarded(&["203.0.113.9"]);
        headers.append(
            FORWARDED_FOR,
            HeaderValue::from_bytes(b"10.0.0.\xff").expect("an opaque value"),
        );
        let resolved = Client::resolve(peer.parse().unwrap(), &headers, &proxies);
        assert_eq!(resolved.to_string(), "10.0.0.5:4000");

        // MAX_ENTRIES trusted hops are read, the next is not.
        let hops: Vec<String> = (1..=MAX_ENTRIES).map(|n| format!("10.0.1.{n}")).collect();
        let within = format!("203.0.113.9, {}", hops[1..].join(", "));
        assert_eq!(
            client_of(peer, &[&within], &proxies),
            "203.0.113.9 via 10.0.0.5:4000"
        );
        let past = format!("203.0.113.9, {}", hops.join(", "));
        assert_eq!(
            client_of(peer, &[&past], &proxies),
            "10.0.1.1 via 10.0.0.5:4000"
        );
    }

    #[test]
    fn a_client_is_counted_by_its_ipv4_address_or_its_ipv6_64() {
        let as_key = |text: &str| counted_as(text.parse().unwrap()).to_string();
        assert_eq!(as_key("192.0.2.7"), "192.0.2.7");
        assert_eq!(as_key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(as_key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(as_key("2001:db8:1:2::1"), as_key("2001:db8:1:2:ffff::9"));
        assert_ne!(as_key("2001:db8:1:2::1"), as_key("2001:db8:1:3::1"));
        assert_eq!(as_key("::1"), "::");
    }
}
