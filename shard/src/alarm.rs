//! A one-shot timer with microsecond precision, for the shard actor's group commit.
//!
//! tokio's timers (and so actix's `run_later`) tick in whole milliseconds: a wait of 250 µs
//! for the writers a commit answered (`[limits] commit_coalesce_us`) lasted a millisecond or
//! more whenever they did not all come back, which is most of a durable write's latency once
//! its fdatasync takes a few hundred microseconds. A timerfd armed with the exact delay and
//! registered with the worker thread's reactor rings when asked: the wait costs what it says.
//!
//! One per shard actor, used only on its thread. A ring that nobody waits for any more (the
//! writers came back first) is disarmed, and arming it again resets its count, so a late
//! expiry never ends the next wait early.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec,
};
use tokio::io::unix::AsyncFd;

pub struct Alarm {
    fd: Rc<AsyncFd<OwnedFd>>,
}

impl Alarm {
    /// A disarmed alarm on the current thread's tokio reactor (call it on the actor's thread).
    pub fn new() -> io::Result<Self> {
        let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        // `AsyncFd::new` is deprecated because a borrowed descriptor could be closed while
        // registered. This one is an `OwnedFd` the AsyncFd owns: it stays open until the
        // AsyncFd deregisters it on drop. (`register`, the replacement, is `unsafe`, which
        // this crate forbids.)
        #[allow(deprecated)]
        let fd = AsyncFd::new(fd)?;
        Ok(Self { fd: Rc::new(fd) })
    }

    /// Arms it to ring `after` from now, replacing any earlier setting and expiry.
    pub fn set(&self, after: Duration) -> io::Result<()> {
        // A zero it_value would disarm it: ring after a nanosecond instead.
        let after = after.max(Duration::from_nanos(1));
        self.settime(Timespec { tv_sec: after.as_secs() as _, tv_nsec: after.subsec_nanos() as _ })
    }

    /// Stops it: a wait given up on rings nobody.
    pub fn disarm(&self) -> io::Result<()> {
        self.settime(Timespec { tv_sec: 0, tv_nsec: 0 })
    }

    fn settime(&self, value: Timespec) -> io::Result<()> {
        let spec = Itimerspec { it_interval: Timespec { tv_sec: 0, tv_nsec: 0 }, it_value: value };
        timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &spec)?;
        Ok(())
    }

    /// Resolves when it rings (the expiry read, so the next `set` starts from nothing).
    /// Not tied to `self`: the actor keeps it in a spawned future it may cancel.
    pub fn rung(&self) -> impl Future<Output = io::Result<()>> + 'static {
        let fd = Rc::clone(&self.fd);
        async move {
            loop {
                let mut ready = fd.readable().await?;
                let read = ready.try_io(|inner| {
                    let mut count = [0u8; 8];
                    rustix::io::read(inner.get_ref(), &mut count).map_err(io::Error::from)
                });
                match read {
                    Ok(Ok(_)) => return Ok(()),
                    Ok(Err(e)) => return Err(e),
                    // Readiness left from an expiry a `set` since has reset: wait again.
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

/// Waits `duration`, to the microsecond where a timerfd can be had (else tokio's timer,
/// rounded up to its millisecond). For waits whose length must not tell anything: a
/// refused bind that did less work than another (router::op::credentials).
pub async fn sleep_precisely(duration: Duration) {
    let rung = Alarm::new().and_then(|alarm| {
        alarm.set(duration)?;
        Ok(alarm.rung())
    });
    match rung {
        Ok(rung) => {
            if rung.await.is_err() {
                tokio::time::sleep(duration).await;
            }
        }
        Err(_) => tokio::time::sleep(duration).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// It rings, and never before its delay. How soon after (well under tokio's millisecond
    /// tick, which is why it exists) is a matter for the benchmarks: the group commit's
    /// modify A/B in docs/BENCHMARKS.md ("The group commit's wait, timed to the
    /// microsecond").
    #[test]
    fn rings_after_the_delay_and_not_before() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let alarm = Alarm::new().unwrap();
            for _ in 0..20 {
                let start = Instant::now();
                alarm.set(Duration::from_micros(200)).unwrap();
                let rang = tokio::time::timeout(Duration::from_secs(10), alarm.rung()).await;
                assert!(matches!(rang, Ok(Ok(()))), "the alarm did not ring: {rang:?}");
                assert!(start.elapsed() >= Duration::from_micros(200), "rang early: {:?}", start.elapsed());
            }
        });
    }

    #[test]
    fn a_disarmed_or_reset_alarm_does_not_ring_early() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let alarm = Alarm::new().unwrap();
            // An expiry nobody read, then a new, longer setting: the wait lasts the new delay.
            alarm.set(Duration::from_micros(10)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            let start = Instant::now();
            alarm.set(Duration::from_millis(5)).unwrap();
            alarm.rung().await.unwrap();
            assert!(start.elapsed() >= Duration::from_millis(5), "{:?}", start.elapsed());
            // Disarmed: it does not ring.
            alarm.set(Duration::from_millis(1)).unwrap();
            alarm.disarm().unwrap();
            let waited = tokio::time::timeout(Duration::from_millis(20), alarm.rung()).await;
            assert!(waited.is_err(), "a disarmed alarm rang");
        });
    }
}
