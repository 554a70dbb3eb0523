//! The shard's error type. It says what went wrong in directory terms; the router turns it
//! into an LDAP resultCode in one place (`router::error`).

use crate::entry::codec::CorruptRecord;
use crate::storage::StorageError;

#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    #[error("entry already exists")]
    AlreadyExists,
    #[error("no such object")]
    NoSuchObject,
    #[error("entry has children")]
    NotAllowedOnNonLeaf,
    #[error("no such attribute: {0}")]
    NoSuchAttribute(String),
    #[error("attribute or value exists: {0}")]
    AttributeOrValueExists(String),
    #[error("cannot remove a value of the RDN: {0}")]
    NotAllowedOnRdn(String),
    #[error("{0}")]
    ConstraintViolation(String),
    /// The entry would break the schema; carries the result code slapd answers with.
    #[error("{}", .0.message)]
    Schema(ferrodir_proto::schema::check::Violation),
    /// A write's condition (`write::update::EntryCheck`) was false on the staged entry.
    #[error("assertion failed")]
    AssertionFailed,
    /// The parent is being deleted or demoted; the router retries after it settles.
    #[error("parent is being changed")]
    ParentClosed,
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Corrupt(#[from] CorruptRecord),
    /// A configured bound on the work a request may cause was reached (memberOf's chain
    /// caps: `memberof_chain_depth_max`, `memberof_chain_entries_max`).
    #[error("{0}")]
    AdminLimitExceeded(String),
    /// The shard could not take the work (stopped, or a commit failed).
    #[error("shard unavailable: {0}")]
    Unavailable(String),
}

impl ShardError {
    /// Whether a failed write may nevertheless have happened. A write refused while it was
    /// staged (a name taken, a closed parent, a schema violation) is known not to have
    /// happened. One that met a storage error may have reached the disk before the error
    /// (a failed fsync), and one the shard never answered (stopped, its mailbox gone) may
    /// have been applied: recovery must decide those from what the shard holds, never from
    /// the error.
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            ShardError::Storage(_) | ShardError::Unavailable(_) => true,
            ShardError::AlreadyExists
            | ShardError::NoSuchObject
            | ShardError::NotAllowedOnNonLeaf
            | ShardError::NoSuchAttribute(_)
            | ShardError::AttributeOrValueExists(_)
            | ShardError::NotAllowedOnRdn(_)
            | ShardError::ConstraintViolation(_)
            | ShardError::Schema(_)
            | ShardError::ParentClosed
            | ShardError::AssertionFailed
            | ShardError::AdminLimitExceeded(_)
            | ShardError::Corrupt(_) => false,
        }
    }
}

pub type ShardResult<T> = Result<T, ShardError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_after_staging_leave_the_outcome_unknown() {
        let unknown = [
            ShardError::Storage(StorageError("fsync failed".into())),
            ShardError::Unavailable("stopped".into()),
        ];
        assert!(unknown.iter().all(ShardError::is_outcome_unknown));
        let refused = [
            ShardError::AlreadyExists,
            ShardError::NoSuchObject,
            ShardError::NotAllowedOnNonLeaf,
            ShardError::ParentClosed,
            ShardError::ConstraintViolation("x".into()),
        ];
        assert!(refused.iter().all(|e| !e.is_outcome_unknown()));
    }
}
