//! Failed sign-ins per client address (the client behind trusted proxies:
//! [`crate::telemetry::Client`]): after [`MAX_FAILURES`] within [`WINDOW`], the address's
//! sign-ins (the login form, a bearer token) are answered 429 until the oldest of them is a
//! [`WINDOW`] old. Session cookies are not sign-ins: a signed-in browser is never throttled.
//!
//! An IPv6 client is counted by its /64 (one host holds a whole /64). The table keeps at most
//! [`MAX_ADDRESSES`] addresses, forgetting those without a failure within the window first, then
//! the one whose last failure is oldest: memory stays bounded however many addresses an
//! attacker has, and a token of 32 characters or more stays out of reach anyway.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::telemetry::counted_as;

/// Failed sign-ins an address may make within [`WINDOW`].
pub(crate) const MAX_FAILURES: usize = 5;
/// The window failed sign-ins are counted in.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most (a few hundred kilobytes).
pub(crate) const MAX_ADDRESSES: usize = 4096;

/// The failed sign-ins of the dashboard's process.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    /// Per address: its last failures, oldest first, at most [`MAX_FAILURES`].
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Throttle {
    /// How long `peer` must wait before it may sign in again, if it must.
    pub(crate) fn wait(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.lock();
        let failures = table.get(&key(peer))?;
        let oldest = *failures.front()?;
        let age = now.saturating_duration_since(oldest);
        (failures.len() >= MAX_FAILURES && age < WINDOW).then(|| WINDOW - age)
    }

    /// A failed sign-in from `peer` at `now`.
    pub(crate) fn failed(&self, peer: IpAddr, now: Instant) {
        let key = key(peer);
        let mut table = self.lock();
        if !table.contains_key(&key) && table.len() >= MAX_ADDRESSES {
            let recent = |t: &Instant| now.saturating_duration_since(*t) < WINDOW;
            table.retain(|_, failures| failures.back().is_some_and(recent));
            if table.len() >= MAX_ADDRESSES
                && let Some(oldest) = table
                    .iter()
                    .min_by_key(|(_, failures)| failures.back().copied())
                    .map(|(key, _)| *key)
            {
                table.remove(&oldest);
            }
        }
        let failures = table.entry(key).or_default();
        while failures
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
            || failures.len() >= MAX_FAILURES
        {
            failures.pop_front();
        }
        failures.push_back(now);
    }

    /// A successful sign-in from `peer`: its count starts over.
    pub(crate) fn succeeded(&self, peer: IpAddr) {
        self.lock().remove(&key(peer));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, VecDeque<Instant>>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.lock().len()
    }
}

/// What an address is counted as: itself, or its /64 for IPv6.
fn key(peer: IpAddr) -> IpAddr {
    counted_as(peer)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn five_failures_within_a_minute_block_the_address_until_the_first_is_a_minute_old() {
        let throttle = Throttle::default();
        let start = Instant::now();
        let peer = v4(1);
        for n in 0..MAX_FAILURES {
            assert_eq!(throttle.wait(peer, start), None, "after {n} failures");
            throttle.failed(peer, start + Duration::from_secs(n as u64));
        }
        let now = start + Duration::from_secs(10);
        assert_eq!(throttle.wait(peer, now), Some(Duration::from_secs(50)));
        assert_eq!(throttle.wait(v4(2), now), None, "another address");
        assert_eq!(
            throttle.wait(peer, start + WINDOW - Duration::from_millis(1)),
            Some(Duration::from_millis(1))
        );
        // A minute after the first: four remain in the window, one more attempt is allowed.
        let later = start + WINDOW;
        assert_eq!(throttle.wait(peer, later), None);
        throttle.failed(peer, later);
        assert_eq!(
            throttle.wait(peer, later),
            Some(Duration::from_secs(1)),
            "the second failure is now the oldest of five"
        );
        // Failures spread wider than the window never block.
        let slow = v4(3);
        for n in 0..20u64 {
            let at = start + Duration::from_secs(13 * n);
            assert_eq!(throttle.wait(slow, at), None, "attempt {n}");
            throttle.failed(slow, at);
        }
        throttle.succeeded(peer);
        assert_eq!(throttle.wait(peer, later), None, "a sign-in starts over");
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64_and_ipv4_mapped_as_ipv4() {
        let throttle = Throttle::default();
        let now = Instant::now();
        for n in 0..MAX_FAILURES {
            let addr: IpAddr = format!("2001:db8:1:2::{:x}", n + 1).parse().unwrap();
            throttle.failed(addr, now);
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(throttle.wait(same_64, now).is_some());
        assert!(throttle.wait(other_64, now).is_none());
        for _ in 0..MAX_FAILURES {
            throttle.failed("::ffff:10.0.0.7".parse().unwrap(), now);
        }
        assert!(throttle.wait(v4(7), now).is_some());
    }

    #[test]
    fn the_table_is_bounded_and_forgets_stale_then_oldest_addresses_first() {
        let throttle = Throttle::default();
        let start = Instant::now();
        // A blocked address, then a flood of others at one failure each.
        for _ in 0..MAX_FAILURES {
            throttle.failed(v4(0), start);
        }
        for n in 1..MAX_ADDRESSES as u32 {
            throttle.failed(v4(n), start + Duration::from_secs(1));
        }
        assert_eq!(throttle.addresses(), MAX_ADDRESSES);
        // Full: the newcomer evicts the address whose last failure is oldest (the blocked one).
        let now = start + Duration::from_secs(2);
        assert!(throttle.wait(v4(0), now).is_some());
        throttle.failed(v4(1_000_000), now);
        assert_eq!(throttle.addresses(), MAX_ADDRESSES);
        assert!(throttle.wait(v4(0), now).is_none());
        // Past the window every entry is stale: one sweep leaves the newcomer alone.
        let much_later = start + WINDOW + Duration::from_secs(5);
        throttle.failed(v4(2_000_000), much_later);
        assert_eq!(throttle.addresses(), 1);
    }
}
