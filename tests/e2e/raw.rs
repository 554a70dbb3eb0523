//! The wire protocol with hand-made BER over a plain `TcpStream`: broken PDUs (not a
//! SEQUENCE, an element overrunning its parent, indefinite length, a length over the 16 MiB
//! limit, nesting deeper than 64, an unknown protocolOp, a response sent as a request) must
//! each get a Notice of Disconnection and a closed connection while other connections carry
//! on; long-form lengths are accepted; the PROTOS c06-ldapv3 PDUs are answered or refused,
//! never left hanging; pipelined requests (with Binds in between) each get exactly one final
//! response under the identity in force when they were sent; Abandon and Unbind.
//!
//! Every read has a timeout, so a server that goes silent fails the test instead of hanging
//! it. The BER reader here is deliberately tiny: single-octet tags, definite lengths.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::harness::{Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

const NOTICE_OF_DISCONNECTION: &[u8] = b"1.3.6.1.4.1.1466.20036";
pub(crate) const WHO_AM_I: &[u8] = b"1.3.6.1.4.1.4203.1.11.3";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const READ_TIMEOUT: Duration = Duration::from_secs(15);

// protocolOp tags (RFC 4511 §4.2–4.12).
const BIND_RESPONSE: u8 = 0x61;
const SEARCH_RESULT_ENTRY: u8 = 0x64;
pub(crate) const SEARCH_RESULT_DONE: u8 = 0x65;
pub(crate) const EXTENDED_RESPONSE: u8 = 0x78;

// ---- building BER ----

pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u64).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (8 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The contents octets of a non-negative INTEGER, minimal two's complement.
pub(crate) fn int_content(value: u32) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().min(3);
    let mut out = bytes[skip..].to_vec();
    if out[0] & 0x80 != 0 {
        out.insert(0, 0);
    }
    out
}

pub(crate) fn int(tag: u8, value: u32) -> Vec<u8> {
    tlv(tag, &int_content(value))
}

pub(crate) fn octets(value: &[u8]) -> Vec<u8> {
    tlv(0x04, value)
}

pub(crate) fn message(id: u32, op: &[u8]) -> Vec<u8> {
    tlv(0x30, &[int(0x02, id), op.to_vec()].concat())
}

pub(crate) fn bind(id: u32, dn: &str, password: &str) -> Vec<u8> {
    let body = [int(0x02, 3), octets(dn.as_bytes()), tlv(0x80, password.as_bytes())].concat();
    message(id, &tlv(0x60, &body))
}

pub(crate) fn present(attr: &str) -> Vec<u8> {
    tlv(0x87, attr.as_bytes())
}

fn equality(attr: &str, value: &str) -> Vec<u8> {
    tlv(0xa3, &[octets(attr.as_bytes()), octets(value.as_bytes())].concat())
}

/// scope: 0 base, 1 one level, 2 subtree, 3 children (below the base).
pub(crate) fn search(id: u32, base: &str, scope: u32, filter: &[u8], attrs: &[&str]) -> Vec<u8> {
    let attr_list: Vec<u8> = attrs.iter().flat_map(|a| octets(a.as_bytes())).collect();
    let body = [
        octets(base.as_bytes()),
        int(0x0a, scope),
        int(0x0a, 0), // derefAliases: never
        int(0x02, 0), // sizeLimit
        int(0x02, 0), // timeLimit
        tlv(0x01, &[0x00]),
        filter.to_vec(),
        tlv(0x30, &attr_list),
    ]
    .concat();
    message(id, &tlv(0x63, &body))
}

pub(crate) fn who_am_i(id: u32) -> Vec<u8> {
    message(id, &tlv(0x77, &tlv(0x80, WHO_AM_I)))
}

fn abandon(id: u32, target: u32) -> Vec<u8> {
    message(id, &tlv(0x50, &int_content(target)))
}

fn unbind(id: u32) -> Vec<u8> {
    message(id, &[0x42, 0x00])
}

// ---- reading BER ----

/// Splits one TLV off the front of `buf`: (tag, contents, rest). None if it doesn't fit.
pub(crate) fn split_tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count].iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        rest = &rest[count..];
        len
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

pub(crate) fn uint(content: &[u8]) -> u32 {
    content.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b))
}

