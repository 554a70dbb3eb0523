//! The audit log (`[audit_log] path`) of the real binary, driven by python3-ldap3 over one
//! connection: an Add, a Modify (add, replace and delete of values, a new password), a
//! Modify DN, a Password Modify and a Delete each leave one record in slapo-auditlog's
//! format, whose header names the operation, the bind DN, the client's IP and port and the
//! connection (cross-checked with cn=Monitor's connection entry), whose body is the change
//! as LDIF, and in which a password shows only as the hash the entry holds. A refused
//! change leaves none. SIGUSR1 after the file was moved away makes the next change land in
//! a new file at the path (logrotate). With `[refint]` on, the server's own rewrite of a
//! group after a member's delete is recorded too, as slapd's refint overlay's modify is.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::harness::{tool, wait_until, Server, ADMIN_DN, ADMIN_PW, TEST_CONFIG};

/// The password the client sends in clear; it must never reach the file.
const SECRET: &str = "Audit-Clear-Text-7431";
const ADDED: &str = "uid=audra,ou=people,dc=example,dc=com";
const RENAMED: &str = "uid=audrey,ou=people,dc=example,dc=com";
const PYTHON: &str = "/usr/bin/python3";

/// One server with the audit log on, storing passwords as {SSHA512} (fast in a debug build).
fn start(audit: &Path) -> Server {
    let config = TEST_CONFIG.replacen(
        "[log]",
        &format!("password_scheme = \"{{SSHA512}}\"\n[audit_log]\npath = \"{}\"\n[log]", audit.display()),
        1,
    );
    Server::start_with_config(&config)
}

/// The client: prints its own port and its connection's number (from cn=Monitor), makes
/// the five changes and one refused add, and prints the userPassword the entry held after
/// the Password Modify.
const SCRIPT: &str = r#"
import sys, ldap3
host, port = sys.argv[1].rsplit(":", 1)
admin, admin_pw, secret, added, renamed = sys.argv[2:7]
server = ldap3.Server(host, port=int(port), get_info=ldap3.NONE)
conn = ldap3.Connection(server, user=admin, password=admin_pw, auto_bind=True, raise_exceptions=True)
local_port = conn.socket.getsockname()[1]
print(local_port)
conn.search("cn=Connections,cn=Monitor", "(objectClass=monitorConnection)", ldap3.LEVEL,
            attributes=["monitorConnectionNumber", "monitorConnectionPeerAddress"])
mine = [e for e in conn.entries
        if str(e.monitorConnectionPeerAddress) == "IP=127.0.0.1:%d" % local_port]
assert len(mine) == 1, conn.entries
print(mine[0].monitorConnectionNumber)
conn.add(added, ["inetOrgPerson"], {"uid": "audra", "cn": "Audra", "sn": "A",
         "mail": "audra@example.com", "userPassword": secret, "description": "caf\u00e9"})
try:
    conn.add("uid=alice,ou=people,dc=example,dc=com", ["inetOrgPerson"], {"cn": "x", "sn": "y"})
    raise SystemExit("adding an existing entry succeeded")
except ldap3.core.exceptions.LDAPEntryAlreadyExistsResult:
    pass
conn.modify(added, {
    "telephoneNumber": [(ldap3.MODIFY_ADD, ["+1 555 0100"])],
    "mail": [(ldap3.MODIFY_REPLACE, ["audra@example.org"])],
    "description": [(ldap3.MODIFY_DELETE, [])],
    "userPassword": [(ldap3.MODIFY_REPLACE, [secret + "-2"])],
})
conn.modify_dn(added, "uid=audrey", delete_old_dn=True)
assert conn.extend.standard.modify_password(renamed, None, secret + "-3") is True
conn.search(renamed, "(objectClass=*)", ldap3.BASE, attributes=["userPassword"])
stored = conn.entries[0].entry_attributes_as_dict["userPassword"][0]
print(stored.decode() if isinstance(stored, bytes) else stored)
conn.delete(renamed)
conn.unbind()
"#;

/// One record: its header line, its LDIF lines, its closing comment.
struct Record {
    header: String,
    lines: Vec<String>,
    end: String,
}

/// The records of an audit file: blocks separated by a blank line, lines unfolded.
fn records(text: &str) -> Vec<Record> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            // Long lines are folded (RFC 2849 note 2: a continuation starts with a space).
            let mut lines: Vec<String> = Vec::new();
            for line in block.lines() {
                match (line.strip_prefix(' '), lines.last_mut()) {
                    (Some(rest), Some(last)) => last.push_str(rest),
                    _ => lines.push(line.to_string()),
                }
            }
            assert!(lines.len() >= 4, "a short record: {block:?}");
            let header = lines.remove(0);
            let end = lines.pop().unwrap();
            Record { header, lines, end }
        })
        .collect()
}

