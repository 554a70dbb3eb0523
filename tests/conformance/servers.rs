//! The two servers under comparison, each a child process on a loopback port in its own
//! temporary directory, killed when dropped: OpenLDAP's slapd with back-mdb (the reference)
//! and the real `ferrodir` binary. Both get the same schema and, when asked, the same LDIF.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SUFFIX: &str = "dc=example,dc=com";
pub const MANAGER_DN: &str = "cn=Manager,dc=example,dc=com";
pub const MANAGER_PW: &str = "secret";

pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);
/// dyngroup: ferrodir always has it (proto/schema/dyngroup.schema), as slapo-dynlist needs it.
const SCHEMAS: [&str; 6] = ["core", "cosine", "inetorgperson", "nis", "openldap", "dyngroup"];

/// `testdata/` of the repository (a copy of the shared test data), or `$FERRODIR_TESTDATA`.
pub fn testdata() -> PathBuf {
    match std::env::var_os("FERRODIR_TESTDATA") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata"),
    }
}

/// OpenLDAP's test data set (`tests/data/` of OpenLDAP 2.5.13).
pub fn openldap_data(name: &str) -> PathBuf {
    let path = testdata().join("conformance/openldap").join(name);
    assert!(
        path.is_file(),
        "test data {} is missing (set FERRODIR_TESTDATA to shared/testdata)",
        path.display()
    );
    path
}

