//! [`EntryUpdate`]: a change computed from an entry as the shard's writer sees it when the
//! write is staged, not as the asker read it. The writer stages one write at a time, on the
//! state every earlier write of the shard leaves, so two updates of one entry sent at once
//! from any workers each see the other's effect: nothing is lost between reading and
//! writing, with no lock and no retry. The password policy's bookkeeping (router
//! `ppolicy`) counts a failed bind this way: each adds its pwdFailureTime value and locks
//! the account when the count staged before it plus itself reaches pwdMaxFailure.
//!
//! The shard knows nothing of what an update means: it asks for the changes, applies them
//! like a Modify's (schema checked, stamped by `author`, replicated as any change), and
//! writes nothing when there are none.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::ldif::LdifMod;

/// The changes to make to an entry, decided from the entry as staged.
pub trait EntryUpdate: Send + Sync + std::fmt::Debug {
    /// The changes for `entry` (its staged state); None, or no change, leaves it as it is.
    fn changes(&self, entry: &Entry) -> Option<Vec<LdifMod>>;
}

/// A condition on the entry a write changes, judged on the entry as staged, in the batch
/// that commits the write (RFC 4528's assertion control): false fails the write with
/// `ShardError::AssertionFailed` and nothing of it is staged.
pub trait EntryCheck: Send + Sync + std::fmt::Debug {
    /// Whether `record` (entry `id`, its staged state; for an Add, the entry to add) passes.
    fn holds(&self, id: crate::id::EntryId, record: &crate::entry::record::EntryRecord) -> bool;
}
