//! `ldap-null-responder`: an LDAP server that does no directory work. Every request gets a
//! canned success, so a benchmark against it measures the load generator, the kernel and
//! loopback TCP: the ceiling no real server on the same machine can pass.
//!
//! Per request it frames the PDU (`check_frame`, the same check the server does), reads the
//! messageID and the operation's tag by hand, and appends a response encoded once at start
//! with the messageID patched in. A search gets one tiny entry named after its base object
//! (so load generators that count returned entries, such as ldclt's exact searches, count
//! it) and a SearchResultDone.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    encode_message, BindResponse, ExtendedResponse, LdapMessage, LdapResult, OctetString, PartialAttribute,
    ProtocolOp, SearchResultEntry,
};
use ferrodir_proto::ResultCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::Error;
use crate::wire::{self, tag};

/// Requests are tiny; a larger one is surely not from a benchmark client.
const PDU_BYTES_MAX: usize = 1024 * 1024;
/// Filters nest a few levels at most in benchmarks; the server's own limit is 64.
const NESTING_DEPTH_MAX: usize = 64;
/// Read at least this much at a time, so that pipelined requests arrive in one read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// What the connection does after answering one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// UnbindRequest (RFC 4511 §4.3): send nothing, close.
    Close,
}

/// The protocolOps we answer with, each encoded once (identifier, length and contents),
/// ready for [`wire::push_message`].
#[derive(Debug, Clone)]
pub struct Responses {
    bind: Vec<u8>,
    search_done: Vec<u8>,
    modify: Vec<u8>,
    add: Vec<u8>,
    delete: Vec<u8>,
    modify_dn: Vec<u8>,
    compare: Vec<u8>,
    extended: Vec<u8>,
    /// The `attributes` element of the canned SearchResultEntry (`objectClass: top`); the
    /// entry's name is the request's base object, so it is written per request.
    entry_attributes: Vec<u8>,
}

/// Encodes `protocol_op` with `ferrodir_proto` and keeps only the protocolOp's bytes.
fn canned(protocol_op: ProtocolOp) -> Result<Vec<u8>, Error> {
    let pdu = encode_message(&LdapMessage { message_id: 0, protocol_op, controls: None })?;
    Ok(wire::encoded_op(&pdu)?.to_vec())
}

impl Responses {
    pub fn new() -> Result<Responses, Error> {
        let success = LdapResult::success;
        // RFC 4511 §4.10: a compare that went well answers compareTrue, not success;
        // ldapcompare and ldclt report resultCode 0 as an error.
        let compare_true = LdapResult::new(ResultCode::COMPARE_TRUE, b"", b"");
        let entry = canned(ProtocolOp::SearchResultEntry(SearchResultEntry {
            object_name: OctetString::from_static(b""),
            attributes: vec![PartialAttribute {
                r#type: OctetString::from_static(b"objectClass"),
                vals: vec![OctetString::from_static(b"top")],
            }],
        }))?;
        let content = wire::tlv_content(&entry)?;
        // The contents are `04 00` (the empty name) followed by the attribute list.
        let entry_attributes = content.get(2..).ok_or(Error::Malformed("canned entry"))?.to_vec();
        Ok(Responses {
            bind: canned(ProtocolOp::BindResponse(BindResponse {
                result: success(),
                server_sasl_creds: None,
            }))?,
            search_done: canned(ProtocolOp::SearchResultDone(success()))?,
            modify: canned(ProtocolOp::ModifyResponse(success()))?,
            add: canned(ProtocolOp::AddResponse(success()))?,
            delete: canned(ProtocolOp::DelResponse(success()))?,
            modify_dn: canned(ProtocolOp::ModifyDnResponse(success()))?,
            compare: canned(ProtocolOp::CompareResponse(compare_true))?,
            extended: canned(ProtocolOp::ExtendedResponse(ExtendedResponse {
                result: success(),
                response_name: None,
                response_value: None,
            }))?,
            entry_attributes,
        })
    }

