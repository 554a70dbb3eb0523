//! Password policy lockout against slapd 2.5: slapd with `overlay ppolicy`
//! (`ppolicy_default`, `ppolicy_use_lockout`), ferrodir with `[ppolicy] default_policy`, the
//! same policies and people added over LDAP on both, then the same script of binds (each
//! asking for the Password Policy control) and administrator changes on both. Every step's
//! result code and control value are compared, and after the script which pwd* attributes
//! each person holds and how many values.
//!
//! Two more scripts compare password changes and resets, and aging (the expiry warning,
//! grace binds, passwordExpired).
//!
//! Known difference, asserted rather than compared: a bind to a DN that names no entry gets
//! no control from slapd and an empty one from ferrodir (docs/CONFORMANCE.md).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use ldap3::controls::RawControl;
use ldap3::{LdapConn, LdapConnSettings, Mod, Scope, SearchEntry};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const OID: &str = "1.3.6.1.4.1.42.2.27.8.5.1";
const POLICIES: &str = "ou=policies,dc=example,dc=com";
const PEOPLE: &str = "ou=people,dc=example,dc=com";
const STATE: [&str; 3] = ["pwdFailureTime", "pwdAccountLockedTime", "pwdReset"];

fn connect(server: &Server) -> LdapConn {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
    let mut conn = LdapConn::with_settings(settings, &format!("ldap://{}", server.addr)).expect("connect");
    conn.with_timeout(Duration::from_secs(10));
    conn
}

fn manager(server: &Server) -> LdapConn {
    let mut conn = connect(server);
    conn.simple_bind(MANAGER_DN, MANAGER_PW).and_then(|r| r.success()).expect("bind as the manager");
    conn
}

fn add(conn: &mut LdapConn, dn: &str, attrs: &[(&str, &str)]) {
    let mut merged: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for (name, value) in attrs {
        merged.entry(name).or_default().insert(value);
    }
    let result = conn.add(dn, merged.into_iter().collect()).expect("add");
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
}

/// A pwdPolicy for userPassword named `name`, with `settings`.
fn policy<'a>(name: &'a str, settings: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut attrs = vec![
        ("objectClass", "organizationalRole"),
        ("objectClass", "pwdPolicy"),
        ("cn", name),
        ("pwdAttribute", "userPassword"),
    ];
    attrs.extend_from_slice(settings);
    attrs
}

fn populate(server: &Server) {
    let mut conn = manager(server);
    add(
        &mut conn,
        SUFFIX,
        &[("objectClass", "dcObject"), ("objectClass", "organization"), ("dc", "example"), ("o", "x")],
    );
    for ou in ["people", "policies"] {
        add(&mut conn, &format!("ou={ou},{SUFFIX}"), &[("objectClass", "organizationalUnit"), ("ou", ou)]);
    }
    add(
        &mut conn,
        &format!("cn=default,{POLICIES}"),
        &policy("default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "3")]),
    );
    add(
        &mut conn,
        &format!("cn=short,{POLICIES}"),
        &policy("short", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "2")]),
    );
    add(
        &mut conn,
        &format!("cn=lax,{POLICIES}"),
        &policy("lax", &[("pwdLockout", "FALSE"), ("pwdMaxFailure", "2")]),
    );
    let short = format!("cn=short,{POLICIES}");
    let lax = format!("cn=lax,{POLICIES}");
    for (uid, password, subentry) in [
        ("u1", Some("pw1"), None),
        ("u2", Some("pw2"), Some(&short)),
        ("u3", Some("pw3"), Some(&lax)),
        ("u4", None, None),
    ] {
        let mut attrs = vec![("objectClass", "inetOrgPerson"), ("uid", uid), ("cn", uid), ("sn", uid)];
        if let Some(password) = password {
            attrs.push(("userPassword", password));
        }
        if let Some(subentry) = subentry {
            attrs.push(("pwdPolicySubentry", subentry.as_str()));
        }
        add(&mut conn, &format!("uid={uid},{PEOPLE}"), &attrs);
    }
}

/// The policy `cn=NAME` with `settings`, and the person `uid=PREFIXNAME` it governs, whose
/// password is `NAME-password`.
fn add_governed(conn: &mut LdapConn, prefix: &str, name: &str, settings: &[(&str, &str)]) {
    add(conn, &format!("cn={name},{POLICIES}"), &policy(name, settings));
    let (uid, subentry, password) =
        (format!("{prefix}{name}"), format!("cn={name},{POLICIES}"), format!("{name}-password"));
    add(
        conn,
        &format!("uid={uid},{PEOPLE}"),
        &[
            ("objectClass", "inetOrgPerson"),
            ("uid", &uid),
            ("cn", &uid),
            ("sn", &uid),
            ("userPassword", &password),
            ("pwdPolicySubentry", &subentry),
        ],
    );
}

