//! Limits (issue #9, item 3), against the real binary over raw BER: size limits per identity
//! class (anonymous, authenticated, a listed DN, the rootDN); the PDU size limit before and
//! after bind; the pending-request limit stopping the server from reading (and everything
//! still answered); filter, control and attribute counts refused with adminLimitExceeded;
//! connections per IP; the anonymous idle timeout; a flood of 10,000 connections costing
//! at most 64 MiB; slow senders (slowloris) leaving other clients answered promptly.
//!
//! The BER here is deliberately tiny (as in raw.rs): single-octet tags, definite lengths.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};
use crate::raw::{bind, connect, int, octets, parse_result, present, send, split_tlv, tlv, uint, Message};

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const READ_TIMEOUT: Duration = Duration::from_secs(20);
/// Entries in the example tree, all under BASE.
const EXAMPLE_ENTRIES: usize = 6;

const BIND_RESPONSE: u8 = 0x61;
const SEARCH_RESULT_ENTRY: u8 = 0x64;
const SEARCH_RESULT_DONE: u8 = 0x65;
const EXTENDED_RESPONSE: u8 = 0x78;
const NOTICE_OF_DISCONNECTION: &[u8] = b"1.3.6.1.4.1.1466.20036";
const SIZE_LIMIT_EXCEEDED: u32 = 4;
const ADMIN_LIMIT_EXCEEDED: u32 = 11;

/// TEST_CONFIG with `limits` (TOML tables under `[limits]`) appended.
fn config(limits: &str) -> String {
    format!("{TEST_CONFIG}\n{limits}\n")
}

// ---- building BER ----

/// raw.rs's `message`, with request controls.
fn message(id: u32, op: &[u8], controls: &[&str]) -> Vec<u8> {
    let mut body = [int(0x02, id), op.to_vec()].concat();
    if !controls.is_empty() {
        let list: Vec<u8> = controls.iter().flat_map(|oid| tlv(0x30, &octets(oid.as_bytes()))).collect();
        body.extend(tlv(0xa0, &list));
    }
    tlv(0x30, &body)
}

fn equality(attr: &str, value: &[u8]) -> Vec<u8> {
    tlv(0xa3, &[octets(attr.as_bytes()), octets(value)].concat())
}

/// A subtree search of BASE.
fn search_with(id: u32, filter: &[u8], attrs: &[&str], controls: &[&str]) -> Vec<u8> {
    let attr_list: Vec<u8> = attrs.iter().flat_map(|a| octets(a.as_bytes())).collect();
    let body = [
        octets(BASE.as_bytes()),
        int(0x0a, 2),
        int(0x0a, 0),
        int(0x02, 0),
        int(0x02, 0),
        tlv(0x01, &[0x00]),
        filter.to_vec(),
        tlv(0x30, &attr_list),
    ]
    .concat();
    message(id, &tlv(0x63, &body), controls)
}

fn search(id: u32, filter: &[u8]) -> Vec<u8> {
    search_with(id, filter, &["1.1"], &[])
}

/// `(&(&(...(objectClass=*))))`: a filter of depth `depth`.
fn nested(depth: usize) -> Vec<u8> {
    (1..depth).fold(present("objectClass"), |inner, _| tlv(0xa0, &inner))
}

// ---- reading BER ----

/// The resultCode and diagnosticMessage of a response carrying an LDAPResult.
fn result(message: &Message) -> (u32, String) {
    let outcome = parse_result(&message.body);
    (outcome.code, outcome.diagnostic)
}

/// One whole PDU, or None when the server closed the connection (cleanly or by reset).
fn read_pdu(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut header = [0u8; 2];
    match stream.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset) => return None,
        Err(e) => panic!("waiting for a response: {e}"),
    }
    let mut pdu = header.to_vec();
    let len = if header[1] < 0x80 {
        usize::from(header[1])
    } else {
        let mut octets = vec![0u8; usize::from(header[1] & 0x7f)];
        stream.read_exact(&mut octets).expect("length octets");
        pdu.extend_from_slice(&octets);
        octets.iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b))
    };
    let mut content = vec![0u8; len];
    stream.read_exact(&mut content).expect("a PDU");
    pdu.extend_from_slice(&content);
    Some(pdu)
}

