//! One access question answered by the rules: what level does this requester have on this
//! attribute (or `entry`, or `children`) of this entry. First rule whose `<what>` matches,
//! then its first clause whose `<who>` holds; otherwise none (slapd's implicit
//! `by * none`). The rootDN is never subject to rules.

use ferrodir_proto::entry::Entry;

use crate::acl::rule::{Attr, Level, NormDn, Rule, RuleSet, Who};
use crate::requester::Identity;
use crate::requester::Transport;

/// Who asks, with what the rules need to know of them, gathered once per operation. Plain
/// data (no `Rc`), so that a search's per-entry decisions can run on the search pool.
#[derive(Clone, Debug)]
pub struct Subject {
    pub identity: Identity,
    confidential: bool,
    tls: bool,
    loopback_ip: bool,
    /// Membership of each of the rule set's groups, in its order.
    member_of: Vec<bool>,
}

impl Subject {
    pub fn new(identity: Identity, transport: &Transport, member_of: Vec<bool>) -> Self {
        Self {
            identity,
            confidential: transport.confidential(),
            tls: transport.tls,
            loopback_ip: transport.local && !transport.ldapi,
            member_of,
        }
    }

    pub fn is_root(&self) -> bool {
        matches!(self.identity, Identity::Root(_))
    }

    /// The requester's own entry, normalised; None when anonymous or the rootDN.
    pub fn user(&self) -> Option<&NormDn> {
        match &self.identity {
            Identity::User(dn) => Some(dn),
            Identity::Anonymous | Identity::Root(_) => None,
        }
    }

    /// Whether `dn` is the requester's own entry.
    pub fn is_self(&self, dn: &NormDn) -> bool {
        self.user().is_some_and(|user| user.rdns == dn.rdns)
    }

    /// Whether one `<who>` condition holds; `is_self` says whether the target is the
    /// requester's entry (asked only for `self`).
    fn holds(&self, who: &Who, is_self: &dyn Fn() -> bool) -> bool {
        match who {
            Who::Anonymous => matches!(self.identity, Identity::Anonymous),
            Who::Users => !matches!(self.identity, Identity::Anonymous),
            Who::SelfEntry => is_self(),
            Who::Dn(scope) => self.user().is_some_and(|user| scope.contains(user)),
            Who::Group(index) => self.member_of.get(*index).copied().unwrap_or(false),
            Who::Confidential => self.confidential,
            Who::Tls => self.tls,
            Who::LoopbackIp => self.loopback_ip,
        }
    }

    /// The level the first clause of `rule` that holds grants; none if no clause holds.
    pub fn clause_level(&self, rule: &Rule, is_self: &dyn Fn() -> bool) -> Level {
        rule.by
            .iter()
            .find(|by| by.who.iter().all(|who| self.holds(who, is_self)))
            .map_or(Level::None, |by| by.level)
    }
}

/// The entry an access question is about: its DN, and its attributes when some rule has a
/// filter ([`RuleSet::needs_entry`]); a rule's filter never matches a target without them.
#[derive(Copy, Clone, Debug)]
pub struct Target<'a> {
    pub dn: &'a NormDn,
    pub entry: Option<&'a Entry>,
}

/// Whether the rule's `<what>` covers `attr` of `target`.
pub fn rule_applies(set: &RuleSet, rule: &Rule, target: &Target, attr: Attr) -> bool {
    if !rule.what.covers(attr) || !rule.what.dn.contains(target.dn) {
        return false;
    }
    match (&rule.what.filter, target.entry) {
        (None, _) => true,
        (Some(filter), Some(entry)) => {
            ferrodir_shard::filter_matches(&set.matching, filter, entry, Some(&target.dn.dn))
        }
        (Some(_), None) => false,
    }
}

