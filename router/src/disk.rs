//! Free space on the data directory's filesystem, as the server's disk monitor last saw it,
//! and the rule that follows from it: below `[limits] disk_free_min_bytes` client writes
//! are refused with unwillingToPerform (53) "disk space low" before the disk is full, and
//! they are taken again by themselves once the space is back (docs/OPERATIONS.md, "A full
//! disk"). The reserve left below the threshold is what the server's own small writes
//! (password policy bookkeeping, checkpoints of the write logs) still need.
//!
//! One value per server, written by the monitor's thread once a second and read by every
//! write: a read of a line nobody else writes in between costs nothing that scales with
//! cores.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::LdapError;

#[derive(Debug)]
pub struct DiskSpace {
    /// `[limits] disk_free_min_bytes`; 0: no threshold. A reload may change it.
    min: AtomicU64,
    /// Bytes free for the server's user at the last look; `u64::MAX` before the first.
    free: AtomicU64,
    low: AtomicBool,
}

impl Default for DiskSpace {
    /// No threshold, nothing seen: writes are never refused for space.
    fn default() -> Self {
        Self::new(0)
    }
}

impl DiskSpace {
    pub fn new(min: u64) -> Self {
        Self { min: AtomicU64::new(min), free: AtomicU64::new(u64::MAX), low: AtomicBool::new(false) }
    }

    /// A reload's threshold, applied at the next look.
    pub fn set_min(&self, min: u64) {
        self.min.store(min, Ordering::Relaxed);
    }

    pub fn min(&self) -> u64 {
        self.min.load(Ordering::Relaxed)
    }

    /// Bytes free at the last look (`u64::MAX`: not looked yet).
    pub fn free(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// Records a look at the filesystem: `free` bytes available. Returns whether writes
    /// are refused now, and whether that changed with this look.
    pub fn observe(&self, free: u64) -> (bool, bool) {
        self.free.store(free, Ordering::Relaxed);
        let min = self.min();
        let low = min > 0 && free < min;
        let was = self.low.swap(low, Ordering::Relaxed);
        (low, was != low)
    }

    pub fn is_low(&self) -> bool {
        self.low.load(Ordering::Relaxed)
    }

    /// The refusal a client write gets while space is low.
    pub fn check(&self) -> Result<(), LdapError> {
        if self.is_low() {
            return Err(LdapError::unwilling("disk space low: writes are refused until space is freed"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_refused_below_the_threshold_and_taken_again_above_it() {
        let disk = DiskSpace::new(1000);
        assert!(disk.check().is_ok(), "nothing seen yet");
        assert_eq!(disk.observe(5000), (false, false));
        assert_eq!(disk.observe(999), (true, true));
        let refusal = disk.check().unwrap_err();
        assert_eq!(refusal.code.0, 53);
        assert!(refusal.message.contains("disk space low"), "{}", refusal.message);
        assert_eq!(disk.observe(10), (true, false));
        assert_eq!(disk.observe(1000), (false, true));
        assert!(disk.check().is_ok());
        // 0 turns the threshold off, even on a full disk.
        disk.set_min(0);
        assert_eq!(disk.observe(0), (false, false));
    }
}
