//! Operations that change the tree, each followed where it matters by a search that reads
//! the result back, so later comparisons run on changed data: refused writes (anonymous,
//! a normal user), adds, modifies, Modify DN and deletes as the rootDN, valid and not.

use crate::catalogue::*;
use crate::client::ModOp::{self, Add, Delete, Increment, Replace};
use crate::client::Scope;

const T1: &str = "cn=Test One,ou=People,dc=example,dc=com";
const T1_CHILD: &str = "cn=Child,cn=Test One,ou=People,dc=example,dc=com";
const T1_RENAMED: &str = "cn=Test Uno,ou=People,dc=example,dc=com";
const SUB_TREE: &str = "ou=Sub Tree,ou=People,dc=example,dc=com";
const NUMBERS: &str = "ou=Numbers,ou=People,dc=example,dc=com";
const MOVER: &str = "cn=Mover,ou=People,dc=example,dc=com";
const PW_USER: &str = "cn=Pw User,ou=People,dc=example,dc=com";
const M: Who = Who::Manager;

pub fn add_all(c: &mut Catalogue) {
    refusals(c);
    adds(c);
    schema_adds(c);
    modifies(c);
    schema_modifies(c);
    moddns(c);
    deletes(c);
    c.search("verify", SUFFIX, Scope::Sub, "(objectClass=*)", &["*"]);
}

fn person(cn: &str, sn: &str) -> Vec<(String, Vec<String>)> {
    entry(&[("objectClass", &["person"]), ("cn", &[cn]), ("sn", &[sn])])
}

/// Writes by identities that may only read (slapd's default policy, `access to * by * read`).
fn refusals(c: &mut Catalogue) {
    let user = Who::User(BJENSEN, BJENSEN_PW);
    for who in [Who::Anonymous, user] {
        c.add(who, "cn=Intruder,ou=People,dc=example,dc=com", person("Intruder", "I"));
        c.modify(who, BJENSEN, vec![change(Add, "description", &["changed by a reader"])]);
        c.modify(who, JOHN, vec![change(Replace, "userPassword", &["stolen"])]);
        c.delete(who, JOHN);
        c.moddn(who, JOHN, "cn=John Renamed", true, None);
        c.add(who, "cn=Intruder,ou=Nowhere,dc=example,dc=com", person("Intruder", "I"));
        c.delete(who, "cn=Nobody,ou=People,dc=example,dc=com");
    }
    c.verify(BJENSEN);
    c.verify(JOHN);
}

