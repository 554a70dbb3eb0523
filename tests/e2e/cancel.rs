//! Cancel (RFC 3909) against the real binary, in hand-made BER (so each answer and its
//! order is seen) and through ldapsearch's `-e '!cancel'`: a refreshAndPersist search is
//! cancelled (it answers canceled, 118, then the Cancel success, 0, within a bound); a
//! Cancel of no operation gets noSuchOperation (119), of itself cannotCancel (121), a
//! malformed one protocolError (2); a write is never cut: it answers as it is, and the
//! Cancel says tooLate (120) or noSuchOperation.

use std::time::{Duration, Instant};

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE};
use crate::raw::{
    bind, connect, int, message, octets, parse_result, present, read_message, send, tlv, EXTENDED_RESPONSE,
    SEARCH_RESULT_DONE,
};

const CANCEL: &[u8] = b"1.3.6.1.1.8";
const SYNC_REQUEST: &[u8] = b"1.3.6.1.4.1.4203.1.9.1.1";
const MODIFY_RESPONSE: u8 = 0x67;

fn cancel(id: u32, target: u32) -> Vec<u8> {
    let value = tlv(0x30, &int(0x02, target));
    message(id, &tlv(0x77, &[tlv(0x80, CANCEL), tlv(0x81, &value)].concat()))
}

/// A subtree search of the suffix in refreshAndPersist mode (RFC 4533): it never ends by
/// itself.
fn persist_search(id: u32) -> Vec<u8> {
    let body = [
        octets(BASE.as_bytes()),
        int(0x0a, 2),
        int(0x0a, 0),
        int(0x02, 0),
        int(0x02, 0),
        tlv(0x01, &[0x00]),
        present("objectClass"),
        tlv(0x30, &octets(b"1.1")),
    ]
    .concat();
    let sync_value = tlv(0x30, &int(0x0a, 3));
    let control = tlv(0x30, &[octets(SYNC_REQUEST), tlv(0x01, &[0xff]), octets(&sync_value)].concat());
    tlv(0x30, &[int(0x02, id), tlv(0x63, &body), tlv(0xa0, &control)].concat())
}

/// Reads until the final responses of the message IDs in `ids` arrived: each (id, op,
/// result code), in arrival order.
fn finals(stream: &mut std::net::TcpStream, ids: &[u32]) -> Vec<(u32, u8, u32)> {
    let mut out = Vec::new();
    while out.len() < ids.len() {
        let m = read_message(stream);
        if ids.contains(&m.id) && matches!(m.op, SEARCH_RESULT_DONE | EXTENDED_RESPONSE | MODIFY_RESPONSE) {
            out.push((m.id, m.op, parse_result(&m.body).code));
        }
    }
    out
}

#[test]
fn cancel_stops_a_search_and_answers_as_rfc_3909_says() {
    let server = Server::start();
    let mut stream = connect(&server);
    send(&mut stream, &bind(1, ADMIN_DN, ADMIN_PW));
    assert_eq!(parse_result(&read_message(&mut stream).body).code, 0);
    send(&mut stream, &persist_search(2));
    // Let the refresh end and the persist stage begin.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    send(&mut stream, &cancel(3, 2));
    let answers = finals(&mut stream, &[2, 3]);
    let took = sent.elapsed();
    assert_eq!(
        answers,
        vec![(2, SEARCH_RESULT_DONE, 118), (3, EXTENDED_RESPONSE, 0)],
        "the search first, then the Cancel"
    );
    assert!(took < Duration::from_millis(200), "cancelled in {took:?}");
    eprintln!("a persist search cancelled in {took:?} (debug build)");

    send(&mut stream, &cancel(4, 99));
    assert_eq!(finals(&mut stream, &[4]), vec![(4, EXTENDED_RESPONSE, 119)]);
    send(&mut stream, &cancel(5, 5));
    assert_eq!(finals(&mut stream, &[5]), vec![(5, EXTENDED_RESPONSE, 121)]);
    let malformed = message(6, &tlv(0x77, &[tlv(0x80, CANCEL), tlv(0x81, b"zz")].concat()));
    send(&mut stream, &malformed);
    assert_eq!(finals(&mut stream, &[6]), vec![(6, EXTENDED_RESPONSE, 2)]);

    // A write and a Cancel of it sent together: the write is not cut short.
    let change = tlv(
        0x30,
        &tlv(
            0x30,
            &[int(0x0a, 2), tlv(0x30, &[octets(b"description"), tlv(0x31, &octets(b"kept"))].concat())]
                .concat(),
        ),
    );
    let modify = message(7, &tlv(0x66, &[octets(b"uid=alice,ou=people,dc=example,dc=com"), change].concat()));
    send(&mut stream, &[modify, cancel(8, 7)].concat());
    let answers = finals(&mut stream, &[7, 8]);
    assert!(answers.contains(&(7, MODIFY_RESPONSE, 0)), "{answers:?}");
    assert!(answers.iter().any(|a| a.0 == 8 && (a.2 == 120 || a.2 == 119)), "{answers:?}");
}

#[test]
fn ldapsearch_cancels_a_persist_search() {
    let server = Server::start();
    let url = server.url();
    let args = [
        "-x",
        "-H",
        url.as_str(),
        "-D",
        ADMIN_DN,
        "-w",
        ADMIN_PW,
        "-b",
        BASE,
        "-E",
        "sync=rp",
        "-e",
        "!cancel",
        "1.1",
    ];
    let started = Instant::now();
    let (_, _, err) = tool("ldapsearch", &args, None);
    assert!(err.contains("cancel got 0"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