/// One decoded LDAPMessage: its ID, protocolOp tag and the protocolOp's contents.
#[derive(Debug)]
pub(crate) struct Message {
    pub id: u32,
    pub op: u8,
    pub body: Vec<u8>,
}

fn parse_message(pdu: &[u8]) -> Option<Message> {
    let (0x30, content, []) = split_tlv(pdu)? else { return None };
    let (0x02, id, rest) = split_tlv(content)? else { return None };
    let (op, body, _controls) = split_tlv(rest)?;
    Some(Message { id: uint(id), op, body: body.to_vec() })
}

/// An LDAPResult (RFC 4511 §4.1.9) and what follows it in the response.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub code: u32,
    pub diagnostic: String,
    /// The optional trailing elements, by tag (e.g. 0x8a responseName, 0x8b responseValue).
    pub extra: BTreeMap<u8, Vec<u8>>,
}

pub(crate) fn parse_result(body: &[u8]) -> Outcome {
    let parsed = (|| {
        let (0x0a, code, rest) = split_tlv(body)? else { return None };
        let (0x04, _matched, rest) = split_tlv(rest)? else { return None };
        let (0x04, diagnostic, mut rest) = split_tlv(rest)? else { return None };
        let mut extra = BTreeMap::new();
        while !rest.is_empty() {
            let (tag, content, next) = split_tlv(rest)?;
            extra.insert(tag, content.to_vec());
            rest = next;
        }
        Some(Outcome {
            code: uint(code),
            diagnostic: String::from_utf8_lossy(diagnostic).into_owned(),
            extra,
        })
    })();
    parsed.unwrap_or_else(|| panic!("not an LDAPResult: {body:02x?}"))
}

// ---- the connection ----

pub(crate) fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.addr).expect("connect");
    stream.set_read_timeout(Some(READ_TIMEOUT)).expect("read timeout");
    stream.set_write_timeout(Some(READ_TIMEOUT)).expect("write timeout");
    stream
}

pub(crate) fn send(stream: &mut impl Write, bytes: &[u8]) {
    stream.write_all(bytes).expect("send");
}

fn read_exact(stream: &mut impl Read, buf: &mut [u8], what: &str) {
    stream.read_exact(buf).unwrap_or_else(|e| panic!("reading {what}: {e}"));
}

/// Reads one whole PDU; None when the server closed the connection cleanly.
fn read_pdu(stream: &mut impl Read) -> Option<Vec<u8>> {
    let mut first = [0u8; 1];
    match stream.read(&mut first) {
        Ok(0) => return None,
        Ok(_) => {}
        Err(e) => panic!("waiting for a response: {e} (no answer within {READ_TIMEOUT:?}?)"),
    }
    let mut pdu = first.to_vec();
    let mut len_octet = [0u8; 1];
    read_exact(stream, &mut len_octet, "a length");
    pdu.push(len_octet[0]);
    let len = if len_octet[0] < 0x80 {
        usize::from(len_octet[0])
    } else {
        let count = usize::from(len_octet[0] & 0x7f);
        assert!((1..=4).contains(&count), "bad length octet from the server: {pdu:02x?}");
        let mut octets = vec![0u8; count];
        read_exact(stream, &mut octets, "length octets");
        pdu.extend_from_slice(&octets);
        octets.iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b))
    };
    let mut content = vec![0u8; len];
    read_exact(stream, &mut content, "a PDU");
    pdu.extend_from_slice(&content);
    Some(pdu)
}

pub(crate) fn read_message(stream: &mut impl Read) -> Message {
    let pdu = read_pdu(stream).expect("a response, not a closed connection");
    parse_message(&pdu).unwrap_or_else(|| panic!("undecodable response: {pdu:02x?}"))
}

/// Asserts that the next thing on `stream` is the end of the connection.
fn expect_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected the connection to close, got {:02x?}", &buf[..n]),
        Err(e) => panic!("expected the connection to close (read returns 0), got: {e}"),
    }
}

