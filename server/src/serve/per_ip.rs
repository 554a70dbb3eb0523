//! The per-IP connection limit (`[limits] connections_per_ip_max`), applied at accept.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections open per client IP address, counted at accept and close only (never on the
/// path of a request), so one mutex is no contention.
pub struct PerIp {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// 0 = unlimited.
    max: usize,
    exempt_loopback: bool,
}

/// One admitted connection's place in its IP's count; gives it back when dropped.
pub struct IpSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PerIp {
    pub fn new(limits: &crate::config::Limits) -> Self {
        Self {
            counts: Arc::default(),
            max: limits.connections_per_ip_max,
            exempt_loopback: limits.connections_per_ip_exempt_loopback,
        }
    }

    /// A slot for one more connection from `ip`, or None when it has `max` open. Exempt
    /// connections aren't counted (None is never returned for them).
    pub fn admit(&self, ip: IpAddr) -> Option<Option<IpSlot>> {
        let ip = ip.to_canonical();
        if self.max == 0 || (self.exempt_loopback && ip.is_loopback()) {
            return Some(None);
        }
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Some(IpSlot { counts: self.counts.clone(), ip }))
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}
