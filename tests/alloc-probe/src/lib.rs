//! A counting global allocator for tests: how large the largest single allocation of a piece of
//! code is, so a test can prove a decoder never reserves more than the bytes it was given justify.
//!
//! Install [`CountingAllocator`] as the test binary's global allocator, then [`measure`] a
//! closure. Only allocations made on the calling thread while it runs are counted; other threads
//! (the test harness's own, or any the closure spawns) are not.
//!
//! ```
//! use alloc_probe::{CountingAllocator, measure};
//!
//! #[global_allocator]
//! static ALLOCATOR: CountingAllocator = CountingAllocator;
//!
//! let (v, m) = measure(|| Vec::<u8>::with_capacity(4096));
//! assert!(m.largest >= 4096);
//! assert!(m.check_largest(1024).is_err());
//! drop(v);
//! ```
//!
//! Allocations the closure makes through the C allocator (`malloc` inside a `-sys` crate such as
//! zstd or lz4) do not pass through Rust's global allocator and are not seen.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt;

/// A global allocator that delegates to [`System`] and, on a thread inside [`measure`], records
/// the size of every allocation (`alloc`, `alloc_zeroed`, and the new size of `realloc`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

// The allocator's own state must never allocate: `const`-initialised `Cell`s of plain integers
// need no lazy initialisation and no destructor registration, and `try_with` tolerates a thread
// that is being torn down.
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    if !ARMED.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    let _ = LARGEST.try_with(|c| c.set(c.get().max(size)));
    let _ = TOTAL.try_with(|c| c.set(c.get().saturating_add(size)));
    let _ = COUNT.try_with(|c| c.set(c.get().saturating_add(1)));
}

// The one unsafe item of this crate. `GlobalAlloc` is an unsafe trait; every method forwards its
// arguments unchanged to `System`, so the caller's obligations (a non-zero-size layout, a pointer
// this allocator returned with that layout) are exactly the ones `System` requires. Recording
// touches only the thread-local `Cell`s above and never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded unchanged; see above.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded unchanged; see above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: forwarded unchanged; see above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; see above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What [`measure`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measurement {
    /// The largest single allocation, in bytes (a `realloc` counts with its new size).
    pub largest: usize,
    /// All bytes requested (each `realloc` adds its new size).
    pub total: usize,
    /// How many allocations and reallocations were made.
    pub count: usize,
}

/// An allocation larger than a test allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun {
    /// The largest single allocation seen.
    pub largest: usize,
    /// The most the test allowed.
    pub limit: usize,
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a single allocation of {} bytes, more than the {} allowed",
            self.largest, self.limit
        )
    }
}

impl std::error::Error for Overrun {}

impl Measurement {
    /// `Ok` unless one allocation was larger than `limit` bytes.
    pub fn check_largest(&self, limit: usize) -> Result<(), Overrun> {
        if self.largest > limit {
            Err(Overrun {
                largest: self.largest,
                limit,
            })
        } else {
            Ok(())
        }
    }
}

/// Restores the enclosing measurement (if any) when a [`measure`] ends, even by a panic, and
/// folds what was seen into it.
struct Scope {
    outer: (bool, Measurement),
}

fn current() -> Measurement {
    Measurement {
        largest: LARGEST.try_with(Cell::get).unwrap_or(0),
        total: TOTAL.try_with(Cell::get).unwrap_or(0),
        count: COUNT.try_with(Cell::get).unwrap_or(0),
    }
}

fn set(armed: bool, m: Measurement) {
    let _ = LARGEST.try_with(|c| c.set(m.largest));
    let _ = TOTAL.try_with(|c| c.set(m.total));
    let _ = COUNT.try_with(|c| c.set(m.count));
    let _ = ARMED.try_with(|c| c.set(armed));
}

impl Drop for Scope {
    fn drop(&mut self) {
        let inner = current();
        let (armed, outer) = self.outer;
        let merged = if armed {
            Measurement {
                largest: outer.largest.max(inner.largest),
                total: outer.total.saturating_add(inner.total),
                count: outer.count.saturating_add(inner.count),
            }
        } else {
            Measurement::default()
        };
        set(armed, merged);
    }
}