/// Asserts a Notice of Disconnection (RFC 4511 §4.4.1) with protocolError, then the close.
pub(crate) fn expect_notice_and_close(stream: &mut TcpStream, what: &str) {
    let message = match read_pdu(stream) {
        Some(pdu) => parse_message(&pdu).unwrap_or_else(|| panic!("{what}: bad notice {pdu:02x?}")),
        None => panic!("{what}: the connection closed without a Notice of Disconnection"),
    };
    assert_eq!(message.id, 0, "{what}: notice messageID");
    assert_eq!(message.op, EXTENDED_RESPONSE, "{what}: {message:02x?}");
    let outcome = parse_result(&message.body);
    assert_eq!(outcome.code, 2, "{what}: protocolError expected: {outcome:?}");
    let name = outcome.extra.get(&0x8a).map(Vec::as_slice);
    assert_eq!(name, Some(NOTICE_OF_DISCONNECTION), "{what}: responseName: {outcome:?}");
    expect_closed(stream);
}

/// An anonymous bind on `stream` succeeds.
pub(crate) fn assert_usable(stream: &mut TcpStream, id: u32) {
    send(stream, &bind(id, "", ""));
    let reply = read_message(stream);
    assert_eq!((reply.id, reply.op), (id, BIND_RESPONSE), "{reply:02x?}");
    let outcome = parse_result(&reply.body);
    assert_eq!(outcome.code, 0, "anonymous bind: {}", outcome.diagnostic);
}

/// Reads a search's responses up to its SearchResultDone: (entry DNs, outcome).
pub(crate) fn read_search(stream: &mut TcpStream, id: u32) -> (Vec<String>, Outcome) {
    let mut dns = Vec::new();
    loop {
        let reply = read_message(stream);
        assert_eq!(reply.id, id, "{reply:02x?}");
        match reply.op {
            SEARCH_RESULT_ENTRY => {
                let (0x04, dn, _) = split_tlv(&reply.body).expect("entry") else {
                    panic!("entry without a DN: {reply:02x?}")
                };
                dns.push(String::from_utf8_lossy(dn).into_owned());
            }
            SEARCH_RESULT_DONE => return (dns, parse_result(&reply.body)),
            other => panic!("unexpected protocolOp {other:#x} in a search"),
        }
    }
}

// ---- broken input ----

/// Sends `bytes` on a fresh connection and expects a Notice of Disconnection and the close,
/// while a connection opened beforehand keeps working.
pub(crate) fn assert_refused(server: &Server, bytes: &[u8], what: &str) {
    let mut bystander = connect(server);
    let mut stream = connect(server);
    send(&mut stream, bytes);
    expect_notice_and_close(&mut stream, what);
    assert_usable(&mut bystander, 1);
    assert_usable(&mut connect(server), 1);
}

#[test]
fn not_a_sequence_is_refused() {
    let server = Server::start();
    assert_refused(&server, &octets(b"abc"), "an OCTET STRING as the PDU");
    assert_refused(&server, &[0x02, 0x01, 0x01], "an INTEGER as the PDU");
}

#[test]
fn element_overrunning_its_parent_is_refused() {
    let server = Server::start();
    // A bind whose name claims 5 octets where 1 is left, then garbage, in a well-framed PDU.
    let bind_body = [0x02, 0x01, 0x03, 0x04, 0x05, b'a'];
    let content = [int(0x02, 1), tlv(0x60, &bind_body), vec![0xff, 0xff, 0xff]].concat();
    assert_refused(&server, &tlv(0x30, &content), "a truncated element followed by garbage");
    // The messageID's own length overruns the PDU.
    assert_refused(&server, &[0x30, 0x03, 0x02, 0x05, 0x01], "a truncated messageID");
}

#[test]
fn indefinite_length_is_refused() {
    let server = Server::start();
    // An Unbind in indefinite form: RFC 4511 §5.1 allows only definite lengths.
    let bytes = [0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00];
    assert_refused(&server, &bytes, "indefinite length");
}

#[test]
fn pdu_over_the_size_limit_is_refused_from_its_header() {
    let server = Server::start();
    // 32 MiB announced and none of it sent: the server must not wait for it.
    assert_refused(&server, &[0x30, 0x84, 0x02, 0x00, 0x00, 0x00], "a 32 MiB length");
    assert_refused(&server, &[0x30, 0x84, 0x01, 0x00, 0x00, 0x00], "a 16 MiB content length");
}