fn adds(c: &mut Catalogue) {
    c.add(M, T1, person("Test One", "One"));
    c.verify(T1);
    c.add(M, T1, person("Test One", "One"));
    c.add(M, "CN=test one, OU=people,dc=example,dc=com", person("test one", "One"));
    c.add(M, "cn=X,ou=Missing,dc=example,dc=com", person("X", "X"));
    c.add(M, "cn=X,cn=Y,ou=Missing,dc=example,dc=com", person("X", "X"));
    c.add(M, T1_CHILD, person("Child", "C"));
    c.verify_tree(T1);
    c.add(M, "cn=X,dc=example,dc=org", person("X", "X"));
    c.add(
        M,
        SUFFIX,
        entry(&[("objectClass", &["organization", "dcObject"]), ("dc", &["example"]), ("o", &["E"])]),
    );
    c.add(M, "this is not a dn", person("X", "X"));
    c.add(M, "cn=Oid Names,ou=People,dc=example,dc=com", {
        entry(&[("2.5.4.0", &["2.5.6.6"]), ("2.5.4.3", &["Oid Names"]), ("2.5.4.4", &["Names"])])
    });
    c.verify("cn=Oid Names,ou=People,dc=example,dc=com");
    c.add(M, "cn=Multi+sn=Valued,ou=People,dc=example,dc=com", person("Multi", "Valued"));
    c.verify("sn=Valued+cn=Multi,ou=People,dc=example,dc=com");
    c.add(M, "cn=Case Parent,OU=PEOPLE,DC=EXAMPLE,DC=COM", person("Case Parent", "P"));
    c.verify("cn=case parent,ou=people,dc=example,dc=com");
    c.add(
        M,
        PW_USER,
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Pw User"]),
            ("sn", &["U"]),
            ("userPassword", &["pw-secret"]),
        ]),
    );
    c.bind(PW_USER, "pw-secret");
    c.bind(PW_USER, "wrong");
    c.add(M, "cn=Tagged,ou=People,dc=example,dc=com", {
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Tagged"]),
            ("sn", &["T"]),
            ("description;lang-en", &["english"]),
        ])
    });
    c.verify("cn=Tagged,ou=People,dc=example,dc=com");
    c.search("verify", SUFFIX, Scope::Sub, "(description;lang-en=english)", &["1.1"]);
    c.search("verify", SUFFIX, Scope::Sub, "(description=english)", &["description"]);
    c.add(M, "cn=Time Person,ou=People,dc=example,dc=com", {
        let classes: &[&str] = &["testPerson"];
        let time: &[&str] = &["20050304001801.234Z"];
        entry(&[
            ("objectClass", classes),
            ("cn", &["Time Person"]),
            ("sn", &["P"]),
            ("uid", &["tp"]),
            ("testTime", time),
        ])
    });
    c.verify("cn=Time Person,ou=People,dc=example,dc=com");
    for filter in
        ["(testTime>=20050101000000Z)", "(testTime<=20050101000000Z)", "(testTime=20050304001801.234Z)"]
    {
        c.search("verify", SUFFIX, Scope::Sub, filter, &["1.1"]);
    }
    c.add(M, NUMBERS, {
        let classes: &[&str] = &["organizationalUnit", "extensibleObject"];
        entry(&[("objectClass", classes), ("ou", &["Numbers"]), ("uidNumber", &["5"]), ("gidNumber", &["7"])])
    });
    c.add(M, SUB_TREE, entry(&[("objectClass", &["organizationalUnit"]), ("ou", &["Sub Tree"])]));
    for leaf in ["Leaf A", "Leaf B"] {
        c.add(M, &format!("cn={leaf},{SUB_TREE}"), person(leaf, "Leaf"));
    }
    c.add(M, "cn=Group Test,ou=Groups,dc=example,dc=com", {
        let members: &[&str] =
            &[MANAGER_DN, "CN=John Doe, ou=Information Technology Division,ou=People,dc=example,dc=com"];
        entry(&[("objectClass", &["groupOfNames"]), ("cn", &["Group Test"]), ("member", members)])
    });
    c.search(
        "verify",
        GROUPS,
        Scope::One,
        "(member=cn=john doe,ou=information technology division,ou=people,dc=example,dc=com)",
        &["member"],
    );
    c.verify_tree(PEOPLE);
}

