//! Proxied authorization (RFC 4370) through the real binary and OpenLDAP's tools
//! (`-e authzid=`): under `[sasl] authz_policy = "to"`, an identity whose authzTo names
//! alice runs operations as alice — alice's limits (a size limit of her own), alice's Who
//! am I?, alice as modifiersName — and the access log's RESULT and the audit record name
//! both identities; a target its rules don't name is authorizationDenied (123), and so is
//! any proxying under the default policy, `none`.

use std::time::{Duration, Instant};

use crate::harness::{tool, tool_as as run, wait_until, Server, ADMIN_DN, ADMIN_PW};

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const PEOPLE: &str = "ou=people,dc=example,dc=com";
const APP: &str = "cn=app,dc=example,dc=com";

fn config(dir: &std::path::Path, policy: &str) -> String {
    format!(
        "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\npassword_scheme = \"{{SCRAM-SHA-256}}\"\n\
         [[authz_regexp]]\nmatch = 'uid=([^,]+),cn=scram-sha-256,cn=auth'\nreplace = 'cn=$1,dc=example,dc=com'\n\
         [[access_rules]]\nto = 'attrs=userPassword'\nby = ['self write', 'anonymous auth', '* none']\n\
         [[access_rules]]\nto = '*'\nby = ['self write', '* read']\n\
         [[limits.identities]]\ndn = \"{ALICE}\"\nsearch_entries_max = 1\n\
         [sasl]\nauthz_policy = \"{policy}\"\n\
         [access_log]\npath = \"{}\"\n[audit_log]\npath = \"{}\"\n[log]\nlevel = \"warn\"\n",
        dir.join("access").display(),
        dir.join("audit").display()
    )
}

fn add_app(server: &Server) {
    let entry = format!(
        "dn: {APP}\nobjectClass: applicationProcess\nobjectClass: simpleSecurityObject\ncn: app\n\
         userPassword: app-secret\nauthzTo: dn.exact:{ALICE}\n"
    );
    let (rc, _, err) = run(server, "ldapadd", (ADMIN_DN, ADMIN_PW), &[], Some(&entry));
    assert_eq!(rc, 0, "{err}");
}

const AS_APP: (&str, &str) = (APP, "app-secret");

#[test]
fn an_allowed_proxy_runs_as_the_target_with_its_limits_and_both_are_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with_config(&config(dir.path(), "to"));
    add_app(&server);
    let as_alice = format!("!authzid=dn:{ALICE}");
    let (rc, out, err) = run(&server, "ldapwhoami", AS_APP, &["-e", &as_alice], None);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), format!("dn:{ALICE}"));
    // Not critical (RFC 4370 asks for critical; slapd takes both by default, and so do
    // we; OpenLDAP's tools only send it critical, so a generic control carries it here):
    // the search runs under alice's size limit.
    let generic = format!("2.16.840.1.113730.3.4.18=:dn:{ALICE}");
    let search = ["-E", generic.as_str(), "-b", PEOPLE, "(objectClass=*)", "1.1"];
    assert_eq!(run(&server, "ldapsearch", AS_APP, &search, None).0, 4, "alice's limit, not app's");
    let (rc, out, _) = run(&server, "ldapwhoami", AS_APP, &[], None);
    assert_eq!((rc, out.trim()), (0, format!("dn:{APP}").as_str()), "without the control, itself");
    // Alice's own limit: one entry.
    let search = ["-e", as_alice.as_str(), "-b", PEOPLE, "(objectClass=*)", "1.1"];
    assert_eq!(
        run(&server, "ldapsearch", AS_APP, &search, None).0,
        4,
        "sizeLimitExceeded under alice's limit"
    );
    assert_eq!(run(&server, "ldapsearch", AS_APP, &search[2..], None).0, 0, "app's own: no limit");
    // Alice's rights: she may write her entry (self), app may not.
    let change = format!("dn: {ALICE}\nchangetype: modify\nreplace: description\ndescription: proxied\n");
    assert_eq!(run(&server, "ldapmodify", AS_APP, &[], Some(&change)).0, 50);
    assert_eq!(run(&server, "ldapmodify", AS_APP, &["-e", &as_alice], Some(&change)).0, 0);
    let (_, read, _) = run(
        &server,
        "ldapsearch",
        (ADMIN_DN, ADMIN_PW),
        &["-LLL", "-b", ALICE, "-s", "base", "modifiersName"],
        None,
    );
    assert!(read.to_lowercase().contains(&format!("modifiersname: {ALICE}")), "{read}");
    // Both identities in the logs.
    let deadline = Instant::now() + Duration::from_secs(10);
    let read_file = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    assert!(
        wait_until(deadline, || read_file("audit")
            .to_lowercase()
            .contains(&format!("authcdn={}", APP.to_lowercase()))),
        "{}",
        read_file("audit")
    );
    assert!(
        wait_until(deadline, || read_file("access").contains(&format!("authzid=\"dn:{ALICE}\""))),
        "{}",
        read_file("access")
    );
    // A target the rules don't name.
    let as_bob = "!authzid=dn:uid=bob,ou=people,dc=example,dc=com";
    assert_eq!(run(&server, "ldapwhoami", AS_APP, &["-e", as_bob], None).0, 1, "ldapwhoami exits 1 on 123");
    let (rc, _, _) =
        run(&server, "ldapsearch", AS_APP, &["-e", as_bob, "-b", ALICE, "-s", "base", "1.1"], None);
    assert_eq!(rc, 123);
    let (_, supported, _) =
        run(&server, "ldapsearch", (ADMIN_DN, ADMIN_PW), &["-b", "", "-s", "base", "supportedControl"], None);
    assert!(supported.contains("2.16.840.1.113730.3.4.18"), "{supported}");
    // A SASL bind's authzid goes by the same rules: app (SCRAM) binds as alice, not as bob.
    let url = server.url();
    let sasl = |authzid: &str| {
        let args =
            ["-H", url.as_str(), "-Y", "SCRAM-SHA-256", "-U", "app", "-w", "app-secret", "-X", authzid];
        tool("ldapwhoami", &args, None)
    };
    let (rc, out, err) = sasl(&format!("dn:{ALICE}"));
    assert_eq!((rc, out.trim()), (0, format!("dn:{ALICE}").as_str()), "{err}");
    let (rc, _, err) = sasl("dn:uid=bob,ou=people,dc=example,dc=com");
    assert_ne!(rc, 0, "{err}");
    assert!(err.contains("(50)"), "insufficientAccessRights: {err}");
}

#[test]
fn the_default_policy_lets_nobody_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with_config(&config(dir.path(), "none"));
    add_app(&server);
    let search = ["-e", &format!("!authzid=dn:{ALICE}"), "-b", ALICE, "-s", "base", "1.1"].map(String::from);
    let search: Vec<&str> = search.iter().map(String::as_str).collect();
    assert_eq!(run(&server, "ldapsearch", AS_APP, &search, None).0, 123);
    // The rootDN may act as anyone, as slapd's.
    assert_eq!(run(&server, "ldapsearch", (ADMIN_DN, ADMIN_PW), &search, None).0, 0);
}