/// The level `subject` has on `attr` of `target`.
pub fn level(set: &RuleSet, subject: &Subject, target: &Target, attr: Attr) -> Level {
    if subject.is_root() {
        return Level::Manage;
    }
    let Some(rule) = set.rules.iter().find(|rule| rule_applies(set, rule, target, attr)) else {
        return Level::None;
    };
    subject.clause_level(rule, &|| subject.is_self(target.dn))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::schema::Schema;
    use ferrodir_proto::Dn;
    use ferrodir_shard::RuleTable;

    use super::*;
    use crate::acl::parse::{compile, profile, RuleText};

    pub(crate) fn set(texts: &[RuleText]) -> RuleSet {
        compile(texts, Arc::new(RuleTable::from_schema(&Schema::standard())), "test").unwrap()
    }

    pub(crate) fn norm(text: &str) -> NormDn {
        NormDn::new(Dn::parse(text).unwrap(), &ferrodir_proto::value::PlainAvas)
    }

    pub(crate) fn user(text: &str) -> Subject {
        Subject::new(Identity::User(norm(text).into()), &Transport::default(), vec![])
    }

    pub(crate) fn anonymous() -> Subject {
        Subject::new(Identity::Anonymous, &Transport::default(), vec![])
    }

    const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
    const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

    #[test]
    fn the_default_rules_are_debians() {
        let rules = set(&profile("default").unwrap());
        let alice = norm(ALICE);
        let target = Target { dn: &alice, entry: None };
        let ask = |who: &Subject, attr| level(&rules, who, &target, attr);
        let password = Attr::Type("userpassword");
        assert_eq!(ask(&user(ALICE), password), Level::Write, "self writes its password");
        assert_eq!(ask(&user(BOB), password), Level::None);
        assert_eq!(ask(&anonymous(), password), Level::Auth, "anonymous may bind with it");
        assert_eq!(ask(&user(ALICE), Attr::Type("shadowlastchange")), Level::Write);
        assert_eq!(ask(&anonymous(), Attr::Type("shadowlastchange")), Level::Read);
        assert_eq!(ask(&user(BOB), Attr::Type("cn")), Level::Read);
        assert_eq!(ask(&user(ALICE), Attr::Type("cn")), Level::Read, "no write on the rest");
        assert_eq!(ask(&anonymous(), Attr::Entry), Level::Read);
        let root = Subject::new(Identity::Root(Default::default()), &Transport::default(), vec![]);
        assert_eq!(ask(&root, password), Level::Manage, "the rootDN is above the rules");
    }

    #[test]
    fn first_matching_rule_wins_and_the_implicit_end_is_none() {
        let rules = set(&[
            RuleText::new(r#"dn.subtree="ou=people,dc=example,dc=com" attrs=mail"#, &["users read"]),
            RuleText::new("attrs=mail", &["* write"]),
            RuleText::new(
                r#"dn.one="ou=people,dc=example,dc=com""#,
                &["dn.exact=\"uid=bob,ou=people,dc=example,dc=com\" write"],
            ),
        ]);
        let alice = norm(ALICE);
        let target = Target { dn: &alice, entry: None };
        assert_eq!(level(&rules, &user(BOB), &target, Attr::Type("mail")), Level::Read);
        assert_eq!(level(&rules, &anonymous(), &target, Attr::Type("mail")), Level::None, "no clause holds");
        assert_eq!(level(&rules, &user(BOB), &target, Attr::Type("cn")), Level::Write);
        assert_eq!(level(&rules, &user(ALICE), &target, Attr::Type("cn")), Level::None);
        let elsewhere = norm("cn=x,dc=example,dc=com");
        let other = Target { dn: &elsewhere, entry: None };
        assert_eq!(level(&rules, &user(BOB), &other, Attr::Type("mail")), Level::Write);
        assert_eq!(level(&rules, &user(BOB), &other, Attr::Entry), Level::None, "after the last rule");
    }

    #[test]
    fn filters_need_the_entry_and_transport_conditions_hold_on_their_own() {
        let rules = set(&[
            RuleText::new(
                "filter=(objectClass=person) attrs=entry",
                &["ssf=1 read", "peername.ip=127.0.0.1 search"],
            ),
            RuleText::new("*", &["* disclose"]),
        ]);
        let alice = norm(ALICE);
        let person = Entry::new(vec![Attribute::new("objectClass", vec![b"person".to_vec()])]);
        let with = Target { dn: &alice, entry: Some(&person) };
        let without = Target { dn: &alice, entry: None };
        let tls = Transport { tls: true, ..Default::default() };
        let loopback = Transport { local: true, ..Default::default() };
        let ldapi = Transport { local: true, ldapi: true, ..Default::default() };
        let on = |t: &Transport| Subject::new(Identity::Anonymous, t, vec![]);
        assert_eq!(level(&rules, &on(&tls), &with, Attr::Entry), Level::Read);
        assert_eq!(level(&rules, &on(&loopback), &with, Attr::Entry), Level::Search);
        assert_eq!(level(&rules, &on(&ldapi), &with, Attr::Entry), Level::Read, "ldapi is confidential");
        assert_eq!(level(&rules, &on(&Transport::default()), &with, Attr::Entry), Level::None);
        assert_eq!(
            level(&rules, &on(&tls), &without, Attr::Entry),
            Level::Disclose,
            "no entry: no filter match"
        );
    }

    #[test]
    fn groups_are_memberships_gathered_beforehand() {
        let rules = set(&[RuleText::new("*", &["group=\"cn=admins,dc=example,dc=com\" write", "* read"])]);
        let alice = norm(ALICE);
        let target = Target { dn: &alice, entry: None };
        let member = Subject::new(Identity::User(norm(BOB).into()), &Transport::default(), vec![true]);
        assert_eq!(level(&rules, &member, &target, Attr::Entry), Level::Write);
        assert_eq!(level(&rules, &user(BOB), &target, Attr::Entry), Level::Read);
    }
}
