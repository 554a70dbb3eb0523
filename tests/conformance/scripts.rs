//! OpenLDAP's own test scripts, replayed: the operations of tests/scripts/test003-search,
//! test004-modify, test005-modrdn and test026-dn (OpenLDAP 2.5.13), with their searches
//! printed as `ldapsearch -LLL -S ""` prints them. OpenLDAP compares that output with
//! `diff -i` against search.out.provider, modify.out.provider, modrdn.out.provider.0..3 and
//! dn.out after ldif-filter, which for back-mdb only removes comments.
//!
//! slapd must reproduce each file exactly (otherwise the replay is wrong); ferrodir must
//! reproduce it once both sides are normalised: entries sorted, attribute lines sorted,
//! operational attributes dropped (RFC 4511 §4.5.2 fixes no order for either).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::client::{Auth, Client, Control, Reply, Request, Scope, SearchRequest};
use crate::filter;
use crate::ldif::{self, RecordKind};
use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const OPERATIONAL: &[&str] = &[
    "entryuuid",
    "entrycsn",
    "createtimestamp",
    "modifytimestamp",
    "creatorsname",
    "modifiersname",
    "entrydn",
    "hassubordinates",
    "structuralobjectclass",
    "subschemasubentry",
    "contextcsn",
];

/// One server's replay of one script: what its searches printed, and every operation whose
/// result code was not the one the script requires.
#[derive(Default)]
pub struct Replay {
    pub outputs: BTreeMap<&'static str, String>,
    /// What each search printed, in order: (file, filter, output).
    pub searches: Vec<(&'static str, String, String)>,
    pub problems: Vec<String>,
}

struct Session {
    client: Client,
    replay: Replay,
    deadline: Instant,
}

/// A whole replay, however slow the server: beyond this, the remaining operations fail.
const REPLAY_BUDGET: Duration = Duration::from_secs(60);

impl Session {
    fn open(server: &Server, as_manager: bool) -> Session {
        let mut client = Client::connect(server.addr).unwrap_or_else(|e| panic!("{}: {e}", server.name));
        if as_manager {
            let bind =
                Request::Bind { version: 3, dn: MANAGER_DN.into(), auth: Auth::Simple(MANAGER_PW.into()) };
            match client.call(&bind) {
                Reply::Result(r) if r.code == 0 => {}
                other => panic!("{}: bind as {MANAGER_DN} failed: {other:?}", server.name),
            }
        }
        Session { client, replay: Replay::default(), deadline: Instant::now() + REPLAY_BUDGET }
    }

    fn call(&mut self, request: &Request) -> Reply {
        if Instant::now() > self.deadline {
            return Reply::Failed(format!("replay took longer than {REPLAY_BUDGET:?}"));
        }
        self.client.call(request)
    }

    /// Runs a write and records a problem unless its result code is `expected`.
    fn expect(&mut self, what: &str, request: Request, expected: i64) {
        let code = match self.call(&request) {
            Reply::Result(r) => Some(r.code),
            _ => None,
        };
        if code != Some(expected) {
            self.replay.problems.push(format!("{what}: rc={code:?}, the script requires {expected}"));
        }
    }

    /// `ldapsearch -LLL -S "" -b BASE [-s SCOPE] [-M] FILTER ATTRS`, appended to `file`.
    fn ldapsearch(
        &mut self,
        file: &'static str,
        base: &str,
        scope: Scope,
        filter_text: &str,
        attrs: &[&str],
    ) {
        self.ldapsearch_with(file, base, scope, filter_text, attrs, vec![]);
    }

