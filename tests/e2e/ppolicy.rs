//! Password policy (slapd's ppolicy overlay, draft-behera-ldap-password-policy-10): policy
//! entries added over LDAP and named by `[ppolicy] default_policy` or an entry's
//! pwdPolicySubentry; lockout after pwdMaxFailure failures, for pwdLockoutDuration or until
//! an administrator deletes pwdAccountLockedTime; the Password Policy control's
//! accountLocked; failures counted across connections and kept across a restart; aging
//! (pwdMaxAge: the expiry warning, grace binds, passwordExpired). Driven
//! with the ldap3 crate and `ldapwhoami -e ppolicy`.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ferrodir_proto::message::ppolicy::{PasswordPolicyResponse, PolicyError, PASSWORD_POLICY_OID};
use ldap3::controls::RawControl;
use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{bound, connect_url, tool, wait_until, Client, Server, ADMIN_DN, ADMIN_PW};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const POLICIES: &str = "ou=policies,dc=example,dc=com";
const DEFAULT_POLICY: &str = "cn=default,ou=policies,dc=example,dc=com";

/// TEST_CONFIG with the default policy named, and a cheap hash: these tests bind often.
fn config() -> String {
    crate::harness::TEST_CONFIG.replacen(
        "[log]",
        &format!(
            "password_scheme = \"{{SSHA512}}\"\n[ppolicy]\ndefault_policy = \"{DEFAULT_POLICY}\"\n[log]"
        ),
        1,
    )
}

fn dn_of(uid: &str) -> String {
    format!("uid={uid},{PEOPLE}")
}

fn admin(server: &Server) -> Client {
    bound(server, ADMIN_DN, ADMIN_PW)
}

/// Adds `ou=policies` and the policy `cn=NAME` under it, a pwdPolicy on an
/// organizationalRole (a structural class, as slapd users write them), with `settings`.
fn add_policy(client: &mut Client, name: &str, settings: &[(&str, &str)]) {
    if name == "default" {
        let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["policies"].into())];
        let result = client.add(POLICIES, ou).expect("add");
        assert_eq!(result.rc, 0, "add {POLICIES}: {result:?}");
    }
    let mut attrs: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["organizationalRole", "pwdPolicy"].into()),
        ("cn", [name].into()),
        ("pwdAttribute", ["userPassword"].into()),
    ];
    attrs.extend(settings.iter().map(|(attr, value)| (*attr, [*value].into())));
    let dn = format!("cn={name},{POLICIES}");
    let result = client.add(&dn, attrs).expect("add");
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
}

/// Adds the person `uid` with userPassword `uid-pw`, and `extra` attributes.
fn add_person(client: &mut Client, uid: &str, extra: &[(&str, &str)]) {
    let password = format!("{uid}-pw");
    let mut attrs: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["inetOrgPerson"].into()),
        ("uid", [uid].into()),
        ("cn", [uid].into()),
        ("sn", [uid].into()),
        ("userPassword", [password.as_str()].into()),
    ];
    attrs.extend(extra.iter().map(|(attr, value)| (*attr, [*value].into())));
    let result = client.add(&dn_of(uid), attrs).expect("add");
    assert_eq!(result.rc, 0, "add {uid}: {result:?}");
}

/// A simple bind on a new connection, asking for the Password Policy control: the result
/// code and the control's value, decoded (None when none came back).
fn bind(server: &Server, dn: &str, password: &str) -> (u32, Option<PasswordPolicyResponse>) {
    let mut client = connect_url(&server.url());
    let ask = RawControl { ctype: PASSWORD_POLICY_OID.to_string(), crit: false, val: None };
    let result = client.with_controls(vec![ask]).simple_bind(dn, password).expect("bind");
    let control = result.ctrls.iter().find(|c| c.1.ctype == PASSWORD_POLICY_OID).map(|c| {
        let value = c.1.val.as_deref().expect("the response control has a value");
        PasswordPolicyResponse::decode_value(value).expect("a PasswordPolicyResponseValue")
    });
    (result.rc, control)
}

