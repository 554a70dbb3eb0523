//! The hash pool: the threads every password hash and check runs on, apart from the worker
//! threads that serve connections and host the shards' writers.
//!
//! Why: an argon2 check takes tens of milliseconds and 19 MiB by design. On a worker thread
//! it would stall every other connection of that thread for as long; 500 of them at once
//! would hold 500 × 19 MiB. Here each thread runs one job at a time, so the memory in use
//! is at most threads × the largest `m` a value may ask for (`argon2::M_COST_KIB_MAX`), and
//! the threads run at a lower priority (set by the caller's `on_thread_start`), so lookups
//! go first when the CPUs are busy.
//!
//! Jobs wait in one bounded queue. A job that finds it full fails at once with
//! [`PoolError::Busy`] (a bind then gets busy (51)); nothing waits without bound, and the
//! memory of a queued job is its password and stored values only.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// One unit of work: a hash or a check, with its answer channel inside.
type Job = Box<dyn FnOnce() + Send>;

/// Why a job did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The queue was full.
    #[error("too many password checks in progress")]
    Busy,
    /// The pool has no threads (an offline tool), or the job ended without an answer.
    #[error("password checks are not available")]
    Stopped,
}

pub struct HashPool {
    sender: SyncSender<Job>,
    threads: usize,
    queue_max: usize,
}

impl std::fmt::Debug for HashPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashPool")
            .field("threads", &self.threads)
            .field("queue_max", &self.queue_max)
            .finish()
    }
}

impl HashPool {
    /// Starts `threads` threads (at least one) named `password-hash`, each running
    /// `on_thread_start` first, sharing a queue of `queue_max` jobs. With `queue_max` 0 a job
    /// runs only if a thread is idle.
    pub fn start(
        threads: usize,
        queue_max: usize,
        on_thread_start: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (sender, receiver) = mpsc::sync_channel::<Job>(queue_max);
        let receiver = Arc::new(Mutex::new(receiver));
        let on_thread_start = Arc::new(on_thread_start);
        for index in 0..threads {
            let (receiver, on_thread_start) = (receiver.clone(), on_thread_start.clone());
            std::thread::Builder::new().name(format!("password-hash-{index}")).spawn(move || {
                on_thread_start();
                serve(&receiver);
            })?;
        }
        Ok(Self { sender, threads, queue_max })
    }

    /// A pool without threads, for the offline tools (import, restore), which never hash or
    /// check: every job fails with [`PoolError::Stopped`].
    pub fn offline() -> Self {
        let (sender, _receiver) = mpsc::sync_channel::<Job>(0);
        Self { sender, threads: 0, queue_max: 0 }
    }

    /// Runs `work` on a pool thread and waits for its answer without blocking the caller's
    /// thread. Fails at once when the queue is full.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PoolError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = reply.send(work());
        });
        self.sender.try_send(job).map_err(|error| match error {
            TrySendError::Full(_) => PoolError::Busy,
            TrySendError::Disconnected(_) => PoolError::Stopped,
        })?;
        answer.await.map_err(|_| PoolError::Stopped)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// One thread's loop: take the next job, run it, until the pool is dropped. A job that
/// panics loses only its own answer (its caller sees [`PoolError::Stopped`]).
fn serve(receiver: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for a job, never while running one.
        let job = match receiver.lock() {
            Ok(guard) => guard.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(job) = job else { return };
        if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("a password job panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(future)
    }

    #[test]
    fn runs_jobs_on_its_threads() {
        let started = Arc::new(AtomicUsize::new(0));
        let counter = started.clone();
        let pool = HashPool::start(2, 4, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let name = block_on(pool.run(|| std::thread::current().name().map(str::to_string))).unwrap();
        assert!(name.unwrap().starts_with("password-hash-"));
        // The job ran on one thread; the other may still be starting on a busy machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while started.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_full_queue_fails_at_once() {
        let pool = HashPool::start(1, 1, || {}).unwrap();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (running_tx, running_rx) = tokio::sync::oneshot::channel::<()>();
        block_on(async {
            // One job runs (blocked), one waits in the queue, the third is refused. Each step
            // waits for the one before it, not for a sleep, so a busy machine cannot reorder them.
            let running = pool.run(move || {
                let _ = running_tx.send(());
                wait.recv().ok()
            });
            let rest = async {
                running_rx.await.unwrap();
                let queued = pool.run(|| 2);
                let third = async {
                    let third = pool.run(|| 3).await;
                    release.send(()).unwrap();
                    third
                };
                tokio::join!(queued, third)
            };
            let (first, (second, third)) = tokio::join!(running, rest);
            assert_eq!(third, Err(PoolError::Busy));
            assert_eq!(first, Ok(Some(())));
            assert_eq!(second, Ok(2));
        });
    }

    #[test]
    fn a_panicking_job_loses_only_its_answer() {
        let pool = HashPool::start(1, 4, || {}).unwrap();
        #[allow(clippy::panic)]
        let lost = block_on(pool.run(|| -> u8 { panic!("test") }));
        assert_eq!(lost, Err(PoolError::Stopped));
        assert_eq!(block_on(pool.run(|| 7)), Ok(7));
    }

    #[test]
    fn offline_pools_refuse() {
        assert_eq!(block_on(HashPool::offline().run(|| 1)), Err(PoolError::Stopped));
    }
}