    fn ldapsearch_with(
        &mut self,
        file: &'static str,
        base: &str,
        scope: Scope,
        filter_text: &str,
        attrs: &[&str],
        controls: Vec<Control>,
    ) {
        let request = Request::Search(SearchRequest {
            base: base.into(),
            scope,
            filter: filter::parse(filter_text).expect("script filter"),
            attrs: attrs.iter().map(|a| a.to_string()).collect(),
            size_limit: 0,
            types_only: false,
            controls,
        });
        let mut output = String::new();
        match self.call(&request) {
            Reply::Search { mut entries, done, .. } => {
                ldif::sort_like_ldapsearch(&mut entries);
                for entry in &entries {
                    ldif::write_entry(&mut output, entry, false);
                }
                if done.code != 0 {
                    self.replay.problems.push(format!("search {filter_text} under {base}: rc={}", done.code));
                }
            }
            other => self.replay.problems.push(format!("search {filter_text} under {base}: {other:?}")),
        }
        self.replay.outputs.entry(file).or_default().push_str(&output);
        self.replay.searches.push((file, filter_text.to_string(), output));
    }
}

/// test003-search: six searches on the loaded data.
pub fn test003_search(server: &Server) -> Replay {
    let mut s = Session::open(server, false);
    let f = "search.out.provider";
    s.ldapsearch(f, SUFFIX, Scope::Sub, "(sn=jENSEN)", &[]);
    s.ldapsearch(f, SUFFIX, Scope::Sub, "(sn~=jENSEN)", &["name"]);
    s.ldapsearch(
        f,
        SUFFIX,
        Scope::Sub,
        "(|(givenname=Xx*yY*Z)(cn=)(undef=*)(objectclass=groupofnames)(sn=jones)\
         (member=cn=Manager,dc=example,dc=com)(uniqueMember=cn=Manager,dc=example,dc=com))",
        &[],
    );
    s.ldapsearch(
        f,
        "ou=groups,dc=example,dc=com",
        Scope::One,
        "(&(objectclass=groupofnames)(cn=A*)(member=cn=Mark Elliot,ou=Alumni Association,ou=People,dc=example,dc=com))",
        &[],
    );
    s.ldapsearch(f, SUFFIX, Scope::Sub, "(!(objectclass=pilotPerson))", &[]);
    // ldapsearch -M: ManageDsaIT, not critical.
    let manage_dsa_it = Control { oid: "2.16.840.1.113730.3.4.2".into(), critical: false, value: None };
    let filter = "(&(objectClass=inetorgperson)(userid=uham))";
    s.ldapsearch_with(f, SUFFIX, Scope::Sub, filter, &["2.5.4.0", "userid"], vec![manage_dsa_it]);
    s.replay
}

/// test004-modify: ldapmodify -f test-modify.ldif, an add with no attributes (protocolError),
/// then every entry.
pub fn test004_modify(server: &Server) -> Replay {
    let mut s = Session::open(server, true);
    let text = std::fs::read_to_string(servers::openldap_data("test-modify.ldif")).expect("test-modify.ldif");
    for record in ldif::parse(&text).expect("parse test-modify.ldif") {
        let what = format!("{} {}", kind_name(&record.kind), record.dn);
        s.expect(&what, change_request(record.dn, record.kind, false), 0);
    }
    let empty_add = Request::Add { dn: "cn=Foo Bar,dc=example,dc=com".into(), attrs: vec![] };
    s.expect("add with no attributes", empty_add, 2);
    s.ldapsearch("modify.out.provider", SUFFIX, Scope::Sub, "(objectClass=*)", &[]);
    s.replay
}

fn kind_name(kind: &RecordKind) -> &'static str {
    match kind {
        RecordKind::Content(_) | RecordKind::Add(_) => "add",
        RecordKind::Delete => "delete",
        RecordKind::Modify(_) => "modify",
        RecordKind::ModRdn { .. } => "modrdn",
    }
}

/// The request ldapmodify (or ldapmodify -a, `add_content`) sends for one LDIF record.
fn change_request(dn: String, kind: RecordKind, add_content: bool) -> Request {
    match kind {
        RecordKind::Add(attrs) => Request::Add { dn, attrs },
        RecordKind::Content(attrs) if add_content => Request::Add { dn, attrs },
        RecordKind::Content(_) => panic!("record {dn} has no changetype"),
        RecordKind::Delete => Request::Delete { dn },
        RecordKind::Modify(changes) => Request::Modify { dn, changes },
        RecordKind::ModRdn { new_rdn, delete_old_rdn, new_superior } => {
            Request::ModDn { dn, new_rdn, delete_old_rdn, new_superior }
        }
    }
}

