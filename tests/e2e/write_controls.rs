//! The controls OpenLDAP's tools send with writes and reads (issue #25 items 2-5), through
//! ldapmodify, ldapadd, ldapdelete, ldapsearch and ldapcompare against the real binary:
//! the assertion control (RFC 4528) on every operation, critical and not; pre-read and
//! post-read (RFC 4527) with their attribute lists and the access rules; relax rules for a
//! migration's NO-USER-MODIFICATION values; dontUseCopy (RFC 6171) on a provider; and the
//! refusals (a critical pre-read on a Search, a malformed value).

use crate::harness::{tool_as as run, Server, ADMIN_DN, ADMIN_PW};

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const PEOPLE: &str = "ou=people,dc=example,dc=com";

fn config() -> String {
    format!(
        "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\n\
         [[access_rules]]\nto = 'attrs=userPassword'\nby = ['self write', 'anonymous auth', '* none']\n\
         [[access_rules]]\nto = 'attrs=description'\nby = ['self write', '* none']\n\
         [[access_rules]]\nto = '*'\nby = ['self write', '* read']\n\
         [log]\nlevel = \"warn\"\n"
    )
}

const ROOT: (&str, &str) = (ADMIN_DN, ADMIN_PW);
const AS_ALICE: (&str, &str) = (ALICE, "password");
const AS_BOB: (&str, &str) = ("uid=bob,ou=people,dc=example,dc=com", "password");

fn describe(description: &str) -> String {
    format!("dn: {ALICE}\nchangetype: modify\nreplace: description\ndescription: {description}\n")
}

fn description_of(server: &Server) -> String {
    let (_, out, _) =
        run(server, "ldapsearch", ROOT, &["-LLL", "-b", ALICE, "-s", "base", "description"], None);
    out
}

#[test]
fn the_assertion_control_guards_every_operation() {
    let server = Server::start_with_config(&config());
    // Modify: false, then true, critical and not.
    let (rc, _, err) =
        run(&server, "ldapmodify", ROOT, &["-e", "!assert=(sn=Nobody)"], Some(&describe("no")));
    assert_eq!(rc, 122, "{err}");
    assert!(!description_of(&server).contains("description: no"), "nothing written");
    let (rc, _, err) =
        run(&server, "ldapmodify", ROOT, &["-e", "assert=(sn=Liddell)"], Some(&describe("yes")));
    assert_eq!(rc, 0, "{err}");
    assert!(description_of(&server).contains("description: yes"));
    // Search (the base entry) and Compare (the target).
    let base = ["-b", ALICE, "-s", "base", "-e", "assert=(uid=bob)", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &base, None).0, 122);
    let base = ["-b", ALICE, "-s", "base", "-e", "assert=(uid=alice)", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &base, None).0, 0);
    let compare = ["-e", "assert=(uid=bob)", ALICE, "sn:Liddell"];
    assert_eq!(run(&server, "ldapcompare", ROOT, &compare, None).0, 122);
    let compare = ["-e", "assert=(uid=alice)", ALICE, "sn:Liddell"];
    assert_eq!(run(&server, "ldapcompare", ROOT, &compare, None).0, 6, "compareTrue");
    // Add (the entry to add), Modify DN and Delete.
    let entry = format!("dn: cn=t1,{PEOPLE}\nobjectClass: person\ncn: t1\nsn: one\n");
    assert_eq!(run(&server, "ldapadd", ROOT, &["-e", "assert=(sn=two)"], Some(&entry)).0, 122);
    assert_eq!(run(&server, "ldapadd", ROOT, &["-e", "assert=(sn=one)"], Some(&entry)).0, 0);
    let rename = format!("dn: cn=t1,{PEOPLE}\nchangetype: modrdn\nnewrdn: cn=t2\ndeleteoldrdn: 1\n");
    assert_eq!(run(&server, "ldapmodify", ROOT, &["-e", "assert=(sn=two)"], Some(&rename)).0, 122);
    assert_eq!(run(&server, "ldapmodify", ROOT, &["-e", "assert=(sn=one)"], Some(&rename)).0, 0);
    let t2 = format!("cn=t2,{PEOPLE}");
    assert_eq!(run(&server, "ldapdelete", ROOT, &["-e", "assert=(sn=two)", &t2], None).0, 122);
    assert_eq!(run(&server, "ldapsearch", ROOT, &["-b", &t2, "-s", "base", "1.1"], None).0, 0, "still there");
    assert_eq!(run(&server, "ldapdelete", ROOT, &["-e", "assert=(sn=one)", &t2], None).0, 0);
    // Under the requester's access: bob may not search alice's description, so an
    // assertion on it is Undefined (false) for him and true for her.
    let on_description = ["-b", ALICE, "-s", "base", "-e", "assert=(description=yes)", "1.1"];
    assert_eq!(run(&server, "ldapsearch", AS_BOB, &on_description, None).0, 122);
    assert_eq!(run(&server, "ldapsearch", AS_ALICE, &on_description, None).0, 0);
    // A malformed value: protocolError.
    let garbage = ["-b", ALICE, "-s", "base", "-E", "1.3.6.1.1.12=:zz", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &garbage, None).0, 2);
}

