//! The shard's error type. It says what went wrong in directory terms; the router turns it
//! into an LDAP resultCode in one place (`router::error`).

use crate::codec::CorruptRecord;
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
    /// The parent is being deleted or demoted; the router retries after it settles.
    #[error("parent is being changed")]
    ParentClosed,
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Corrupt(#[from] CorruptRecord),
    /// The shard could not take the work (stopped, or a commit failed).
    #[error("shard unavailable: {0}")]
    Unavailable(String),
}

pub type ShardResult<T> = Result<T, ShardError>;