/// Waits until the file holds `count` whole records (the writer is asynchronous).
fn wait_for_records(path: &Path, count: usize) -> String {
    let mut text = String::new();
    wait_until(Instant::now() + Duration::from_secs(20), || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.matches("# end ").count() >= count
    });
    text
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Checks a record's header and closing line: `# <op> <time> dc=example,dc=com <bind DN>
/// IP=127.0.0.1:<port> conn=<n>` and `# end <op> <time>`, the time within the test's run.
fn check_frame(record: &Record, op: &str, port: &str, conn: &str, started: u64) {
    let fields: Vec<&str> = record.header.split(' ').collect();
    assert_eq!(fields.len(), 7, "header: {}", record.header);
    assert_eq!((fields[0], fields[1]), ("#", op), "header: {}", record.header);
    let at: u64 = fields[2].parse().unwrap_or_else(|_| panic!("header time: {}", record.header));
    assert!(at >= started && at <= unix_now(), "header time {at} outside the test: {}", record.header);
    assert_eq!(fields[3], "dc=example,dc=com", "suffix: {}", record.header);
    assert_eq!(fields[4], ADMIN_DN, "bind DN: {}", record.header);
    assert_eq!(fields[5], format!("IP=127.0.0.1:{port}"), "peer: {}", record.header);
    assert_eq!(fields[6], format!("conn={conn}"), "connection: {}", record.header);
    assert_eq!(record.end, format!("# end {op} {at}"));
}

fn starts(lines: &[String], expected: &[&str]) {
    let head: Vec<&str> = lines.iter().take(expected.len()).map(String::as_str).collect();
    assert_eq!(head, expected, "record: {lines:#?}");
}

#[test]
fn every_change_is_recorded_as_slapo_auditlog_writes_it_and_sigusr1_reopens() {
    let ok = Command::new(PYTHON).args(["-c", "import ldap3"]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "{PYTHON} cannot import ldap3: install it with `apt-get install -y python3-ldap3`");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.ldif");
    let server = start(&path);
    let started = unix_now();
    let output = Command::new(PYTHON)
        .args(["-c", SCRIPT, &server.addr.to_string(), ADMIN_DN, ADMIN_PW, SECRET, ADDED, RENAMED])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let printed: Vec<&str> = stdout.lines().collect();
    let [port, conn, stored_password] = printed[..] else { panic!("the client printed {stdout:?}") };

    // The delete is the client's last change: once its record is there, every record of
    // the connection is (one connection's records are in commit order).
    let text = wait_for_records(&path, 5);
    assert!(!text.contains(SECRET), "a cleartext password reached the audit log:\n{text}");
    let all = records(&text);
    let ops: Vec<&str> = all.iter().map(|r| r.header.split(' ').nth(1).unwrap_or("")).collect();
    assert_eq!(
        ops,
        ["add", "modify", "modrdn", "modify", "delete"],
        "one record per change, the refused add none:\n{text}"
    );
    for record in &all {
        let op = record.header.split(' ').nth(1).unwrap();
        check_frame(record, op, port, conn, started);
    }

    let add = &all[0].lines;
    starts(add, &[&format!("dn: {ADDED}"), "changetype: add"]);
    for line in ["uid: audra", "cn: Audra", "sn: A", "mail: audra@example.com", "objectClass: inetOrgPerson"]
    {
        assert!(add.iter().any(|l| l == line), "no {line:?} in {add:#?}");
    }
    // "café" is not a SAFE-STRING: base64, as LDIF requires.
    assert!(add.iter().any(|l| l == "description:: Y2Fmw6k="), "{add:#?}");
    let hashes: Vec<&String> = add.iter().filter(|l| l.starts_with("userPassword")).collect();
    assert_eq!(hashes.len(), 1, "{add:#?}");
    assert!(hashes[0].starts_with("userPassword: {SSHA512}"), "the add's password: {}", hashes[0]);

    let modify = &all[1].lines;
    starts(
        modify,
        &[
            &format!("dn: {ADDED}"),
            "changetype: modify",
            "add: telephoneNumber",
            "telephoneNumber: +1 555 0100",
            "-",
            "replace: mail",
            "mail: audra@example.org",
            "-",
            "delete: description",
            "-",
            "replace: userPassword",
        ],
    );
    assert!(modify[11].starts_with("userPassword: {SSHA512}"), "{modify:#?}");
    assert_eq!(modify[12..], ["-"], "{modify:#?}");

    starts(
        &all[2].lines,
        &[&format!("dn: {ADDED}"), "changetype: modrdn", "newrdn: uid=audrey", "deleteoldrdn: 1"],
    );
    assert_eq!(all[2].lines.len(), 4, "no newsuperior: {:#?}", all[2].lines);

    // Password Modify is a modify of userPassword, with the value the entry then held.
    starts(&all[3].lines, &[&format!("dn: {RENAMED}"), "changetype: modify", "replace: userPassword"]);
    assert!(stored_password.starts_with("{SSHA512}"), "stored: {stored_password}");
    assert_eq!(all[3].lines[3..], [format!("userPassword: {stored_password}"), "-".to_string()]);

    assert_eq!(all[4].lines, [format!("dn: {RENAMED}"), "changetype: delete".to_string()]);

    // The file holds password hashes: only its owner may read it.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the audit log's mode");

    // Rotation: move the file away, SIGUSR1, and the next change goes to a new file there.
    let rotated = dir.path().join("audit.ldif.1");
    std::fs::rename(&path, &rotated).unwrap();
    Command::new("kill").args(["-USR1", &server.pid().unwrap().to_string()]).status().unwrap();
    // The reopen creates the file anew at once: its existence says the signal was handled.
    let reopened = wait_until(Instant::now() + Duration::from_secs(10), || path.exists());
    assert!(reopened, "SIGUSR1 did not reopen the audit log at {}", path.display());
    let change = "dn: uid=alice,ou=people,dc=example,dc=com\nchangetype: modify\nreplace: description\n\
                  description: rotated\n-\n";
    let (code, _, err) =
        tool("ldapmodify", &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW], Some(change));
    assert_eq!(code, 0, "{err}");
    let fresh = records(&wait_for_records(&path, 1));
    assert_eq!(fresh.len(), 1, "the new file's records");
    assert!(fresh[0].header.starts_with("# modify "), "{}", fresh[0].header);
    assert_ne!(fresh[0].header.split(' ').nth(6), Some(format!("conn={conn}").as_str()), "a new connection");
    starts(
        &fresh[0].lines,
        &[
            "dn: uid=alice,ou=people,dc=example,dc=com",
            "changetype: modify",
            "replace: description",
            "description: rotated",
            "-",
        ],
    );
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(records(&old).len(), 5, "the moved file got nothing after the reopen:\n{old}");
}

