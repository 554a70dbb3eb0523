//! The operation catalogue's building blocks: who sends an operation, a builder that numbers
//! operations per group (`filter-017`: ids stay stable when another group grows), and a
//! one-line description of each request for the report.

use std::collections::HashMap;

use crate::client::{Auth, Change, Control, ModOp, Request, Scope, SearchRequest};
use crate::filter;

pub use crate::servers::{MANAGER_DN, MANAGER_PW, SUFFIX};

pub const PEOPLE: &str = "ou=People,dc=example,dc=com";
pub const GROUPS: &str = "ou=Groups,dc=example,dc=com";
pub const ALUMNI: &str = "ou=Alumni Association,ou=People,dc=example,dc=com";
pub const ITD: &str = "ou=Information Technology Division,ou=People,dc=example,dc=com";
pub const BJENSEN: &str = "cn=Barbara Jensen,ou=Information Technology Division,ou=People,dc=example,dc=com";
pub const BJORN: &str = "cn=Bjorn Jensen,ou=Information Technology Division,ou=People,dc=example,dc=com";
pub const JOHN: &str = "cn=John Doe,ou=Information Technology Division,ou=People,dc=example,dc=com";
pub const JAJ: &str = "cn=James A Jones 1,ou=Alumni Association,ou=People,dc=example,dc=com";
pub const ALL_STAFF: &str = "cn=All Staff,ou=Groups,dc=example,dc=com";
pub const ITD_STAFF: &str = "cn=ITD Staff,ou=Groups,dc=example,dc=com";
/// Entries of test-ordered.ldif with a userPassword, and that password.
pub const BJENSEN_PW: &str = "bjensen";
pub const BJORN_PW: &str = "bjorn";
pub const JAJ_PW: &str = "jaj";

/// The identity an operation runs as. Binds always run on a fresh connection of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Who {
    Anonymous,
    Manager,
    User(&'static str, &'static str),
}

impl Who {
    pub fn label(&self) -> &'static str {
        match self {
            Who::Anonymous => "anon",
            Who::Manager => "manager",
            Who::User(..) => "user",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Op {
    pub id: String,
    pub who: Who,
    pub request: Request,
    /// The request in one line, as the report prints it.
    pub text: String,
}

#[derive(Default)]
pub struct Catalogue {
    pub ops: Vec<Op>,
    counters: HashMap<&'static str, usize>,
}

pub fn attrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

pub fn values(list: &[&str]) -> Vec<String> {
    attrs(list)
}

pub fn change(op: ModOp, attr: &str, vals: &[&str]) -> Change {
    Change { op, attr: attr.to_string(), values: values(vals) }
}

pub fn entry(list: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    list.iter().map(|(name, vals)| (name.to_string(), values(vals))).collect()
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Base => "base",
        Scope::One => "one",
        Scope::Sub => "sub",
        Scope::Children => "children",
    }
}

impl Catalogue {
    pub fn push(&mut self, group: &'static str, who: Who, request: Request) {
        let counter = self.counters.entry(group).or_insert(0);
        *counter += 1;
        let id = format!("{group}-{counter:03}");
        let text = format!("[{}] {}", who.label(), describe(&request));
        self.ops.push(Op { id, who, request, text });
    }

    /// A search with every option spelled out.
    #[allow(clippy::too_many_arguments)]
    pub fn search_full(
        &mut self,
        group: &'static str,
        who: Who,
        base: &str,
        scope: Scope,
        filter_text: &str,
        attributes: &[&str],
        size_limit: i64,
        types_only: bool,
        controls: Vec<Control>,
    ) {
        let filter =
            filter::parse(filter_text).unwrap_or_else(|e| panic!("catalogue filter {filter_text}: {e}"));
        let request = Request::Search(SearchRequest {
            base: base.to_string(),
            scope,
            filter,
            attrs: attrs(attributes),
            size_limit,
            types_only,
            controls,
        });
        self.push(group, who, request);
    }

    /// An anonymous search without limits.
    pub fn search(
        &mut self,
        group: &'static str,
        base: &str,
        scope: Scope,
        filter_text: &str,
        attributes: &[&str],
    ) {
        self.search_full(group, Who::Anonymous, base, scope, filter_text, attributes, 0, false, vec![]);
    }

    /// The entry at `dn` with its user attributes: how writes are checked.
    pub fn verify(&mut self, dn: &str) {
        self.search("verify", dn, Scope::Base, "(objectClass=*)", &["*"]);
    }

