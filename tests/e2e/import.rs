//! `ferrodir import`, driven as a subprocess like a user would.
//!
//! - A bad record without `--continue` fails with its line number (also deep into a file, where
//!   the loader works on many chunks at once) and leaves neither a data directory nor the
//!   staging directory behind; a good import into the same place then succeeds.
//! - `--continue` skips bad records, and the records under a skipped parent, and names each
//!   by its line.
//! - `--progress always` prints progress lines with entries/s even when stderr is no terminal.
//! - import → export → import into a new directory → export gives byte-identical LDIF.
//! - The imported directory serves its entries, indices included.
//! - A directory that holds entries is refused; what a crashed import left is cleared.
//! - An import whose key sort spills many runs to files answers every search as the same
//!   entries added over LDAP do, passes `ferrodir verify`, and leaves no run file behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ldap3::Scope;

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE};
use crate::persistence::{admin, ldif_dns, read, run_binary, search, values};

const CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
index = ["objectClass eq", "uid,mail eq", "cn eq,sub"]
[log]
level = "warn"
"#;

/// How long one import or export may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// An LDIF file being written, with the line each record starts on.
struct Ldif {
    text: String,
    lines: usize,
}

impl Ldif {
    fn new() -> Self {
        Self { text: "version: 1\n\n".into(), lines: 2 }
    }

    /// Appends a record (without its trailing blank line); returns its first line.
    fn record(&mut self, record: &str) -> usize {
        let first = self.lines + 1;
        self.text.push_str(record);
        self.text.push_str("\n\n");
        self.lines += record.lines().count() + 1;
        first
    }
}

/// The suffix, two organisational units, `people` users (some under a nested unit, one with a
/// non-ASCII name in base64) and a few groups: large enough for many loader chunks.
fn directory(people: usize) -> Ldif {
    let mut ldif = Ldif::new();
    ldif.record(&format!(
        "dn: {BASE}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example"
    ));
    for ou in ["people", "groups"] {
        ldif.record(&format!(
            "dn: ou={ou},{BASE}\nobjectClass: top\nobjectClass: organizationalUnit\nou: {ou}"
        ));
    }
    ldif.record(&format!(
        "dn: ou=staff,ou=people,{BASE}\nobjectClass: organizationalUnit\nou: staff\ndescription: nested"
    ));
    for i in 0..people {
        let parent = if i % 10 == 0 { "ou=staff,ou=people" } else { "ou=people" };
        ldif.record(&person(i, parent));
    }
    // cn "Zoë" in base64, as an export writes non-ASCII values.
    ldif.record(&format!(
        "dn: uid=zoe,ou=people,{BASE}\nobjectClass: inetOrgPerson\nuid: zoe\ncn:: Wm/Dqw==\nsn: Z"
    ));
    for g in 0..3 {
        let members: String =
            (0..5).map(|m| format!("\nmember: uid=user{:05},ou=people,{BASE}", g * 5 + m + 1)).collect();
        ldif.record(&format!(
            "dn: cn=group{g},ou=groups,{BASE}\nobjectClass: groupOfNames\ncn: group{g}{members}"
        ));
    }
    ldif
}

fn person(i: usize, parent: &str) -> String {
    format!(
        "dn: uid=user{i:05},{parent},{BASE}\nobjectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n\
         objectClass: inetOrgPerson\nuid: user{i:05}\ncn: user {i}\nsn: {i}\ngivenName: User\n\
         mail: user{i:05}@example.com\ntelephoneNumber: +1 555 {:04}\ndescription: the quick brown fox \n jumps",
        i % 10000
    )
}

/// A scratch directory with the config and an LDIF file in it.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ferrodir.toml"), CONFIG).expect("write config");
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write LDIF");
        path
    }

    /// `ferrodir import [extra] --data-dir DIR FILE`: (exit code, stderr).
    fn import(&self, data: &str, file: &Path, extra: &[&str]) -> (i32, String) {
        let config = self.path("ferrodir.toml");
        let data = self.path(data);
        let mut args = vec!["import", "--config", text(&config), "--data-dir", text(&data)];
        args.extend_from_slice(extra);
        args.push(text(file));
        let (code, _, stderr) = run_binary(&args, RUN_LIMIT);
        (code, stderr)
    }

    /// `ferrodir export` of a data directory: the LDIF.
    fn export(&self, data: &str) -> String {
        let config = self.path("ferrodir.toml");
        let data = self.path(data);
        let args = ["export", "--config", text(&config), "--data-dir", text(&data)];
        let (code, stdout, stderr) = run_binary(&args, RUN_LIMIT);
        assert_eq!(code, 0, "export failed: {stderr}");
        stdout
    }

    /// Names in the scratch directory, sorted.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path())
            .expect("list scratch dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn bad_record_fails_with_its_line_and_leaves_nothing_behind() {
    let scratch = Scratch::new();
    let mut ldif = directory(3000);
    // Past the first megabyte's worth of chunks, so the line number crosses chunk borders.
    let bad_line = ldif.record(&format!("dn: uid=noclass,ou=people,{BASE}\nuid: noclass\ncn: n\nsn: n"));
    ldif.record(&person(99_999, "ou=people"));
    let file = scratch.write("bad.ldif", &ldif.text);
    let (code, stderr) = scratch.import("data", &file, &[]);
    assert_ne!(code, 0, "an import with a bad record succeeded: {stderr}");
    assert!(stderr.contains(&format!("line {bad_line}:")), "no line {bad_line} in: {stderr}");
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert_eq!(scratch.names(), ["bad.ldif", "ferrodir.toml"], "a failed import left something behind");

    let good = scratch.write("good.ldif", &directory(3000).text);
    let (code, stderr) = scratch.import("data", &good, &[]);
    assert_eq!(code, 0, "import of a good file after a failed one: {stderr}");
    assert!(stderr.contains("imported 3008 entries"), "{stderr}");
    assert_eq!(
        scratch.names(),
        ["bad.ldif", "data", "ferrodir.toml", "good.ldif"],
        "staging dir left behind"
    );
}

