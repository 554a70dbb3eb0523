//! Access decisions: the one place operations ask. The rules themselves (slapd's
//! `access to <what> by <who> <level>`, compiled once at start) live in [`crate::acl`];
//! this module gathers what they need from an operation (who asks, over what transport,
//! in which groups; the target entry when a rule has a filter) and turns their answers
//! into LDAP results with slapd's codes and its care not to disclose what may not be seen.
//!
//! The rootDN is never subject to rules. The root DSE and cn=Subschema are readable by
//! everyone (slapd keeps them in its frontend, which database rules don't reach).

use ferrodir_proto::entry::Entry;
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, EntryId};

pub use crate::acl::decide::Subject;
use crate::acl::decide::{self, Target};
use crate::acl::rule::{Attr, Group, Level, RuleSet};
use crate::acl::view::{self, Decision, Region};
use crate::config::DirectoryConfig;
use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::requester::Identity;
use crate::requester::Transport;
use crate::resolve;
use crate::worker::Worker;

/// What access decisions read of the operation asking: who asks, over which transport, and
/// the worker through which the groups and entries the rules name are read. The operation
/// context is one (`op::context`); access takes this rather than the context itself so that
/// it sits below the operations, which all ask it.
pub trait Asker {
    /// The configuration the operation runs under.
    fn config(&self) -> &DirectoryConfig;
    fn worker(&self) -> &Worker;
    fn identity(&self) -> &Identity;
    fn transport(&self) -> &Transport;
}

/// The requester of `ctx`, with its group memberships read once for this operation (one
/// lookup per group the rules name, only for an authenticated entry: never per entry).
/// A group that can't be read counts as not a member.
pub async fn subject(ctx: &impl Asker) -> Subject {
    let set = &ctx.config().access_rules;
    let member_of = match ctx.identity() {
        Identity::User(user) if set.has_groups() => {
            let mut member_of = Vec::with_capacity(set.groups.len());
            for group in &set.groups {
                member_of.push(is_member(ctx, set, group, user).await);
            }
            member_of
        }
        _ => Vec::new(),
    };
    Subject::new(ctx.identity().clone(), ctx.transport(), member_of)
}

/// Whether `user` is listed in `group`'s member attribute, and the group entry has the
/// group's class (slapd checks both).
async fn is_member(ctx: &impl Asker, set: &RuleSet, group: &Group, user: &NormDn) -> bool {
    let Ok(located) = resolve::locate(ctx.worker(), &group.dn).await else { return false };
    let rules = set.matching.dn();
    let Ok(Some(record)) = ctx.worker().fetch(located.id).await else { return false };
    let entry = &record.entry;
    if group.member_attr == "memberurl" {
        // `group/groupOfURLs/memberURL=`: the user is a member when the group's memberURLs
        // select it, as slapd's backend_group evaluates URL-valued groups (op::dynlist).
        return ferrodir_shard::has_class(&set.matching, entry, group.class.as_bytes())
            && crate::op::dynlist::acl::is_dynamic_member(ctx.worker(), &set.matching, entry, user).await;
    }
    ferrodir_shard::has_class(&set.matching, entry, group.class.as_bytes())
        && entry
            .attrs
            .iter()
            .filter(|a| set.matching.get(&a.name).is_some_and(|r| r.canonical == group.member_attr))
            .flat_map(|a| a.values.iter())
            .filter_map(|v| std::str::from_utf8(v).ok().and_then(|t| rules.parse(t).ok()))
            .any(|member| member.same_entry(user))
}

/// The level `subject` has on `attr` of the entry `dn` (with its attributes when the rules
/// need them: [`needs_entry`]).
pub fn level(
    config: &DirectoryConfig,
    subject: &Subject,
    dn: &NormDn,
    entry: Option<&Entry>,
    attr: Attr,
) -> Level {
    if subject.is_root() {
        return Level::Manage;
    }
    decide::level(&config.access_rules, subject, &Target { dn, entry }, attr)
}

