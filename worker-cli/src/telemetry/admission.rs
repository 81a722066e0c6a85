//! Who gets a connection slot of a listener, so that no client can crowd the probes out.
//!
//! - **Caps.** At most [`Slots::general`] connections at once, at most [`Slots::per_peer`] of them
//!   from one client address (an IPv6 client: its /64, [`counted_as`]): one client cannot take
//!   the listener, many share it.
//! - **Behind trusted proxies** a connection's client is known only once its request head is
//!   read (`X-Forwarded-For`, [`super::client`]): a trusted proxy's connection takes a slot of the
//!   listener at once and its client's share when the head arrives ([`Ticket::claim`]); one whose
//!   client already has its share busy is refused then, so the proxy carries many clients and
//!   each of them gets one client's share.
//! - **Idle connections give way.** A connection that has not sent its request head yet (TLS
//!   handshake included) is *idle*. A newcomer that finds no slot, the listener's or its
//!   address's, closes the oldest idle connection (its address's, when that is the bound) and
//!   takes its place. Idle sockets, however many and from however many addresses, keep nobody
//!   out: the kubelet sends its request within milliseconds of connecting.
//! - **A reserve for probes.** Only connections busy with a request can fill the caps. Past them,
//!   [`Slots::reserve`] more slots take connections whose request turns out to be a probe; any
//!   other request on a reserve slot is answered 503 at once. The path is known only once the
//!   head is read, so the slot is given first and its use checked then ([`Ticket::kind`]); the
//!   reserve is not counted per address, since nothing can hold a reserve slot: probes are
//!   answered from memory, other requests refused at once, idle ones give way.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::client::counted_as;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// How many connections a listener takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slots {
    /// Connections for any request, at once.
    pub(crate) general: usize,
    /// Of those, from one client address (an IPv6 client's /64).
    pub(crate) per_peer: usize,
    /// More, for probe requests only.
    pub(crate) reserve: usize,
}

/// Which slot a connection holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any request.
    General,
    /// Probes only.
    Reserve,
}

/// The slots of one listener.
#[derive(Debug)]
pub(crate) struct Admission {
    slots: Slots,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Every connection holding a slot, oldest first (ids only grow). At most `general +
    /// reserve` entries: the table is the count, and needs no per-address map.
    conns: BTreeMap<u64, Conn>,
}

#[derive(Debug)]
struct Conn {
    /// What its client is counted as ([`counted_as`]); `None` for a trusted proxy's connection
    /// until its request head names the client: it counts against the listener only.
    client: Option<IpAddr>,
    kind: Kind,
    /// Its request head has arrived: it no longer gives way.
    busy: bool,
    evict: CancellationToken,
}

/// A connection's slot, given back when dropped (or taken by a newcomer, see [`Ticket::evicted`]).
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    kind: Kind,
    evict: CancellationToken,
}

impl Admission {
    pub(crate) fn new(slots: Slots) -> Arc<Self> {
        Arc::new(Self {
            slots,
            state: Mutex::new(State::default()),
        })
    }

