//! The plain-TCP LDAP connection the request/response tools share (`ldap-search-load`,
//! `ldap-login-storm`, `ldap-isolation`, `ldap-repl-lag`): the stream, the input and output
//! buffers, the messageID counter and the frame limits. Each tool wraps it with what it
//! reads out of the answers; `ldap-latency` has its own, for TLS.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    encode_message_into, AuthenticationChoice, BindRequest, Control, LdapMessage, OctetString, ProtocolOp,
    MESSAGE_ID_MAX,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::Error;
use crate::wire::{self, tag};

/// The largest answer a tool reads (an entry with a big group's members fits).
const PDU_BYTES_MAX: usize = 16 * 1024 * 1024;
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub struct Conn {
    stream: TcpStream,
    input: BytesMut,
    output: Vec<u8>,
    next_id: u32,
    limits: FrameLimits,
}

impl Conn {
    /// Connects within `wait`, with Nagle off.
    pub async fn connect(address: &str, wait: Duration) -> Result<Conn, Error> {
        let stream = tokio::time::timeout(wait, TcpStream::connect(address))
            .await
            .map_err(|_| Error::Timeout(wait.as_millis() as u64))??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            input: BytesMut::with_capacity(READ_CHUNK_BYTES),
            output: Vec::with_capacity(512),
            next_id: 1,
            limits: FrameLimits { pdu_bytes_max: PDU_BYTES_MAX, nesting_depth_max: 64 },
        })
    }

    /// Sends one request; returns its messageID.
    pub async fn send(
        &mut self,
        protocol_op: ProtocolOp,
        controls: Option<Vec<Control>>,
    ) -> Result<u32, Error> {
        let message_id = self.next_id;
        self.next_id = if message_id >= MESSAGE_ID_MAX { 1 } else { message_id + 1 };
        self.output.clear();
        encode_message_into(&LdapMessage { message_id, protocol_op, controls }, &mut self.output)?;
        self.stream.write_all(&self.output).await?;
        Ok(message_id)
    }

    /// Reads until the buffer starts with one whole message; returns its length. Each read
    /// waits at most `wait` (None: as long as it takes). Cancel-safe: bytes read stay in
    /// the buffer.
    pub async fn read_frame(&mut self, wait: Option<Duration>) -> Result<usize, Error> {
        loop {
            if let Some(len) = check_frame(&self.input, &self.limits)? {
                return Ok(len);
            }
            self.input.reserve(READ_CHUNK_BYTES);
            let read = match wait {
                Some(wait) => tokio::time::timeout(wait, self.stream.read_buf(&mut self.input))
                    .await
                    .map_err(|_| Error::Timeout(wait.as_millis() as u64))??,
                None => self.stream.read_buf(&mut self.input).await?,
            };
            if read == 0 {
                return Err(Error::Closed);
            }
        }
    }

    /// The first `len` bytes of the input: the message [`Conn::read_frame`] found.
    pub fn frame(&self, len: usize) -> &[u8] {
        &self.input[..len]
    }

    /// Drops the message [`Conn::read_frame`] found.
    pub fn consume(&mut self, len: usize) {
        self.input.advance(len);
    }

    /// A simple bind, one request and its answer; the result code.
    pub async fn simple_bind(
        &mut self,
        dn: &[u8],
        password: &[u8],
        wait: Option<Duration>,
    ) -> Result<u32, Error> {
        let message_id = self
            .send(
                ProtocolOp::BindRequest(BindRequest {
                    version: 3,
                    name: OctetString::from(dn.to_vec()),
                    authentication: AuthenticationChoice::Simple(OctetString::from(password.to_vec())),
                }),
                None,
            )
            .await?;
        let len = self.read_frame(wait).await?;
        let answer = wire::peek(self.frame(len))?;
        if answer.message_id != message_id || answer.op_tag != tag::BIND_RESPONSE {
            return Err(Error::Unexpected(format!("answer with tag {:#04x} to a bind", answer.op_tag)));
        }
        let code = wire::result_code(answer.op_content)?;
        self.consume(len);
        Ok(code)
    }
}