fn read_message(stream: &mut TcpStream) -> Message {
    let pdu = read_pdu(stream).expect("a response, not a closed connection");
    let parsed = (|| {
        let (0x30, content, []) = split_tlv(&pdu)? else { return None };
        let (0x02, id, rest) = split_tlv(content)? else { return None };
        let (op, body, _controls) = split_tlv(rest)?;
        Some(Message { id: uint(id), op, body: body.to_vec() })
    })();
    parsed.unwrap_or_else(|| panic!("undecodable response: {pdu:02x?}"))
}

/// Reads a search's responses to its SearchResultDone: (entries, resultCode, diagnostic).
fn read_search(stream: &mut TcpStream, id: u32) -> (usize, u32, String) {
    let mut entries = 0;
    loop {
        let reply = read_message(stream);
        assert_eq!(reply.id, id, "{reply:02x?}");
        match reply.op {
            SEARCH_RESULT_ENTRY => entries += 1,
            SEARCH_RESULT_DONE => {
                let (code, diagnostic) = result(&reply);
                return (entries, code, diagnostic);
            }
            other => panic!("unexpected protocolOp {other:#x} in a search"),
        }
    }
}

fn bind_ok(stream: &mut TcpStream, id: u32, dn: &str, password: &str) {
    send(stream, &bind(id, dn, password));
    let reply = read_message(stream);
    assert_eq!((reply.id, reply.op), (id, BIND_RESPONSE), "{reply:02x?}");
    assert_eq!(result(&reply).0, 0, "bind as {dn:?}: {reply:02x?}");
}

/// The connection answers a search (all entries, success).
fn assert_usable(stream: &mut TcpStream, id: u32) {
    send(stream, &search(id, &present("objectClass")));
    let (entries, code, diagnostic) = read_search(stream, id);
    assert_eq!((entries, code), (EXAMPLE_ENTRIES, 0), "{diagnostic}");
}

fn expect_notice_and_close(stream: &mut TcpStream, what: &str) {
    let pdu = read_pdu(stream).unwrap_or_else(|| panic!("{what}: closed without a Notice of Disconnection"));
    let notice = pdu.windows(NOTICE_OF_DISCONNECTION.len()).any(|w| w == NOTICE_OF_DISCONNECTION);
    assert!(notice && pdu.contains(&EXTENDED_RESPONSE), "{what}: not a notice: {pdu:02x?}");
    assert!(read_pdu(stream).is_none(), "{what}: the connection stayed open");
}

/// Whether the server closes `stream` within `limit` (rather than answering or waiting).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Ok(_) => panic!("expected a close or silence, got data"),
        Err(_) => false,
    }
}

// ---- per-class search limits ----

#[test]
fn size_limit_follows_the_identity_class() {
    let server = Server::start_with_config(&config(&format!(
        r#"[limits.anonymous]
search_entries_max = 2
[limits.authenticated]
search_entries_max = 3
[[limits.identities]]
dn = "{ALICE}"
search_entries_max = 0
"#
    )));
    let cases = [(None, 2, SIZE_LIMIT_EXCEEDED), (Some((BOB, "password")), 3, SIZE_LIMIT_EXCEEDED)];
    let exempt =
        [(Some((ALICE, "password")), EXAMPLE_ENTRIES, 0), (Some((ADMIN_DN, ADMIN_PW)), EXAMPLE_ENTRIES, 0)];
    for (who, entries, code) in cases.into_iter().chain(exempt) {
        let mut stream = connect(&server);
        if let Some((dn, password)) = who {
            bind_ok(&mut stream, 1, dn, password);
        }
        send(&mut stream, &search(2, &present("objectClass")));
        let (got, got_code, diagnostic) = read_search(&mut stream, 2);
        assert_eq!((got, got_code), (entries, code), "as {who:?}: {diagnostic}");
    }
}

// ---- PDU size and pending requests ----

