//! Cancel (RFC 3909, extended operation 1.3.6.1.1.8): stop another operation of the same
//! connection and say how that went. The session finds the operation by messageID and
//! raises its stop signal with `StopReason::Cancel`; a search checks the signal between
//! entries and a Compare before it answers, so a read stops within milliseconds and
//! answers canceled (118). A write has gone too far once it runs (its shard commits it):
//! it answers as it is, and the Cancel says so. The Cancel answers after the cancelled
//! operation, as the RFC asks:
//! - success (0): the operation answered canceled;
//! - noSuchOperation (119): no operation of this connection has that messageID (a Bind,
//!   an Unbind, an Abandon, a StartTLS or a Cancel never waits to be cancelled: they are
//!   answered, or refused, before the next request is read);
//! - tooLate (120): the operation answered anyway;
//! - cannotCancel (121): the request names the Cancel itself.
//!
//! A value that is not `SEQUENCE { cancelID MessageID }` is protocolError.

use std::sync::Arc;
use std::time::Duration;

use ferrodir_proto::message::{ExtendedResponse, LdapResult};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{StopReason, StopSignal};
use rasn::{AsnType, Decode, Decoder, Encode};

/// RFC 3909 §2: the Cancel operation's requestName.
pub const CANCEL_OID: &str = "1.3.6.1.1.8";

/// How long a Cancel waits for the operation it cancelled to answer; past it, tooLate.
const WAIT_MAX: Duration = Duration::from_secs(10);
/// How often it looks.
const POLL: Duration = Duration::from_millis(1);

/// RFC 3909 §2: `cancelRequestValue ::= SEQUENCE { cancelID MessageID }`.
#[derive(AsnType, Encode, Decode, Debug)]
struct CancelRequest {
    cancel_id: u32,
}

/// The messageID a Cancel names; None: a malformed value.
pub fn target(value: Option<&[u8]>) -> Option<u32> {
    let bytes = value?;
    let request: CancelRequest = rasn::ber::decode(bytes).ok()?;
    // Nothing may follow the value.
    let again = rasn::ber::encode(&request).ok()?;
    (again.len() == bytes.len()).then_some(request.cancel_id)
}

/// Cancels the operation whose stop signal is `signal` (None: no such operation) and
/// waits until it answered or `finished` says it is gone; the Cancel's response.
pub async fn cancel(signal: Option<Arc<StopSignal>>, finished: impl Fn() -> bool) -> ExtendedResponse {
    let Some(signal) = signal else {
        return response(ResultCode::NO_SUCH_OPERATION, "");
    };
    if signal.answered().is_none() {
        signal.raise(StopReason::Cancel);
    }
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while signal.answered().is_none() && !finished() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    match signal.answered() {
        Some(true) => response(ResultCode::SUCCESS, ""),
        _ => response(ResultCode::TOO_LATE, ""),
    }
}

/// The response to a Cancel naming itself.
pub fn cannot_cancel() -> ExtendedResponse {
    response(ResultCode::CANNOT_CANCEL, "")
}

/// The response to a Cancel whose value does not decode.
pub fn malformed() -> ExtendedResponse {
    response(ResultCode::PROTOCOL_ERROR, "cancel request value is invalid")
}

fn response(code: ResultCode, text: &str) -> ExtendedResponse {
    ExtendedResponse {
        result: LdapResult::new(code, String::new(), text),
        response_name: None,
        response_value: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_names_a_message_id() {
        assert_eq!(target(Some(&[0x30, 0x03, 0x02, 0x01, 0x05])), Some(5));
        assert_eq!(target(Some(&[0x30, 0x03, 0x02, 0x01])), None);
        assert_eq!(target(Some(&[0x30, 0x03, 0x02, 0x01, 0x05, 0x00])), None);
        assert_eq!(target(None), None);
    }
}