#[test]
fn continue_skips_bad_records_and_names_their_lines() {
    let scratch = Scratch::new();
    let mut ldif = directory(2000);
    let no_class = ldif.record(&format!("dn: ou=broken,{BASE}\nou: broken"));
    let under_skipped = ldif.record(&person(50_000, "ou=broken"));
    let duplicate = ldif.record(&person(7, "ou=people"));
    let bad_syntax = ldif.record(&format!("dn: uid=x,ou=people,{BASE}\nthis line has no colon"));
    let outside = ldif.record("dn: dc=elsewhere\nobjectClass: dcObject\ndc: elsewhere");
    let fine = ldif.record(&person(60_000, "ou=people"));
    let file = scratch.write("mixed.ldif", &ldif.text);
    let (code, stderr) = scratch.import("data", &file, &["--continue"]);
    assert_eq!(code, 0, "import --continue: {stderr}");
    // An LDIF syntax error is reported on the line that has it, the others on their `dn:`.
    for line in [no_class, under_skipped, duplicate, bad_syntax + 1, outside] {
        assert!(stderr.contains(&format!("skipped: line {line}:")), "line {line} not reported: {stderr}");
    }
    assert!(!stderr.contains(&format!("line {fine}:")), "a good record was reported: {stderr}");
    assert!(stderr.contains("imported 2009 entries") && stderr.contains("5 skipped"), "{stderr}");
    let exported = scratch.export("data");
    assert!(ldif_dns(&exported).contains(&format!("uid=user60000,ou=people,{BASE}")), "the record after");
    assert!(!exported.contains("ou=broken"), "a skipped record or its child was loaded");
}