#[test]
fn pdu_limit_is_larger_once_bound() {
    let server = Server::start_with_config(&config("[limits.anonymous]\npdu_bytes_max = 2000"));
    // A 3,000-byte search: over the anonymous limit, well under the authenticated one.
    let big = search(2, &equality("uid", &[b'x'; 2900]));
    assert!(big.len() > 2000 && big.len() < 4000);
    let mut anonymous = connect(&server);
    send(&mut anonymous, &big);
    expect_notice_and_close(&mut anonymous, "3,000 bytes before bind");

    let mut bound = connect(&server);
    bind_ok(&mut bound, 1, BOB, "password");
    send(&mut bound, &big);
    let (entries, code, diagnostic) = read_search(&mut bound, 2);
    assert_eq!((entries, code), (0, 0), "{diagnostic}");
    assert_usable(&mut bound, 3);
}

/// Bytes written to `stream` that the kernel has not yet handed to the peer (TIOCOUTQ): on
/// loopback, more than none stays there only while the peer's receive buffer is full.
fn unsent_bytes(stream: &TcpStream) -> libc::c_int {
    let mut unsent: libc::c_int = 0;
    // SAFETY: a valid socket descriptor, and a pointer to a c_int, which TIOCOUTQ fills.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut unsent) };
    assert_eq!(rc, 0, "ioctl TIOCOUTQ");
    unsent
}

/// Shrinks a socket's kernel buffers, so that what the test sees is the server's buffering,
/// not the kernel's.
fn shrink_socket_buffers(stream: &TcpStream) {
    let size: libc::c_int = 16 * 1024;
    for option in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: a valid socket descriptor, and a pointer to a c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "setsockopt");
    }
}

#[test]
fn pending_request_limit_stops_reading_and_everything_is_answered() {
    let server = Server::start_with_config(&config(
        "[limits]\noutbound_pdus_queued_max = 4\n[limits.anonymous]\nrequests_pending_max = 4",
    ));
    // Every search returns this entry too, so that its answers fill the server's send
    // buffer after a few searches whatever size the kernel gives that buffer: the test
    // then measures the server's own reading, not how much the kernel absorbs.
    let big = format!(
        "dn: cn=big,{BASE}\nobjectClass: organizationalRole\ncn: big\ndescription: {}\n",
        "y".repeat(256 * 1024)
    );
    let (code, _, err) = crate::harness::tool(
        "ldapadd",
        &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW],
        Some(&big),
    );
    assert_eq!(code, 0, "ldapadd: {err}");
    // 600 searches of 16 KiB each (a long value that matches nothing, negated: every entry
    // matches), about 10 MB in all, whose answers the client doesn't read at first.
    const REQUESTS: u32 = 600;
    let pad = vec![b'x'; 16 * 1024];
    let filter = tlv(0xa2, &equality("uid", &pad));
    let requests: Vec<u8> = (1..=REQUESTS).flat_map(|id| search_with(id, &filter, &[], &[])).collect();
    let total = requests.len();
    let mut stream = connect(&server);
    shrink_socket_buffers(&stream);
    let written = Arc::new(AtomicUsize::new(0));
    let mut writer = stream.try_clone().expect("clone");
    writer.set_write_timeout(None).expect("no write timeout");
    let progress = written.clone();
    let writing = std::thread::spawn(move || {
        for chunk in requests.chunks(64 * 1024) {
            writer.write_all(chunk).expect("send requests");
            progress.fetch_add(chunk.len(), Ordering::Relaxed);
        }
    });
    // Wait for the server to stop reading: the kernel holds bytes the client sent that the
    // server has not taken (the server's receive window is closed) and the writer has made
    // no progress for ten looks in a row. A server that queued requests without bound never
    // gets there: it reads all 10 MB and the writer finishes.
    let mut last = (usize::MAX, 0);
    let stalled = crate::harness::wait_until(Instant::now() + Duration::from_secs(30), || {
        let now = written.load(Ordering::Relaxed);
        last = if now == last.0 { (now, last.1 + 1) } else { (now, 0) };
        last.1 >= 10 && now < total && unsent_bytes(&stream) > 0
    });
    let stalled_at = written.load(Ordering::Relaxed);
    assert!(stalled, "the server never stopped reading: it took {stalled_at} of {total} bytes");
    // One that stops reading has taken only what the kernel's buffers hold.
    assert!(stalled_at < total / 2, "the server read {stalled_at} of {total} bytes without answering");
    let mut answered = 0;
    while answered < REQUESTS {
        let reply = read_message(&mut stream);
        if reply.op == SEARCH_RESULT_DONE {
            assert_eq!(result(&reply).0, 0, "search {}: {reply:02x?}", reply.id);
            answered += 1;
        }
    }
    writing.join().expect("writer thread");
    eprintln!("pending limit: the client could write {stalled_at} of {total} bytes before reading");
}