#[test]
fn refint_rewrites_are_recorded_as_the_servers_own_modify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.ldif");
    let config = TEST_CONFIG.replacen(
        "[log]",
        &format!("[audit_log]\npath = \"{}\"\n[refint]\nenabled = true\n[log]", path.display()),
        1,
    );
    let server = Server::start_with_config(&config);
    let changes = "dn: uid=rita,ou=people,dc=example,dc=com\nchangetype: add\nobjectClass: inetOrgPerson\n\
                   uid: rita\ncn: Rita\nsn: R\n\n\
                   dn: cn=auditors,ou=groups,dc=example,dc=com\nchangetype: add\nobjectClass: groupOfNames\n\
                   cn: auditors\nmember: uid=rita,ou=people,dc=example,dc=com\n\
                   member: uid=alice,ou=people,dc=example,dc=com\n\n\
                   dn: uid=rita,ou=people,dc=example,dc=com\nchangetype: delete\n";
    let (code, _, err) =
        tool("ldapmodify", &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW], Some(changes));
    assert_eq!(code, 0, "{err}");
    let text = wait_for_records(&path, 4);
    let all = records(&text);
    assert_eq!(all.len(), 4, "two adds, the delete, refint's modify:\n{text}");
    let client: Vec<&Record> =
        all.iter().filter(|r| r.header.contains(&format!(" {ADMIN_DN} IP=127.0.0.1:"))).collect();
    assert_eq!(client.len(), 3, "{text}");
    let internal: Vec<&Record> = all.iter().filter(|r| r.header.ends_with(" conn=-1")).collect();
    let [refint] = internal[..] else { panic!("one record of the server's own change:\n{text}") };
    assert!(
        refint.header.starts_with("# modify ")
            && refint.header.ends_with(" dc=example,dc=com cn=Referential Integrity Overlay  conn=-1"),
        "{}",
        refint.header
    );
    starts(
        &refint.lines,
        &[
            "dn: cn=auditors,ou=groups,dc=example,dc=com",
            "changetype: modify",
            "replace: member",
            "member: uid=alice,ou=people,dc=example,dc=com",
            "-",
        ],
    );
    assert!(!refint.lines.iter().any(|l| l.contains("rita")), "{:#?}", refint.lines);
}
