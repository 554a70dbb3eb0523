//! The compiled form of access rules: slapd's `access to <what> by <who> <level>`, parsed
//! once at start (`parse`) and read by every operation (`decide`, `view`).

use std::collections::HashSet;
use std::sync::Arc;

use ferrodir_proto::filter::Filter;
use ferrodir_shard::RuleTable;

/// slapd's access levels, each implying those below it (slapd.access(5)).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    None,
    /// May learn that the entry exists (an error instead of noSuchObject).
    Disclose,
    /// May use the value to authenticate (a simple bind checks userPassword).
    Auth,
    Compare,
    Search,
    Read,
    Write,
    Manage,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Disclose => "disclose",
            Level::Auth => "auth",
            Level::Compare => "compare",
            Level::Search => "search",
            Level::Read => "read",
            Level::Write => "write",
            Level::Manage => "manage",
        }
    }
}

/// Which entries a DN clause covers, by normalised RDNs (`rdns[0]` leftmost). An empty
/// base covers the whole tree for `Subtree`, every naming context's entry for `One`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnScope {
    All,
    Base(NormDn),
    One(NormDn),
    Subtree(NormDn),
    Children(NormDn),
}

/// A DN as the rules compare it: its normalised RDNs (normalised once, where it was parsed).
pub use ferrodir_proto::NormDn;

impl DnScope {
    /// Whether `dn` lies in this scope.
    pub fn contains(&self, dn: &NormDn) -> bool {
        match self {
            DnScope::All => true,
            DnScope::Base(base) => dn.depth_below(base) == Some(0),
            DnScope::One(base) => dn.depth_below(base) == Some(1),
            DnScope::Subtree(base) => dn.depth_below(base).is_some(),
            DnScope::Children(base) => dn.depth_below(base).is_some_and(|depth| depth > 0),
        }
    }

    /// The DN the scope hangs from; None for `All`.
    pub fn base(&self) -> Option<&NormDn> {
        match self {
            DnScope::All => None,
            DnScope::Base(base) | DnScope::One(base) | DnScope::Subtree(base) | DnScope::Children(base) => {
                Some(base)
            }
        }
    }
}

/// The attributes a rule covers: slapd's `attrs=` list, with the pseudo-attributes `entry`
/// (the entry itself) and `children` (adding and removing entries below it). Types are
/// canonical names, each listed type with its subtypes (`attrs=name` covers cn and sn).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrList {
    pub entry: bool,
    pub children: bool,
    pub types: HashSet<String>,
}

/// What an access question is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Attr<'a> {
    Entry,
    Children,
    /// A canonical attribute type name.
    Type(&'a str),
}

impl AttrList {
    pub fn covers(&self, attr: Attr) -> bool {
        match attr {
            Attr::Entry => self.entry,
            Attr::Children => self.children,
            Attr::Type(name) => self.types.contains(name),
        }
    }
}

/// slapd's `<what>`: entries by DN and filter, and attributes. Every part must match.
#[derive(Clone, Debug)]
pub struct What {
    pub dn: DnScope,
    pub filter: Option<Filter>,
    /// None: every attribute and both pseudo-attributes.
    pub attrs: Option<AttrList>,
}

impl What {
    pub fn covers(&self, attr: Attr) -> bool {
        self.attrs.as_ref().is_none_or(|list| list.covers(attr))
    }

    /// Whether which entries it covers depends on more than the rule: a DN or a filter.
    pub fn is_scoped(&self) -> bool {
        self.dn != DnScope::All || self.filter.is_some()
    }
}

/// One condition of a `by` clause (slapd's `<who>`); a clause holds when all of its do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    Anonymous,
    /// Any authenticated identity.
    Users,
    /// The requester's own entry.
    SelfEntry,
    /// The requester's DN lies in the scope.
    Dn(DnScope),
    /// The requester is a member of `groups[index]` of the rule set.
    Group(usize),
    /// `ssf=N` / `transport_ssf=N` with N > 0: a confidential transport (TLS or ldapi).
    Confidential,
    /// `tls_ssf=N` with N > 0: TLS in force.
    Tls,
    /// `peername.ip=127.0.0.1` / `peername.ipv6=::1`: a loopback TCP peer.
    LoopbackIp,
}

/// One `by <who> <level>` clause.
#[derive(Clone, Debug)]
pub struct By {
    /// All must hold; empty is slapd's `*`.
    pub who: Vec<Who>,
    pub level: Level,
}

/// One rule, with its text for messages.
#[derive(Clone, Debug)]
pub struct Rule {
    pub text: String,
    pub what: What,
    pub by: Vec<By>,
}

/// A static group a `group=` clause names: its entry, the class it must have and the
/// attribute that lists member DNs (slapd's defaults: groupOfNames, member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub dn: NormDn,
    pub class: String,
    pub member_attr: String,
}

/// Every rule in order, compiled once at start. First match wins; after the last rule,
/// and after a matching rule's last clause, slapd's implicit `by * none`.
#[derive(Clone, Debug)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    pub groups: Vec<Group>,
    /// Matching facts for the rules' filters.
    pub matching: Arc<RuleTable>,
    /// Where the set came from, for the log (`default`, `open-read`, `access_rules`).
    pub origin: String,
}

impl RuleSet {
    /// Whether some rule needs the entry's attributes (a filter) to know if it applies.
    pub fn needs_entry(&self) -> bool {
        self.rules.iter().any(|rule| rule.what.filter.is_some())
    }

    /// Whether some rule compares DNs: a DN scope, `self` or a `dn=` clause. When none
    /// does, a decision needs no normalised DN (the default rules: none per request).
    pub fn uses_dns(&self) -> bool {
        self.rules.iter().any(|rule| {
            rule.what.dn != DnScope::All
                || rule.by.iter().flat_map(|by| &by.who).any(|who| matches!(who, Who::SelfEntry | Who::Dn(_)))
        })
    }

    /// Whether some rule's clauses depend on the requester's group memberships.
    pub fn has_groups(&self) -> bool {
        !self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(text: &str) -> NormDn {
        NormDn::new(ferrodir_proto::Dn::parse(text).unwrap(), &ferrodir_proto::value::PlainAvas)
    }

    #[test]
    fn dn_scopes_compare_normalised_rdns() {
        let people = norm("ou=People,dc=example,dc=com");
        let alice = norm("UID=alice, ou=people,dc=EXAMPLE,dc=com");
        let deep = norm("cn=x,uid=alice,ou=people,dc=example,dc=com");
        // An escaped comma is part of a value, not a separator.
        let tricky = norm("cn=x\\,ou=people,dc=example,dc=com");
        assert!(DnScope::Subtree(people.clone()).contains(&people));
        assert!(DnScope::Subtree(people.clone()).contains(&deep));
        assert!(!DnScope::Subtree(people.clone()).contains(&tricky));
        assert!(DnScope::One(people.clone()).contains(&alice));
        assert!(!DnScope::One(people.clone()).contains(&deep));
        assert!(!DnScope::Children(people.clone()).contains(&people));
        assert!(DnScope::Children(people.clone()).contains(&deep));
        assert!(DnScope::Base(people.clone()).contains(&norm("OU=people,DC=example,DC=com")));
        assert!(!DnScope::Base(people).contains(&alice));
    }

    #[test]
    fn levels_are_ordered_as_slapd_orders_them() {
        assert!(Level::None < Level::Disclose && Level::Disclose < Level::Auth);
        assert!(Level::Auth < Level::Compare && Level::Compare < Level::Search);
        assert!(Level::Search < Level::Read && Level::Read < Level::Write && Level::Write < Level::Manage);
    }
}