/// `(&(&(...(objectClass=*))))` with `depth` ANDs.
fn nested_and(depth: usize) -> Vec<u8> {
    (0..depth).fold(present("objectClass"), |inner, _| tlv(0xa0, &inner))
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    // filter_depth_max (32 by default) would answer adminLimitExceeded before the framing
    // limit is reached; raised here so that this test sees the framing limit alone.
    let server = Server::start_with_config(&format!("{TEST_CONFIG}\n[limits]\nfilter_depth_max = 64\n"));
    // Depth counts constructed elements from the LDAPMessage (1) and the SearchRequest (2),
    // so n nested ANDs reach depth n + 2: 62 is exactly the limit of 64...
    let mut stream = connect(&server);
    for (id, depth) in [(1, 20), (2, 62)] {
        send(&mut stream, &search(id, BASE, 2, &nested_and(depth), &["1.1"]));
        let (dns, done) = read_search(&mut stream, id);
        assert_eq!((done.code, dns.len()), (0, 6), "{depth} ANDs: {done:?}");
    }
    // ...and one more is over it.
    assert_refused(&server, &search(3, BASE, 2, &nested_and(63), &["1.1"]), "63 nested ANDs");
    assert_refused(&server, &search(4, BASE, 2, &nested_and(1000), &["1.1"]), "1000 nested ANDs");
    let mut deep = octets(b"x");
    for _ in 0..100 {
        deep = tlv(0x30, &deep);
    }
    assert_refused(&server, &message(5, &deep), "100 nested SEQUENCEs");
}

#[test]
fn unknown_or_misplaced_protocol_op_is_refused() {
    let server = Server::start();
    assert_refused(&server, &message(1, &[0x7e, 0x00]), "[APPLICATION 30]");
    assert_refused(&server, &message(1, &[0x5e, 0x00]), "primitive [APPLICATION 30]");
    // A BindResponse is a response, not a request.
    let response = tlv(0x61, &[int(0x0a, 0), octets(b""), octets(b"")].concat());
    assert_refused(&server, &message(1, &response), "a BindResponse from the client");
}

#[test]
fn long_form_lengths_are_accepted() {
    let server = Server::start();
    let mut stream = connect(&server);
    // An anonymous bind with four-octet lengths on the message and the BindRequest.
    let bytes = [
        0x30, 0x84, 0x00, 0x00, 0x00, 0x10, 0x02, 0x01, 0x01, 0x60, 0x84, 0x00, 0x00, 0x00, 0x07, 0x02, 0x01,
        0x03, 0x04, 0x00, 0x80, 0x00,
    ];
    send(&mut stream, &bytes);
    let reply = read_message(&mut stream);
    assert_eq!((reply.id, reply.op), (1, BIND_RESPONSE), "{reply:02x?}");
    assert_eq!(parse_result(&reply.body).code, 0);
    // And a search with four-octet lengths on every element, nested or not.
    let body = [
        tlv_long(0x04, BASE.as_bytes()),
        tlv_long(0x0a, &[0]),
        tlv_long(0x0a, &[0]),
        tlv_long(0x02, &[0]),
        tlv_long(0x02, &[0]),
        tlv_long(0x01, &[0]),
        tlv_long(0x87, b"objectClass"),
        tlv_long(0x30, &tlv_long(0x04, b"1.1")),
    ]
    .concat();
    let request = tlv_long(0x30, &[tlv_long(0x02, &[2]), tlv_long(0x63, &body)].concat());
    send(&mut stream, &request);
    let (dns, done) = read_search(&mut stream, 2);
    assert_eq!((done.code, dns), (0, vec![BASE.to_string()]), "{done:?}");
}

/// A TLV whose length always takes the long form with four octets (X.690 §8.1.3.5 allows
/// more length octets than needed; BER decoders must accept it).
fn tlv_long(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = u32::try_from(content.len()).expect("small");
    [&[tag, 0x84][..], &len.to_be_bytes(), content].concat()
}