#[test]
fn progress_always_prints_entries_per_second_and_never_prints_nothing() {
    let scratch = Scratch::new();
    let file = scratch.write("in.ldif", &directory(500).text);
    let (code, stderr) = scratch.import("always", &file, &["--progress", "always"]);
    assert_eq!(code, 0, "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("progress: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("entries/s") && line.contains("% of input") && line.contains("ETA"), "{line}");
    let (code, stderr) = scratch.import("never", &file, &["--progress", "never"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("progress: "), "--progress never printed progress: {stderr}");
    assert!(stderr.contains("entries/s"), "the summary line: {stderr}");
}

#[test]
fn import_export_import_export_is_byte_identical() {
    let scratch = Scratch::new();
    let file = scratch.write("in.ldif", &directory(1500).text);
    let (code, stderr) = scratch.import("first", &file, &[]);
    assert_eq!(code, 0, "{stderr}");
    let first = scratch.export("first");
    assert_eq!(ldif_dns(&first).len(), 1508, "every entry exported");
    let exported = scratch.write("first.ldif", &first);
    let (code, stderr) = scratch.import("second", &exported, &[]);
    assert_eq!(code, 0, "re-import of an export: {stderr}");
    let second = scratch.export("second");
    assert!(first == second, "the round trip changed the LDIF");
}

#[test]
fn imported_directory_serves_its_entries() {
    let mut server = Server::start_with_config(CONFIG);
    server.stop();
    let scratch = Scratch::new();
    let file = scratch.write("in.ldif", &directory(1200).text);
    let (code, stderr) = scratch.import("data", &file, &[]);
    assert_eq!(code, 0, "{stderr}");
    server.data_dir = scratch.path("data");
    server.restart();
    let mut conn = admin(&server);
    let all = search(&mut conn, BASE, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
    assert_eq!(all.len(), 1208);
    let by_uid = search(&mut conn, BASE, Scope::Subtree, "(uid=user01130)", &["cn"]).expect("uid search");
    assert_eq!(by_uid.len(), 1, "equality search on an imported index");
    assert_eq!(by_uid[0].0, format!("uid=user01130,ou=staff,ou=people,{BASE}"));
    let by_sub = search(&mut conn, BASE, Scope::Subtree, "(cn=user 113*)", &["1.1"]).expect("substring");
    assert_eq!(by_sub.len(), 11, "user 113 and user 1130..1139");
    let staff = search(
        &mut conn,
        &format!("ou=staff,ou=people,{BASE}"),
        Scope::OneLevel,
        "(objectClass=*)",
        &["1.1"],
    )
    .expect("one level under a nested container");
    assert_eq!(staff.len(), 120);
    let zoe = read(&mut conn, &format!("uid=zoe,ou=people,{BASE}")).expect("zoe");
    assert_eq!(values(&zoe, "cn"), Some(&vec!["Zoë".as_bytes().to_vec()]));
    let user = read(&mut conn, &format!("uid=user00003,ou=people,{BASE}")).expect("user00003");
    assert_eq!(
        values(&user, "description"),
        Some(&vec![b"the quick brown fox jumps".to_vec()]),
        "folded line"
    );
}

#[test]
fn a_directory_with_entries_is_refused_and_a_stale_staging_dir_cleared() {
    let scratch = Scratch::new();
    let file = scratch.write("in.ldif", &directory(100).text);
    // What an import killed mid-way leaves: a staging directory with half a shard in it.
    std::fs::create_dir(scratch.path(".data.importing")).expect("stale staging dir");
    std::fs::write(scratch.path(".data.importing/shard-000.redb"), b"half written").expect("stale shard");
    let (code, stderr) = scratch.import("data", &file, &[]);
    assert_eq!(code, 0, "import over a stale staging dir: {stderr}");
    assert_eq!(scratch.names(), ["data", "ferrodir.toml", "in.ldif"]);
    let (code, stderr) = scratch.import("data", &file, &[]);
    assert_ne!(code, 0, "a second import into a full directory succeeded");
    assert!(stderr.contains("already holds entries"), "{stderr}");
    assert_eq!(ldif_dns(&scratch.export("data")).len(), 108, "the refused import changed the directory");
}

/// The searches both directories must answer alike: every entry with its user attributes,
/// and lookups through each kind of index the config has (equality, substring, presence
/// through the objectClass index, one level, an AND of two indexed terms).
const SAME_ANSWERS: [(&str, Scope, &str); 8] = [
    (BASE, Scope::Subtree, "(objectClass=*)"),
    (BASE, Scope::Subtree, "(uid=user00130)"),
    (BASE, Scope::Subtree, "(cn=user 13*)"),
    (BASE, Scope::Subtree, "(mail=*)"),
    (BASE, Scope::Subtree, "(objectClass=organizationalUnit)"),
    (BASE, Scope::Subtree, "(&(objectClass=inetOrgPerson)(cn=*5))"),
    (BASE, Scope::Subtree, "(cn=group1)"),
    ("ou=staff,ou=people,dc=example,dc=com", Scope::OneLevel, "(objectClass=*)"),
];

/// Each search of [`SAME_ANSWERS`]: the entries sorted by DN, with their user attributes
/// and structuralObjectClass (which an import and an Add both compute).
fn answers(server: &Server) -> Vec<Vec<(String, crate::persistence::Attrs)>> {
    let mut conn = admin(server);
    SAME_ANSWERS
        .iter()
        .map(|(base, scope, filter)| {
            let mut found = search(&mut conn, base, *scope, filter, &["*", "structuralObjectClass"])
                .unwrap_or_else(|rc| panic!("{filter}: result {rc}"));
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found
        })
        .collect()
}

#[test]
fn an_import_that_spills_its_sort_answers_as_the_same_entries_added_over_ldap() {
    let scratch = Scratch::new();
    let ldif = directory(300);
    let file = scratch.write("in.ldif", &ldif.text);
    // 64 KiB for 4 shards: each shard writer spills dozens of runs and merges them.
    let (code, stderr) = scratch.import("data", &file, &["--sort-memory", "64K"]);
    assert_eq!(code, 0, "{stderr}");
    let leftovers: Vec<String> = std::fs::read_dir(scratch.path("data"))
        .expect("list data dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("sort") || name.contains("run"))
        .collect();
    assert!(leftovers.is_empty(), "sort files left in the data directory: {leftovers:?}");

    let mut imported = Server::start_with_config(CONFIG);
    imported.stop();
    imported.data_dir = scratch.path("data");
    let (clean, report) = imported.verify();
    assert!(clean && report.contains("verified 308 entries"), "{report}");
    imported.restart();

    let added = Server::start_with_config(CONFIG);
    let url = added.url();
    let args = ["-x", "-H", url.as_str(), "-D", ADMIN_DN, "-w", ADMIN_PW, "-f", text(&file)];
    let (code, _, stderr) = tool("ldapadd", &args, None);
    assert_eq!(code, 0, "ldapadd: {stderr}");

    let (from_import, from_ldap) = (answers(&imported), answers(&added));
    assert_eq!(from_import[0].len(), 308, "every entry is there");
    assert_eq!(from_import[1].len(), 1, "the uid lookup finds its entry");
    assert_eq!(from_import[2].len(), 11, "user 13 and user 130..139");
    for (i, (mine, theirs)) in from_import.iter().zip(&from_ldap).enumerate() {
        assert!(mine == theirs, "{:?}: import and LDAP adds answer differently", SAME_ANSWERS[i]);
    }
}