    /// The DNs of a subtree: how tree-shape changes are checked.
    pub fn verify_tree(&mut self, base: &str) {
        self.search("verify", base, Scope::Sub, "(objectClass=*)", &["1.1"]);
    }

    pub fn compare(&mut self, who: Who, dn: &str, attr: &str, value: &str) {
        let request = Request::Compare { dn: dn.into(), attr: attr.into(), value: value.into() };
        self.push("compare", who, request);
    }

    pub fn bind(&mut self, dn: &str, password: &str) {
        self.push(
            "bind",
            Who::Anonymous,
            Request::Bind { version: 3, dn: dn.into(), auth: Auth::Simple(password.into()) },
        );
    }

    pub fn add(&mut self, who: Who, dn: &str, attributes: Vec<(String, Vec<String>)>) {
        self.push("add", who, Request::Add { dn: dn.into(), attrs: attributes });
    }

    pub fn modify(&mut self, who: Who, dn: &str, changes: Vec<Change>) {
        self.push("modify", who, Request::Modify { dn: dn.into(), changes });
    }

    pub fn moddn(
        &mut self,
        who: Who,
        dn: &str,
        new_rdn: &str,
        delete_old_rdn: bool,
        new_superior: Option<&str>,
    ) {
        let request = Request::ModDn {
            dn: dn.into(),
            new_rdn: new_rdn.into(),
            delete_old_rdn,
            new_superior: new_superior.map(str::to_string),
        };
        self.push("moddn", who, request);
    }

    pub fn delete(&mut self, who: Who, dn: &str) {
        self.push("delete", who, Request::Delete { dn: dn.into() });
    }

    pub fn assert_unique_ids(&self) {
        let mut seen = std::collections::HashSet::new();
        for op in &self.ops {
            assert!(seen.insert(op.id.clone()), "duplicate operation id {}", op.id);
        }
    }
}

fn quote_list(list: &[String]) -> String {
    list.iter()
        .map(|v| if v.len() > 40 { format!("{}…", &v[..40]) } else { v.clone() })
        .collect::<Vec<_>>()
        .join("|")
}

fn describe_changes(changes: &[Change]) -> String {
    let parts: Vec<String> = changes
        .iter()
        .map(|c| {
            let op = match c.op {
                ModOp::Add => "add",
                ModOp::Delete => "delete",
                ModOp::Replace => "replace",
                ModOp::Increment => "increment",
            };
            format!("{op} {}:{}", c.attr, quote_list(&c.values))
        })
        .collect();
    format!("[{}]", parts.join("; "))
}

/// The report's one-line form of a request.
pub fn describe(request: &Request) -> String {
    match request {
        Request::Bind { version, dn, auth } => {
            let auth = match auth {
                Auth::Simple(pw) => format!("pw={pw:?}"),
                Auth::Sasl(mech) => format!("sasl={mech}"),
            };
            let version = if *version == 3 { String::new() } else { format!(" v{version}") };
            format!("bind{version} {dn:?} {auth}")
        }
        Request::Search(s) => {
            let filter = crate::filter::to_string(&s.filter);
            let mut text =
                format!("search {} {:?} {} [{}]", scope_name(s.scope), s.base, filter, s.attrs.join(","));
            if s.size_limit != 0 {
                text.push_str(&format!(" sizelimit={}", s.size_limit));
            }
            if s.types_only {
                text.push_str(" typesonly");
            }
            for control in &s.controls {
                text.push_str(&format!(" ctrl={}{}", control.oid, if control.critical { "!" } else { "" }));
            }
            text
        }
        Request::Compare { dn, attr, value } => format!("compare {dn:?} {attr}={value:?}"),
        Request::Add { dn, attrs } => {
            let parts: Vec<String> = attrs.iter().map(|(n, v)| format!("{n}:{}", quote_list(v))).collect();
            format!("add {dn:?} {{{}}}", parts.join("; "))
        }
        Request::Modify { dn, changes } => format!("modify {dn:?} {}", describe_changes(changes)),
        Request::ModDn { dn, new_rdn, delete_old_rdn, new_superior } => {
            let superior = new_superior.as_ref().map(|s| format!(" newSuperior={s:?}")).unwrap_or_default();
            format!("moddn {dn:?} -> {new_rdn:?} deleteoldrdn={}{superior}", *delete_old_rdn as u8)
        }
        Request::Delete { dn } => format!("delete {dn:?}"),
        Request::Extended { oid, value } => format!("extended {oid} value={}", value.is_some()),
    }
}
