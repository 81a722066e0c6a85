//! The ledger in virtual time: a shared log, members that write, read and apply at chosen
//! instants, and the invariant checked after every step — the shares of the members that may
//! start records, each at the counts its dispatcher has applied, add up to at most the rate.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

const MS: Duration = Duration::from_millis(1);

fn timing() -> Timing {
    Timing {
        heartbeat: 1000 * MS,
        ack: 1000 * MS,
        lease: 3000 * MS,
        forget: 60_000 * MS,
    }
}

/// One member of the simulated fleet.
struct Sim {
    ledger: Ledger,
    lease: Arc<Lease>,
    /// The next log entry it reads.
    read: usize,
    /// The counts its dispatcher runs at.
    applied: FleetView,
    /// Killed: it writes, reads and starts nothing any more.
    dead: bool,
}

struct Fleet {
    t0: Instant,
    log: Vec<(String, Option<Vec<u8>>)>,
    members: Vec<Sim>,
}

impl Fleet {
    fn new() -> Self {
        Self {
            t0: Instant::now(),
            log: Vec::new(),
            members: Vec::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + MS * u32::try_from(ms).unwrap()
    }

    fn join(&mut self, rates: &[&str]) -> usize {
        let lease = Arc::new(Lease::fenced());
        let n = self.members.len();
        let mut ledger = Ledger::new(
            format!("w{n}"),
            format!("nonce{n}"),
            timing(),
            lease.clone(),
        );
        ledger.want(&rates.iter().map(|r| (*r).to_owned()).collect(), self.t0);
        self.members.push(Sim {
            ledger,
            lease,
            read: 0,
            applied: FleetView::default(),
            dead: false,
        });
        n
    }

    fn beat(&mut self, i: usize, ms: u64) {
        let now = self.at(ms);
        let m = &mut self.members[i];
        if m.dead {
            return;
        }
        let (key, value) = m.ledger.heartbeat(now);
        self.log.push((key, Some(value)));
    }

    fn write(&mut self, key: &str, value: Option<Vec<u8>>) {
        self.log.push((key.to_owned(), value));
    }

    fn read(&mut self, i: usize, ms: u64) {
        let now = self.at(ms);
        let m = &mut self.members[i];
        if m.dead {
            return;
        }
        while m.read < self.log.len() {
            let (key, value) = &self.log[m.read];
            let offset = i64::try_from(m.read).unwrap();
            m.read += 1;
            m.ledger
                .read(offset, key.as_bytes(), value.as_deref(), false, now);
        }
        m.ledger.tick(now);
    }

    /// Its dispatcher takes up the counts the ledger has now.
    fn apply(&mut self, i: usize) {
        let m = &mut self.members[i];
        if !m.dead {
            m.applied = m.ledger.view();
        }
    }

    fn step(&mut self, i: usize, ms: u64) {
        self.read(i, ms);
        self.apply(i);
    }

    fn may_start(&self, i: usize, ms: u64) -> bool {
        let m = &self.members[i];
        !m.dead && m.lease.holds_for("sms", self.at(ms), m.applied.version)
    }

    /// The sum of the shares of `rate` of the members that may start at `ms`, in millionths.
    fn shares(&self, rate: &str, ms: u64) -> u64 {
        (0..self.members.len())
            .filter(|i| self.may_start(*i, ms))
            .filter(|i| self.members[*i].ledger.claims.contains_key(rate))
            .map(|i| 1_000_000 / u64::from(self.members[i].applied.sharing(Some(rate))))
            .sum()
    }

    fn check(&self, ms: u64) {
        let sum = self.shares("sms", ms);
        assert!(
            sum <= 1_000_000,
            "at {ms} ms the shares add up to {sum}/1000000"
        );
    }

    /// Everyone alive beats, then reads and applies, at `ms`; checked after each step.
    fn round(&mut self, ms: u64) {
        for i in 0..self.members.len() {
            self.beat(i, ms);
            self.check(ms);
        }
        for i in 0..self.members.len() {
            self.step(i, ms);
            self.check(ms);
        }
        // Acknowledgements written once the counts are applied, then read.
        for i in 0..self.members.len() {
            if self.members[i].ledger.owes_ack() {
                self.beat(i, ms);
            }
        }
        for i in 0..self.members.len() {
            self.step(i, ms);
            self.check(ms);
        }
    }
}

#[test]
fn a_fleet_that_starts_together_takes_its_shares_once_everyone_counts_everyone() {
    let mut fleet = Fleet::new();
    for _ in 0..3 {
        fleet.join(&["sms"]);
    }
    for i in 0..3 {
        fleet.beat(i, 0);
        assert!(!fleet.may_start(i, 0), "not read back yet");
    }
    fleet.step(0, 10);
    assert!(
        fleet.may_start(0, 10),
        "w0 joined first: the others count it from their start"
    );
    fleet.step(1, 10);
    assert!(!fleet.may_start(1, 10), "w0 has not acknowledged w1");
    fleet.round(20);
    for i in 0..3 {
        assert!(fleet.may_start(i, 20), "w{i} counted by all");
        assert_eq!(fleet.members[i].applied.sharing(Some("sms")), 3);
    }
    assert_eq!(fleet.shares("sms", 20), 999_999);
}

#[test]
fn a_newcomer_waits_for_every_member_before_it_to_apply_the_smaller_share() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    fleet.round(0);
    assert!(fleet.may_start(a, 0) && fleet.may_start(b, 0));
    let c = fleet.join(&["sms"]);
    fleet.read(c, 100);
    fleet.beat(c, 100);
    fleet.step(c, 110);
    assert!(!fleet.may_start(c, 110), "no acknowledgement yet");
    // a reads the newcomer: it owes an acknowledgement at once, and its dispatcher starts
    // nothing until it runs at the smaller share.
    fleet.read(a, 120);
    assert!(fleet.members[a].ledger.owes_ack());
    assert!(!fleet.may_start(a, 120), "the counts grew: not applied yet");
    fleet.beat(a, 130);
    fleet.apply(a);
    assert!(fleet.may_start(a, 130));
    fleet.step(c, 140);
    assert!(!fleet.may_start(c, 140), "b has not acknowledged");
    fleet.check(140);
    fleet.step(b, 150);
    fleet.beat(b, 150);
    fleet.step(c, 160);
    assert!(fleet.may_start(c, 160));
    fleet.check(160);
}

