//! The replication consumer (`[[replication]]`) between real binaries on loopback: a
//! provider, a refreshAndPersist replica, a refreshOnly replica and a replica of the first
//! replica (a chain), compared with `*` `+` searches (DNs, values, entryUUID, entryCSN) and
//! contextCSN; writes on replicas (a referral, or 53); a replica stopped while the provider
//! changes, then restarted; and a replica killed with -9 mid-refresh that resumes with
//! nothing lost or duplicated.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{
    binary, bound, free_port, http_get, snapshot_of, Server, Snapshot, ADMIN_DN, ADMIN_PW, BASE,
};

/// The provider's server_id differs from the replicas' (0): the replicas' entries, and the
/// chain's, carry CSNs of another sid than their own.
const PROVIDER_CONFIG: &str = r#"
server_id = 1
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[log]
level = "warn"
"#;

const REFERRAL: &str = "ldap://provider.example:389";

/// The attributes compared: every stored one (`*` `+`), but those each server computes
/// for itself from its own state.
const COMPUTED: &[&str] = &["contextcsn"];

/// A replica's config: `kind` is refreshAndPersist or refreshOnly.
fn replica_config(provider: &str, rid: u32, kind: &str, password_file: &Path, extra: &str) -> String {
    format!(
        r#"
shards = 3
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
{extra}
[limits]
# A replica serving a persisting consumer (the chain) stops without waiting for it.
shutdown_grace_s = 1
[log]
level = "warn"

[[replication]]
rid = {rid}
provider = "{provider}"
bind_dn = "{ADMIN_DN}"
password_file = "{}"
search_base = "{BASE}"
type = "{kind}"
interval_s = 1
retry = "1 +"
"#,
        password_file.display()
    )
}

/// DN (lower case) → attribute (lower case) → sorted values, of the whole suffix.

fn snapshot(server: &Server) -> Snapshot {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let Ok(result) = client.search(BASE, Scope::Subtree, "(objectClass=*)", vec!["*", "+"]) else {
        return Snapshot::new();
    };
    let Ok((entries, _)) = result.success() else { return Snapshot::new() };
    snapshot_of(entries, |k| !COMPUTED.contains(&k))
}

/// How many entries the server holds under the suffix (0 before the suffix exists).
fn count(server: &Server) -> usize {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    client
        .search(BASE, Scope::Subtree, "(objectClass=*)", vec!["1.1"])
        .ok()
        .and_then(|r| r.success().ok())
        .map_or(0, |(entries, _)| entries.len())
}

fn context_csn(server: &Server) -> Vec<String> {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let result = client.search(BASE, Scope::Base, "(objectClass=*)", vec!["contextCSN"]).expect("search");
    let (entries, _) = result.success().expect("suffix entry");
    entries
        .into_iter()
        .map(SearchEntry::construct)
        .flat_map(|e| e.attrs.get("contextCSN").cloned().unwrap_or_default())
        .collect()
}