fn locked() -> Option<PasswordPolicyResponse> {
    Some(PasswordPolicyResponse::error(PolicyError::AccountLocked))
}

/// The values of the operational `attr` of `dn`, read by the rootDN.
fn values(server: &Server, dn: &str, attr: &str) -> Vec<String> {
    let (entries, _) = admin(server)
        .search(dn, Scope::Base, "(objectClass=*)", vec![attr])
        .expect("search")
        .success()
        .expect("read the entry");
    let entry = SearchEntry::construct(entries.into_iter().next().expect("the entry"));
    entry
        .attrs
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(attr))
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[test]
fn max_failures_lock_until_the_administrator_unlocks() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "3")]);
    add_person(&mut root, "lucy", &[]);
    let lucy = dn_of("lucy");
    // A bind the policy has nothing to say about: the control comes back empty.
    assert_eq!(bind(&server, &lucy, "lucy-pw"), (0, Some(PasswordPolicyResponse::default())));
    for _ in 0..3 {
        assert_eq!(bind(&server, &lucy, "wrong"), (49, Some(PasswordPolicyResponse::default())));
    }
    // Locked: the right password gets the same 49, and only the control says why.
    assert_eq!(bind(&server, &lucy, "lucy-pw"), (49, locked()));
    let (rc, _, stderr) =
        tool("ldapwhoami", &["-x", "-H", &server.url(), "-D", &lucy, "-w", "lucy-pw", "-e", "ppolicy"], None);
    assert_eq!(rc, 49, "{stderr}");
    assert!(stderr.contains("Account locked"), "ldapwhoami -e ppolicy: {stderr}");
    // The state is stored on the entry, readable by the administrator, in slapd's forms.
    let lock = values(&server, &lucy, "pwdAccountLockedTime");
    assert!(lock.len() == 1 && lock[0].len() == 15 && lock[0].ends_with('Z'), "{lock:?}");
    let failures = values(&server, &lucy, "pwdFailureTime");
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures.iter().all(|f| f.len() == 22 && f.as_bytes()[14] == b'.'), "{failures:?}");
    // The administrator unlocks: the failures go with the lock, and the user binds again.
    let unlock =
        root.modify(&lucy, vec![Mod::Delete("pwdAccountLockedTime", Default::default())]).expect("modify");
    assert_eq!(unlock.rc, 0, "{unlock:?}");
    assert!(values(&server, &lucy, "pwdFailureTime").is_empty());
    assert_eq!(bind(&server, &lucy, "lucy-pw").0, 0);
    // A wrong bind, then a right one: the failure is cleared.
    assert_eq!(bind(&server, &lucy, "wrong").0, 49);
    assert_eq!(values(&server, &lucy, "pwdFailureTime").len(), 1);
    assert_eq!(bind(&server, &lucy, "lucy-pw").0, 0);
    assert!(values(&server, &lucy, "pwdFailureTime").is_empty());
    // The administrator may set pwdReset and lock by hand (slapd's flags); no user may
    // write pwdFailureTime.
    let reset = root.modify(&lucy, vec![Mod::Replace("pwdReset", ["TRUE"].into())]).expect("modify");
    assert_eq!(reset.rc, 0, "{reset:?}");
    assert_eq!(values(&server, &lucy, "pwdReset"), ["TRUE"]);
    let forged =
        root.modify(&lucy, vec![Mod::Add("pwdFailureTime", ["20200101000000Z"].into())]).expect("modify");
    assert_eq!(forged.rc, 19, "{forged:?}");
    let by_hand = root
        .modify(&lucy, vec![Mod::Replace("pwdAccountLockedTime", ["000001010000Z"].into())])
        .expect("modify");
    assert_eq!(by_hand.rc, 0, "{by_hand:?}");
    assert_eq!(bind(&server, &lucy, "lucy-pw"), (49, locked()));
}