#[test]
fn a_member_that_leaves_gives_its_share_back_when_the_leave_is_read() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    fleet.round(0);
    fleet.members[b].ledger.leave();
    assert!(!fleet.may_start(b, 0), "fenced at once");
    fleet.beat(b, 10);
    fleet.step(a, 20);
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 1);
    assert!(fleet.may_start(a, 20));
    fleet.check(20);
}

#[test]
fn a_killed_member_is_dropped_after_its_lease_could_have_lasted_and_not_before() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    fleet.round(0);
    fleet.members[b].dead = true;
    let mut dropped_at = None;
    for ms in (1000..10_000).step_by(1000) {
        fleet.round(ms);
        if dropped_at.is_none() && fleet.members[a].applied.sharing(Some("sms")) == 1 {
            dropped_at = Some(ms);
        }
    }
    // Last heard at 0: lease (3 s) + read-back bound (1 s), seen on its own heartbeat.
    assert_eq!(dropped_at, Some(4000));
    assert!(fleet.may_start(a, 9000));
}

#[test]
fn a_stopped_member_cannot_start_when_it_resumes_after_the_others_dropped_it() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    fleet.round(0);
    // b stops (SIGSTOP): it neither writes nor reads, but its lease is still checked.
    for ms in (1000..8000).step_by(1000) {
        fleet.beat(a, ms);
        fleet.step(a, ms);
        fleet.check(ms);
    }
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 1);
    assert!(!fleet.may_start(b, 3000), "its lease ended at 3 s");
    // b resumes: a heartbeat written before it notices goes out in a new epoch.
    fleet.beat(b, 8000);
    fleet.check(8000);
    fleet.step(b, 8010);
    assert!(
        !fleet.may_start(b, 8010),
        "a newcomer again: it waits for a"
    );
    fleet.check(8010);
    fleet.round(8100);
    assert!(fleet.may_start(b, 8100));
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 2);
}

#[test]
fn a_heartbeat_read_back_late_renews_nothing() {
    let mut fleet = Fleet::new();
    let a = fleet.join(&["sms"]);
    fleet.round(0);
    fleet.beat(a, 1000);
    fleet.step(a, 2500);
    assert!(fleet.may_start(a, 2500), "the first lease holds until 3 s");
    assert!(
        !fleet.may_start(a, 3000),
        "read back 1.5 s late: not renewed"
    );
}

#[test]
fn a_tombstone_or_leave_forged_under_a_member_s_key_makes_it_join_again() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    fleet.round(0);
    fleet.write("member/w1", None);
    fleet.step(a, 10);
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 1);
    fleet.step(b, 20);
    assert!(
        !fleet.may_start(b, 20),
        "b learns it is not counted and stops"
    );
    fleet.check(20);
    fleet.round(30);
    assert!(fleet.may_start(a, 30) && fleet.may_start(b, 30));
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 2);
}

