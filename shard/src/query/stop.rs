//! How a search learns that it should stop, and how long it took to notice.
//!
//! One [`StopSignal`] per reason-holder: the session keeps one per operation (Abandon, the
//! connection closing), and a search makes one more for its own limits (sizeLimit,
//! timeLimit, the last shard done). Every shard's part of a search checks both between
//! entries, so a stop reaches a scan within one entry's work wherever it runs. The signal
//! records when it was raised, so the part that notices can report how long that took
//! (logged under the `ferrodir::search_stop` target; the isolation benchmark reads it).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Why a search stopped early.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum StopReason {
    /// Not stopped.
    None = 0,
    Abandon = 1,
    /// The connection closed (or sent Unbind) with the operation in flight.
    Closed = 2,
    SizeLimit = 3,
    TimeLimit = 4,
    /// The router needs nothing more (an error on another shard, the result already known).
    Finished = 5,
    /// The client sent a Cancel (RFC 3909) for the operation.
    Cancel = 6,
}

impl StopReason {
    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Abandon,
            2 => Self::Closed,
            3 => Self::SizeLimit,
            4 => Self::TimeLimit,
            5 => Self::Finished,
            6 => Self::Cancel,
            _ => Self::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Abandon => "abandon",
            Self::Closed => "closed",
            Self::SizeLimit => "size_limit",
            Self::TimeLimit => "time_limit",
            Self::Finished => "finished",
            Self::Cancel => "cancel",
        }
    }
}

/// A flag raised once, with its reason and the moment it was raised.
#[derive(Debug, Default)]
pub struct StopSignal {
    reason: AtomicU8,
    /// Wakes what waits for the signal ([`StopSignal::wait`]) when it is raised.
    wakeup: tokio::sync::Notify,
    /// How the operation's final response went: 0 not yet, [`ANSWERED`] as usual,
    /// [`ANSWERED_CANCELED`] with canceled (118) after a Cancel (what the Cancel answers).
    answered: AtomicU8,
    /// Microseconds since [`epoch`] when raised; 0 while not raised.
    raised_at_us: AtomicU64,
}

const ANSWERED: u8 = 1;
const ANSWERED_CANCELED: u8 = 2;

/// The process-wide zero of [`StopSignal`] timestamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    // At least 1, so that 0 can mean "not raised".
    u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX).max(1)
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the signal; the first reason wins.
    pub fn raise(&self, reason: StopReason) {
        if self.reason.compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.raised_at_us.store(now_us(), Ordering::Release);
            self.wakeup.notify_waiters();
        }
    }

    /// Resolves once the signal is raised: what an operation that sleeps between checks (a
    /// persist search waiting for changes) selects on, so that a Cancel or an Abandon stops
    /// it at once rather than at its next check.
    pub async fn wait(&self) {
        let notified = self.wakeup.notified();
        tokio::pin!(notified);
        // Registered before the check: a raise between the two still wakes it.
        notified.as_mut().enable();
        if self.is_raised() {
            return;
        }
        notified.await;
    }

    /// The operation sent its final response: `canceled` when it answered canceled (118)
    /// because a Cancel stopped it.
    pub fn set_answered(&self, canceled: bool) {
        self.answered.store(if canceled { ANSWERED_CANCELED } else { ANSWERED }, Ordering::Release);
    }

    /// Whether the operation sent its final response, and whether that said canceled.
    pub fn answered(&self) -> Option<bool> {
        match self.answered.load(Ordering::Acquire) {
            ANSWERED => Some(false),
            ANSWERED_CANCELED => Some(true),
            _ => None,
        }
    }

    /// The reason, if raised. One relaxed load: cheap enough to check before every entry.
    pub fn raised(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::Relaxed) {
            0 => None,
            value => Some(StopReason::from_u8(value)),
        }
    }

    pub fn is_raised(&self) -> bool {
        self.reason.load(Ordering::Relaxed) != 0
    }

    /// How long ago the signal was raised, in microseconds (0 if not raised or just now).
    pub fn age_us(&self) -> u64 {
        match self.raised_at_us.load(Ordering::Acquire) {
            0 => 0,
            at => now_us().saturating_sub(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins_and_age_grows() {
        let signal = StopSignal::new();
        assert_eq!(signal.raised(), None);
        signal.raise(StopReason::Abandon);
        signal.raise(StopReason::SizeLimit);
        assert_eq!(signal.raised(), Some(StopReason::Abandon));
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(signal.age_us() >= 2000);
    }
}