// ---- the shape of a request ----

#[test]
fn filter_controls_and_attribute_counts_are_bounded() {
    let server = Server::start_with_config(&config(
        "[limits]\nfilter_depth_max = 4\nfilter_elements_max = 8\ncontrols_per_request_max = 2\n\
         attributes_per_request_max = 3",
    ));
    let mut stream = connect(&server);
    let or_of = |n: usize| tlv(0xa1, &(0..n).flat_map(|_| present("objectClass")).collect::<Vec<u8>>());
    let noncritical = ["1.2.3.4", "1.2.3.5", "1.2.3.6"];
    let cases: Vec<(Vec<u8>, u32, &str)> = vec![
        (search(1, &nested(4)), 0, ""),
        (search(2, &nested(5)), ADMIN_LIMIT_EXCEEDED, "filter_depth_max"),
        (search(3, &or_of(7)), 0, ""),
        (search(4, &or_of(8)), ADMIN_LIMIT_EXCEEDED, "filter_elements_max"),
        (search_with(5, &present("objectClass"), &["cn", "sn", "uid"], &[]), 0, ""),
        (
            search_with(6, &present("objectClass"), &["cn", "sn", "uid", "mail"], &[]),
            ADMIN_LIMIT_EXCEEDED,
            "attributes_per_request_max",
        ),
        (search_with(7, &present("objectClass"), &["1.1"], &noncritical[..2]), 0, ""),
        (
            search_with(8, &present("objectClass"), &["1.1"], &noncritical),
            ADMIN_LIMIT_EXCEEDED,
            "controls_per_request_max",
        ),
    ];
    for (request, code, limit) in cases {
        let id =
            split_tlv(&request).and_then(|(_, c, _)| split_tlv(c)).map(|(_, id, _)| uint(id)).expect("id");
        send(&mut stream, &request);
        let (entries, got, diagnostic) = read_search(&mut stream, id);
        assert_eq!(got, code, "request {id}: {diagnostic}");
        assert!(diagnostic.contains(limit), "request {id}: {diagnostic:?} should name {limit}");
        if code == 0 {
            assert_eq!(entries, EXAMPLE_ENTRIES, "request {id}");
        }
    }
    // Too many controls on a Bind too; the connection goes on.
    let body = [int(0x02, 3), octets(b""), tlv(0x80, b"")].concat();
    send(&mut stream, &message(9, &tlv(0x60, &body), &noncritical));
    let reply = read_message(&mut stream);
    assert_eq!((reply.id, reply.op, result(&reply).0), (9, BIND_RESPONSE, ADMIN_LIMIT_EXCEEDED));
    assert_usable(&mut stream, 10);
}

// ---- connections ----