#[test]
fn pre_read_and_post_read_show_the_entry_before_and_after() {
    let server = Server::start_with_config(&config());
    let (rc, out, err) = run(
        &server,
        "ldapmodify",
        ROOT,
        &["-e", "preread=description,sn", "-e", "postread=description"],
        Some(&describe("first")),
    );
    assert_eq!(rc, 0, "{err}");
    let (pre, post) = out.split_once("# ==> postread").expect(&out);
    assert!(
        pre.contains("# ==> preread") && pre.contains("sn: Liddell") && !pre.contains("description"),
        "{out}"
    );
    assert!(post.contains("description: first") && !post.contains("sn:"), "{out}");
    let (rc, out, _) =
        run(&server, "ldapmodify", ROOT, &["-e", "!preread=description"], Some(&describe("second")));
    assert_eq!(rc, 0);
    assert!(out.contains("description: first"), "the value before this change: {out}");
    // Add: post-read with the stamps the server wrote; Modify DN: both names.
    let entry = format!("dn: cn=r1,{PEOPLE}\nobjectClass: person\ncn: r1\nsn: read\n");
    let (rc, out, _) = run(&server, "ldapadd", ROOT, &["-e", "postread=entryUUID,cn"], Some(&entry));
    assert_eq!(rc, 0);
    assert!(out.contains("entryUUID: ") && out.contains("cn: r1"), "{out}");
    let rename = format!("dn: cn=r1,{PEOPLE}\nchangetype: modrdn\nnewrdn: cn=r2\ndeleteoldrdn: 1\n");
    let (rc, out, _) =
        run(&server, "ldapmodify", ROOT, &["-e", "preread=cn", "-e", "postread=cn"], Some(&rename));
    assert_eq!(rc, 0);
    assert!(
        out.contains(&format!("dn: cn=r1,{PEOPLE}")) && out.contains(&format!("dn: cn=r2,{PEOPLE}")),
        "{out}"
    );
    let (rc, out, _) =
        run(&server, "ldapdelete", ROOT, &["-e", "preread=sn", &format!("cn=r2,{PEOPLE}")], None);
    assert_eq!(rc, 0);
    assert!(out.contains("sn: read"), "the deleted entry: {out}");
    // The access rules apply: alice changes her own entry's mail and asks for her
    // description (hers to read) and bob's view is not involved; bob changing his own
    // entry sees no description of his (none) and gets what he may read.
    let mail = format!("dn: {ALICE}\nchangetype: modify\nreplace: mail\nmail: a@example.com\n");
    let (rc, out, err) =
        run(&server, "ldapmodify", AS_ALICE, &["-e", "postread=description,mail"], Some(&mail));
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("description: second") && out.contains("mail: a@example.com"), "{out}");
    let reader = ["-e", "postread=description,mail"];
    let other = format!("dn: {ALICE}\nchangetype: modify\nreplace: mail\nmail: b@example.com\n");
    let (rc, _, _) = run(&server, "ldapmodify", AS_BOB, &reader, Some(&other));
    assert_eq!(rc, 50, "bob may not write alice's mail");
    // A critical pre-read on a Search is refused (it only means something on a write).
    let search = ["-b", ALICE, "-s", "base", "-e", "!preread", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &search, None).0, 12);
}