#[test]
fn junk_and_made_up_members_never_raise_a_share() {
    let mut fleet = Fleet::new();
    let a = fleet.join(&["sms"]);
    fleet.round(0);
    fleet.write("member/bad id", Some(b"{}".to_vec()));
    fleet.write("member/x", Some(b"not json".to_vec()));
    let ghost = Heartbeat::new(0, 1, "g", 0, &["sms".to_owned()], false);
    fleet.write("member/ghost", Some(ghost.encode()));
    fleet.step(a, 10);
    assert_eq!(
        fleet.members[a].applied.sharing(Some("sms")),
        2,
        "a made-up member only lowers the share"
    );
    for id in 0..(MAX_MEMBERS + 10) {
        let ghost = Heartbeat::new(0, 1, "g", 0, &["sms".to_owned()], false);
        fleet.write(&format!("member/g{id}"), Some(ghost.encode()));
    }
    fleet.step(a, 20);
    assert_eq!(fleet.members[a].ledger.others.len(), MAX_MEMBERS);
    fleet.round(10_000);
    assert_eq!(
        fleet.members[a].applied.sharing(Some("sms")),
        1,
        "silent ghosts are dropped"
    );
}

/// Random schedules of beats, reads, applies, joins, leaves, kills and stops over four rates
/// of time: the shares never add up to more than the rate.
#[test]
fn the_shares_never_add_up_to_more_than_the_rate_under_random_schedules() {
    for seed in 0..300 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut fleet = Fleet::new();
        let mut stopped: Vec<bool> = Vec::new();
        let mut next_beat: Vec<u64> = Vec::new();
        let mut ms = 0;
        for _ in 0..600 {
            ms += rng.random_range(0..if seed % 2 == 0 { 60 } else { 400 });
            let alive = fleet.members.iter().filter(|m| !m.dead).count();
            if alive < 6 && rng.random_bool(0.01) {
                fleet.join(&["sms"]);
                stopped.push(false);
                next_beat.push(ms);
            }
            let n = fleet.members.len();
            if n == 0 {
                continue;
            }
            let i = rng.random_range(0..n);
            match rng.random_range(0..100) {
                0 => fleet.members[i].dead = true,
                1 => fleet.members[i].ledger.leave(),
                2 => stopped[i] = !stopped[i],
                3 if !stopped[i] => {
                    // Its records ran out, or came back.
                    let wanted: std::collections::BTreeSet<String> =
                        if fleet.members[i].ledger.claims.is_empty() {
                            ["sms".to_owned()].into()
                        } else {
                            Default::default()
                        };
                    let now = fleet.at(ms);
                    fleet.members[i].ledger.want(&wanted, now);
                }
                _ if stopped[i] => {}
                4..40 => fleet.read(i, ms),
                40..75 => fleet.apply(i),
                _ => {}
            }
            for j in 0..n {
                let owes = fleet.members[j].ledger.owes_ack();
                if !stopped[j] && (ms >= next_beat[j] || owes && rng.random_bool(0.3)) {
                    fleet.beat(j, ms);
                    next_beat[j] = ms + 1000;
                }
            }
            let sum = fleet.shares("sms", ms);
            assert!(
                sum <= 1_000_000,
                "seed {seed} at {ms} ms: shares add up to {sum}"
            );
        }
    }
}

#[test]
fn a_member_without_work_takes_no_share_and_a_new_claim_waits_for_the_others() {
    let mut fleet = Fleet::new();
    let (a, b) = (fleet.join(&["sms"]), fleet.join(&["sms"]));
    let idle = fleet.join(&[]);
    fleet.round(0);
    assert_eq!(
        fleet.members[a].applied.sharing(Some("sms")),
        2,
        "idle claims nothing"
    );
    let now = fleet.at(100);
    let wanted = ["sms".to_owned()].into();
    assert!(fleet.members[idle].ledger.want(&wanted, now), "a new claim");
    fleet.beat(idle, 100);
    fleet.step(idle, 110);
    assert!(!fleet.may_start(idle, 110), "claimed, not acknowledged");
    fleet.check(110);
    fleet.round(200);
    assert!(fleet.may_start(idle, 200));
    assert_eq!(fleet.members[a].applied.sharing(Some("sms")), 3);
    // Its records ran out: it gives the claim up at once, then says so.
    let now = fleet.at(300);
    assert!(
        fleet.members[idle].ledger.want(&Default::default(), now),
        "a claim given up is a change: a heartbeat says so at once"
    );
    assert!(
        !fleet.members[idle].ledger.want(&Default::default(), now),
        "no change, no early heartbeat"
    );
    assert!(!fleet.may_start(idle, 300));
    fleet.round(300);
    assert_eq!(fleet.members[b].applied.sharing(Some("sms")), 2);
    fleet.check(300);
}