/// Adds that break a schema rule (RFC 4512 §2.4, §2.5; RFC 4511 §4.7).
fn schema_adds(c: &mut Catalogue) {
    let dn = |cn: &str| format!("cn={cn},ou=People,dc=example,dc=com");
    c.add(M, &dn("No Class"), entry(&[("cn", &["No Class"]), ("sn", &["C"])]));
    c.add(
        M,
        &dn("Bad Class"),
        entry(&[("objectClass", &["noSuchClass"]), ("cn", &["Bad Class"]), ("sn", &["C"])]),
    );
    c.add(M, &dn("No Sn"), entry(&[("objectClass", &["person"]), ("cn", &["No Sn"])]));
    c.add(
        M,
        &dn("Has Uid"),
        entry(&[("objectClass", &["person"]), ("cn", &["Has Uid"]), ("sn", &["U"]), ("uid", &["u"])]),
    );
    c.add(M, &dn("Two Names"), {
        let classes: &[&str] = &["inetOrgPerson"];
        entry(&[
            ("objectClass", classes),
            ("cn", &["Two Names"]),
            ("sn", &["N"]),
            ("displayName", &["One", "Two"]),
        ])
    });
    c.add(M, &dn("Bad Number"), {
        let classes: &[&str] = &["person", "extensibleObject"];
        entry(&[("objectClass", classes), ("cn", &["Bad Number"]), ("sn", &["N"]), ("uidNumber", &["abc"])])
    });
    // RFC 4511 §4.7: the client may leave the RDN's values out of the attribute list.
    c.add(
        M,
        &dn("Rdn Missing"),
        entry(&[("objectClass", &["person"]), ("cn", &["Other Name"]), ("sn", &["R"])]),
    );
    c.verify(&dn("Rdn Missing"));
    c.add(M, &dn("Unknown Attr"), {
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Unknown Attr"]),
            ("sn", &["U"]),
            ("undefinedAttr", &["x"]),
        ])
    });
    c.add(M, &dn("Empty"), vec![]);
    c.add(M, &dn("No Values"), {
        entry(&[("objectClass", &["person"]), ("cn", &["No Values"]), ("sn", &["V"]), ("description", &[])])
    });
    c.add(M, &dn("Dup"), entry(&[("objectClass", &["person"]), ("cn", &["Dup", "Dup"]), ("sn", &["D"])]));
    c.add(
        M,
        &dn("Dup Case"),
        entry(&[("objectClass", &["person"]), ("cn", &["Dup Case", "DUP CASE"]), ("sn", &["D"])]),
    );
    c.add(M, &dn("Two Structural"), {
        let classes: &[&str] = &["person", "organizationalUnit"];
        entry(&[("objectClass", classes), ("cn", &["Two Structural"]), ("sn", &["S"]), ("ou", &["S"])])
    });
    c.add(M, &dn("Only Top"), entry(&[("objectClass", &["top"]), ("cn", &["Only Top"])]));
    c.add(
        M,
        &dn("Aux Only"),
        entry(&[("objectClass", &["posixAccount"]), ("cn", &["Aux Only"]), ("uid", &["a"])]),
    );
    c.add(M, &dn("Uuid"), {
        let uuid: &[&str] = &["597ae2f6-16a6-1027-98f4-abcdefabcdef"];
        entry(&[("objectClass", &["person"]), ("cn", &["Uuid"]), ("sn", &["U"]), ("entryUUID", uuid)])
    });
    c.add(M, &dn("Stamp"), {
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Stamp"]),
            ("sn", &["S"]),
            ("createTimestamp", &["20200101000000Z"]),
        ])
    });
    c.add(M, &dn("Subs"), {
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Subs"]),
            ("sn", &["S"]),
            ("hasSubordinates", &["TRUE"]),
        ])
    });
    c.add(M, &dn("Bad Mail"), {
        entry(&[
            ("objectClass", &["inetOrgPerson"]),
            ("cn", &["Bad Mail"]),
            ("sn", &["M"]),
            ("mail", &["bjé@example.com"]),
        ])
    });
    c.add(M, &dn("Bad See"), {
        entry(&[
            ("objectClass", &["person"]),
            ("cn", &["Bad See"]),
            ("sn", &["S"]),
            ("seeAlso", &["not a dn"]),
        ])
    });
    c.add(M, &dn("Bad Time"), {
        let classes: &[&str] = &["testPerson"];
        entry(&[
            ("objectClass", classes),
            ("cn", &["Bad Time"]),
            ("sn", &["T"]),
            ("uid", &["bt"]),
            ("testTime", &["yesterday"]),
        ])
    });
    c.add(M, &dn("Two Times"), {
        let classes: &[&str] = &["testPerson"];
        let times: &[&str] = &["20050304001801Z", "20060304001801Z"];
        entry(&[
            ("objectClass", classes),
            ("cn", &["Two Times"]),
            ("sn", &["T"]),
            ("uid", &["tt"]),
            ("testTime", times),
        ])
    });
    c.add(
        M,
        "cn=No Member,ou=Groups,dc=example,dc=com",
        entry(&[("objectClass", &["groupOfNames"]), ("cn", &["No Member"])]),
    );
    c.verify_tree(PEOPLE);
}

