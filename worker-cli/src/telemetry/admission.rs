//! Who gets a connection slot of a listener, so that no client can crowd the probes out.
//!
//! - **Caps.** At most [`Slots::general`] connections at once, at most [`Slots::per_peer`] of them
//!   from one client address: one client cannot take the listener, many share it.
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

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// How many connections a listener takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slots {
    /// Connections for any request, at once.
    pub(crate) general: usize,
    /// Of those, from one client address.
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
    peer: IpAddr,
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

    /// A slot for a connection from `peer`, or `None`: close it.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let peer = peer.to_canonical();
        let mut state = self.lock();
        let kind = state.place(peer, self.slots)?;
        let id = state.next;
        state.next += 1;
        let evict = CancellationToken::new();
        state.conns.insert(
            id,
            Conn {
                peer,
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
    /// Where a newcomer from `peer` goes, evicting an idle connection if it must.
    fn place(&mut self, peer: IpAddr, slots: Slots) -> Option<Kind> {
        let general = |c: &Conn| c.kind == Kind::General;
        let held = self.conns.values().filter(|c| general(c)).count();
        let own = self
            .conns
            .values()
            .filter(|c| general(c) && c.peer == peer)
            .count();
        let placed = if own >= slots.per_peer {
            self.evict_oldest(|c| general(c) && c.peer == peer)
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
        let first = admission.admit(ip(1)).expect("a slot");
        let second = admission.admit(ip(1)).expect("a slot");
        assert_eq!(
            (first.kind(), second.kind()),
            (Kind::General, Kind::General)
        );
        // Its third: the first (idle) gives way, nobody else's.
        let other = admission.admit(ip(2)).expect("a slot");
        let third = admission.admit(ip(1)).expect("a slot");
        assert_eq!(third.kind(), Kind::General);
        assert!(evicted(&first) && !evicted(&second) && !evicted(&other));
        assert_eq!(admission.held(), 3);
        // Busy connections do not give way: past its share an address gets the reserve.
        second.busy();
        third.busy();
        let fourth = admission.admit(ip(1)).expect("a reserve slot");
        assert_eq!(fourth.kind(), Kind::Reserve);
        // The reserve's idle connection gives way to the next; nothing else does.
        let fifth = admission.admit(ip(1)).expect("the reserve slot");
        assert!(evicted(&fourth));
        fifth.busy();
        assert!(admission.admit(ip(1)).is_none());
        // Another address still gets a general slot.
        assert_eq!(
            admission.admit(ip(3)).map(|t| t.kind()),
            Some(Kind::General)
        );
    }

    #[test]
    fn a_full_listener_closes_the_oldest_idle_connection_then_gives_the_reserve() {
        let admission = Admission::new(SLOTS);
        let held: Vec<Ticket> = (1..=4).filter_map(|n| admission.admit(ip(n))).collect();
        assert_eq!(held.len(), 4);
        held[0].busy();
        held[2].busy();
        let newcomer = admission.admit(ip(9)).expect("a slot");
        assert_eq!(newcomer.kind(), Kind::General);
        assert!(!evicted(&held[0]) && evicted(&held[1]) && !evicted(&held[2]));
        held[3].busy();
        newcomer.busy();
        // Every general slot busy: a probe's reserve, then nothing.
        let probe = admission.admit(ip(10)).expect("the reserve");
        assert_eq!(probe.kind(), Kind::Reserve);
        probe.busy();
        assert!(admission.admit(ip(11)).is_none());
        // A slot given back is taken again.
        drop(probe);
        assert_eq!(
            admission.admit(ip(11)).map(|t| t.kind()),
            Some(Kind::Reserve)
        );
    }

    #[test]
    fn dropped_and_evicted_tickets_give_back_exactly_their_slot() {
        let admission = Admission::new(SLOTS);
        let a = admission.admit(ip(1)).expect("a slot");
        let b = admission.admit(ip(1)).expect("a slot");
        let c = admission.admit(ip(1)).expect("a slot");
        assert!(evicted(&a));
        assert_eq!(admission.held(), 2);
        // The evicted ticket's drop gives back nothing more.
        drop(a);
        assert_eq!(admission.held(), 2);
        drop((b, c));
        assert_eq!(admission.held(), 0);
        // IPv4-mapped IPv6 is the IPv4 address.
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("an address");
        let _d = admission.admit(mapped).expect("a slot");
        let _e = admission.admit(ip(1)).expect("a slot");
        let f = admission.admit(ip(1)).expect("a slot");
        assert_eq!(admission.held(), 2);
        drop(f);
    }
}
