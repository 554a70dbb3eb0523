//! Substring searches on 16 shards (issue #14, item 7): the router asks only the shards the
//! gram table (`shard::gramsummary`) says may hold every gram, so a search must still find
//! every match after adds, modifies, deletes and renames (each acknowledged write is seen by
//! the next search, on any connection) and after a restart, which rebuilds the table from
//! the index. Every search is compared with what a model of the entries says it must find.

use std::collections::{BTreeMap, BTreeSet};

use ldap3::{LdapConn, Mod, Scope};

use crate::harness::Server;
use crate::persistence::{add, admin, attrs, delete, modify, modify_dn, one, search};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

const CONFIG: &str = r#"
shards = 16
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
index = ["objectClass eq", "cn eq,sub", "description sub"]
[log]
level = "warn"
"#;

/// What the directory holds under ou=people: DN (lowercase) → (cn, description).
type Model = BTreeMap<String, (String, String)>;

struct Case {
    filter: &'static str,
    wants: fn(&str, &str) -> bool,
}

/// The searches compared, with what each must find by the model. Values are lowercase, so
/// the model's byte comparisons are the server's case-insensitive ones.
const CASES: &[Case] = &[
    Case { filter: "(cn=fan 1*)", wants: |cn, _| cn.starts_with("fan 1") },
    Case { filter: "(cn=fan 12*)", wants: |cn, _| cn.starts_with("fan 12") },
    Case { filter: "(cn=*n 7*)", wants: |cn, _| cn.contains("n 7") },
    Case { filter: "(cn=*5)", wants: |cn, _| cn.ends_with('5') },
    Case { filter: "(cn=*renamed*)", wants: |cn, _| cn.contains("renamed") },
    Case { filter: "(description=*tag-3*)", wants: |_, d| d.contains("tag-3") },
    Case { filter: "(description=*zeta*)", wants: |_, d| d.contains("zeta") },
    Case { filter: "(description=*omega*)", wants: |_, d| d.contains("omega") },
    Case {
        filter: "(&(cn=fan*)(description=*-5-*))",
        wants: |cn, d| cn.starts_with("fan") && d.contains("-5-"),
    },
    Case {
        filter: "(|(cn=fan 3*)(description=*zeta*))",
        wants: |cn, d| cn.starts_with("fan 3") || d.contains("zeta"),
    },
    Case { filter: "(cn=*qqq*)", wants: |cn, _| cn.contains("qqq") },
];

fn person(cn: &str, description: &str) -> crate::persistence::Attrs {
    attrs(&[
        ("objectClass", &["top", "person"]),
        ("cn", &[cn]),
        ("sn", &["s"]),
        ("description", &[description]),
    ])
}

fn dn_of(cn: &str) -> String {
    format!("cn={cn},{PEOPLE}")
}

fn add_person(conn: &mut LdapConn, model: &mut Model, cn: &str, description: &str) {
    let (rc, _) = add(conn, &dn_of(cn), &person(cn, description));
    assert_eq!(rc, 0, "add {cn}");
    model.insert(dn_of(cn), (cn.to_string(), description.to_string()));
}

/// Every case, from every reader, against the model.
fn check(readers: &mut [LdapConn], model: &Model, phase: &str) {
    for case in CASES {
        let wanted: BTreeSet<String> =
            model.iter().filter(|(_, (cn, d))| (case.wants)(cn, d)).map(|(dn, _)| dn.clone()).collect();
        for (i, reader) in readers.iter_mut().enumerate() {
            let found = search(reader, "dc=example,dc=com", Scope::Subtree, case.filter, &["1.1"])
                .unwrap_or_else(|rc| panic!("{phase}: {} failed with {rc}", case.filter));
            let found: BTreeSet<String> = found.into_iter().map(|(dn, _)| dn.to_ascii_lowercase()).collect();
            assert_eq!(found, wanted, "{phase}: {} from reader {i}", case.filter);
        }
    }
}

#[test]
fn substring_searches_on_16_shards_find_every_match_through_writes_and_a_restart() {
    let mut server = Server::start_with_config(CONFIG);
    let mut writer = admin(&server);
    let mut model = Model::new();
    for i in 0..160 {
        add_person(&mut writer, &mut model, &format!("fan {i}"), &format!("tag-{}-{}", i % 7, i % 11));
    }
    // Connections go to the workers in turn: four of them read through several workers.
    let mut readers: Vec<LdapConn> = (0..4).map(|_| admin(&server)).collect();
    check(&mut readers, &model, "after the adds");
    // Grams no entry had before: each write is seen by the next search.
    for i in (0..160).step_by(9) {
        let dn = dn_of(&format!("fan {i}"));
        let description = format!("zeta-{i}");
        assert_eq!(modify(&mut writer, &dn, vec![Mod::Replace("description", one(&description))]), 0);
        model.get_mut(&dn).expect("modelled").1 = description;
        check(&mut readers[..1], &model, &format!("after modifying fan {i}"));
    }
    for i in (3..160).step_by(13) {
        let dn = dn_of(&format!("fan {i}"));
        assert_eq!(delete(&mut writer, &dn), 0, "delete fan {i}");
        model.remove(&dn);
    }
    for i in 0..12 {
        add_person(&mut writer, &mut model, &format!("new {i}"), &format!("omega-{i}"));
        check(&mut readers[..1], &model, &format!("after adding new {i}"));
    }
    for i in (1..160).step_by(17) {
        let old = dn_of(&format!("fan {i}"));
        if !model.contains_key(&old) {
            continue;
        }
        let cn = format!("renamed {i}");
        assert_eq!(modify_dn(&mut writer, &old, &format!("cn={cn}"), true, None), 0, "rename fan {i}");
        let (_, description) = model.remove(&old).expect("modelled");
        model.insert(dn_of(&cn), (cn, description));
    }
    check(&mut readers, &model, "after the writes");
    drop(readers);
    drop(writer);
    server.stop();
    server.restart();
    let mut readers: Vec<LdapConn> = (0..4).map(|_| admin(&server)).collect();
    check(&mut readers, &model, "after the restart");
}