#[test]
fn connections_per_ip_are_limited() {
    let server = Server::start_with_config(&config(
        "[limits]\nconnections_per_ip_max = 3\nconnections_per_ip_exempt_loopback = false",
    ));
    let mut open: Vec<TcpStream> = (0..3).map(|_| connect(&server)).collect();
    for (id, stream) in open.iter_mut().enumerate() {
        assert_usable(stream, id as u32 + 1);
    }
    let mut fourth = connect(&server);
    assert!(closed_within(&mut fourth, Duration::from_secs(10)), "a 4th connection from one IP stayed open");
    // Closing one makes room again (the count drops when the server sees the close).
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = connect(&server);
        // Refused connections may already be reset: a failed send shows up as None below.
        let _ = again.write_all(&search(1, &present("objectClass")));
        match read_pdu(&mut again) {
            Some(_) => break,
            None => assert!(Instant::now() < deadline, "no room after a connection closed"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn idle_anonymous_connections_are_closed_and_bound_ones_kept() {
    let server = Server::start_with_config(&config(
        "[limits.anonymous]\nidle_timeout_s = 1\n[limits.authenticated]\nidle_timeout_s = 0",
    ));
    let mut anonymous = connect(&server);
    assert_usable(&mut anonymous, 1);
    // Its idle time counts from its last request, whatever the bind below takes.
    let started = Instant::now();
    let mut bound = connect(&server);
    bind_ok(&mut bound, 1, BOB, "password");
    assert!(
        closed_within(&mut anonymous, Duration::from_secs(10)),
        "the idle anonymous connection stayed open"
    );
    assert!(started.elapsed() >= Duration::from_millis(500), "closed before its idle timeout");
    std::thread::sleep(Duration::from_millis(1500));
    bound.set_read_timeout(Some(READ_TIMEOUT)).expect("read timeout");
    assert_usable(&mut bound, 2);
}

/// Raises this process's open-file limit (inherited by the server it starts) to `wanted`.
fn raise_open_files(wanted: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        assert!(limit.rlim_max >= wanted, "the hard open-file limit ({}) is under {wanted}", limit.rlim_max);
        limit.rlim_cur = limit.rlim_cur.max(wanted);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// The server's resident memory in KiB, from /proc/PID/status.
fn rss_kib(server: &Server) -> u64 {
    let pid = server.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmRSS value")
}

#[test]
fn a_flood_of_connections_from_one_ip_costs_little_memory() {
    const FLOOD: usize = 10_000;
    raise_open_files(FLOOD as u64 + 2000);
    let server = Server::start_with_config(&config("[limits]\nconnections_max = 20000"));
    let mut warm = connect(&server);
    assert_usable(&mut warm, 1);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(&server);
    let mut flood = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let mut stream = TcpStream::connect(server.addr).expect("connect");
        // Half of them start a PDU and stop: each then holds a read buffer.
        if i % 2 == 0 {
            stream.write_all(&[0x30]).expect("send");
        }
        flood.push(stream);
    }
    // All accepted and the server still answering.
    let mut probe = connect(&server);
    assert_usable(&mut probe, 1);
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(&server);
    let added_mib = after.saturating_sub(before) / 1024;
    eprintln!("{FLOOD} connections: RSS {before} KiB -> {after} KiB (+{added_mib} MiB)");
    assert!(after.saturating_sub(before) <= 64 * 1024, "{FLOOD} connections added {added_mib} MiB");
    drop(flood);
    assert_usable(&mut probe, 2);
}

#[test]
fn slow_senders_leave_other_clients_answered() {
    // A small read budget (the least allowed: the largest PDU), so that slow senders of big
    // PDUs use all of it.
    let server = Server::start_with_config(&config("[limits]\nread_buffers_bytes_max = 4194303"));
    // 100 clients each sending a search one byte at a time, and 40 announcing a 250,000-byte
    // PDU and sending it a byte at a time: between them they hold the whole read budget.
    let small = search(1, &present("objectClass"));
    let big_header = {
        let mut pdu = tlv(0x30, &vec![0u8; 250_000 - 5]);
        pdu.truncate(8);
        pdu
    };
    let mut slow: Vec<(TcpStream, Vec<u8>)> = (0..100).map(|_| (connect(&server), small.clone())).collect();
    slow.extend((0..40).map(|_| (connect(&server), big_header.clone())));
    let mut other = connect(&server);
    let mut sent = 0;
    let mut worst = Duration::ZERO;
    let mut id = 1;
    // 100 rounds, each a byte more from every slow sender and a search from the other
    // client, which must be answered (raw.rs's read timeout bounds each wait).
    while id <= 100 {
        // One more byte each, never the last: no slow PDU is ever whole here.
        for (stream, pdu) in &mut slow {
            if sent + 1 < pdu.len() {
                stream.write_all(&pdu[sent..=sent]).expect("slow send");
            }
        }
        sent += 1;
        let asked = Instant::now();
        assert_usable(&mut other, id);
        worst = worst.max(asked.elapsed());
        id += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    // For information only: how long an answer took is a benchmark's business, not a test's.
    eprintln!("slowloris: {} searches answered meanwhile, the slowest in {worst:?}", id - 1);
    // The slow senders' own requests are answered once they are whole.
    for (stream, pdu) in slow.iter_mut().take(3) {
        send(stream, &pdu[sent.min(pdu.len() - 1)..]);
        let (entries, code, _) = read_search(stream, 1);
        assert_eq!((entries, code), (EXAMPLE_ENTRIES, 0));
    }
}
