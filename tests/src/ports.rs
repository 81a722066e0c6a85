//! Ports for the listeners of the processes a test starts (`share-worker`'s telemetry listener and
//! dashboard), which are given a port in their config before they bind it.
//!
//! A port found by binding port 0 and closing it lies in the kernel's ephemeral range: until the
//! child binds it, any outgoing connection of any process (a Kafka client, a browser, another
//! test) may take it as its local port, and the child then fails with "address in use". These
//! ports are taken below the ephemeral range, where no outgoing connection lands, and reserved
//! among the test processes running at once by a lock on a file, held until the process ends.

use std::fs::{File, OpenOptions};
use std::sync::Mutex;

/// The first port handed out: above the local brokers' 9xxx ports.
const FIRST: u16 = 20_000;
/// Ports handed out at most (fewer if the ephemeral range starts lower).
const SPAN: u16 = 10_000;

/// A loopback port nothing listens on and no other test process holds, reserved for this process.
pub fn reserve_port() -> u16 {
    static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
    let end = match ephemeral_start() {
        Some(start) if start > FIRST + 100 => start.min(FIRST + SPAN),
        _ => FIRST + SPAN,
    };
    let span = end - FIRST;
    let dir = std::env::temp_dir().join("share-worker-test-ports");
    std::fs::create_dir_all(&dir).expect("a directory for the port locks");
    let offset = (uuid::Uuid::new_v4().as_u128() % u128::from(span)) as u16;
    for n in 0..span {
        let port = FIRST + (offset + n) % span;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
            .expect("a port lock file");
        if lock.try_lock().is_err() {
            continue; // another test process holds it
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue; // something outside the tests listens on it
        }
        HELD.lock().expect("the held ports").push(lock);
        return port;
    }
    panic!("no free port in {FIRST}..{end}");
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| reserve_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!((FIRST..FIRST + SPAN).contains(&port), "{port}");
            if let Some(start) = ephemeral_start() {
                assert!(
                    port < start,
                    "{port} is in the ephemeral range from {start}"
                );
            }
            std::net::TcpListener::bind(("127.0.0.1", port)).expect("bindable");
        }
    }
}