#[test]
fn protos_c06_pdus_are_answered_or_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/protos-c06-ldapv3");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 100, "the PROTOS c06 set has 100 PDUs");
    let server = Server::start();
    let mut answers: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut refused = 0;
    for file in &files {
        let bytes = std::fs::read(file).expect("read test PDU");
        let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
        // Each file is one whole PDU, so the server has everything it needs to decide.
        let (_, _, rest) = split_tlv(&bytes).unwrap_or_else(|| panic!("{name}: not one PDU"));
        assert!(rest.is_empty(), "{name}: trailing bytes");
        match send_one_protos_pdu(&server, &bytes, &name) {
            Some(code) => answers.entry(code).or_default().push(name),
            None => refused += 1,
        }
    }
    eprintln!("PROTOS c06: {refused} refused; answered, by resultCode: {answers:?}");
    // Still alive and still right.
    let mut stream = connect(&server);
    send(&mut stream, &search(1, BASE, 2, &present("objectClass"), &["1.1"]));
    let (dns, done) = read_search(&mut stream, 1);
    assert_eq!((done.code, dns.len()), (0, 6), "{done:?}");
}

/// Sends one PROTOS PDU; Some(resultCode) if the server answered it with a
/// SearchResultDone, None if it disconnected (with a Notice, or by closing after the
/// write). Panics on silence.
fn send_one_protos_pdu(server: &Server, bytes: &[u8], name: &str) -> Option<u32> {
    let mut stream = connect(server);
    let request_id = parse_message(bytes).map(|m| m.id);
    if let Err(e) = stream.write_all(bytes) {
        // Refused while we were still writing: it must have closed on us.
        assert!(
            matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
            "{name}: write failed: {e}"
        );
        return None;
    }
    loop {
        let pdu = read_pdu_or_reset(&mut stream, name)?;
        let message = parse_message(&pdu).unwrap_or_else(|| panic!("{name}: bad reply {pdu:02x?}"));
        match message.op {
            SEARCH_RESULT_ENTRY => continue,
            SEARCH_RESULT_DONE => {
                if let Some(id) = request_id {
                    assert_eq!(message.id, id, "{name}: SearchResultDone for another ID");
                }
                let _ = stream.shutdown(Shutdown::Both);
                return Some(parse_result(&message.body).code);
            }
            EXTENDED_RESPONSE if message.id == 0 => {
                let outcome = parse_result(&message.body);
                let notice = outcome.extra.get(&0x8a).map(Vec::as_slice);
                assert_eq!(notice, Some(NOTICE_OF_DISCONNECTION), "{name}: {outcome:?}");
                expect_closed(&mut stream);
                return None;
            }
            other => panic!("{name}: unexpected protocolOp {other:#x}: {message:02x?}"),
        }
    }
}

/// Like [`read_pdu`], but a reset connection (the server closed with our bytes unread)
/// also counts as closed.
fn read_pdu_or_reset(stream: &mut TcpStream, name: &str) -> Option<Vec<u8>> {
    let mut probe = [0u8; 1];
    match stream.peek(&mut probe) {
        Ok(0) => None,
        Ok(_) => read_pdu(stream),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
        Err(e) => panic!("{name}: no answer and no disconnect within {READ_TIMEOUT:?}: {e}"),
    }
}

// ---- several operations on one connection ----