#[test]
fn an_entrys_own_policy_overrides_the_default_and_its_lock_lifts_by_itself() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "3")]);
    add_policy(
        &mut root,
        "short",
        &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "1"), ("pwdLockoutDuration", "2")],
    );
    add_person(&mut root, "max", &[("pwdPolicySubentry", &format!("cn=short,{POLICIES}"))]);
    add_person(&mut root, "moe", &[]);
    let (max, moe) = (dn_of("max"), dn_of("moe"));
    // Under the default, one failure locks nothing.
    assert_eq!(bind(&server, &moe, "wrong").0, 49);
    assert_eq!(bind(&server, &moe, "moe-pw").0, 0);
    // Under its own policy, one failure locks, for two seconds.
    assert_eq!(bind(&server, &max, "wrong").0, 49);
    assert_eq!(bind(&server, &max, "max-pw"), (49, locked()));
    let deadline = Instant::now() + Duration::from_secs(20);
    assert!(wait_until(deadline, || bind(&server, &max, "max-pw").0 == 0), "the lock never lifted");
    // The successful bind removed the expired lock and the failure.
    assert!(values(&server, &max, "pwdAccountLockedTime").is_empty());
    assert!(values(&server, &max, "pwdFailureTime").is_empty());
}

#[test]
fn concurrent_failures_on_many_connections_all_count() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "8")]);
    add_person(&mut root, "nina", &[]);
    let nina = dn_of("nina");
    let fail_at_once = |threads: usize| {
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, url, nina) = (barrier.clone(), server.url(), nina.clone());
                std::thread::spawn(move || {
                    let mut client = connect_url(&url);
                    barrier.wait();
                    client.simple_bind(&nina, "wrong").expect("bind").rc
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().expect("a binding thread"), 49);
        }
    };
    // Seven at once: seven failures recorded, none lost, and no lock yet.
    fail_at_once(7);
    assert_eq!(values(&server, &nina, "pwdFailureTime").len(), 7);
    assert!(values(&server, &nina, "pwdAccountLockedTime").is_empty());
    // The administrator unlocks (clearing the failures); eight at once lock.
    let unlock =
        root.modify(&nina, vec![Mod::Replace("pwdAccountLockedTime", Default::default())]).expect("modify");
    assert_eq!(unlock.rc, 0, "{unlock:?}");
    assert!(values(&server, &nina, "pwdFailureTime").is_empty());
    fail_at_once(8);
    assert_eq!(values(&server, &nina, "pwdFailureTime").len(), 8);
    assert_eq!(bind(&server, &nina, "nina-pw"), (49, locked()));
}

#[test]
fn a_lock_survives_a_restart() {
    let mut server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "2")]);
    add_person(&mut root, "otto", &[]);
    drop(root);
    let otto = dn_of("otto");
    assert_eq!(bind(&server, &otto, "wrong").0, 49);
    // One failure, kept across the restart: the next one locks.
    server.stop();
    server.restart();
    assert_eq!(values(&server, &otto, "pwdFailureTime").len(), 1);
    assert_eq!(bind(&server, &otto, "wrong").0, 49);
    server.stop();
    server.restart();
    assert_eq!(bind(&server, &otto, "otto-pw"), (49, locked()));
}

#[test]
fn malformed_policies_are_refused_naming_the_attribute() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdMaxFailure", "3")]);
    let bad = |root: &mut Client, attr: &str, value: &str| {
        let mut attrs: Vec<(&str, std::collections::HashSet<&str>)> =
            vec![("objectClass", ["organizationalRole", "pwdPolicy"].into()), ("cn", ["bad"].into())];
        if attr != "pwdAttribute" {
            attrs.push(("pwdAttribute", ["userPassword"].into()));
        }
        attrs.push((attr, [value].into()));
        root.add(&format!("cn=bad,{POLICIES}"), attrs).expect("add")
    };
    let result = bad(&mut root, "pwdMaxFailure", "abc");
    assert_eq!(result.rc, 21, "{result:?}");
    assert!(result.text.contains("pwdMaxFailure"), "{result:?}");
    let result = bad(&mut root, "pwdLockout", "maybe");
    assert_eq!(result.rc, 21, "{result:?}");
    assert!(result.text.contains("pwdLockout"), "{result:?}");
    let result = bad(&mut root, "pwdAttribute", "noSuchAttribute");
    assert_eq!(result.rc, 19, "{result:?}");
    assert!(result.text.contains("pwdAttribute"), "{result:?}");
    // A Modify too.
    let change = vec![Mod::Replace("pwdMaxFailure", ["-x"].into())];
    let result = root.modify(DEFAULT_POLICY, change).expect("modify");
    assert_eq!(result.rc, 21, "{result:?}");
    assert!(result.text.contains("pwdMaxFailure"), "{result:?}");
    // pwdPolicy needs pwdAttribute.
    let attrs = vec![("objectClass", ["organizationalRole", "pwdPolicy"].into()), ("cn", ["bare"].into())];
    let result = root.add(&format!("cn=bare,{POLICIES}"), attrs).expect("add");
    assert_eq!(result.rc, 65, "{result:?}");
}