/// Whether some rule has a filter, so that deciding needs the target's attributes.
pub fn needs_entry(config: &DirectoryConfig, subject: &Subject) -> bool {
    !subject.is_root() && config.access_rules.needs_entry()
}

/// The entry `id` when the rules need its attributes to decide; None otherwise (no read).
pub async fn entry_for_rules(
    ctx: &impl Asker,
    subject: &Subject,
    id: EntryId,
) -> LdapResultOf<Option<Entry>> {
    if !needs_entry(ctx.config(), subject) || id == EntryId::ROOT {
        return Ok(None);
    }
    Ok(ctx.worker().fetch(id).await?.map(|record| record.entry.clone()))
}

/// Resolves `dn`, answering a missing entry as slapd does: the matchedDN only if the
/// requester may `disclose` that entry.
pub async fn locate(ctx: &impl Asker, subject: &Subject, dn: &NormDn) -> LdapResultOf<Located> {
    match resolve::locate(ctx.worker(), dn).await {
        Ok(located) => Ok(located),
        Err(error) => Err(undisclosed(ctx, subject, error).await),
    }
}

/// `error` without a matchedDN the requester may not learn of.
pub async fn undisclosed(ctx: &impl Asker, subject: &Subject, mut error: LdapError) -> LdapError {
    if error.code != ResultCode::NO_SUCH_OBJECT || error.matched_dn.is_empty() || subject.is_root() {
        return error;
    }
    let Ok(matched) = ctx.config().dn_rules().parse(&error.matched_dn) else {
        error.matched_dn.clear();
        return error;
    };
    let entry = match resolve::locate(ctx.worker(), &matched).await {
        Ok(located) => entry_for_rules(ctx, subject, located.id).await.ok().flatten(),
        Err(_) => None,
    };
    if level(ctx.config(), subject, &matched, entry.as_ref(), Attr::Entry) < Level::Disclose {
        error.matched_dn.clear();
    }
    error
}

/// Anonymous writes are refused before the target is even looked up: slapd answers
/// strongerAuthRequired whether or not the entry exists and whatever the rules say (its
/// `allow update_anon` is off by default). Other identities are checked by the rules.
pub fn check_not_anonymous(who: &Identity) -> Result<(), LdapError> {
    match who {
        Identity::Anonymous => {
            Err(LdapError::new(ResultCode::STRONGER_AUTH_REQUIRED, "modifications require authentication"))
        }
        _ => Ok(()),
    }
}

fn insufficient(message: &str) -> LdapError {
    LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, message)
}

/// `write` on `attr` of `dn`, or insufficientAccessRights (50) with `message`.
pub fn check_write(
    config: &DirectoryConfig,
    subject: &Subject,
    dn: &NormDn,
    entry: Option<&Entry>,
    attr: Attr,
    message: &str,
) -> Result<(), LdapError> {
    if level(config, subject, dn, entry, attr) >= Level::Write {
        Ok(())
    } else {
        Err(insufficient(message))
    }
}

/// Whether `subject` may write attribute `attr` (any spelling) of the entry `target_dn`
/// (`entry`: its attributes, needed when a rule has a filter): insufficientAccessRights
/// otherwise. For Password Modify (RFC 3062) and every other change of one attribute.
pub fn may_write_attr(
    config: &DirectoryConfig,
    subject: &Subject,
    target_dn: &NormDn,
    entry: Option<&Entry>,
    attr: &str,
) -> Result<(), LdapError> {
    let canonical = config.rules.canonical(attr);
    check_write(config, subject, target_dn, entry, Attr::Type(&canonical), "no write access to attribute")
}

