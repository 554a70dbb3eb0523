//! The per-shard commit thread. It owns nothing but the engine handle: it applies one batch
//! at a time, syncs it, and reports back. Keeping the fsync off the worker thread is what
//! lets reads and other connections proceed while a batch commits.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::error::{ShardError, ShardResult};
use crate::storage::{KvEngine, Mutation, StorageError};

pub struct CommitJob {
    pub mutations: Vec<Mutation>,
    pub done: oneshot::Sender<Result<(), StorageError>>,
}

pub struct Committer {
    jobs: SyncSender<CommitJob>,
}

impl Committer {
    /// Hands over a batch. At most one batch is in flight per shard, so the queue of one
    /// never blocks the worker. A refused job comes back.
    pub fn submit(&self, job: CommitJob) -> Result<(), CommitJob> {
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => Err(job),
        }
    }
}

pub fn spawn_committer(engine: Arc<dyn KvEngine>, shard: usize) -> ShardResult<Committer> {
    let (jobs, queue) = sync_channel::<CommitJob>(1);
    std::thread::Builder::new()
        .name(format!("commit-{shard}"))
        .spawn(move || {
            while let Ok(job) = queue.recv() {
                // A panic mid-commit leaves the engine's batch in an unknown state.
                let result = crate::fatal::abort_on_panic("committing a batch", shard, || {
                    engine.commit(&job.mutations)
                });
                let _ = job.done.send(result);
            }
        })
        .map_err(|e| ShardError::Unavailable(format!("cannot start commit thread: {e}")))?;
    Ok(Committer { jobs })
}