#[test]
fn the_root_dse_lists_the_control() {
    let server = Server::start_with_config(&config());
    let (entries, _) = connect_url(&server.url())
        .search("", Scope::Base, "(objectClass=*)", vec!["supportedControl"])
        .expect("search")
        .success()
        .expect("root DSE");
    let dse = SearchEntry::construct(entries.into_iter().next().expect("root DSE"));
    assert!(dse.attrs["supportedControl"].iter().any(|oid| oid == PASSWORD_POLICY_OID), "{dse:?}");
    // Critical on a bind: supported, so not refused.
    let mut client = connect_url(&server.url());
    let ask = RawControl { ctype: PASSWORD_POLICY_OID.to_string(), crit: true, val: None };
    let result =
        client.with_controls(vec![ask]).simple_bind("uid=bob,ou=people,dc=example,dc=com", "password");
    assert_eq!(result.expect("bind").rc, 0);
}

/// A replica (`[[replication]]`) of a provider with the same default policy: the lock the
/// provider writes replicates and refuses binds on the replica; failed binds on the replica
/// write nothing there (its subtree is the provider's), and the provider's unlock replicates.
#[test]
fn a_replica_refuses_binds_to_an_account_the_provider_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{ADMIN_PW}\n")).expect("write the password file");
    let provider =
        Server::start_with_config(&config().replacen("shards = 4", "server_id = 1\nshards = 4", 1));
    let mut root = admin(&provider);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "3")]);
    add_person(&mut root, "rita", &[]);
    let replica_config = format!(
        "shards = 3\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = false\npassword_scheme = \"{{SSHA512}}\"\n[ppolicy]\ndefault_policy = \"{DEFAULT_POLICY}\"\n\
         [limits]\nshutdown_grace_s = 1\n[log]\nlevel = \"warn\"\n\
         [[replication]]\nrid = 1\nprovider = \"{}\"\nbind_dn = \"{ADMIN_DN}\"\npassword_file = \"{}\"\n\
         search_base = \"dc=example,dc=com\"\ntype = \"refreshAndPersist\"\nretry = \"1 +\"\n",
        provider.url(),
        password_file.display()
    );
    let replica = Server::start_with_config(&replica_config);
    let rita = dn_of("rita");
    let deadline = || Instant::now() + Duration::from_secs(30);
    assert!(
        wait_until(deadline(), || bind(&replica, &rita, "rita-pw").0 == 0),
        "rita never reached the replica"
    );
    for _ in 0..3 {
        assert_eq!(bind(&provider, &rita, "wrong").0, 49);
    }
    let locked_there = || !values(&replica, &rita, "pwdAccountLockedTime").is_empty();
    assert!(wait_until(deadline(), locked_there), "the lock never reached the replica");
    assert_eq!(values(&replica, &rita, "pwdFailureTime").len(), 3);
    assert_eq!(bind(&replica, &rita, "rita-pw"), (49, locked()));
    // A failure on the replica is not counted there, nor on the provider.
    assert_eq!(bind(&replica, &rita, "wrong").0, 49);
    assert_eq!(values(&replica, &rita, "pwdFailureTime").len(), 3);
    assert_eq!(values(&provider, &rita, "pwdFailureTime").len(), 3);
    // The provider's administrator unlocks; the replica follows.
    let unlock =
        root.modify(&rita, vec![Mod::Delete("pwdAccountLockedTime", Default::default())]).expect("modify");
    assert_eq!(unlock.rc, 0, "{unlock:?}");
    assert!(
        wait_until(deadline(), || bind(&replica, &rita, "rita-pw").0 == 0),
        "the unlock never reached the replica"
    );
    assert!(values(&replica, &rita, "pwdFailureTime").is_empty());
}

