//! A minimal synchronous LDAPv3 client over a loopback TCP socket: it encodes the RFC 4511
//! requests the catalogue needs, reads responses until the operation's final one, and keeps
//! everything the servers send in the order they send it (entries, attributes, values).
//! Every call is bounded by [`OP_DEADLINE`]; a server that stalls fails the operation
//! instead of hanging the test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::ber;
use crate::filter::{self, Filter};

/// Each socket read or write; a debug build on two busy cores answers well within this.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// One whole operation, all its responses included.
const OP_DEADLINE: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Larger than anything the test data can produce; a bigger PDU means a confused server.
const PDU_BYTES_MAX: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Base = 0,
    One = 1,
    Sub = 2,
    /// OpenLDAP's subordinate subtree (`-s children`): below the base, without it.
    Children = 3,
}

#[derive(Debug, Clone)]
pub struct Control {
    pub oid: String,
    pub critical: bool,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub enum Auth {
    Simple(String),
    Sasl(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModOp {
    Add = 0,
    Delete = 1,
    Replace = 2,
    Increment = 3,
}

#[derive(Debug, Clone)]
pub struct Change {
    pub op: ModOp,
    pub attr: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub base: String,
    pub scope: Scope,
    pub filter: Filter,
    pub attrs: Vec<String>,
    pub size_limit: i64,
    pub types_only: bool,
    pub controls: Vec<Control>,
}

#[derive(Debug, Clone)]
pub enum Request {
    Bind { version: i64, dn: String, auth: Auth },
    Search(SearchRequest),
    Compare { dn: String, attr: String, value: String },
    Add { dn: String, attrs: Vec<(String, Vec<String>)> },
    Modify { dn: String, changes: Vec<Change> },
    ModDn { dn: String, new_rdn: String, delete_old_rdn: bool, new_superior: Option<String> },
    Delete { dn: String },
    Extended { oid: String, value: Option<Vec<u8>> },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LdapResult {
    pub code: i64,
    pub matched: String,
    pub message: String,
    pub referrals: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub dn: String,
    pub attrs: Vec<(String, Vec<Vec<u8>>)>,
}

#[derive(Debug, Clone)]
pub enum Reply {
    Result(LdapResult),
    Search {
        entries: Vec<Entry>,
        references: Vec<Vec<String>>,
        done: LdapResult,
    },
    Extended {
        result: LdapResult,
        value: Option<Vec<u8>>,
    },
    /// No LDAP answer: the connection closed, timed out, or sent a Notice of Disconnection.
    Failed(String),
}

pub struct Client {
    stream: TcpStream,
    buffer: Vec<u8>,
    next_id: i64,
    pub broken: bool,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Result<Client, String> {
        let stream =
            TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Client { stream, buffer: Vec::new(), next_id: 1, broken: false })
    }

    /// Sends `request` and collects its answer. Any transport failure marks the client
    /// broken; the caller opens a new one.
    pub fn call(&mut self, request: &Request) -> Reply {
        self.call_with_controls(request, &[])
    }

    /// [`Client::call`] with `controls` on the request (a Search carries its own: these are
    /// added to them).
    pub fn call_with_controls(&mut self, request: &Request, controls: &[Control]) -> Reply {
        match self.exchange(request, controls) {
            Ok(reply) => reply,
            Err(why) => {
                self.broken = true;
                Reply::Failed(why)
            }
        }
    }

    fn exchange(&mut self, request: &Request, extra: &[Control]) -> Result<Reply, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut controls = match request {
            Request::Search(search) => search.controls.clone(),
            _ => Vec::new(),
        };
        controls.extend_from_slice(extra);
        let pdu = encode_message(id, &encode_request(request), &controls);
        self.stream.write_all(&pdu).map_err(|e| format!("write: {e}"))?;
        let deadline = Instant::now() + OP_DEADLINE;
        let mut entries = Vec::new();
        let mut references = Vec::new();
        loop {
            let message = self.read_message(deadline)?;
            let (message_id, op) = split_message(&message)?;
            if message_id == 0 {
                let result = parse_result(op.content)?;
                return Err(format!("notice of disconnection (rc={})", result.code));
            }
            if message_id != id {
                continue;
            }
            match op.tag {
                0x64 => entries.push(parse_entry(op.content)?),
                0x73 => references
                    .push(ber::children(op.content)?.iter().map(|t| ber::string(t.content)).collect()),
                0x65 => return Ok(Reply::Search { entries, references, done: parse_result(op.content)? }),
                0x78 => return parse_extended(op.content),
                0x61 | 0x67 | 0x69 | 0x6b | 0x6d | 0x6f => {
                    return Ok(Reply::Result(parse_result(op.content)?))
                }
                other => return Err(format!("unexpected response tag 0x{other:02x}")),
            }
        }
    }

    /// Reads one whole LDAPMessage.
    fn read_message(&mut self, deadline: Instant) -> Result<Vec<u8>, String> {
        loop {
            if let Some(size) = ber::frame_size(&self.buffer)? {
                if size > PDU_BYTES_MAX {
                    return Err(format!("response of {size} bytes"));
                }
                if self.buffer.len() >= size {
                    let rest = self.buffer.split_off(size);
                    return Ok(std::mem::replace(&mut self.buffer, rest));
                }
            }
            if Instant::now() > deadline {
                return Err("timeout: no complete response".into());
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed by server".into()),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    return Err("timeout: server did not answer".into())
                }
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

fn encode_message(id: i64, op: &[u8], controls: &[Control]) -> Vec<u8> {
    let mut parts = vec![ber::integer(id), op.to_vec()];
    if !controls.is_empty() {
        let encoded: Vec<Vec<u8>> = controls
            .iter()
            .map(|c| {
                let mut fields = vec![ber::octets(&c.oid)];
                if c.critical {
                    fields.push(ber::boolean_tagged(ber::BOOLEAN, true));
                }
                if let Some(value) = &c.value {
                    fields.push(ber::octets(value));
                }
                ber::constructed(ber::SEQUENCE, &fields)
            })
            .collect();
        parts.push(ber::constructed(0xa0, &encoded));
    }
    ber::constructed(ber::SEQUENCE, &parts)
}

/// PartialAttribute ::= SEQUENCE { type, vals SET OF value }, values in the given order.
fn partial_attribute(name: &str, values: &[String]) -> Vec<u8> {
    let values: Vec<Vec<u8>> = values.iter().map(ber::octets).collect();
    ber::constructed(ber::SEQUENCE, &[ber::octets(name), ber::constructed(ber::SET, &values)])
}

fn attribute_list(attrs: &[(String, Vec<String>)]) -> Vec<u8> {
    let encoded: Vec<Vec<u8>> = attrs.iter().map(|(name, values)| partial_attribute(name, values)).collect();
    ber::constructed(ber::SEQUENCE, &encoded)
}

/// The protocolOp of each request (RFC 4511 §4.2 to §4.12).
fn encode_request(request: &Request) -> Vec<u8> {
    match request {
        Request::Bind { version, dn, auth } => {
            let auth = match auth {
                Auth::Simple(password) => ber::tlv(0x80, password.as_bytes()),
                Auth::Sasl(mechanism) => ber::constructed(0xa3, &[ber::octets(mechanism)]),
            };
            ber::constructed(0x60, &[ber::integer(*version), ber::octets(dn), auth])
        }
        Request::Search(search) => {
            let attrs: Vec<Vec<u8>> = search.attrs.iter().map(ber::octets).collect();
            ber::constructed(
                0x63,
                &[
                    ber::octets(&search.base),
                    ber::enumerated(search.scope as i64),
                    ber::enumerated(0),
                    ber::integer(search.size_limit),
                    ber::integer(0),
                    ber::boolean_tagged(ber::BOOLEAN, search.types_only),
                    filter::encode(&search.filter),
                    ber::constructed(ber::SEQUENCE, &attrs),
                ],
            )
        }
        Request::Compare { dn, attr, value } => {
            let ava = ber::constructed(ber::SEQUENCE, &[ber::octets(attr), ber::octets(value)]);
            ber::constructed(0x6e, &[ber::octets(dn), ava])
        }
        Request::Add { dn, attrs } => ber::constructed(0x68, &[ber::octets(dn), attribute_list(attrs)]),
        Request::Modify { dn, changes } => {
            let changes: Vec<Vec<u8>> = changes
                .iter()
                .map(|c| {
                    let modification = partial_attribute(&c.attr, &c.values);
                    ber::constructed(ber::SEQUENCE, &[ber::enumerated(c.op as i64), modification])
                })
                .collect();
            ber::constructed(0x66, &[ber::octets(dn), ber::constructed(ber::SEQUENCE, &changes)])
        }
        Request::ModDn { dn, new_rdn, delete_old_rdn, new_superior } => {
            let mut parts = vec![
                ber::octets(dn),
                ber::octets(new_rdn),
                ber::boolean_tagged(ber::BOOLEAN, *delete_old_rdn),
            ];
            if let Some(superior) = new_superior {
                parts.push(ber::tlv(0x80, superior.as_bytes()));
            }
            ber::constructed(0x6c, &parts)
        }
        Request::Delete { dn } => ber::tlv(0x4a, dn.as_bytes()),
        Request::Extended { oid, value } => {
            let mut parts = vec![ber::tlv(0x80, oid.as_bytes())];
            if let Some(value) = value {
                parts.push(ber::tlv(0x81, value));
            }
            ber::constructed(0x77, &parts)
        }
    }
}

fn split_message(message: &[u8]) -> Result<(i64, ber::Tlv<'_>), String> {
    let (outer, _) = ber::parse(message)?;
    let parts = ber::children(outer.content)?;
    if parts.len() < 2 {
        return Err("LDAPMessage with fewer than two elements".into());
    }
    Ok((ber::parse_integer(parts[0].content)?, parts[1]))
}

fn parse_result(content: &[u8]) -> Result<LdapResult, String> {
    let parts = ber::children(content)?;
    if parts.len() < 3 {
        return Err("LDAPResult with fewer than three elements".into());
    }
    let mut result = LdapResult {
        code: ber::parse_integer(parts[0].content)?,
        matched: ber::string(parts[1].content),
        message: ber::string(parts[2].content),
        referrals: Vec::new(),
    };
    for extra in &parts[3..] {
        if extra.tag == 0xa3 {
            result.referrals = ber::children(extra.content)?.iter().map(|t| ber::string(t.content)).collect();
        }
    }
    Ok(result)
}

fn parse_extended(content: &[u8]) -> Result<Reply, String> {
    let result = parse_result(content)?;
    let value = ber::children(content)?.iter().find(|t| t.tag == 0x8b).map(|t| t.content.to_vec());
    Ok(Reply::Extended { result, value })
}

fn parse_entry(content: &[u8]) -> Result<Entry, String> {
    let parts = ber::children(content)?;
    if parts.len() != 2 {
        return Err("SearchResultEntry without two elements".into());
    }
    let mut attrs = Vec::new();
    for attribute in ber::children(parts[1].content)? {
        let fields = ber::children(attribute.content)?;
        if fields.len() != 2 {
            return Err("PartialAttribute without two elements".into());
        }
        let values = ber::children(fields[1].content)?.iter().map(|v| v.content.to_vec()).collect();
        attrs.push((ber::string(fields[0].content), values));
    }
    Ok(Entry { dn: ber::string(parts[0].content), attrs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_request_bytes() {
        let request = Request::Bind { version: 3, dn: "".into(), auth: Auth::Simple("".into()) };
        let pdu = encode_message(1, &encode_request(&request), &[]);
        assert_eq!(
            pdu,
            vec![0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00]
        );
    }

    #[test]
    fn modify_request_shape() {
        let change =
            Change { op: ModOp::Replace, attr: "drink".into(), values: vec!["a".into(), "b".into()] };
        let request = Request::Modify { dn: "cn=x".into(), changes: vec![change] };
        let encoded = encode_request(&request);
        let (op, _) = ber::parse(&encoded).unwrap();
        let parts = ber::children(op.content).unwrap();
        let changes = ber::children(parts[1].content).unwrap();
        let change = ber::children(changes[0].content).unwrap();
        assert_eq!(ber::parse_integer(change[0].content).unwrap(), 2);
        let attribute = ber::children(change[1].content).unwrap();
        assert_eq!(attribute[0].content, b"drink");
        assert_eq!(ber::children(attribute[1].content).unwrap().len(), 2);
    }
}