fn modifies(c: &mut Catalogue) {
    let m = |c: &mut Catalogue, op: ModOp, attr: &str, vals: &[&str]| {
        c.modify(M, T1, vec![change(op, attr, vals)])
    };
    m(c, Add, "description", &["first"]);
    c.verify(T1);
    m(c, Add, "description", &["first"]);
    m(c, Add, "description", &["FIRST"]);
    m(c, Add, "description", &["second", "third"]);
    m(c, Delete, "description", &["FIRST"]);
    m(c, Delete, "description", &["missing"]);
    m(c, Delete, "telephoneNumber", &[]);
    c.verify(T1);
    m(c, Delete, "description", &[]);
    m(c, Replace, "telephoneNumber", &["+1 313 555 0000", "+1 313 555 0001"]);
    c.verify(T1);
    c.search("verify", SUFFIX, Scope::Sub, "(telephoneNumber=+13135550001)", &["1.1"]);
    m(c, Replace, "telephoneNumber", &[]);
    m(c, Replace, "seeAlso", &[]);
    m(c, Replace, "description", &["a", "a"]);
    m(c, Replace, "cn", &["Test One", "Alias"]);
    c.verify(T1);
    m(c, Delete, "cn", &["Alias"]);
    m(c, Add, "2.5.4.13", &["by oid"]);
    m(c, Add, "description;lang-en", &["tagged"]);
    c.verify(T1);
    c.modify(M, "CN=TEST ONE , OU=People,dc=example,dc=com", vec![change(Add, "description", &["case"])]);
    c.modify(M, T1, vec![]);
    c.modify(M, T1, vec![change(Add, "description", &["atomic"]), change(Add, "undefinedAttr", &["x"])]);
    c.modify(M, T1, vec![change(Add, "drink", &["Pils"])]);
    c.modify(M, T1, vec![change(Add, "description", &["Pils"]), change(Delete, "description", &["Pils"])]);
    c.verify(T1);
    c.modify(M, "cn=Nobody,ou=People,dc=example,dc=com", vec![change(Add, "description", &["x"])]);
    c.modify(M, "cn=Nobody,ou=Nowhere,dc=example,dc=com", vec![change(Add, "description", &["x"])]);
    c.modify(M, "cn=Nobody,dc=example,dc=org", vec![change(Add, "description", &["x"])]);
    c.modify(M, SUFFIX, vec![change(Add, "description", &["suffix changed"])]);
    c.verify(SUFFIX);
    c.modify(M, "", vec![change(Add, "description", &["root dse"])]);
    c.modify(M, "cn=Subschema", vec![change(Add, "description", &["schema"])]);
    // Increment (RFC 4525), as OpenLDAP's test004 does on ou=People.
    c.modify(
        M,
        PEOPLE,
        vec![change(Increment, "uidNumber", &["1"]), change(Increment, "gidNumber", &["-1"])],
    );
    c.verify(PEOPLE);
    c.modify(M, NUMBERS, vec![change(Increment, "uidNumber", &["-10"])]);
    c.modify(M, NUMBERS, vec![change(Increment, "uidNumber", &["x"])]);
    c.modify(M, NUMBERS, vec![change(Increment, "uidNumber", &["1", "2"])]);
    c.modify(M, NUMBERS, vec![change(Increment, "ou", &["1"])]);
    c.modify(M, NUMBERS, vec![change(Increment, "homeDirectory", &["1"])]);
    c.verify(NUMBERS);
    c.search("verify", PEOPLE, Scope::Sub, "(uidNumber<=-1)", &["uidNumber"]);
    c.search("verify", PEOPLE, Scope::Sub, "(gidNumber>=0)", &["gidNumber"]);
    c.modify(M, BJENSEN, vec![change(Delete, "facsimileTelephoneNumber", &["+1 313 555 2274"])]);
    c.modify(M, BJENSEN, vec![change(Delete, "telephoneNumber", &["+13135559022"])]);
    c.modify(M, BJENSEN, vec![change(Delete, "sn", &["jensen"])]);
    c.verify(BJENSEN);
}

