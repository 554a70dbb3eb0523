//! The CSN clock of one directory: a monotonic count of microseconds that every shard's
//! writes take their entryCSN from, so that CSNs never repeat or go back, even across
//! shards. Only writes touch it; reads never do. It is seeded at startup with the highest
//! CSN a shard has committed (`watermark`), so a wall clock set back doesn't make CSNs go
//! back either.
//!
//! The clock carries the configured `server_id`, which every CSN names in its third field
//! (three hex digits, as slapd writes it), so that the CSNs of several providers never
//! collide. One value, made by whoever opens the directory (the server, an import, a unit
//! test) and reached through the watermark hub: two directories in one process (the
//! in-process tests) keep two clocks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::write::stamp::{civil_time, format_csn, Stamp};

/// The highest server id a CSN can carry (three hex digits).
pub const SERVER_ID_MAX: u32 = 4095;

#[derive(Debug, Default)]
pub struct Clock {
    /// The last tick handed out (microseconds since the epoch; 0 before the first).
    micros: AtomicU64,
    server_id: u32,
}

impl Clock {
    /// A clock stamping `server_id` (clamped to [`SERVER_ID_MAX`]) into its CSNs.
    pub fn new(server_id: u32) -> Self {
        Self { micros: AtomicU64::new(0), server_id: server_id.min(SERVER_ID_MAX) }
    }

    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    /// The last tick (0 before the first).
    pub fn now(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }

    /// Moves the clock to at least `micros` (the highest CSN committed before a restart, or
    /// a replicated entry's).
    pub fn seed(&self, micros: u64) {
        self.micros.fetch_max(micros, Ordering::SeqCst);
    }

    /// The CSN of a tick, with this clock's server id.
    pub fn csn_of(&self, micros: u64) -> String {
        format_csn(micros, self.server_id)
    }

    /// Takes the next tick: the wall clock, or one past the last tick if that is later.
    pub fn tick(&self) -> u64 {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
        let mut last = self.micros.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last + 1);
            // SeqCst: the watermark (`watermark.rs`) reads this clock and the shards' floors
            // in one total order.
            match self.micros.compare_exchange_weak(last, next, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// One write's stamp: the next tick, its CSN and its time, by `author`.
    pub fn stamp(&self, author: &str) -> Stamp {
        let micros = self.tick();
        // One civil time for both stamps (`format_csn`'s form, without computing it twice).
        let civil = civil_time(micros / 1_000_000);
        let csn = format!("{civil}.{:06}Z#000000#{:03x}#000000", micros % 1_000_000, self.server_id);
        Stamp { author: author.to_string(), time: format!("{civil}Z"), csn, micros }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csns_strictly_rise_and_carry_the_server_id() {
        let clock = Clock::new(0xabc);
        let a = clock.stamp("cn=a");
        let b = clock.stamp("cn=a");
        assert!(b.csn > a.csn, "{} then {}", a.csn, b.csn);
        assert_eq!(a.time.len(), 15);
        // The stamp's CSN is the clock tick's, and its time the same second.
        assert_eq!(b.csn, clock.csn_of(b.micros));
        assert_eq!(b.time[..14], b.csn[..14]);
        assert!(b.csn.contains("#abc#"), "{}", b.csn);
        assert_eq!(clock.now(), b.micros);
    }

    #[test]
    fn a_seeded_clock_never_goes_back() {
        let clock = Clock::new(SERVER_ID_MAX + 10);
        assert_eq!(clock.server_id(), SERVER_ID_MAX);
        let far = clock.tick() + 60_000_000;
        clock.seed(far);
        clock.seed(far - 5);
        assert!(clock.tick() > far);
    }

    #[test]
    fn two_clocks_are_independent() {
        let (one, two) = (Clock::new(1), Clock::new(2));
        one.seed(u64::MAX / 2);
        assert!(two.now() < u64::MAX / 2);
    }
}