/// Whether `subject` may write the NO-USER-MODIFICATION attribute `attr` under the relax
/// rules control: `manage` access to it (slapd's rule; the rootDN has it).
pub fn may_relax(
    config: &DirectoryConfig,
    subject: &Subject,
    target_dn: &NormDn,
    entry: Option<&Entry>,
    attr: &str,
) -> Result<(), LdapError> {
    let canonical = config.rules.canonical(attr);
    if level(config, subject, target_dn, entry, Attr::Type(&canonical)) >= Level::Manage {
        return Ok(());
    }
    Err(insufficient(&format!("{attr}: no manage access to relax the rules")))
}

/// What `who` may do with an entry as a search base (RFC 4511 §4.5.1, slapd's `search`
/// and `disclose` levels on `entry`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EntryAccess {
    /// May search from it (and so learn it exists).
    Search,
    /// May learn that it exists, not search from it.
    DiscloseOnly,
    /// May not even learn that it exists.
    Nothing,
}

/// Whether `subject` may read the cn=changelog entry `dn` (`entry`: its attributes, for
/// rules with a filter). The changelog is a database of its own, as 389-ds's and slapd's
/// are: the naming contexts' rules that cover every DN (`to *`, `to attrs=...`) do not reach
/// it, only rules whose `<what>` names a DN scope that holds the entry
/// (`to dn.subtree="cn=changelog" by dn.exact="..." read`). So by default only the rootDN
/// reads it.
pub fn may_read_changelog(config: &DirectoryConfig, subject: &Subject, dn: &NormDn, entry: &Entry) -> bool {
    if subject.is_root() {
        return true;
    }
    let set = &config.access_rules;
    let target = Target { dn, entry: Some(entry) };
    let Some(rule) = set
        .rules
        .iter()
        .filter(|rule| rule.what.dn != crate::acl::rule::DnScope::All)
        .find(|rule| decide::rule_applies(set, rule, &target, Attr::Entry))
    else {
        return false;
    };
    subject.clause_level(rule, &|| subject.is_self(dn)) >= Level::Read
}

/// Whether any rule names a DN scope within cn=changelog: without one, nobody but the
/// rootDN reads the changelog, and a search need not look at a record to say so.
pub fn changelog_has_rules(config: &DirectoryConfig) -> bool {
    use crate::acl::rule::DnScope;
    config.access_rules.rules.iter().any(|rule| match &rule.what.dn {
        DnScope::All => false,
        DnScope::Base(dn) | DnScope::One(dn) | DnScope::Subtree(dn) | DnScope::Children(dn) => {
            dn.rdns.last().is_some_and(|rdn| rdn == "cn=changelog")
        }
    })
}

/// The access `subject` has to `dn` as a search base.
pub fn entry_access(
    config: &DirectoryConfig,
    subject: &Subject,
    dn: &NormDn,
    entry: Option<&Entry>,
) -> EntryAccess {
    match level(config, subject, dn, entry, Attr::Entry) {
        l if l >= Level::Search => EntryAccess::Search,
        l if l >= Level::Disclose => EntryAccess::DiscloseOnly,
        _ => EntryAccess::Nothing,
    }
}

/// The answer to a search whose base the requester may not search, as slapd gives it:
/// insufficientAccessRights when the entry may be disclosed, else noSuchObject with no
/// matchedDN, exactly as if it did not exist.
pub fn base_refusal(access: EntryAccess) -> Option<LdapError> {
    match access {
        EntryAccess::Search => None,
        EntryAccess::DiscloseOnly => Some(insufficient("no search access to the base")),
        EntryAccess::Nothing => Some(LdapError::new(ResultCode::NO_SUCH_OBJECT, "")),
    }
}

/// Compare needs `compare` on the attribute; without it, insufficientAccessRights if the
/// entry may be disclosed, else noSuchObject (slapd's back-mdb compare).
pub fn compare_refusal(
    config: &DirectoryConfig,
    subject: &Subject,
    dn: &NormDn,
    entry: &Entry,
    canonical: &str,
) -> Option<LdapError> {
    let entry = Some(entry);
    if level(config, subject, dn, entry, Attr::Type(canonical)) >= Level::Compare {
        return None;
    }
    Some(match level(config, subject, dn, entry, Attr::Entry) >= Level::Disclose {
        true => insufficient(""),
        false => LdapError::new(ResultCode::NO_SUCH_OBJECT, ""),
    })
}

