//! cn=Monitor against slapd's own monitor database (back-monitor): the same `ldapsearch`
//! as the manager on both, comparing the DNs and each DN's attribute types, then the three
//! queries openldap_exporter sends, whose DNs must match and whose values must be numbers
//! wherever slapd's are. What Ferrodir deliberately publishes differently is listed below,
//! each with its reason; anything else that differs fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW};

/// DNs only slapd has (lowercased).
const SLAPD_ONLY: &[(&str, &str)] = &[
    ("cn=backend 2,cn=backends,cn=monitor", "slapd numbers its four backend types; Ferrodir has two"),
    ("cn=backend 3,cn=backends,cn=monitor", "(ferrodir and monitor)"),
    ("cn=database 0,cn=databases,cn=monitor", "slapd's cn=config database; Ferrodir has no cn=config"),
    ("cn=overlay 0,cn=overlays,cn=monitor", "slapd's glue overlay; Ferrodir has no overlays"),
];

/// Subtrees only Ferrodir has.
const FERRODIR_ONLY: &[&str] = &["cn=shards,cn=monitor"];

/// Attribute types slapd publishes on a DN and Ferrodir doesn't (or the reverse), by the
/// DN's first RDN prefix.
const TYPE_EXCEPTIONS: &[(&str, &[&str], &str)] = &[
    (
        "cn=connection ",
        &[
            "monitorconnectionopsreceived",
            "monitorconnectionopsexecuting",
            "monitorconnectionopspending",
            "monitorconnectionopscompleted",
            "monitorconnectionopsasync",
            "monitorconnectionget",
            "monitorconnectionread",
            "monitorconnectionwrite",
            "monitorconnectionmask",
            "monitorconnectionactivitytime",
        ],
        "per-operation counts would be written on every request: left out",
    ),
    (
        "cn=database 1,",
        &[
            "olmmdbpagesmax",
            "olmmdbpagesused",
            "olmmdbpagesfree",
            "olmmdbreadersmax",
            "olmmdbreadersused",
            "olmmdbentries",
            "olmdbdirectory",
        ],
        "back-mdb's own attributes",
    ),
    ("cn=overlays,", &["monitoredinfo"], "slapd lists its glue overlay"),
    ("cn=backend 1,", &["seealso"], "slapd's backend 1 is back-ldif, with no database"),
];

/// DN (lowercased) → attribute types (lowercased) → values, from `ldapsearch -LLL`.
type Ldif = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn ldapsearch(server: &Server, base: &str, filter: &str, attrs: &[&str]) -> Ldif {
    let url = format!("ldap://{}", server.addr);
    let output = Command::new("ldapsearch")
        .args(["-x", "-H", &url, "-D", MANAGER_DN, "-w", MANAGER_PW, "-b", base, "-s", "sub", "-LLL"])
        .args(["-o", "ldif-wrap=no", filter])
        .args(attrs)
        .output()
        .expect("run ldapsearch (OpenLDAP's ldap-utils)");
    assert!(output.status.success(), "{}: {}", server.name, String::from_utf8_lossy(&output.stderr));
    let mut entries = Ldif::new();
    let mut current = String::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim_start_matches(':').trim().to_string();
        if name == "dn" {
            current = value.to_ascii_lowercase();
            entries.entry(current.clone()).or_default();
        } else if let Some(entry) = entries.get_mut(&current) {
            entry.entry(name.to_ascii_lowercase()).or_default().push(value);
        }
    }
    entries
}

fn excepted(dn: &str) -> bool {
    SLAPD_ONLY.iter().any(|(d, _)| *d == dn)
        || FERRODIR_ONLY.iter().any(|s| dn == *s || dn.ends_with(&format!(",{s}")))
}

/// Connection numbers differ between the servers: cn=Connection N counts as one name.
fn generic(dn: &str) -> String {
    match dn.strip_prefix("cn=connection ").and_then(|rest| rest.split_once(',')) {
        Some((_, parent)) => format!("cn=connection n,{parent}"),
        None => dn.to_string(),
    }
}

fn dns(ldif: &Ldif) -> BTreeSet<String> {
    ldif.keys().filter(|dn| !excepted(dn)).map(|dn| generic(dn)).collect()
}

fn start_both() -> (Server, Server) {
    (servers::start_slapd_with_monitor(), servers::start_ferrodir(None))
}

#[test]
fn monitor_tree_has_slapds_dns_and_attribute_types() {
    let (slapd, ferrodir) = start_both();
    let theirs = ldapsearch(&slapd, "cn=Monitor", "(objectClass=*)", &["*", "+"]);
    let ours = ldapsearch(&ferrodir, "cn=Monitor", "(objectClass=*)", &["*", "+"]);
    // Not two empty answers: slapd's tree is there in full.
    assert!(theirs.len() > 50 && theirs.contains_key("cn=search,cn=operations,cn=monitor"), "{theirs:?}");
    assert!(theirs.keys().any(|dn| dn.starts_with("cn=connection ")), "slapd lists this connection");
    assert_eq!(dns(&ours), dns(&theirs), "DNs differ (slapd's on the right)");
    for (dn, their_attrs) in theirs.iter().filter(|(dn, _)| !excepted(dn)) {
        let generic_dn = generic(dn);
        let Some((_, our_attrs)) = ours.iter().find(|(d, _)| generic(d) == generic_dn) else { continue };
        let skip: BTreeSet<&str> = TYPE_EXCEPTIONS
            .iter()
            .filter(|(prefix, _, _)| dn.starts_with(prefix))
            .flat_map(|(_, types, _)| types.iter().copied())
            .collect();
        let types = |attrs: &BTreeMap<String, Vec<String>>| -> BTreeSet<String> {
            attrs.keys().filter(|t| !skip.contains(t.as_str())).cloned().collect()
        };
        assert_eq!(types(our_attrs), types(their_attrs), "attribute types of {dn} (slapd's on the right)");
    }
}

#[test]
fn monitor_answers_openldap_exporters_queries_as_slapd_does() {
    let (slapd, ferrodir) = start_both();
    // openldap_exporter's three queries.
    let queries: [(&str, &str, &str); 3] = [
        ("cn=Monitor", "(objectClass=monitoredObject)", "monitoredInfo"),
        ("cn=Monitor", "(objectClass=monitorCounterObject)", "monitorCounter"),
        ("cn=Operations,cn=Monitor", "(objectClass=monitorOperation)", "monitorOpCompleted"),
    ];
    for (base, filter, attr) in queries {
        let theirs = ldapsearch(&slapd, base, filter, &[attr]);
        let ours = ldapsearch(&ferrodir, base, filter, &[attr]);
        assert!(theirs.len() >= 9, "{filter}: slapd answered {theirs:?}");
        assert_eq!(dns(&ours), dns(&theirs), "{filter} {attr}: DNs differ (slapd's on the right)");
        let key = attr.to_ascii_lowercase();
        let numeric = |values: Option<&Vec<String>>| {
            values.and_then(|v| v.first()).is_some_and(|v| v.parse::<f64>().is_ok())
        };
        for (dn, their_attrs) in theirs.iter().filter(|(dn, _)| !excepted(dn)) {
            if !numeric(their_attrs.get(&key)) {
                continue;
            }
            let ours_there = ours.iter().find(|(d, _)| generic(d) == generic(dn)).map(|(_, a)| a);
            assert!(
                numeric(ours_there.and_then(|a| a.get(&key))),
                "{dn}: slapd's {attr} is a number, ferrodir's {:?}",
                ours_there.and_then(|a| a.get(&key))
            );
        }
    }
}