/// Runs `f` and measures the allocations it makes on this thread. Measurements nest: an inner
/// `measure` reports only its own allocations, and they count toward the enclosing one too.
/// Without [`CountingAllocator`] installed as the global allocator every measurement is zero.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Measurement) {
    let scope = Scope {
        outer: (ARMED.try_with(Cell::get).unwrap_or(false), current()),
    };
    set(true, Measurement::default());
    let value = f();
    // Read before the scope restores the enclosing measurement.
    let seen = current();
    drop(scope);
    (value, seen)
}

#[cfg(test)]
mod tests {
    use std::hint::black_box;

    use super::*;

    #[global_allocator]
    static ALLOCATOR: CountingAllocator = CountingAllocator;

    #[test]
    fn a_large_reservation_is_measured() {
        let (v, m) = measure(|| black_box(Vec::<u8>::with_capacity(1 << 20)));
        assert!(m.largest >= 1 << 20, "{m:?}");
        assert!(m.total >= 1 << 20 && m.count >= 1, "{m:?}");
        drop(v);
    }

    #[test]
    fn zeroed_allocations_and_reallocations_are_measured() {
        let (v, m) = measure(|| black_box(vec![0u8; 3 << 10]));
        assert!(m.largest >= 3 << 10, "{m:?}");
        let mut v = v;
        let ((), m) = measure(|| v.reserve_exact(64 << 10));
        assert!(m.largest >= 64 << 10, "{m:?}");
    }

    #[test]
    fn nothing_is_measured_outside_measure() {
        let ((), _) = measure(|| ());
        assert_eq!(current(), Measurement::default());
        let v = black_box(Vec::<u8>::with_capacity(1 << 20));
        drop(v);
        assert_eq!(
            current(),
            Measurement::default(),
            "a disarmed allocation counted"
        );
        assert!(!ARMED.with(Cell::get));
    }

    #[test]
    fn other_threads_are_not_measured() {
        let (joined, m) = measure(|| {
            // Spawning allocates on this thread (the thread's handle); the large buffer does not.
            std::thread::spawn(|| black_box(Vec::<u8>::with_capacity(8 << 20)).capacity()).join()
        });
        assert_eq!(joined.ok(), Some(8 << 20));
        assert!(m.largest < 8 << 20, "{m:?}");
    }

    #[test]
    fn measurements_nest() {
        let ((inner, small), outer) = measure(|| {
            let small = black_box(Vec::<u8>::with_capacity(100));
            let (big, inner) = measure(|| black_box(Vec::<u8>::with_capacity(10_000)));
            drop(big);
            (inner, small)
        });
        drop(small);
        assert!(inner.largest >= 10_000 && inner.count == 1, "{inner:?}");
        assert!(
            outer.largest >= 10_000,
            "the inner allocation counts outside too: {outer:?}"
        );
        assert!(outer.count >= 2, "{outer:?}");
        let ((), after) = measure(|| ());
        assert_eq!(after, Measurement::default());
    }

    #[test]
    fn a_panic_inside_ends_the_measurement() {
        let caught = std::panic::catch_unwind(|| measure(|| panic!("boom")));
        assert!(caught.is_err());
        let ((), after) = measure(|| ());
        assert_eq!(after, Measurement::default());
    }

    #[test]
    fn an_allocation_beyond_the_limit_is_an_overrun() {
        let claimed_len = 1usize << 24;
        let input = [0u8; 16];
        let (v, m) = measure(|| black_box(Vec::<u8>::with_capacity(claimed_len)));
        drop(v);
        let limit = input.len() + 1024;
        assert_eq!(
            m.check_largest(limit),
            Err(Overrun {
                largest: m.largest,
                limit
            })
        );
        assert!(m.largest >= claimed_len);
        assert!(measure(|| ()).1.check_largest(0).is_ok());
    }
}