/// Modifies that break a schema rule or touch NO-USER-MODIFICATION attributes.
fn schema_modifies(c: &mut Catalogue) {
    let m = |c: &mut Catalogue, op: ModOp, attr: &str, vals: &[&str]| {
        c.modify(M, T1, vec![change(op, attr, vals)])
    };
    m(c, Replace, "sn", &[]);
    m(c, Delete, "cn", &["Test One"]);
    m(c, Replace, "cn", &["Other"]);
    m(c, Replace, "objectClass", &["organizationalUnit"]);
    m(c, Replace, "objectClass", &["noSuchClass"]);
    m(c, Delete, "objectClass", &[]);
    m(c, Add, "objectClass", &["inetOrgPerson"]);
    m(c, Add, "uid", &["t1"]);
    m(c, Add, "undefinedAttr", &["x"]);
    m(c, Add, "objectClass", &["posixAccount"]);
    c.modify(M, T1, {
        let classes: &[&str] = &["posixAccount"];
        vec![
            change(Add, "objectClass", classes),
            change(Add, "uid", &["t1"]),
            change(Add, "uidNumber", &["1001"]),
            change(Add, "gidNumber", &["1001"]),
            change(Add, "homeDirectory", &["/home/t1"]),
        ]
    });
    c.verify(T1);
    m(c, Add, "uidNumber", &["1002"]);
    m(c, Replace, "uidNumber", &["abc"]);
    m(c, Replace, "homeDirectory", &[]);
    m(c, Increment, "uidNumber", &["5"]);
    c.verify(T1);
    m(c, Add, "seeAlso", &["not a dn"]);
    m(c, Add, "telephoneNumber", &["é"]);
    // NO-USER-MODIFICATION (RFC 4512 §4.1.2), each with a value of valid syntax.
    for (attr, value) in [
        ("entryUUID", "597ae2f6-16a6-1027-98f4-abcdefabcdef"),
        ("createTimestamp", "20200101000000Z"),
        ("modifyTimestamp", "20200101000000Z"),
        ("creatorsName", MANAGER_DN),
        ("entryDN", T1),
        ("hasSubordinates", "TRUE"),
        ("structuralObjectClass", "person"),
        ("subschemaSubentry", "cn=Subschema"),
    ] {
        m(c, Replace, attr, &[value]);
    }
    m(c, Delete, "entryUUID", &[]);
    c.modify(M, BJENSEN, vec![change(Add, "mail", &["bjé@example.com"])]);
    c.modify(M, BJENSEN, vec![change(Add, "displayName", &["B", "J"])]);
    c.verify(T1);
}