/// test005-modrdn, on one database (the script's second database, which only serves the
/// affectsMultipleDSAs case, is left out).
pub fn test005_modrdn(server: &Server) -> Replay {
    let mut s = Session::open(server, true);
    let jaj = "cn=James A Jones 1, ou=Alumni Association, ou=People, dc=example, dc=com";
    let jaj3 = "cn=James A Jones III, ou=Alumni Association, ou=People, dc=example, dc=com";
    let jones2 = "cn=James A Jones 2, ou=Information Technology Division, ou=People, dc=example, dc=com";
    let moddn = |dn: &str, rdn: &str, delete: bool, superior: Option<&str>| Request::ModDn {
        dn: dn.into(),
        new_rdn: rdn.into(),
        delete_old_rdn: delete,
        new_superior: superior.map(str::to_string),
    };
    s.expect("modrdn deleteoldrdn=0", moddn(jaj, "cn=James A Jones III", false, None), 0);
    s.expect("modrdn deleteoldrdn=1", moddn(jones2, "cn=James A Jones II", true, None), 0);
    s.ldapsearch("modrdn.out.provider.1", SUFFIX, Scope::Sub, "(cn=James A Jones III)", &[]);
    s.ldapsearch("modrdn.out.provider.2", SUFFIX, Scope::Sub, "(cn=James A Jones II)", &[]);
    s.ldapsearch("(removed rdn: empty)", SUFFIX, Scope::Sub, "(cn=James A Jones 2)", &[]);
    s.ldapsearch("modrdn.out.provider.0", SUFFIX, Scope::Sub, "(objectClass=*)", &[]);
    s.expect("modrdn to an existing value", moddn(jaj3, "cn=James A Jones 1", true, None), 0);
    s.ldapsearch("modrdn.out.provider.3", SUFFIX, Scope::Sub, "(cn=James A Jones 1)", &[]);
    s.expect("modrdn newSuperior = target", moddn(jaj, "cn=James A Jones 1", false, Some(jaj)), 53);
    s.expect("modrdn newRdn same as target", moddn(jaj, "cn=James A Jones 1", false, None), 0);
    s.expect("modrdn newRdn changed case", moddn(jaj, "cn=James A JONES 1", false, None), 0);
    s.replay
}

/// test026-dn: ldapadd -c of test-dn.ldif into an empty database, then seven searches.
pub fn test026_dn(server: &Server) -> Replay {
    let mut s = Session::open(server, true);
    let text = std::fs::read_to_string(servers::openldap_data("test-dn.ldif")).expect("test-dn.ldif");
    for record in ldif::parse(&text).expect("parse test-dn.ldif") {
        // ldapadd -c: some of these are meant to fail; go on either way.
        let _ = s.call(&change_request(record.dn, record.kind, true));
        if s.client.broken {
            s.client = Session::open(server, true).client;
        }
    }
    let f = "dn.out";
    s.ldapsearch(f, SUFFIX, Scope::Sub, "(objectclass=*)", &[]);
    let filters = [
        "(member=OU=Sales+CN=J. Smith,DC=example,DC=net)",
        "(member=testUUID=597ae2f6-16a6-1027-98f4-ABCDEFabcdef,DC=Example)",
        "(uniqueMember=dc=example,dc=com)",
        "(uniqueMember=dc=example,dc=com#'001000'B)",
        "(uniqueMember=dc=example,dc=com#'1000'B)",
        "(uniqueMember~=)",
        "(uniqueMember~=dc=example,dc=com#'1000'B)",
    ];
    for filter in filters {
        s.ldapsearch(f, SUFFIX, Scope::Sub, filter, &[]);
    }
    s.replay
}