/// `pwdChangedTime` of `dn` as Unix seconds.
fn changed_at(server: &Server, dn: &str) -> u64 {
    let text = values(server, dn, "pwdChangedTime").into_iter().next().expect("pwdChangedTime is stamped");
    let micros = ferrodir_proto::schema::gentime::unix_micros(&text).expect("a generalized time");
    u64::try_from(micros / 1_000_000).expect("after 1970")
}

fn warning(warning: ferrodir_proto::message::ppolicy::PolicyWarning) -> Option<PasswordPolicyResponse> {
    Some(PasswordPolicyResponse { warning: Some(warning), error: None })
}

#[test]
fn a_password_near_its_max_age_warns_and_one_past_it_spends_grace_binds_then_is_refused() {
    use ferrodir_proto::message::ppolicy::PolicyWarning;
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdMaxAge", "3600"), ("pwdExpireWarning", "7200")]);
    add_policy(&mut root, "short", &[("pwdMaxAge", "1"), ("pwdGraceAuthNLimit", "2")]);
    // Within the warning window from the start: the control says how long is left.
    add_person(&mut root, "wendy", &[]);
    let wendy = dn_of("wendy");
    let (rc, control) = bind(&server, &wendy, "wendy-pw");
    let left = match control.and_then(|c| c.warning) {
        Some(PolicyWarning::TimeBeforeExpiration(left)) => left,
        other => panic!("expected timeBeforeExpiration, got {other:?}"),
    };
    assert_eq!(rc, 0);
    assert!((3500..=3600).contains(&left), "{left} seconds left");
    let (_, _, stderr) = tool(
        "ldapwhoami",
        &["-x", "-H", &server.url(), "-D", &wendy, "-w", "wendy-pw", "-e", "ppolicy"],
        None,
    );
    assert!(stderr.contains("expires in"), "ldapwhoami -e ppolicy: {stderr}");

    // One second of age allowed, two grace binds.
    let short = format!("cn=short,{POLICIES}");
    add_person(&mut root, "gus", &[("pwdPolicySubentry", short.as_str())]);
    let gus = dn_of("gus");
    let changed = changed_at(&server, &gus);
    let unix_now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(wait_until(Instant::now() + Duration::from_secs(10), || unix_now() >= changed + 2));
    assert_eq!(bind(&server, &gus, "gus-pw"), (0, warning(PolicyWarning::GraceAuthNsRemaining(1))));
    assert_eq!(bind(&server, &gus, "gus-pw"), (0, warning(PolicyWarning::GraceAuthNsRemaining(0))));
    assert_eq!(values(&server, &gus, "pwdGraceUseTime").len(), 2);
    let expired = Some(PasswordPolicyResponse::error(PolicyError::PasswordExpired));
    assert_eq!(bind(&server, &gus, "gus-pw"), (49, expired));
    // A new password: stamped again, the grace binds counted afresh.
    let result = root.modify(&gus, vec![Mod::Replace("userPassword", ["gus-new"].into())]).expect("modify");
    assert_eq!(result.rc, 0);
    assert!(changed_at(&server, &gus) >= changed + 2, "pwdChangedTime moved");
    assert!(values(&server, &gus, "pwdGraceUseTime").is_empty(), "grace binds reset");
}