#[test]
fn relax_lets_a_migration_keep_its_operational_values_and_dont_use_copy_is_honoured() {
    let server = Server::start_with_config(&config());
    let entry = format!(
        "dn: cn=m1,{PEOPLE}\nobjectClass: person\ncn: m1\nsn: mig\ncreateTimestamp: 20000101000000Z\n\
         entryUUID: 11111111-2222-3333-4444-555555555555\n"
    );
    assert_eq!(run(&server, "ldapadd", ROOT, &[], Some(&entry)).0, 19, "NO-USER-MODIFICATION without relax");
    assert_eq!(run(&server, "ldapadd", AS_ALICE, &["-e", "relax"], Some(&entry)).0, 50, "relax needs manage");
    let (rc, _, err) = run(&server, "ldapadd", ROOT, &["-e", "!relax"], Some(&entry));
    assert_eq!(rc, 0, "{err}");
    let (_, out, _) = run(
        &server,
        "ldapsearch",
        ROOT,
        &["-LLL", "-b", &format!("cn=m1,{PEOPLE}"), "-s", "base", "+"],
        None,
    );
    assert!(out.contains("createTimestamp: 20000101000000Z"), "{out}");
    assert!(out.contains("entryUUID: 11111111-2222-3333-4444-555555555555"), "{out}");
    let change = format!("dn: cn=m1,{PEOPLE}\nchangetype: modify\nreplace: createTimestamp\ncreateTimestamp: 19990101000000Z\n");
    assert_eq!(run(&server, "ldapmodify", ROOT, &[], Some(&change)).0, 19);
    assert_eq!(run(&server, "ldapmodify", ROOT, &["-e", "relax"], Some(&change)).0, 0);
    // dontUseCopy: this server holds the authoritative copy of its own naming context.
    let search = ["-b", ALICE, "-s", "base", "-E", "!dontUseCopy", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &search, None).0, 0);
    let (_, out, _) = run(&server, "ldapsearch", ROOT, &["-b", "", "-s", "base", "supportedControl"], None);
    for oid in
        ["1.3.6.1.1.12", "1.3.6.1.1.13.1", "1.3.6.1.1.13.2", "1.3.6.1.1.22", "1.3.6.1.4.1.4203.666.5.12"]
    {
        assert!(out.contains(&format!("supportedControl: {oid}")), "{oid} in the root DSE: {out}");
    }
    // RFC 4529's `@objectClass` works, and the root DSE says so (as slapd's does).
    let (_, out, _) = run(&server, "ldapsearch", ROOT, &["-b", "", "-s", "base", "supportedFeatures"], None);
    assert!(out.contains("supportedFeatures: 1.3.6.1.4.1.4203.1.5.2"), "{out}");
    let (_, out, _) =
        run(&server, "ldapsearch", ROOT, &["-LLL", "-b", ALICE, "-s", "base", "@organizationalPerson"], None);
    assert!(out.contains("sn: Liddell") && !out.contains("uid:"), "{out}");
}

/// dontUseCopy on a replica: its replicated subtree is a copy, so a Search or a Compare
/// carrying the control gets the referral to the provider; outside it, and without the
/// control, the replica answers.
#[test]
fn dont_use_copy_on_a_replica_refers_to_the_provider() {
    let dir = tempfile::tempdir().expect("tempdir");
    let password = dir.path().join("replicator.pw");
    std::fs::write(&password, "unused\n").expect("password file");
    // A provider nobody listens on: the consumer keeps retrying; the area is replicated.
    let config = format!(
        "{}\n[[replication]]\nrid = 1\nprovider = \"ldap://127.0.0.1:9\"\nbind_dn = \"cn=replicator,dc=example,dc=com\"\n\
         password_file = \"{}\"\nsearch_base = \"{PEOPLE}\"\nupdate_referral = \"ldap://provider.example.com\"\nretry = \"5 +\"\n",
        config(),
        password.display()
    );
    let server = Server::start_with_config(&config);
    let search = ["-b", ALICE, "-s", "base", "-E", "!dontUseCopy", "1.1"];
    let (rc, out, _) = run(&server, "ldapsearch", ROOT, &search, None);
    assert_eq!(rc, 10, "a referral: {out}");
    assert!(out.contains("ldap://provider.example.com"), "{out}");
    assert_eq!(
        run(
            &server,
            "ldapsearch",
            ROOT,
            &search[..4].iter().chain(&["1.1"]).copied().collect::<Vec<_>>(),
            None
        )
        .0,
        0
    );
    let outside = ["-b", "dc=example,dc=com", "-s", "base", "-E", "!dontUseCopy", "1.1"];
    assert_eq!(run(&server, "ldapsearch", ROOT, &outside, None).0, 0, "not replicated here");
}