/// One step of the script.
enum Step {
    Bind(&'static str, &'static str),
    /// The manager's Modify of a person.
    Admin(&'static str, Mod<&'static str>),
}

/// (result code, control value) of a bind asking for the control; None: no control.
fn bind(server: &Server, uid: &str, password: &str) -> (u32, Option<Vec<u8>>) {
    let mut conn = connect(server);
    let ask = RawControl { ctype: OID.to_string(), crit: false, val: None };
    let result =
        conn.with_controls(vec![ask]).simple_bind(&format!("uid={uid},{PEOPLE}"), password).expect("bind");
    let control = result.ctrls.iter().find(|c| c.1.ctype == OID).map(|c| c.1.val.clone().unwrap_or_default());
    (result.rc, control)
}

fn run(server: &Server, script: &[Step]) -> Vec<String> {
    let mut admin = manager(server);
    script
        .iter()
        .map(|step| match step {
            Step::Bind(uid, password) => {
                let (rc, control) = bind(server, uid, password);
                format!("bind {uid} {password}: rc={rc} control={control:02x?}")
            }
            Step::Admin(uid, change) => {
                let rc =
                    admin.modify(&format!("uid={uid},{PEOPLE}"), vec![change.clone()]).expect("modify").rc;
                format!("admin {uid}: rc={rc}")
            }
        })
        .collect()
}

/// How many values of each pwd* state attribute each person holds.
fn state(server: &Server) -> BTreeMap<String, Vec<(String, usize)>> {
    let mut admin = manager(server);
    let (entries, _) = admin
        .search(PEOPLE, Scope::OneLevel, "(objectClass=inetOrgPerson)", STATE.to_vec())
        .expect("search")
        .success()
        .expect("search people");
    entries
        .into_iter()
        .map(|e| {
            let entry = SearchEntry::construct(e);
            let counts = STATE
                .iter()
                .map(|name| {
                    let n = entry
                        .attrs
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map_or(0, |(_, v)| v.len());
                    (name.to_string(), n)
                })
                .collect();
            (entry.dn.to_lowercase(), counts)
        })
        .collect()
}

#[test]
fn lockout_matches_slapd() {
    let default = format!("cn=default,{POLICIES}");
    let slapd = servers::start_slapd_with_overlay(
        "ppolicy",
        &format!("overlay ppolicy\nppolicy_default \"{default}\"\nppolicy_use_lockout\n"),
    );
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("[ppolicy]\ndefault_policy = \"{default}\"\n"));
    populate(&slapd);
    populate(&ferrodir);
    let unlock = || Mod::Delete("pwdAccountLockedTime", HashSet::new());
    let script = [
        // The default policy: three failures lock for good; a success in between clears.
        Step::Bind("u1", "pw1"),
        Step::Bind("u1", "bad"),
        Step::Bind("u1", "bad"),
        Step::Bind("u1", "pw1"),
        Step::Bind("u1", "bad"),
        Step::Bind("u1", "bad"),
        Step::Bind("u1", "bad"),
        Step::Bind("u1", "pw1"),
        Step::Bind("u1", "bad"),
        Step::Admin("u1", unlock()),
        Step::Bind("u1", "pw1"),
        Step::Admin("u1", Mod::Replace("pwdReset", HashSet::from(["TRUE"]))),
        // Its own policy: two failures lock.
        Step::Bind("u2", "bad"),
        Step::Bind("u2", "bad"),
        Step::Bind("u2", "pw2"),
        // pwdLockout FALSE: the lock time is written, and binds go on.
        Step::Bind("u3", "bad"),
        Step::Bind("u3", "bad"),
        Step::Bind("u3", "bad"),
        Step::Bind("u3", "pw3"),
        Step::Bind("u3", "bad"),
        // No userPassword: nothing to count.
        Step::Bind("u4", "bad"),
        // A lock set by hand, for good.
        Step::Admin("u2", Mod::Replace("pwdAccountLockedTime", HashSet::from(["000001010000Z"]))),
        Step::Bind("u2", "pw2"),
    ];
    let theirs = run(&slapd, &script);
    let ours = run(&ferrodir, &script);
    // The reference locked accounts (u1 twice, u2 twice): the script tests something.
    let locked = theirs.iter().filter(|line| line.contains("control=Some([30, 03, 81, 01, 01])")).count();
    assert_eq!(locked, 4, "slapd's answers: {theirs:#?}");
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(b, a, "step {i} differs (slapd's on the right)");
    }
    assert_eq!(state(&ferrodir), state(&slapd), "pwd* state after the script (slapd's on the right)");
    // The one known difference: a DN that names no entry.
    assert_eq!(bind(&slapd, "nobody", "x"), (49, None));
    assert_eq!(bind(&ferrodir, "nobody", "x"), (49, Some(vec![0x30, 0x00])));
}