/// A server process and where it listens.
pub struct Server {
    pub name: &'static str,
    pub addr: SocketAddr,
    /// Things the report should mention about how the server was set up.
    pub notes: Vec<String>,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    let fixed = Path::new("/usr/sbin").join(name);
    if fixed.is_file() {
        return Some(fixed);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

pub(crate) fn slapd_programs() -> (PathBuf, PathBuf) {
    match (find_program("slapd"), find_program("slapadd")) {
        (Some(slapd), Some(slapadd)) => (slapd, slapadd),
        _ => panic!(
            "slapd is not installed. The conformance test compares ferrodir with OpenLDAP slapd 2.5 \
             (Debian package `slapd`, with slapadd and /etc/ldap/schema) and never skips: \
             `bash tests/setup.sh` installs it (tests/run.sh calls it)."
        ),
    }
}

/// slapd.conf; `access` lines go into the database section (so that, as in slapd, they
/// don't reach the root DSE and cn=Subschema, which stay readable by all). `extra` (more
/// database sections) goes last.
pub(crate) fn slapd_config(dir: &Path, access: &[String], extra: &str) -> String {
    // Not with back-monitor: the overlay adds entries to cn=Monitor.
    let member_of = extra.is_empty() && Path::new("/usr/lib/ldap/memberof.la").exists();
    let mut conf = String::new();
    for schema in SCHEMAS {
        conf.push_str(&format!("include /etc/ldap/schema/{schema}.schema\n"));
    }
    // The ppolicy overlay's schema, which ferrodir always has (proto/schema/ppolicy.schema),
    // registered where ferrodir loads it, before test.schema (cn=Subschema lists types in
    // the order they came): loading the module registers it; without `overlay ppolicy` no
    // policy applies. Not with back-monitor, as memberof: the module adds an entry to
    // cn=Monitor.
    if extra.is_empty() && Path::new("/usr/lib/ldap/ppolicy.la").exists() {
        conf.push_str("modulepath /usr/lib/ldap\nmoduleload ppolicy\n");
    }
    conf.push_str(&format!("include {}\n", openldap_data("test.schema").display()));
    conf.push_str(&format!("pidfile {0}/slapd.pid\nargsfile {0}/slapd.args\n", dir.display()));
    // Debian builds the backends as modules; other builds link back-mdb in.
    if Path::new("/usr/lib/ldap/back_mdb.la").exists() {
        conf.push_str("modulepath /usr/lib/ldap\nmoduleload back_mdb\n");
    }
    // memberOf as ferrodir computes it (direct memberships through member and
    // uniqueMember): the overlay, once for each.
    if member_of {
        conf.push_str("moduleload memberof\n");
    }

    // Without `access` lines: slapd's default policy, "access to * by * read"
    // (slapd.access(5)), which is what ferrodir's `access = "open-read"` reproduces.
    conf.push_str(&format!(
        "database mdb\nmaxsize 67108864\nsuffix \"{SUFFIX}\"\nrootdn \"{MANAGER_DN}\"\nrootpw {MANAGER_PW}\n\
         directory {}/db\nindex objectClass eq\nindex cn,sn,uid,mail eq,sub\n",
        dir.display()
    ));
    for line in access {
        conf.push_str(line);
        conf.push('\n');
    }
    if member_of {
        conf.push_str("overlay memberof\n");
        conf.push_str(
            "overlay memberof\nmemberof-group-oc groupOfUniqueNames\nmemberof-member-ad uniqueMember\n",
        );
    }
    conf.push_str(extra);
    conf
}

/// Starts slapd, loaded with `ldif` by slapadd when given (else with an empty database).
pub fn start_slapd(ldif: Option<&Path>) -> Server {
    start_slapd_with(ldif, &[])
}

/// Starts slapd with `access` lines (`access to ... by ...`) in its database section.
pub fn start_slapd_with(ldif: Option<&Path>, access: &[String]) -> Server {
    start_slapd_sections(ldif, access, "")
}

/// Starts slapd with its monitor database (back-monitor, built into Debian's slapd: no
/// module to load), readable by the manager only.
pub fn start_slapd_with_monitor() -> Server {
    let monitor = format!(
        "database monitor\naccess to dn.subtree=\"cn=Monitor\" by dn.exact=\"{MANAGER_DN}\" read by * none\n"
    );
    start_slapd_sections(None, &[], &monitor)
}

/// Starts slapd with the overlay module `module` (from /usr/lib/ldap) loaded and
/// `database_lines` (`overlay ...` and its directives) in its database section.
pub fn start_slapd_with_overlay(module: &str, database_lines: &str) -> Server {
    start_slapd_full(None, &[], database_lines, &format!("moduleload {module}\n"))
}

/// Starts slapd loaded with `ldif`, with `globals` (slapd.conf lines of the global section,
/// `authz-regexp` say) before its database section.
pub fn start_slapd_with_globals(ldif: &Path, globals: &str) -> Server {
    start_slapd_full(Some(ldif), &[], "", globals)
}

/// Starts slapd, empty, with `access` lines in its database section and `globals` (slapd.conf
/// lines of the global section, `authz-policy` say) before it.
pub fn start_slapd_with_access_and_globals(access: &[String], globals: &str) -> Server {
    start_slapd_full(None, access, "", globals)
}

/// [`start_slapd_with_overlay`] with `access` lines too.
pub fn start_slapd_with_overlay_and_access(module: &str, database_lines: &str, access: &[String]) -> Server {
    start_slapd_full(None, access, database_lines, &format!("moduleload {module}\n"))
}

/// Starts slapd as an RFC 4533 provider: back-mdb with the syncprov overlay and a session
/// log (so that a consumer with a recent cookie gets a delete phase), loaded with `ldif`.
pub fn start_slapd_provider(ldif: &Path) -> Server {
    let lines =
        "index entryUUID,entryCSN eq\noverlay syncprov\nsyncprov-checkpoint 1 1\nsyncprov-sessionlog 1000\n";
    start_slapd_full(Some(ldif), &[], lines, "moduleload syncprov\n")
}

fn start_slapd_sections(ldif: Option<&Path>, access: &[String], extra: &str) -> Server {
    start_slapd_full(ldif, access, extra, "")
}

/// Starts slapd without the memberof overlay (and so without memberOf in its schema): how
/// a plain slapd answers where ferrodir runs with `memberof = false`. `lastmod on` (slapd's
/// default) is only there to make the database section non-empty, which is what keeps
/// [`slapd_config`] from adding the overlay.
pub fn start_slapd_without_member_of() -> Server {
    start_slapd_full(None, &[], "lastmod on\n", "")
}

/// Starts slapd listening on the Unix socket `socket` (ldapi://) besides its loopback
/// port, with `global` lines (TLS directives, say) before its database section.
pub fn start_slapd_with_ldapi(socket: &Path, global: &str) -> Server {
    start_slapd_listening(None, &[], "", global, Some(socket))
}

fn start_slapd_full(ldif: Option<&Path>, access: &[String], extra: &str, modules: &str) -> Server {
    start_slapd_listening(ldif, access, extra, modules, None)
}

/// The percent-encoded `ldapi://` URL of the socket `path`.
pub fn ldapi_url(path: &Path) -> String {
    format!("ldapi://{}", path.display().to_string().replace('/', "%2F"))
}

fn start_slapd_listening(
    ldif: Option<&Path>,
    access: &[String],
    extra: &str,
    modules: &str,
    ldapi: Option<&Path>,
) -> Server {
    let (slapd, slapadd) = slapd_programs();
    let dir = tempfile::tempdir().expect("temporary directory");
    let conf = dir.path().join("slapd.conf");
    std::fs::create_dir(dir.path().join("db")).expect("mkdir db");
    let mut text = slapd_config(dir.path(), access, extra);
    if !modules.is_empty() {
        // Modules load before the database section that uses them.
        let at = text.find("database mdb").unwrap_or(0);
        text.insert_str(at, &format!("modulepath /usr/lib/ldap\n{modules}"));
    }
    std::fs::write(&conf, &text).expect("write slapd.conf");
    // The memberOf values only where the overlay that defines memberOf is loaded.
    let with_member_of = match ldif {
        Some(ldif) if text.contains("overlay memberof") => Some(member_of_ldif(ldif, dir.path())),
        other => other.map(Path::to_path_buf),
    };
    if let Some(ldif) = with_member_of.as_deref() {
        let output =
            Command::new(&slapadd).arg("-f").arg(&conf).arg("-l").arg(ldif).output().expect("run slapadd");
        assert!(output.status.success(), "slapadd failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let version =
        Command::new(&slapd).arg("-VV").output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned());
    let version = version.unwrap_or_default().lines().next().unwrap_or("").trim().to_string();
    // The catalogue's expectations, the allowlist and OpenLDAP's .out files are those of
    // 2.5 (Debian bookworm's package): another version would differ for its own reasons.
    assert!(
        version.contains("slapd 2.5"),
        "the reference must be OpenLDAP slapd 2.5 (Debian bookworm's `slapd` package), found: {version:?}"
    );
    let notes = Vec::new();
    for _attempt in 0..5 {
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("slapd.log")).expect("slapd.log");
        let mut urls = format!("ldap://127.0.0.1:{port}/");
        if let Some(socket) = ldapi {
            urls.push_str(&format!(" {}", ldapi_url(socket)));
        }
        let mut child = Command::new(&slapd)
            .args(["-d", "0", "-h", &urls, "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start slapd");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if wait_listening(&mut child, addr) {
            return Server { name: "slapd", addr, notes, child, _dir: dir };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = std::fs::read_to_string(dir.path().join("slapd.log")).unwrap_or_default();
    panic!("slapd did not start listening on 127.0.0.1; its log:\n{log}");
}

/// `ldif` with the memberOf values slapd's memberof overlay stores in each member of a
/// group (the overlay maintains them on LDAP writes, not in slapadd), written to a file in
/// `dir`; the file itself when it holds anything but plain entries.
fn member_of_ldif(ldif: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(ldif).expect("read LDIF");
    let Ok(records) = crate::ldif::parse(&text) else { return ldif.to_path_buf() };
    let mut entries = Vec::new();
    for record in records {
        match record.kind {
            crate::ldif::RecordKind::Content(attrs) => entries.push((record.dn, attrs)),
            _ => return ldif.to_path_buf(),
        }
    }
    let norm =
        |dn: &str| dn.split(',').map(|rdn| rdn.trim().to_ascii_lowercase()).collect::<Vec<_>>().join(",");
    let mut groups_of: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for (dn, attrs) in &entries {
        let members =
            |name: &str| name.eq_ignore_ascii_case("member") || name.eq_ignore_ascii_case("uniqueMember");
        for (_, values) in attrs.iter().filter(|(name, _)| members(name)) {
            for member in values {
                // A uniqueMember value's optional UID (`#'0101'B`) is not part of the DN.
                let member = match member.rsplit_once("#'") {
                    Some((dn, uid)) if uid.ends_with("'B") => dn,
                    _ => member.as_str(),
                };
                groups_of.entry(norm(member)).or_default().push(dn.clone());
            }
        }
    }
    let mut out = String::new();
    for (dn, attrs) in &entries {
        crate::ldif::put_value(&mut out, "dn", dn.as_bytes());
        for (name, values) in attrs {
            for value in values {
                crate::ldif::put_value(&mut out, name, value.as_bytes());
            }
        }
        for group in groups_of.get(&norm(dn)).into_iter().flatten() {
            crate::ldif::put_value(&mut out, "memberOf", group.as_bytes());
        }
        out.push('\n');
    }
    let path = dir.join("with-memberof.ldif");
    std::fs::write(&path, out).expect("write LDIF");
    path
}

pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

/// SIGTERM, as an operator stops a server, then SIGKILL after `grace`.
pub(crate) fn terminate(mut child: Child, grace: Duration) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `ferrodir serve` of `config` on `data_dir` at `addr`, its stderr appended to `log`;
/// None when it did not start listening.
pub(crate) fn spawn_ferrodir(config: &Path, data_dir: &Path, addr: SocketAddr, log: &Path) -> Option<Child> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("ferrodir log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrodir"))
        .args(["serve", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &addr.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start ferrodir");
    if wait_listening(&mut child, addr) {
        return Some(child);
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

pub(crate) fn wait_listening(child: &mut Child, addr: SocketAddr) -> bool {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_exited)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// ferrodir's config; `extra` (top-level keys and tables such as `[[access_rules]]`) goes
/// before `[log]`.
pub(crate) fn ferrodir_config(with_schema_key: bool, extra: &str) -> String {
    let mut config = format!(
        "suffixes = [\"{SUFFIX}\"]\nroot_dn = \"{MANAGER_DN}\"\nroot_password = \"{MANAGER_PW}\"\n\
         access = \"open-read\"\nexample_data = false\nshards = 4\n"
    );
    if with_schema_key {
        config.push_str(&format!("schema_files = [\"{}\"]\n", openldap_data("test.schema").display()));
    }
    config.push_str(extra);
    config.push_str("\n[log]\nlevel = \"warn\"\n");
    config
}

/// Starts ferrodir, loaded with `ferrodir import` from `ldif` when given.
pub fn start_ferrodir(ldif: Option<&Path>) -> Server {
    start_ferrodir_with(ldif, "")
}

/// Starts ferrodir with `extra` configuration (see [`ferrodir_config`]).
pub fn start_ferrodir_with(ldif: Option<&Path>, extra: &str) -> Server {
    let binary = env!("CARGO_BIN_EXE_ferrodir");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("ferrodir.toml");
    let data = dir.path().join("data");
    let mut notes = Vec::new();
    std::fs::write(&config, ferrodir_config(true, extra)).expect("write config");
    // `schema_files` is being added to the server; until it is, an older binary refuses the
    // key and the run goes on without test.schema (and says so in the report).
    let check =
        Command::new(binary).args(["export", "--config"]).arg(&config).arg("--data-dir").arg(&data).output();
    let stderr = check.map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).unwrap_or_default();
    if stderr.contains("unknown field `schema_files`") {
        notes.push("ferrodir rejects the config key `schema_files`: ran without test.schema".into());
        std::fs::write(&config, ferrodir_config(false, extra)).expect("write config");
    }
    let _ = std::fs::remove_dir_all(&data);
    if let Some(ldif) = ldif {
        let output = Command::new(binary)
            .args(["import", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .arg(ldif)
            .output()
            .expect("run ferrodir import");
        assert!(
            output.status.success(),
            "ferrodir import failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let log = std::fs::File::create(dir.path().join("ferrodir.log")).expect("ferrodir.log");
    let mut child = Command::new(binary)
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start ferrodir");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("ferrodir listening on ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(START_TIMEOUT).ok().and_then(|a| a.parse().ok()) {
        Some(addr) => Server { name: "ferrodir", addr, notes, child, _dir: dir },
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.path().join("ferrodir.log")).unwrap_or_default();
            panic!("ferrodir did not start listening on 127.0.0.1; its log:\n{log}");
        }
    }
}