fn moddns(c: &mut Catalogue) {
    let jaj_cn = |cn: &str| format!("cn={cn},ou=Alumni Association,ou=People,dc=example,dc=com");
    c.add(M, MOVER, person("Mover", "M"));
    c.moddn(M, MOVER, "cn=Mover Two", false, None);
    c.verify("cn=Mover Two,ou=People,dc=example,dc=com");
    c.verify(MOVER);
    c.moddn(M, "cn=Mover Two,ou=People,dc=example,dc=com", "cn=Mover Three", true, None);
    c.verify("cn=Mover Three,ou=People,dc=example,dc=com");
    c.moddn(M, "cn=Mover Three,ou=People,dc=example,dc=com", "cn=Mover Three", true, Some(GROUPS));
    let moved = "cn=Mover Three,ou=Groups,dc=example,dc=com";
    c.verify(moved);
    c.verify("cn=Mover Three,ou=People,dc=example,dc=com");
    c.moddn(M, moved, "cn=All Staff", true, None);
    c.moddn(M, moved, "cn=Bjorn Jensen", true, Some(ITD));
    c.moddn(M, "cn=Nobody,ou=People,dc=example,dc=com", "cn=Somebody", true, None);
    c.moddn(M, moved, "cn=Mover Three", true, Some("ou=Missing,dc=example,dc=com"));
    c.moddn(M, moved, "cn=Mover Three", true, Some("dc=example,dc=org"));
    c.moddn(M, moved, "uid=mover", true, None);
    c.moddn(M, moved, "undefinedAttr=x", true, None);
    c.moddn(M, moved, "cn", true, None);
    c.moddn(M, moved, "cn=Mover Three+sn=M", false, None);
    let multi = "cn=Mover Three+sn=M,ou=Groups,dc=example,dc=com";
    c.verify(multi);
    c.moddn(M, multi, "sn=M", true, None);
    c.verify("sn=M,ou=Groups,dc=example,dc=com");
    c.verify(multi);
    // A subtree: rename an ou with children, read the children at their new DNs, move
    // a subtree under another parent, rename it back.
    c.moddn(M, ALUMNI, "ou=Alumni", true, None);
    let renamed = "ou=Alumni,ou=People,dc=example,dc=com";
    c.verify_tree(renamed);
    c.verify("cn=Jane Doe,ou=Alumni,ou=People,dc=example,dc=com");
    c.search("verify", renamed, Scope::Sub, "(ou:dn:=Alumni)", &["1.1"]);
    c.verify_tree(ALUMNI);
    c.verify(ALL_STAFF);
    c.moddn(M, SUB_TREE, "ou=Sub Tree", true, Some(GROUPS));
    c.verify_tree(GROUPS);
    c.verify_tree(SUB_TREE);
    c.moddn(M, renamed, "ou=Alumni Association", true, None);
    c.verify_tree(ALUMNI);
    // After OpenLDAP's test005: same RDN, changed case, an RDN value the entry already has.
    c.moddn(M, JAJ, "cn=James A Jones 1", false, None);
    c.moddn(M, JAJ, "cn=James A JONES 1", false, None);
    c.verify(JAJ);
    c.moddn(M, JAJ, "cn=James Jones", true, None);
    c.verify(&jaj_cn("James Jones"));
    c.moddn(M, &jaj_cn("James Jones"), "cn=James A Jones 1", true, None);
    c.verify(JAJ);
    c.moddn(M, JAJ, "cn=James A Jones 1", true, Some(JAJ));
    c.moddn(M, PEOPLE, "ou=People", true, Some(ALUMNI));
    c.moddn(M, SUFFIX, "dc=example2", true, None);
    c.moddn(M, "", "cn=Root", true, None);
    c.moddn(M, "not a dn", "cn=x", true, None);
    // A rename of an entry with a child (T1 got one in adds()).
    c.moddn(M, T1, "cn=Test Uno", true, None);
    c.verify_tree(T1_RENAMED);
    c.verify_tree(PEOPLE);
}

fn deletes(c: &mut Catalogue) {
    c.delete(M, T1_RENAMED);
    c.delete(M, &format!("cn=Child,{T1_RENAMED}"));
    c.verify_tree(T1_RENAMED);
    c.delete(M, T1_RENAMED);
    c.verify(T1_RENAMED);
    c.delete(M, T1);
    c.delete(M, PEOPLE);
    c.delete(M, SUFFIX);
    c.delete(M, SUB_TREE);
    c.delete(M, &format!("cn=Leaf A,{SUB_TREE}"));
    c.delete(M, "cn=Leaf B,ou=Sub Tree,ou=Groups,dc=example,dc=com");
    c.delete(M, "cn=Leaf A,ou=Sub Tree,ou=Groups,dc=example,dc=com");
    c.delete(M, "ou=Sub Tree,ou=Groups,dc=example,dc=com");
    c.verify_tree(GROUPS);
    c.delete(M, "cn=Nobody,ou=People,dc=example,dc=com");
    c.delete(M, "cn=Nobody,ou=Nowhere,dc=example,dc=com");
    c.delete(M, "CN=OID NAMES, OU=people,DC=EXAMPLE,DC=COM");
    c.verify("cn=Oid Names,ou=People,dc=example,dc=com");
    c.delete(M, "");
    c.delete(M, "cn=Subschema");
    c.delete(M, "cn=Nobody,dc=example,dc=org");
    c.delete(M, "not a dn");
    c.delete(M, "sn=Valued+cn=Multi,ou=People,dc=example,dc=com");
    c.verify_tree(PEOPLE);
}