/// Whether a simple bind may check `dn`'s userPassword: slapd asks for `auth` on it, as
/// the (still anonymous) connection. A refusal is answered invalidCredentials like a wrong
/// password, so the rules can't be probed.
pub fn may_authenticate(config: &DirectoryConfig, transport: &Transport, dn: &NormDn, entry: &Entry) -> bool {
    let anonymous = Subject::new(Identity::Anonymous, transport, Vec::new());
    level(config, &anonymous, dn, Some(entry), Attr::Type("userpassword")) >= Level::Auth
}

/// Narrows a search's attribute selection to what `subject` may see, deciding once for
/// the search what does not depend on the entry (see `acl::view`). `region`: the search's
/// base and scope, None when unknown (after an alias); `base`: the base entry's id. False:
/// no entry may be read at all.
pub async fn restrict_search(
    ctx: &impl Asker,
    subject: &Subject,
    region: Option<&Region>,
    base: EntryId,
    attrs: &mut AttrSelection,
) -> bool {
    if subject.is_root() {
        return true;
    }
    let mut draft = view::draft(&ctx.config().access_rules, subject, region);
    // The requester's own entry matters only if the search can return it; a base lookup
    // of it needs no lookup of its id.
    let mut known_self = None;
    if let (true, Some(user), Some(region)) = (draft.needs_self_id(), subject.user(), region) {
        if !region.may_hold(user) {
            draft = draft.without_self();
        } else if region.kind == view::RegionKind::Base {
            known_self = Some(base);
        }
    }
    let decision = if draft.is_uniform() {
        draft.finish(&[], None)
    } else {
        let bases: Vec<NormDn> = draft.bases().into_iter().cloned().collect();
        let mut ids = Vec::with_capacity(bases.len());
        for base in &bases {
            ids.push(entry_id(ctx, base).await);
        }
        let self_id = match (draft.needs_self_id(), known_self, subject.user()) {
            (true, Some(id), _) => Some(id),
            (true, None, Some(user)) => entry_id(ctx, user).await,
            _ => None,
        };
        draft.finish(&ids, self_id)
    };
    match decision {
        Decision::Uniform { entries_readable, rights } => {
            attrs.hidden = rights.hidden;
            attrs.unsearchable = rights.unsearchable;
            entries_readable
        }
        Decision::PerEntry(per_entry) => {
            attrs.hidden = per_entry.ordinary().hidden.clone();
            attrs.unsearchable = per_entry.ordinary().unsearchable.clone();
            attrs.per_entry = Some(per_entry);
            true
        }
    }
}

/// The id of the entry `dn`, if there is one (the root DSE is the virtual root).
async fn entry_id(ctx: &impl Asker, dn: &NormDn) -> Option<EntryId> {
    if dn.is_root() {
        return Some(EntryId::ROOT);
    }
    resolve::locate(ctx.worker(), dn).await.ok().map(|located| located.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_writes_need_authentication_first() {
        assert_eq!(check_not_anonymous(&Identity::Anonymous).unwrap_err().code, ResultCode(8));
        assert!(check_not_anonymous(&Identity::User(Default::default())).is_ok());
    }

    #[test]
    fn a_base_without_search_access_is_refused_as_slapd_does() {
        assert!(base_refusal(EntryAccess::Search).is_none());
        assert_eq!(base_refusal(EntryAccess::DiscloseOnly).map(|e| e.code), Some(ResultCode(50)));
        let hidden = base_refusal(EntryAccess::Nothing).unwrap();
        assert_eq!(hidden.code, ResultCode(32));
        assert!(hidden.matched_dn.is_empty(), "names nothing the requester may not see");
    }
}