    /// Appends the answer to one whole request `pdu` to `out`. An operation tag that is not
    /// a request, or a SearchRequest whose base object is not a primitive OCTET STRING, is an
    /// error: the connection is closed (a benchmark client never sends either).
    pub fn answer(&self, pdu: &[u8], out: &mut Vec<u8>) -> Result<Action, Error> {
        let request = wire::peek(pdu)?;
        let canned = match request.op_tag {
            tag::BIND_REQUEST => &self.bind,
            tag::SEARCH_REQUEST => {
                let base = wire::first_octet_string(request.op_content)?;
                self.push_entry(request.message_id, base, out);
                &self.search_done
            }
            tag::MODIFY_REQUEST => &self.modify,
            tag::ADD_REQUEST => &self.add,
            tag::DEL_REQUEST => &self.delete,
            tag::MODIFY_DN_REQUEST => &self.modify_dn,
            tag::COMPARE_REQUEST => &self.compare,
            tag::EXTENDED_REQUEST => &self.extended,
            // RFC 4511 §4.11: Abandon has no response.
            tag::ABANDON_REQUEST => return Ok(Action::Continue),
            tag::UNBIND_REQUEST => return Ok(Action::Close),
            other => return Err(Error::Unexpected(format!("operation tag {other:#04x} is not a request"))),
        };
        wire::push_message(out, request.message_id, canned);
        Ok(Action::Continue)
    }

    /// A SearchResultEntry named `base` with the canned attributes (RFC 4511 §4.5.2).
    fn push_entry(&self, message_id: u32, base: &[u8], out: &mut Vec<u8>) {
        let content_len = wire::tlv_len(base.len()) + self.entry_attributes.len();
        wire::push_message_start(out, message_id, wire::tlv_len(content_len));
        out.push(tag::SEARCH_RESULT_ENTRY);
        wire::push_length(out, content_len);
        wire::push_tlv(out, tag::OCTET_STRING, base);
        out.extend_from_slice(&self.entry_attributes);
    }
}