/// A Modify on a new connection bound as `dn`, asking for the Password Policy control: the
/// result code and the control's error.
fn modify_as(server: &Server, dn: &str, password: &str, mods: Vec<Mod<&str>>) -> (u32, Option<PolicyError>) {
    let mut client = bound(server, dn, password);
    let ask = RawControl { ctype: PASSWORD_POLICY_OID.to_string(), crit: false, val: None };
    let result = client.with_controls(vec![ask]).modify(dn, mods).expect("modify");
    let error = result
        .ctrls
        .iter()
        .find(|c| c.1.ctype == PASSWORD_POLICY_OID)
        .and_then(|c| PasswordPolicyResponse::decode_value(c.1.val.as_deref().unwrap_or_default()).ok())
        .and_then(|r| r.error);
    (result.rc, error)
}

#[test]
fn a_new_password_must_be_long_enough_new_and_changed_as_the_policy_says() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(
        &mut root,
        "default",
        &[("pwdCheckQuality", "1"), ("pwdMinLength", "8"), ("pwdInHistory", "2")],
    );
    add_policy(&mut root, "strict", &[("pwdSafeModify", "TRUE")]);
    add_policy(&mut root, "fixed", &[("pwdAllowUserChange", "FALSE")]);
    add_person(&mut root, "hana", &[]);
    let hana = dn_of("hana");
    let replace = |value: &'static str| vec![Mod::Replace("userPassword", [value].into())];
    // Too short, then long enough; then the one just replaced: in history.
    assert_eq!(
        modify_as(&server, &hana, "hana-pw", replace("short")),
        (19, Some(PolicyError::PasswordTooShort))
    );
    assert_eq!(modify_as(&server, &hana, "hana-pw", replace("long-enough-1")), (0, None));
    assert_eq!(values(&server, &hana, "pwdHistory").len(), 1, "the old value joined the history");
    assert_eq!(
        modify_as(&server, &hana, "long-enough-1", replace("hana-pw-long")),
        (0, None),
        "a value never used"
    );
    assert_eq!(
        modify_as(&server, &hana, "hana-pw-long", replace("long-enough-1")),
        (19, Some(PolicyError::PasswordInHistory))
    );
    // The rootDN passes every rule.
    let result = root.modify(&hana, replace("x")).expect("modify");
    assert_eq!(result.rc, 0, "the rootDN sets any password");

    // pwdSafeModify: the old password must come with the new one.
    let strict = format!("cn=strict,{POLICIES}");
    add_person(&mut root, "sam", &[("pwdPolicySubentry", strict.as_str())]);
    let sam = dn_of("sam");
    assert_eq!(
        modify_as(&server, &sam, "sam-pw", replace("sam-new")),
        (50, Some(PolicyError::MustSupplyOldPassword))
    );
    let both =
        vec![Mod::Delete("userPassword", ["sam-pw"].into()), Mod::Add("userPassword", ["sam-new"].into())];
    assert_eq!(modify_as(&server, &sam, "sam-pw", both), (0, None));
    let (rc, _, stderr) = tool(
        "ldappasswd",
        &["-x", "-H", &server.url(), "-D", &sam, "-w", "sam-new", "-a", "sam-new", "-s", "sam-newer"],
        None,
    );
    assert_eq!(rc, 0, "Password Modify with the old password: {stderr}");

    // pwdAllowUserChange FALSE: only someone else (here the rootDN) may change it.
    let fixed = format!("cn=fixed,{POLICIES}");
    add_person(&mut root, "fay", &[("pwdPolicySubentry", fixed.as_str())]);
    let fay = dn_of("fay");
    assert_eq!(
        modify_as(&server, &fay, "fay-pw", replace("fay-new-password")),
        (50, Some(PolicyError::PasswordModNotAllowed))
    );
}

