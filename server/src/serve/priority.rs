//! Lowering a thread's scheduling priority, for the threads whose work may wait while the
//! CPUs are busy: the search pool's scans and the password hash pool's hashes.

/// Sets the calling thread's nice value (Linux: per thread), clamped to 0-19. Best effort:
/// a failure only means `threads` compete with lookups on equal terms, and is logged.
pub fn lower_this_thread(nice: i32, threads: &str) {
    let nice = nice.clamp(0, 19);
    if nice == 0 {
        return;
    }
    // SAFETY: gettid and setpriority take no pointers; they act on this thread only.
    let result = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, u32::try_from(tid).unwrap_or(0), nice)
    };
    if result != 0 {
        tracing::warn!(nice, threads, "could not lower the threads' priority");
    }
}