/// `diff -i` after ldif-filter: `None` when equal, else the first differing lines.
pub fn exact_difference(expected: &str, actual: &str) -> Option<String> {
    let expected = ldif::strip_comments(expected).to_ascii_lowercase();
    let actual = ldif::strip_comments(actual).to_ascii_lowercase();
    if expected == actual {
        return None;
    }
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = e.iter().zip(&a).position(|(x, y)| x != y).unwrap_or(e.len().min(a.len()));
    Some(format!(
        "line {}: expected {:?}, got {:?} ({} vs {} lines)",
        first + 1,
        e.get(first).unwrap_or(&"<end>"),
        a.get(first).unwrap_or(&"<end>"),
        e.len(),
        a.len()
    ))
}

type Block = (String, Vec<String>);

/// Entries sorted by normalised DN, each with its sorted, lowercased `attr: value` lines.
fn normalized(text: &str) -> Result<Vec<Block>, String> {
    let mut entries: Vec<Block> = Vec::new();
    for record in ldif::parse(text)? {
        let RecordKind::Content(attrs) = record.kind else {
            return Err(format!("not an entry: {}", record.dn));
        };
        let mut lines: Vec<String> = attrs
            .iter()
            .filter(|(name, _)| !OPERATIONAL.contains(&name.to_ascii_lowercase().as_str()))
            .flat_map(|(name, values)| values.iter().map(move |v| format!("{name}: {v}").to_lowercase()))
            .collect();
        lines.sort();
        entries.push((crate::compare::normalize_dn(&record.dn), lines));
    }
    entries.sort();
    Ok(entries)
}

/// Removes from `blocks` one block equal to each block of `other`; what is left is unmatched.
fn unmatched(blocks: &[Block], other: &[Block]) -> Vec<Block> {
    let mut left: Vec<Block> = blocks.to_vec();
    for block in other {
        if let Some(i) = left.iter().position(|b| b == block) {
            left.remove(i);
        }
    }
    left
}

/// The normalised comparison, entry by entry (the same entry may come back from several
/// searches), leaving out the entries named in `ignored_dns`: `None` when equal, else the
/// entries each side lacks, with their differing lines.
pub fn normalized_difference(expected: &str, actual: &str, ignored_dns: &[&str]) -> Option<String> {
    let (mut expected, mut actual) = match (normalized(expected), normalized(actual)) {
        (Ok(e), Ok(a)) => (e, a),
        (e, a) => return Some(format!("unparsable LDIF: {:?} {:?}", e.err(), a.err())),
    };
    expected.retain(|(dn, _)| !ignored_dns.contains(&dn.as_str()));
    actual.retain(|(dn, _)| !ignored_dns.contains(&dn.as_str()));
    if expected == actual {
        return None;
    }
    let (missing, mut extra) = (unmatched(&expected, &actual), unmatched(&actual, &expected));
    let mut parts = Vec::new();
    for (dn, lines) in &missing {
        let dn_short = crate::compare::clip(dn, 60);
        // Pair with the extra entry of the same DN that shares most lines, if any does.
        let overlap = |other: &[String]| other.iter().filter(|l| lines.contains(l)).count();
        let best = (0..extra.len())
            .filter(|i| extra[*i].0 == *dn)
            .max_by_key(|i| overlap(&extra[*i].1))
            .filter(|i| overlap(&extra[*i].1) > 0 || lines.is_empty() || extra[*i].1.is_empty());
        match best {
            Some(i) => {
                let (_, other) = extra.remove(i);
                let lost: Vec<&String> = lines.iter().filter(|l| !other.contains(l)).collect();
                let gained: Vec<&String> = other.iter().filter(|l| !lines.contains(l)).collect();
                parts.push(format!("{dn_short}: expected {lost:?}, got {gained:?}"));
            }
            None => parts.push(format!("missing entry {dn_short}")),
        }
    }
    parts.extend(extra.iter().map(|(dn, _)| format!("extra entry {}", crate::compare::clip(dn, 60))));
    let count = parts.len();
    parts.truncate(8);
    Some(format!("{count} entries differ: {}", crate::compare::clip(&parts.join("; "), 1200)))
}