/// Accepts connections on `listener` until the process ends, at most `connections_max` at
/// once (further clients wait in the kernel's backlog). Runs on whatever runtime polls it;
/// each connection is a task of its own, so a multi-threaded runtime spreads them.
pub async fn serve(listener: TcpListener, connections_max: usize) -> Result<(), Error> {
    let responses = Arc::new(Responses::new()?);
    let slots = Arc::new(Semaphore::new(connections_max.max(1)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return Ok(()); // the semaphore is never closed
        };
        let stream = match listener
            .accept()
            .await
            .and_then(|(stream, _peer)| stream.set_nodelay(true).map(|()| stream))
        {
            Ok(stream) => stream,
            Err(error) => {
                // EMFILE and friends pass; back off a little instead of spinning.
                eprintln!("accept: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let responses = Arc::clone(&responses);
        tokio::spawn(async move {
            let _slot = slot;
            match serve_connection(stream, &responses).await {
                Ok(()) | Err(Error::Io(_)) => {} // clients of a benchmark hang up abruptly
                Err(error) => eprintln!("connection closed: {error}"),
            }
        });
    }
}

/// One connection: answer every whole request in the buffer, write the answers in one go,
/// read more. Pipelined requests are answered in order. Any byte stream will do (the TLS
/// tests of `ldap-latency` run it over rustls).
pub async fn serve_connection<S>(mut stream: S, responses: &Responses) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limits = FrameLimits { pdu_bytes_max: PDU_BYTES_MAX, nesting_depth_max: NESTING_DEPTH_MAX };
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut output = Vec::with_capacity(READ_CHUNK_BYTES);
    loop {
        let mut action = Action::Continue;
        while let Some(len) = check_frame(&input, &limits)? {
            action = responses.answer(&input[..len], &mut output)?;
            input.advance(len);
            if action == Action::Close {
                break;
            }
        }
        if !output.is_empty() {
            stream.write_all(&output).await?;
            stream.flush().await?;
            output.clear();
        }
        if action == Action::Close {
            return Ok(());
        }
        input.reserve(READ_CHUNK_BYTES);
        if stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::filter::Filter;
    use ferrodir_proto::message::{
        decode_message, encode_message_into, AuthenticationChoice, BindRequest, DerefAliases, SearchRequest,
        SearchScope,
    };
    use tokio::net::TcpStream;

    fn os(text: &str) -> OctetString {
        OctetString::from(text.as_bytes().to_vec())
    }

    fn request(message_id: u32, protocol_op: ProtocolOp, out: &mut Vec<u8>) {
        encode_message_into(&LdapMessage { message_id, protocol_op, controls: None }, out).unwrap();
    }

    fn search(base: &str) -> ProtocolOp {
        ProtocolOp::SearchRequest(SearchRequest {
            base_object: os(base),
            scope: SearchScope::BaseObject,
            deref_aliases: DerefAliases::NeverDerefAliases,
            size_limit: 0,
            time_limit: 0,
            types_only: false,
            filter: Filter::present("objectClass"),
            attributes: vec![],
        })
    }

    /// Reads whole messages until `count` have arrived or the peer closes.
    async fn read_messages(stream: &mut TcpStream, count: usize) -> (Vec<LdapMessage>, bool) {
        let mut buffer = BytesMut::new();
        let mut messages = Vec::new();
        while messages.len() < count {
            if let Some(len) = check_frame(&buffer, &FrameLimits::default()).unwrap() {
                messages.push(decode_message(&buffer[..len]).unwrap());
                buffer.advance(len);
                continue;
            }
            if stream.read_buf(&mut buffer).await.unwrap() == 0 {
                return (messages, true);
            }
        }
        (messages, false)
    }

    #[tokio::test]
    async fn answers_bind_search_and_pipelined_writes_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, 4));
        let mut client = TcpStream::connect(address).await.unwrap();

        let mut out = Vec::new();
        let bind = BindRequest {
            version: 3,
            name: os("cn=admin,dc=example,dc=com"),
            authentication: AuthenticationChoice::Simple(os("secret")),
        };
        request(1, ProtocolOp::BindRequest(bind), &mut out);
        request(300, search("uid=user00042,ou=people,dc=example,dc=com"), &mut out);
        request(301, ProtocolOp::AbandonRequest(300), &mut out);
        request(70_000, ProtocolOp::DelRequest(os("cn=x")), &mut out);
        client.write_all(&out).await.unwrap();

        let (answers, closed) = read_messages(&mut client, 4).await;
        assert!(!closed);
        let expected = [
            (
                1,
                ProtocolOp::BindResponse(BindResponse {
                    result: LdapResult::success(),
                    server_sasl_creds: None,
                }),
            ),
            (
                300,
                ProtocolOp::SearchResultEntry(SearchResultEntry {
                    object_name: os("uid=user00042,ou=people,dc=example,dc=com"),
                    attributes: vec![PartialAttribute { r#type: os("objectClass"), vals: vec![os("top")] }],
                }),
            ),
            (300, ProtocolOp::SearchResultDone(LdapResult::success())),
            (70_000, ProtocolOp::DelResponse(LdapResult::success())),
        ];
        for (answer, (message_id, protocol_op)) in answers.iter().zip(expected) {
            assert_eq!(answer.message_id, message_id);
            assert_eq!(answer.protocol_op, protocol_op);
        }

        out.clear();
        request(5, search(""), &mut out);
        request(6, ProtocolOp::UnbindRequest, &mut out);
        client.write_all(&out).await.unwrap();
        let (answers, closed) = read_messages(&mut client, 3).await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert!(closed, "unbind must close the connection");
        server.abort();
    }

    #[test]
    fn every_request_gets_its_response_type() {
        let responses = Responses::new().unwrap();
        let cases = [
            (tag::MODIFY_REQUEST, b"\x66\x05\x04\x01x\x30\x00".as_slice(), tag::MODIFY_RESPONSE, 0),
            (tag::ADD_REQUEST, b"\x68\x05\x04\x01x\x30\x00", tag::ADD_RESPONSE, 0),
            (tag::MODIFY_DN_REQUEST, b"\x6c\x09\x04\x01x\x04\x01y\x01\x01\x00", tag::MODIFY_DN_RESPONSE, 0),
            (tag::COMPARE_REQUEST, b"\x6e\x0a\x04\x01x\x30\x05\x04\x01a\x04\x00", tag::COMPARE_RESPONSE, 6),
            (tag::EXTENDED_REQUEST, b"\x77\x03\x80\x011", tag::EXTENDED_RESPONSE, 0),
        ];
        for (request_tag, op, response_tag, code) in cases {
            let mut pdu = Vec::new();
            wire::push_message(&mut pdu, 9, op);
            assert_eq!(decode_message(&pdu).map(|_| ()), Ok(()), "request {request_tag:#04x}");
            let mut out = Vec::new();
            assert_eq!(responses.answer(&pdu, &mut out).unwrap(), Action::Continue);
            let answer = wire::peek(&out).unwrap();
            assert_eq!((answer.message_id, answer.op_tag), (9, response_tag));
            assert_eq!(wire::result_code(answer.op_content).unwrap(), code);
            assert!(decode_message(&out).is_ok());
        }
        let mut out = Vec::new();
        assert!(responses.answer(b"\x30\x05\x02\x01\x01\x61\x00", &mut out).is_err());
    }
}