#[test]
fn after_an_administrators_reset_the_user_may_only_change_the_password() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdMustChange", "TRUE")]);
    // Added by the administrator: no reset yet (slapd sets none on an Add)...
    add_person(&mut root, "rita", &[]);
    let rita = dn_of("rita");
    assert!(values(&server, &rita, "pwdReset").is_empty());
    // ...the administrator's change of an existing password is one.
    let result = root.modify(&rita, vec![Mod::Replace("userPassword", ["rita-pw"].into())]).expect("modify");
    assert_eq!(result.rc, 0);
    assert_eq!(values(&server, &rita, "pwdReset"), vec!["TRUE".to_string()]);
    let reset = Some(PasswordPolicyResponse::error(PolicyError::ChangeAfterReset));
    assert_eq!(bind(&server, &rita, "rita-pw"), (0, reset));
    let (_, _, stderr) =
        tool("ldapwhoami", &["-x", "-H", &server.url(), "-D", &rita, "-w", "rita-pw", "-e", "ppolicy"], None);
    assert!(stderr.contains("must be changed") || stderr.contains("Password must"), "ldapwhoami: {stderr}");

    // On the connection that bound: nothing but the change.
    let mut client = bound(&server, &rita, "rita-pw");
    let search = client.search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).expect("search");
    assert_eq!(search.1.rc, 50, "a search before the change: {:?}", search.1);
    let other = client.modify(&rita, vec![Mod::Replace("description", ["x"].into())]).expect("modify");
    assert_eq!(other.rc, 50, "a change of anything else");
    let change =
        client.modify(&rita, vec![Mod::Replace("userPassword", ["rita-own"].into())]).expect("modify");
    assert_eq!(change.rc, 0, "the password change itself");
    let search = client.search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).expect("search");
    assert_eq!(search.1.rc, 0, "after the change the connection is free");
    assert!(values(&server, &rita, "pwdReset").is_empty(), "the user's own change clears pwdReset");
    assert_eq!(bind(&server, &rita, "rita-own"), (0, Some(PasswordPolicyResponse::default())));

    // The administrator resets it again: pwdReset comes back.
    let result = root.modify(&rita, vec![Mod::Replace("userPassword", ["temp-pw"].into())]).expect("modify");
    assert_eq!(result.rc, 0);
    assert_eq!(values(&server, &rita, "pwdReset"), vec!["TRUE".to_string()]);
}

/// A storm of wrong binds over many accounts from several connections at once: exactly the
/// accounts that reached pwdMaxFailure are locked, and no other. (The full storm, 10,000
/// binds over 1,000 DNs with another client's lookups timed, is a benchmark; here the count
/// is smaller and the check is the locks.)
#[test]
fn a_storm_of_wrong_binds_locks_exactly_the_accounts_the_policy_says() {
    let server = Server::start_with_config(&config());
    let mut root = admin(&server);
    add_policy(&mut root, "default", &[("pwdLockout", "TRUE"), ("pwdMaxFailure", "5")]);
    const ACCOUNTS: usize = 120;
    for i in 0..ACCOUNTS {
        add_person(&mut root, &format!("storm{i}"), &[]);
    }
    // Accounts 0..60 get five failures (locked), 60..120 four (not locked), interleaved
    // across eight connections so that one account's failures race on several workers.
    let work: Vec<String> = (0..5)
        .flat_map(|round| (0..ACCOUNTS).filter(move |i| round < 4 || *i < ACCOUNTS / 2))
        .map(|i| dn_of(&format!("storm{i}")))
        .collect();
    let url = server.url();
    std::thread::scope(|scope| {
        for lane in 0..8 {
            let (work, url) = (&work, url.clone());
            scope.spawn(move || {
                let mut client = connect_url(&url);
                for dn in work.iter().skip(lane).step_by(8) {
                    assert_eq!(client.simple_bind(dn, "wrong").expect("bind").rc, 49);
                }
            });
        }
    });
    let locked: Vec<usize> = (0..ACCOUNTS)
        .filter(|i| !values(&server, &dn_of(&format!("storm{i}")), "pwdAccountLockedTime").is_empty())
        .collect();
    assert_eq!(locked, (0..ACCOUNTS / 2).collect::<Vec<_>>(), "exactly the accounts with five failures");
    let spared = dn_of(&format!("storm{}", ACCOUNTS - 1));
    assert_eq!(bind(&server, &spared, &format!("storm{}-pw", ACCOUNTS - 1)).0, 0);
}
