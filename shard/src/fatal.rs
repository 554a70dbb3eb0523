//! The write path's last line of defence. A panic while a write is staged, while a batch is
//! committed or while a commit is published leaves state half-applied (the staging
//! overlay, the entry cache, Bloom bits, the engine's batch), and serving that state would
//! show a write that never fully happened, or hide one that did. So such a panic ends the
//! process after logging it: the next start reads only what was durable, and the
//! coordinator's intents settle anything cross-shard (docs/ARCHITECTURE.md, "Crash safety").
//! A panic anywhere else (one request's operation) drops only that request's connection.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `work`; if it panics, logs what was being done and aborts the process.
pub fn abort_on_panic<T>(what: &'static str, shard: usize, work: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(value) => value,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(
                shard,
                what,
                panic = %message,
                "panic in a shard's write path: aborting, so that nothing half-written is served"
            );
            std::process::abort()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: &str = "FERRODIR_FATAL_TEST_CHILD";
    /// std::process::abort raises SIGABRT (6 on Linux).
    const SIGABRT: i32 = 6;

    #[test]
    fn a_panic_in_the_write_path_aborts_the_process() {
        if std::env::var_os(CHILD).is_some() {
            abort_on_panic("staging a write", 0, || panic!("injected"));
            // Not reached: the process is gone. Exit cleanly so the parent sees the difference.
            std::process::exit(0);
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fatal::tests::a_panic_in_the_write_path_aborts_the_process", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap()
            .status;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(SIGABRT), "{status:?}");
    }

    #[test]
    fn no_panic_no_abort() {
        assert_eq!(abort_on_panic("staging a write", 0, || 7), 7);
    }
}