/// Waits until `replica` shows what `provider` shows, contextCSN included.
fn wait_equal(provider: &Server, replica: &Server, what: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    let want = snapshot(provider);
    let want_csn = context_csn(provider);
    loop {
        let got = snapshot(replica);
        if got == want && context_csn(replica) == want_csn {
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
            let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            let differ: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
                .map(|(k, v)| (k, v, got.get(k)))
                .take(2)
                .collect();
            panic!(
                "{what}: the replica differs after {limit:?}: missing {missing:?}, extra {extra:?}, differing {differ:#?}, contextCSN {:?} vs {:?}",
                context_csn(replica),
                want_csn
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ldif_add(server: &Server, ldif: &str) {
    let (code, _, err) = crate::harness::tool(
        "ldapadd",
        &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW],
        Some(ldif),
    );
    assert_eq!(code, 0, "ldapadd: {err}");
}

fn person(uid: &str, parent: &str) -> String {
    format!("dn: uid={uid},{parent}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: S\n\n")
}

/// Changes of every kind while the replicas persist.
fn changes_while_persisting(provider: &Server) {
    let mut p = bound(provider, ADMIN_DN, ADMIN_PW);
    let people = format!("ou=people,{BASE}");
    let mut ldif = String::new();
    ldif.push_str(&format!("dn: ou=team,{BASE}\nobjectClass: organizationalUnit\nou: team\n\n"));
    for i in 0..5 {
        ldif.push_str(&person(&format!("t{i}"), &format!("ou=team,{BASE}")));
    }
    ldif.push_str(&person("carol", &people));
    ldif.push_str(&person("dave", &people));
    ldif_add(provider, &ldif);
    let modified = p
        .modify(
            &format!("uid=carol,{people}"),
            vec![Mod::Replace("sn", ["Changed"].into()), Mod::Add("mail", ["c@x"].into())],
        )
        .unwrap();
    assert_eq!(modified.rc, 0, "{modified:?}");
    let moved = p.modifydn(&format!("uid=dave,{people}"), "uid=david", true, None).unwrap();
    assert_eq!(moved.rc, 0, "{moved:?}");
    // A subtree rename: ou=team and its five children.
    let renamed = p.modifydn(&format!("ou=team,{BASE}"), "ou=crew", true, None).unwrap();
    assert_eq!(renamed.rc, 0, "{renamed:?}");
    let deleted = p.delete(&format!("uid=bob,{people}")).unwrap();
    assert_eq!(deleted.rc, 0, "{deleted:?}");
    let deleted = p.delete(&format!("uid=t0,ou=crew,{BASE}")).unwrap();
    assert_eq!(deleted.rc, 0, "{deleted:?}");
}

#[test]
fn ferrodir_replicas_follow_a_ferrodir_provider() {
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{ADMIN_PW}\nignored second line\n")).unwrap();
    let provider = Server::start_with_config(PROVIDER_CONFIG);
    let metrics = free_port();
    let persist_config = replica_config(
        &provider.url(),
        1,
        "refreshAndPersist",
        &password,
        &format!("metrics_listen = \"{metrics}\""),
    )
    .replace("retry = \"1 +\"", &format!("retry = \"1 +\"\nupdate_referral = \"{REFERRAL}\""));
    let mut persist = Server::start_with_config(&persist_config);
    let refresh_only =
        Server::start_with_config(&replica_config(&provider.url(), 2, "refreshOnly", &password, ""));
    let chained =
        Server::start_with_config(&replica_config(&persist.url(), 3, "refreshAndPersist", &password, ""));

    let limit = Duration::from_secs(20);
    wait_equal(&provider, &persist, "initial refresh (persist)", limit);
    wait_equal(&provider, &refresh_only, "initial refresh (refreshOnly)", limit);
    wait_equal(&provider, &chained, "initial refresh (chain)", limit);
    assert_eq!(http_get(metrics, "/readyz").0, 200, "a caught-up persisting replica is ready");
    let (_, text) = http_get(metrics, "/metrics");
    assert!(text.contains("ferrodir_replication_consumer_state{rid=\"1\"} 2"), "{text}");
    assert!(text.contains("ferrodir_replication_applied_total{rid=\"1\",kind=\"add\"} 6"), "{text}");

    changes_while_persisting(&provider);
    wait_equal(&provider, &persist, "changes while persisting", limit);
    wait_equal(&provider, &refresh_only, "changes, refreshOnly", limit);
    wait_equal(&provider, &chained, "changes, chain", limit);

    // Writes on a replica: a referral to update_referral, or 53 without one.
    let mut r = bound(&persist, ADMIN_DN, ADMIN_PW);
    let refused = r.delete(&format!("uid=alice,ou=people,{BASE}")).unwrap();
    assert_eq!(refused.rc, 10, "{refused:?}");
    assert_eq!(refused.refs, vec![REFERRAL.to_string()], "{refused:?}");
    let mut c = bound(&chained, ADMIN_DN, ADMIN_PW);
    let refused =
        c.modify(&format!("uid=alice,ou=people,{BASE}"), vec![Mod::Replace("sn", ["x"].into())]).unwrap();
    assert_eq!((refused.rc, refused.text.as_str()), (53, "replica is read-only"), "{refused:?}");

    // cn=Monitor: the consumer's entry, as slapd names it.
    let monitor = r
        .search(
            "cn=Consumer 001,cn=Database 1,cn=Databases,cn=Monitor",
            Scope::Base,
            "(objectClass=*)",
            vec!["*", "+"],
        )
        .unwrap()
        .success()
        .expect("the consumer's monitor entry");
    let entry = SearchEntry::construct(monitor.0.into_iter().next().expect("one entry"));
    assert_eq!(entry.attrs.get("olmSRSyncPhase"), Some(&vec!["Persist".to_string()]), "{entry:?}");
    assert_eq!(entry.attrs.get("olmSRProviderURIList"), Some(&vec![provider.url()]), "{entry:?}");

    // The replica stopped; changes, deletes among them; restarted.
    persist.stop();
    let mut p = bound(&provider, ADMIN_DN, ADMIN_PW);
    for dn in [format!("uid=t1,ou=crew,{BASE}"), format!("uid=carol,ou=people,{BASE}")] {
        assert_eq!(p.delete(&dn).unwrap().rc, 0);
    }
    ldif_add(&provider, &person("erin", &format!("ou=people,{BASE}")));
    let changed =
        p.modify(&format!("uid=alice,ou=people,{BASE}"), vec![Mod::Replace("sn", ["Later"].into())]).unwrap();
    assert_eq!(changed.rc, 0);
    persist.restart();
    wait_equal(&provider, &persist, "after the replica's restart", limit);
    wait_equal(&provider, &chained, "the chain after its provider's restart", limit);
    wait_equal(&provider, &refresh_only, "refreshOnly after more changes", limit);
}

/// `ferrodir import` of `count` people into a new data directory for `server` (stopped).
fn import_people(server: &mut Server, count: usize) {
    let mut ldif =
        format!("dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n");
    ldif.push_str(&format!("dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n\n"));
    for i in 0..count {
        ldif.push_str(&format!(
            "dn: uid=u{i},ou=people,{BASE}\nobjectClass: inetOrgPerson\nuid: u{i}\ncn: User {i}\nsn: {i}\nmail: u{i}@example.com\n\n"
        ));
    }
    let file = server.data_dir.with_extension("ldif");
    std::fs::write(&file, ldif).unwrap();
    let data = server.data_dir.with_extension("imported");
    let output = Command::new(binary())
        .arg("import")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&data)
        .arg(&file)
        .output()
        .expect("run import");
    assert!(output.status.success(), "import: {}", String::from_utf8_lossy(&output.stderr));
    server.data_dir = data;
}

#[test]
fn a_replica_killed_mid_refresh_resumes_with_nothing_lost_or_doubled() {
    const ENTRIES: usize = 2500;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, ADMIN_PW).unwrap();
    let mut provider =
        Server::start_with_config(&PROVIDER_CONFIG.replace("example_data = true", "example_data = false"));
    provider.stop();
    import_people(&mut provider, ENTRIES);
    provider.restart();

    let started = Instant::now();
    let mut replica =
        Server::start_with_config(&replica_config(&provider.url(), 7, "refreshAndPersist", &password, ""));
    // Kill it as soon as part of the refresh is there (a cheap probe: names only).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let have = count(&replica);
        if have > 50 {
            assert!(
                have < ENTRIES + 2,
                "the refresh finished before the kill ({have} entries); raise ENTRIES"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no entries arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    replica.kill();
    // Changes meanwhile, so the resumed refresh has adds, modifies and deletes to apply.
    let mut p = bound(&provider, ADMIN_DN, ADMIN_PW);
    assert_eq!(p.delete(&format!("uid=u1,ou=people,{BASE}")).unwrap().rc, 0);
    assert_eq!(
        p.modify(&format!("uid=u2,ou=people,{BASE}"), vec![Mod::Replace("sn", ["changed"].into())])
            .unwrap()
            .rc,
        0
    );
    replica.restart();
    wait_equal(&provider, &replica, "resumed after kill -9", Duration::from_secs(60));
    let elapsed = started.elapsed();
    let all = snapshot(&replica);
    assert_eq!(all.len(), ENTRIES + 1, "entries (suffix, ou and people, one deleted)");
    let uuids: std::collections::HashSet<_> = all.values().filter_map(|a| a.get("entryuuid")).collect();
    assert_eq!(uuids.len(), all.len(), "an entryUUID twice: an entry was duplicated");
    eprintln!("refresh of {ENTRIES} entries with a kill -9 in between: {elapsed:?}");
    replica.stop();
    let (ok, report) = replica.verify();
    assert!(ok, "ferrodir verify after the replica's kill -9: {report}");
}