#[test]
fn pipelined_requests_each_get_one_answer_under_the_right_identity() {
    let server = Server::start();
    let mut stream = connect(&server);
    let requests = [
        search(1, BASE, 2, &present("objectClass"), &["1.1"]),
        search(2, "ou=people,dc=example,dc=com", 1, &present("objectClass"), &["1.1"]),
        search(3, BASE, 2, &equality("uid", "alice"), &["1.1"]),
        search(4, BOB, 0, &present("objectClass"), &["userPassword"]),
        bind(5, ALICE, "password"),
        who_am_i(6),
        bind(7, ADMIN_DN, ADMIN_PW),
        search(8, BOB, 0, &present("objectClass"), &["userPassword"]),
        who_am_i(9),
    ]
    .concat();
    send(&mut stream, &requests);
    let mut finals: BTreeMap<u32, Message> = BTreeMap::new();
    let mut entries: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    while finals.len() < 9 {
        let reply = read_message(&mut stream);
        assert!((1..=9).contains(&reply.id), "unexpected messageID: {reply:02x?}");
        assert!(!finals.contains_key(&reply.id), "a response after the final one: {reply:02x?}");
        if reply.op == SEARCH_RESULT_ENTRY {
            entries.entry(reply.id).or_default().push(reply.body);
        } else {
            finals.insert(reply.id, reply);
        }
    }
    let expected_ops = [
        (1, SEARCH_RESULT_DONE),
        (2, SEARCH_RESULT_DONE),
        (3, SEARCH_RESULT_DONE),
        (4, SEARCH_RESULT_DONE),
        (5, BIND_RESPONSE),
        (6, EXTENDED_RESPONSE),
        (7, BIND_RESPONSE),
        (8, SEARCH_RESULT_DONE),
        (9, EXTENDED_RESPONSE),
    ];
    for (id, op) in expected_ops {
        let reply = &finals[&id];
        assert_eq!(reply.op, op, "request {id}: {reply:02x?}");
        assert_eq!(parse_result(&reply.body).code, 0, "request {id}: {reply:02x?}");
    }
    let count = |id| entries.get(&id).map_or(0, Vec::len);
    assert_eq!([count(1), count(2), count(3), count(4), count(8)], [6, 2, 1, 1, 1]);
    // Search 4 ran anonymously: no userPassword. Search 8 ran as the admin: there it is.
    let has_password = |body: &[u8]| body.windows(12).any(|w| w.eq_ignore_ascii_case(b"userPassword"));
    assert!(!has_password(&entries[&4][0]), "anonymous search saw userPassword");
    assert!(has_password(&entries[&8][0]), "admin search lacks userPassword");
    let authz = |id: u32| {
        let outcome = parse_result(&finals[&id].body);
        String::from_utf8_lossy(outcome.extra.get(&0x8b).map_or(&[][..], Vec::as_slice)).to_ascii_lowercase()
    };
    assert_eq!(authz(6), format!("dn:{ALICE}"));
    assert_eq!(authz(9), format!("dn:{ADMIN_DN}"));
    // Nothing more is owed: the next request's answer is the next thing on the wire.
    send(&mut stream, &who_am_i(10));
    let reply = read_message(&mut stream);
    assert_eq!((reply.id, reply.op), (10, EXTENDED_RESPONSE), "{reply:02x?}");
}

#[test]
fn abandon_leaves_the_connection_usable() {
    let server = Server::start();
    let mut stream = connect(&server);
    // Abandon a search (whether or not it has finished), then an ID that never existed.
    let requests = [
        search(1, BASE, 2, &present("objectClass"), &["*", "+"]),
        abandon(2, 1),
        abandon(3, 999),
        who_am_i(4),
    ]
    .concat();
    send(&mut stream, &requests);
    // Abandon has no response (RFC 4511 §4.11). The search may or may not answer, at any
    // point: a client can't tell an abandoned operation from one that finished first.
    let reply = read_skipping(&mut stream, 1);
    assert_eq!((reply.id, reply.op), (4, EXTENDED_RESPONSE), "{reply:02x?}");
    assert_eq!(parse_result(&reply.body).code, 0);
    send(&mut stream, &[bind(5, "", ""), search(6, BASE, 1, &present("objectClass"), &["1.1"])].concat());
    let reply = read_skipping(&mut stream, 1);
    assert_eq!((reply.id, reply.op), (5, BIND_RESPONSE), "{reply:02x?}");
    assert_eq!(parse_result(&reply.body).code, 0);
    let mut entries = 0;
    let done = loop {
        let reply = read_skipping(&mut stream, 1);
        assert_eq!(reply.id, 6, "{reply:02x?}");
        match reply.op {
            SEARCH_RESULT_ENTRY => entries += 1,
            SEARCH_RESULT_DONE => break parse_result(&reply.body),
            other => panic!("unexpected protocolOp {other:#x}"),
        }
    };
    assert_eq!((done.code, entries), (0, 2), "{done:?}");
}

/// The next message whose ID isn't `skip`.
fn read_skipping(stream: &mut TcpStream, skip: u32) -> Message {
    loop {
        let reply = read_message(stream);
        if reply.id != skip {
            return reply;
        }
    }
}

#[test]
fn unbind_closes_the_connection() {
    let server = Server::start();
    let mut stream = connect(&server);
    assert_usable(&mut stream, 1);
    // Nothing after the Unbind is answered: not even a request in the same segment.
    send(&mut stream, &[unbind(2), who_am_i(3)].concat());
    expect_closed(&mut stream);
    assert_usable(&mut connect(&server), 1);
}
