//! The one error type of the bench tools. Variants say who was at fault: the peer (bad
//! frames, unexpected answers), the network, or the command line.

use ferrodir_proto::frame::FrameError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer sent bytes that are not an acceptable LDAPMessage.
    #[error("bad frame from peer: {0}")]
    Frame(#[from] FrameError),
    /// The frame was whole, but not shaped as an LDAPMessage we can read.
    #[error("malformed LDAPMessage from peer: {0}")]
    Malformed(&'static str),
    /// The peer answered with something we did not ask for (another messageID, another
    /// operation, a Notice of Disconnection).
    #[error("unexpected answer from peer: {0}")]
    Unexpected(String),
    /// The peer closed the connection while we waited for an answer.
    #[error("peer closed the connection")]
    Closed,
    #[error("no answer within {0} ms")]
    Timeout(u64),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Encoding one of our own requests failed (a bug or an absurd command line).
    #[error("encoding a request: {0}")]
    Encode(#[from] ferrodir_proto::message::EncodeError),
    /// A command-line value we cannot use.
    #[error("{0}")]
    Config(String),
}
