//! `ferrodir verify`: a data directory written by the server verifies clean, even after
//! kill -9 in the middle of writes; an index configured after the data was loaded shows up
//! as missing keys until `ferrodir reindex` rebuilds it.

use std::process::Command;
use std::time::Duration;

use ldap3::{LdapConn, LdapConnSettings};

use crate::harness::{binary, Server, ADMIN_DN, ADMIN_PW, TEST_CONFIG};

fn run(args: &[&str], server: &Server) -> (bool, String) {
    let output = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run ferrodir");
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

fn admin(server: &Server) -> LdapConn {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
    let mut conn = LdapConn::with_settings(settings, &server.url()).expect("connect");
    conn.with_timeout(Duration::from_secs(15))
        .simple_bind(ADMIN_DN, ADMIN_PW)
        .expect("bind")
        .success()
        .expect("bind ok");
    conn
}

fn add_people(conn: &mut LdapConn, prefix: &str, count: usize) {
    for i in 0..count {
        let dn = format!("cn={prefix}{i},ou=people,dc=example,dc=com");
        let cn = format!("{prefix}{i}");
        let attrs = vec![
            ("objectClass", ["person"].into_iter().collect()),
            ("cn", [cn.as_str()].into_iter().collect()),
            ("sn", ["s"].into_iter().collect()),
        ];
        let result = conn.with_timeout(Duration::from_secs(15)).add(&dn, attrs).expect("add");
        assert_eq!(result.rc, 0, "{dn}: {result:?}");
    }
}

#[test]
fn written_data_verifies_clean_even_after_sigkill() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    add_people(&mut conn, "v", 40);
    for i in 0..10 {
        let dn = format!("cn=v{i},ou=people,dc=example,dc=com");
        assert_eq!(conn.with_timeout(Duration::from_secs(15)).delete(&dn).expect("delete").rc, 0);
    }
    drop(conn);
    server.kill();
    let (ok, text) = run(&["verify"], &server);
    assert!(ok, "verify failed:\n{text}");
    assert!(text.contains("0 problems"), "{text}");
}

#[test]
fn a_new_index_is_missing_until_reindex() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    add_people(&mut conn, "r", 20);
    drop(conn);
    server.stop();
    // Configure an index the data was not built with.
    let config = format!("{TEST_CONFIG}\nindex = [\"objectClass eq\", \"sn eq,sub\"]\n");
    let config = config.replacen("[log]\nlevel = \"warn\"\n", "", 1) + "[log]\nlevel = \"warn\"\n";
    std::fs::write(server.config_path(), config).expect("write config");
    let (ok, text) = run(&["verify"], &server);
    assert!(!ok, "verify should report the unbuilt index:\n{text}");
    assert!(text.contains("missing key"), "{text}");
    let (ok, text) = run(&["reindex"], &server);
    assert!(ok, "reindex failed:\n{text}");
    let (ok, text) = run(&["verify"], &server);
    assert!(ok, "verify after reindex:\n{text}");
}