/// A user's own Modify of their userPassword (`mods`), bound with `password`, asking for the
/// control: (result code, control value).
fn own_change(server: &Server, uid: &str, password: &str, mods: Vec<Mod<&str>>) -> (u32, Option<Vec<u8>>) {
    let dn = format!("uid={uid},{PEOPLE}");
    let mut conn = connect(server);
    let bound = conn.simple_bind(&dn, password).expect("bind");
    if bound.rc != 0 {
        return (1000 + bound.rc, None);
    }
    let ask = RawControl { ctype: OID.to_string(), crit: false, val: None };
    let result = conn.with_controls(vec![ask]).modify(&dn, mods).expect("modify");
    let control = result.ctrls.iter().find(|c| c.1.ctype == OID).map(|c| c.1.val.clone().unwrap_or_default());
    (result.rc, control)
}

/// On a connection bound as `uid` with `password`: a search, then its own password change.
fn after_reset(server: &Server, uid: &str, password: &str, new: &'static str) -> (u32, u32) {
    let dn = format!("uid={uid},{PEOPLE}");
    let mut conn = connect(server);
    assert_eq!(conn.simple_bind(&dn, password).expect("bind").rc, 0);
    let search = conn.search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).expect("search");
    let change =
        conn.modify(&dn, vec![Mod::Replace("userPassword", HashSet::from([new]))]).expect("modify").rc;
    (search.1.rc, change)
}

#[test]
fn password_changes_match_slapd() {
    let default = format!("cn=default,{POLICIES}");
    // Users may write their own password (Debian's rules), on both.
    let access = [
        "access to attrs=userPassword by self write by anonymous auth by * none".to_string(),
        "access to * by * read".to_string(),
    ];
    let slapd = servers::start_slapd_with_overlay_and_access(
        "ppolicy",
        &format!("overlay ppolicy\nppolicy_default \"{default}\"\nppolicy_use_lockout\n"),
        &access,
    );
    let rules =
        "[[access_rules]]\nto = 'attrs=userPassword'\nby = ['self write', 'anonymous auth', '* none']\n\
                 [[access_rules]]\nto = '*'\nby = ['* read']\n";
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("[ppolicy]\ndefault_policy = \"{default}\"\n{rules}"));
    let setup = |server: &Server| {
        populate(server);
        let mut conn = manager(server);
        let rules = [
            ("quality", vec![("pwdCheckQuality", "1"), ("pwdMinLength", "8"), ("pwdInHistory", "2")]),
            ("safe", vec![("pwdSafeModify", "TRUE")]),
            ("fixed", vec![("pwdAllowUserChange", "FALSE")]),
            ("reset", vec![("pwdMustChange", "TRUE")]),
        ];
        for (name, settings) in &rules {
            add_governed(&mut conn, "p", name, settings);
        }
    };
    setup(&slapd);
    setup(&ferrodir);
    let replace = |value: &'static str| vec![Mod::Replace("userPassword", HashSet::from([value]))];
    let script = |server: &Server| -> Vec<String> {
        let mut out = Vec::new();
        let mut note = |what: &str, (rc, control): (u32, Option<Vec<u8>>)| {
            out.push(format!("{what}: rc={rc} control={control:02x?}"))
        };
        note("too short", own_change(server, "pquality", "quality-password", replace("short")));
        note("long enough", own_change(server, "pquality", "quality-password", replace("long-enough-1")));
        note("the one before", own_change(server, "pquality", "long-enough-1", replace("quality-password")));
        note("no old password", own_change(server, "psafe", "safe-password", replace("safe-new-1")));
        let both = vec![
            Mod::Delete("userPassword", HashSet::from(["safe-password"])),
            Mod::Add("userPassword", HashSet::from(["safe-new-1"])),
        ];
        note("with the old password", own_change(server, "psafe", "safe-password", both));
        note(
            "user change not allowed",
            own_change(server, "pfixed", "fixed-password", replace("fixed-new-1")),
        );
        let mut admin = manager(server);
        let dn = format!("uid=preset,{PEOPLE}");
        let rc = admin.modify(&dn, replace("reset-password")).expect("modify").rc;
        note("the manager's reset", (rc, None));
        note("reset bind", bind(server, "preset", "reset-password"));
        let (search, change) = after_reset(server, "preset", "reset-password", "reset-own-1");
        note("after reset: search, change", (search, Some(vec![u8::try_from(change).unwrap_or(255)])));
        note("after the own change", bind(server, "preset", "reset-own-1"));
        out
    };
    let theirs = script(&slapd);
    let ours = script(&ferrodir);
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(b, a, "step {i} differs (slapd's on the right); slapd's whole run: {theirs:#?}");
    }
    // The reference refused, and forced a change after the reset: the script tests something.
    let refusals = theirs.iter().filter(|line| line.contains("control=Some([30, 03, 81, 01")).count();
    assert!(refusals >= 5, "slapd's answers: {theirs:#?}");
    assert!(
        theirs.iter().any(|l| l.starts_with("reset bind") && l.contains("[30, 03, 81, 01, 02]")),
        "{theirs:#?}"
    );
    let reset = |server: &Server| state(server).get("uid=preset,ou=people,dc=example,dc=com").cloned();
    assert_eq!(reset(&ferrodir), reset(&slapd), "pwdReset after the own change (slapd's on the right)");
}