    /// A slot for a connection from `peer`, or `None`: close it. A trusted proxy's connection
    /// (`via_proxy`) is counted for its client when its head arrives ([`Ticket::claim`]).
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr, via_proxy: bool) -> Option<Ticket> {
        let client = (!via_proxy).then(|| counted_as(peer));
        let mut state = self.lock();
        let kind = state.place(client, self.slots)?;
        let id = state.next;
        state.next += 1;
        let evict = CancellationToken::new();
        state.conns.insert(
            id,
            Conn {
                client,
                kind,
                busy: false,
                evict: evict.clone(),
            },
        );
        Some(Ticket {
            admission: self.clone(),
            id,
            kind,
            evict,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connections holding a slot (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().conns.len()
    }
}

impl State {
    /// Where a newcomer from `client` (`None`: not known yet) goes, evicting an idle
    /// connection if it must.
    fn place(&mut self, client: Option<IpAddr>, slots: Slots) -> Option<Kind> {
        let general = |c: &Conn| c.kind == Kind::General;
        let held = self.conns.values().filter(|c| general(c)).count();
        let placed = if let Some(client) = client
            && self.general_of(client, None) >= slots.per_peer
        {
            self.evict_oldest(|c| general(c) && c.client == Some(client))
        } else {
            held < slots.general || self.evict_oldest(general)
        };
        if placed {
            return Some(Kind::General);
        }
        let reserve = self.conns.len() - held;
        (reserve < slots.reserve || self.evict_oldest(|c| c.kind == Kind::Reserve))
            .then_some(Kind::Reserve)
    }

    /// The general slots `client`'s connections hold, `except` one.
    fn general_of(&self, client: IpAddr, except: Option<u64>) -> usize {
        self.conns
            .iter()
            .filter(|(id, c)| {
                c.kind == Kind::General && c.client == Some(client) && Some(**id) != except
            })
            .count()
    }

    /// Closes the oldest idle connection that `which` picks, handing its slot over at once;
    /// whether there was one.
    fn evict_oldest(&mut self, which: impl Fn(&Conn) -> bool) -> bool {
        let Some(id) = self
            .conns
            .iter()
            .find(|(_, c)| !c.busy && which(c))
            .map(|(id, _)| *id)
        else {
            return false;
        };
        if let Some(conn) = self.conns.remove(&id) {
            conn.evict.cancel();
        }
        true
    }
}

impl Ticket {
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The request head arrived: the connection no longer gives way to newcomers.
    pub(crate) fn busy(&self) {
        if let Some(conn) = self.admission.lock().conns.get_mut(&self.id) {
            conn.busy = true;
        }
    }

    /// A trusted proxy's connection names its `client`: the connection joins that client's
    /// share (its oldest idle connection giving way if the share is full), or, when the share is
    /// full of requests in progress, `false`: refuse the request. A connection already counted
    /// (not the proxy's, or a reserve slot, which is not counted per client) is left as it is.
    pub(crate) fn claim(&self, client: IpAddr) -> bool {
        if self.kind == Kind::Reserve {
            return true;
        }
        let client = counted_as(client);
        let mut state = self.admission.lock();
        let per_peer = self.admission.slots.per_peer;
        match state.conns.get(&self.id) {
            Some(conn) if conn.client.is_none() => {}
            _ => return true,
        }
        if state.general_of(client, Some(self.id)) >= per_peer
            && !state.evict_oldest(|c| c.kind == Kind::General && c.client == Some(client))
        {
            return false;
        }
        if let Some(conn) = state.conns.get_mut(&self.id) {
            conn.client = Some(client);
        }
        true
    }

    /// Resolves when a newcomer took this idle connection's slot: close it.
    pub(crate) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.lock().conns.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const SLOTS: Slots = Slots {
        general: 4,
        per_peer: 2,
        reserve: 1,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn evicted(ticket: &Ticket) -> bool {
        ticket.evict.is_cancelled()
    }

    #[test]
    fn one_address_gets_its_share_and_its_oldest_idle_connection_gives_way() {
        let admission = Admission::new(SLOTS);
        let first = admission.admit(ip(1), false).expect("a slot");
        let second = admission.admit(ip(1), false).expect("a slot");
        assert_eq!(
            (first.kind(), second.kind()),
            (Kind::General, Kind::General)
        );
        // Its third: the first (idle) gives way, nobody else's.
        let other = admission.admit(ip(2), false).expect("a slot");
        let third = admission.admit(ip(1), false).expect("a slot");
        assert_eq!(third.kind(), Kind::General);
        assert!(evicted(&first) && !evicted(&second) && !evicted(&other));
        assert_eq!(admission.held(), 3);
        // Busy connections do not give way: past its share an address gets the reserve.
        second.busy();
        third.busy();
        let fourth = admission.admit(ip(1), false).expect("a reserve slot");
        assert_eq!(fourth.kind(), Kind::Reserve);
        // The reserve's idle connection gives way to the next; nothing else does.
        let fifth = admission.admit(ip(1), false).expect("the reserve slot");
        assert!(evicted(&fourth));
        fifth.busy();
        assert!(admission.admit(ip(1), false).is_none());
        // Another address still gets a general slot.
        assert_eq!(
            admission.admit(ip(3), false).map(|t| t.kind()),
            Some(Kind::General)
        );
    }

    #[test]
    fn a_full_listener_closes_the_oldest_idle_connection_then_gives_the_reserve() {
        let admission = Admission::new(SLOTS);
        let held: Vec<Ticket> = (1..=4)
            .filter_map(|n| admission.admit(ip(n), false))
            .collect();
        assert_eq!(held.len(), 4);
        held[0].busy();
        held[2].busy();
        let newcomer = admission.admit(ip(9), false).expect("a slot");
        assert_eq!(newcomer.kind(), Kind::General);
        assert!(!evicted(&held[0]) && evicted(&held[1]) && !evicted(&held[2]));
        held[3].busy();
        newcomer.busy();
        // Every general slot busy: a probe's reserve, then nothing.
        let probe = admission.admit(ip(10), false).expect("the reserve");
        assert_eq!(probe.kind(), Kind::Reserve);
        probe.busy();
        assert!(admission.admit(ip(11), false).is_none());
        // A slot given back is taken again.
        drop(probe);
        assert_eq!(
            admission.admit(ip(11), false).map(|t| t.kind()),
            Some(Kind::Reserve)
        );
    }

    #[test]
    fn dropped_and_evicted_tickets_give_back_exactly_their_slot() {
        let admission = Admission::new(SLOTS);
        let a = admission.admit(ip(1), false).expect("a slot");
        let b = admission.admit(ip(1), false).expect("a slot");
        let c = admission.admit(ip(1), false).expect("a slot");
        assert!(evicted(&a));
        assert_eq!(admission.held(), 2);
        // The evicted ticket's drop gives back nothing more.
        drop(a);
        assert_eq!(admission.held(), 2);
        drop((b, c));
        assert_eq!(admission.held(), 0);
        // IPv4-mapped IPv6 is the IPv4 address.
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("an address");
        let _d = admission.admit(mapped, false).expect("a slot");
        let _e = admission.admit(ip(1), false).expect("a slot");
        let f = admission.admit(ip(1), false).expect("a slot");
        assert_eq!(admission.held(), 2);
        drop(f);
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_ipv4_mapped_as_ipv4() {
        let admission = Admission::new(SLOTS);
        let v6 = |text: &str| -> IpAddr { text.parse().expect("an address") };
        let first = admission
            .admit(v6("2001:db8:1:2::1"), false)
            .expect("a slot");
        let second = admission
            .admit(v6("2001:db8:1:2:ffff::9"), false)
            .expect("a slot");
        first.busy();
        second.busy();
        // Another address of the same /64: past its share, the reserve only.
        let third = admission
            .admit(v6("2001:db8:1:2::3"), false)
            .expect("the reserve");
        assert_eq!(third.kind(), Kind::Reserve);
        // Another /64 has a share of its own.
        let other = admission
            .admit(v6("2001:db8:1:3::1"), false)
            .expect("a slot");
        assert_eq!(other.kind(), Kind::General);
        drop((third, other));
        // ::ffff:10.0.0.7 and 10.0.0.7 are one client.
        let mapped = admission
            .admit(v6("::ffff:10.0.0.7"), false)
            .expect("a slot");
        let plain = admission
            .admit(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), false)
            .expect("a slot");
        mapped.busy();
        plain.busy();
        let past = admission.admit(v6("::ffff:10.0.0.7"), false);
        assert_eq!(past.map(|t| t.kind()), Some(Kind::Reserve));
    }

    #[test]
    fn a_trusted_proxys_connections_count_for_the_clients_they_name() {
        let admission = Admission::new(Slots {
            general: 6,
            per_peer: 2,
            reserve: 1,
        });
        let proxy = ip(100);
        let client = |n: u8| IpAddr::V4(Ipv4Addr::new(203, 0, 113, n));
        // The proxy takes more than one client's share of the listener.
        let held: Vec<Ticket> = (0..4)
            .map(|_| admission.admit(proxy, true).expect("a slot"))
            .collect();
        assert!(held.iter().all(|t| t.kind() == Kind::General));
        for ticket in &held {
            ticket.busy();
        }
        // Two requests of one client fill its share; its third is refused, another client's
        // is taken.
        assert!(held[0].claim(client(1)));
        assert!(held[1].claim(client(1)));
        assert!(!held[2].claim(client(1)));
        assert!(held[3].claim(client(2)));
        // A claim counts once.
        assert!(held[0].claim(client(1)));
        // A direct connection of a client counted through the proxy shares its share.
        let direct = admission.admit(client(2), false).expect("a slot");
        assert_eq!(direct.kind(), Kind::General);
        direct.busy();
        let past = admission.admit(client(2), false).expect("the reserve");
        assert_eq!(past.kind(), Kind::Reserve);
        // An idle direct connection gives way to the client's forwarded request.
        drop((past, direct));
        let idle = admission.admit(client(3), false).expect("a slot");
        let idle_too = admission.admit(client(3), false).expect("a slot");
        drop(held);
        let via = admission.admit(proxy, true).expect("a slot");
        via.busy();
        assert!(via.claim(client(3)));
        assert!(evicted(&idle) && !evicted(&idle_too));
        assert_eq!(admission.held(), 2);
    }
}