/// A control value read as (warning, error): the warning as ("time" | "grace", value), the
/// error as its number; None where absent. Times are compared within a few seconds.
fn decoded(control: &Option<Vec<u8>>) -> String {
    let Some(value) = control else { return "no control".into() };
    // SEQUENCE { warning [0] CHOICE { [0] INTEGER, [1] INTEGER } OPTIONAL, error [1] ENUMERATED OPTIONAL }
    let body = value.get(2..).unwrap_or_default();
    let (mut warning, mut error) = (None, None);
    let mut at = 0;
    while at + 2 <= body.len() {
        let (tag, len) = (body[at], usize::from(body[at + 1]));
        let content = body.get(at + 2..at + 2 + len).unwrap_or_default();
        match tag {
            0xa0 if content.len() >= 2 => {
                let kind = if content[0] == 0x80 { "time" } else { "grace" };
                let number = content[2..].iter().fold(0i64, |n, b| (n << 8) | i64::from(*b));
                warning = Some((kind, number));
            }
            0x81 => error = content.first().copied(),
            _ => {}
        }
        at += 2 + len;
    }
    match warning {
        // Seconds before expiry drift between the two runs: rounded to tens.
        Some(("time", n)) => format!("time~{} error={error:?}", (n + 5) / 10),
        other => format!("{other:?} error={error:?}"),
    }
}

/// Aging against slapd: the expiry warning, grace binds counted down, passwordExpired once
/// they are used up, and an administrator's new password starting the age over. Both
/// servers take each step in turn, so one wait ages both.
#[test]
fn expiry_and_grace_match_slapd() {
    let default = format!("cn=default,{POLICIES}");
    let slapd = servers::start_slapd_with_overlay(
        "ppolicy",
        &format!("overlay ppolicy\nppolicy_default \"{default}\"\nppolicy_use_lockout\n"),
    );
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("[ppolicy]\ndefault_policy = \"{default}\"\n"));
    let setup = |server: &Server| {
        populate(server);
        let mut conn = manager(server);
        let policies = [
            ("warn", vec![("pwdMaxAge", "1000"), ("pwdExpireWarning", "2000")]),
            ("aging", vec![("pwdMaxAge", "3"), ("pwdGraceAuthNLimit", "2")]),
            ("expiring", vec![("pwdMaxAge", "3")]),
        ];
        for (name, settings) in &policies {
            add_governed(&mut conn, "a", name, settings);
        }
    };
    setup(&slapd);
    setup(&ferrodir);
    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    let mut both = |what: &str, step: &dyn Fn(&Server) -> (u32, Option<Vec<u8>>)| {
        let (a, b) = (step(&slapd), step(&ferrodir));
        theirs.push(format!("{what}: rc={} {}", a.0, decoded(&a.1)));
        ours.push(format!("{what}: rc={} {}", b.0, decoded(&b.1)));
    };
    both("warned", &|s| bind(s, "awarn", "warn-password"));
    both("young", &|s| bind(s, "aaging", "aging-password"));
    both("young, no grace", &|s| bind(s, "aexpiring", "expiring-password"));
    std::thread::sleep(Duration::from_secs(5));
    both("first grace", &|s| bind(s, "aaging", "aging-password"));
    both("second grace", &|s| bind(s, "aaging", "aging-password"));
    both("no grace left", &|s| bind(s, "aaging", "aging-password"));
    both("wrong password", &|s| bind(s, "aaging", "wrong"));
    both("expired, no grace", &|s| bind(s, "aexpiring", "expiring-password"));
    both("a new password", &|s| {
        let change = Mod::Replace("userPassword", HashSet::from(["aging-new-1"]));
        (manager(s).modify(&format!("uid=aaging,{PEOPLE}"), vec![change]).expect("modify").rc, None)
    });
    both("after the new password", &|s| bind(s, "aaging", "aging-new-1"));
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(b, a, "step {i} differs (slapd's on the right); slapd's whole run: {theirs:#?}");
    }
    // The reference warned, counted grace binds down and refused: the script tests something.
    assert!(theirs[0].contains("time~"), "{theirs:#?}");
    assert!(theirs[3].contains("grace") && theirs[5].contains("rc=49"), "{theirs:#?}");
}
