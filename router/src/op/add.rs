//! Add (RFC 4511 §4.7). The entry is created on the shard its name places it on. Under a
//! container that is one shard's write; under a leaf, the coordinator first promotes the
//! parent to a container (a change that spans shards).

use std::time::Duration;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::message::AddRequest;
use ferrodir_proto::ResultCode;
use ferrodir_shard::{shard_for_child, EntryId, ShardError, WriteOp, WriteOutcome};

use crate::access::{self, check_not_anonymous, Subject};
use crate::acl::rule::Attr;
use crate::auditlog::Change;
use crate::config::DirectoryConfig;
use crate::coordinator::AddUnder;
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::write_controls::{self, WriteControls};
use crate::op::{check_writable, parse_dn, text};
use crate::resolve::locate_parent_of;
use ferrodir_shard::{find_attr, value_key};

/// How often an add retries while its parent is briefly closed by the coordinator.
const PARENT_CLOSED_RETRIES_MAX: u32 = 200;
const PARENT_CLOSED_RETRY_DELAY_MS: u64 = 5;

pub async fn add(ctx: &OpContext, request: AddRequest) -> LdapResultOf<()> {
    let dn = parse_dn(&ctx.config, &request.entry)?;
    if request.attributes.is_empty() {
        return Err(LdapError::protocol("no attributes"));
    }
    // The root DSE and the subschema subentry exist already (RFC 4511 §4.7: an Add of an
    // existing name is entryAlreadyExists), whoever asks, as slapd answers.
    if dn.is_root() {
        return Err(LdapError::new(ResultCode::ENTRY_ALREADY_EXISTS, "root DSE already exists"));
    }
    if dn.is("cn=subschema") {
        return Err(LdapError::new(ResultCode::ENTRY_ALREADY_EXISTS, "subschema subentry already exists"));
    }
    check_writable(&ctx.config, &dn)?;
    check_not_anonymous(&ctx.identity)?;
    let asked = WriteControls::of(ctx)?;
    let subject = access::subject(ctx).await;
    // Name resolution comes before access, as slapd answers: noSuchObject beats refusal.
    let (parent, rdn_norm, rdn) = match locate_parent_of(&ctx.worker, &dn).await {
        Ok(found) => found,
        Err(e) => return Err(access::undisclosed(ctx, &subject, e).await),
    };
    let mut relaxed = Vec::new();
    let mut entry = build_entry(&request, &ctx.config, asked.relax.then_some(&mut relaxed))?;
    if let Some(named_by) = dn.dn.rdns.first() {
        add_rdn_values(&ctx.config, &mut entry, named_by)?;
    }
    if let Some(values) = entry.get("userPassword").map(|a| a.values.clone()) {
        // The password policy's rules, on the values before they are hashed.
        crate::ppolicy::new_password(ctx, &entry, None, &values, false, false).await?;
    }
    crate::op::stored_password::hash_entry(&ctx.config, &mut entry).await?;
    crate::ppolicy::stamp_added(&ctx.worker, &mut entry).await;
    let parent_id = parent.as_ref().map(|p| p.id).unwrap_or(EntryId::ROOT);
    if let Err(refusal) = check_access(ctx, &subject, &dn, parent_id, &entry).await {
        // slapd looks for the entry before it asks the rules: entryAlreadyExists first.
        if crate::resolve::locate(&ctx.worker, &dn).await.is_ok() {
            return Err(LdapError::new(ResultCode::ENTRY_ALREADY_EXISTS, ""));
        }
        return Err(refusal);
    }
    if !subject.is_root() {
        for name in &relaxed {
            access::may_relax(&ctx.config, &subject, &dn, Some(&entry), name)?;
        }
    }
    // Held until the write is answered: a second write of a constrained value waits.
    let written = crate::op::unique::Written { dn: &dn, entry: &entry, changed: None, own: None };
    let _claims = crate::op::unique::check(ctx, &written).await?;
    let audit = crate::op::audit::prepare(ctx, &dn, Change::Add(&entry.attrs));
    let shard = shard_for_child(parent_id, &rdn_norm, ctx.worker.shard_count());
    let op = WriteOp::Add { parent: parent_id, rdn, rdn_norm, entry, author: ctx.identity.author() };
    // The post-read needs the entry as staged: asked for, the add goes as a checked write.
    let op = if asked.post_read.is_some() && asked.assertion.is_none() {
        WriteOp::Checked(Box::new(ferrodir_shard::CheckedWrite { op, check: None }))
    } else {
        write_controls::wrap(ctx, &subject, &asked, op, parent_id).await
    };
    let parent_is_container = parent.as_ref().is_none_or(|p| ctx.worker.skeleton().contains(p.id));
    if !parent_is_container {
        refuse_alias_parent(ctx, parent_id).await?;
    }
    let outcome = send(ctx, parent_id, parent_is_container, shard, op).await?;
    crate::op::audit::committed(ctx, audit);
    let (outcome, _, after) = outcome.split();
    if let WriteOutcome::Added(id) = outcome {
        write_controls::answer_reads(ctx, &subject, &asked, id, None, after).await;
    }
    Ok(())
}

/// slapd's aliasProblem for a new child of an alias (RFC 4512 §2.6: an alias has no
/// subordinates). Only a leaf can be an alias, so only an add under a leaf (the coordinator's
/// slower path, which promotes it) pays for the look.
pub(crate) async fn refuse_alias_parent(ctx: &OpContext, parent_id: EntryId) -> LdapResultOf<()> {
    if parent_id == EntryId::ROOT {
        return Ok(());
    }
    if let Some(record) = ctx.worker.fetch(parent_id).await? {
        if ferrodir_shard::has_class(&ctx.config.rules, &record.entry, b"alias") {
            return Err(LdapError::new(ResultCode::ALIAS_PROBLEM, "parent is an alias"));
        }
    }
    Ok(())
}

/// Sends the add to its shard: through the coordinator under a leaf (which it promotes),
/// else straight to the shard, retrying while the coordinator has the parent closed.
async fn send(
    ctx: &OpContext,
    parent_id: EntryId,
    parent_is_container: bool,
    shard: usize,
    op: WriteOp,
) -> LdapResultOf<WriteOutcome> {
    if !parent_is_container {
        return ctx.worker.coordinator.send(AddUnder { parent: parent_id, shard, op }).await?;
    }
    for _ in 0..PARENT_CLOSED_RETRIES_MAX {
        match ctx.worker.write_to_shard(shard, op.clone()).await {
            Err(ShardError::ParentClosed) => {
                tokio::time::sleep(Duration::from_millis(PARENT_CLOSED_RETRY_DELAY_MS)).await;
                // The parent may have been demoted to a leaf meanwhile, or deleted.
                if parent_id != EntryId::ROOT && !ctx.worker.skeleton().contains(parent_id) {
                    return ctx.worker.coordinator.send(AddUnder { parent: parent_id, shard, op }).await?;
                }
            }
            other => return other.map_err(LdapError::from),
        }
    }
    Err(LdapError::new(ResultCode::BUSY, "parent entry is busy"))
}

/// slapd's checks for an add: `write` on the parent's `children`, on the new entry's
/// `entry`, and on each attribute it is given. The suffix entry's parent is the root DSE.
async fn check_access(
    ctx: &OpContext,
    subject: &Subject,
    dn: &ferrodir_proto::NormDn,
    parent_id: EntryId,
    entry: &Entry,
) -> LdapResultOf<()> {
    if subject.is_root() {
        return Ok(());
    }
    let config = &ctx.config;
    let parent_dn = dn.parent().unwrap_or_default();
    let parent_entry = access::entry_for_rules(ctx, subject, parent_id).await?;
    let message = "no write access to parent";
    access::check_write(config, subject, &parent_dn, parent_entry.as_ref(), Attr::Children, message)?;
    access::check_write(config, subject, dn, Some(entry), Attr::Entry, "no write access to entry")?;
    for attribute in &entry.attrs {
        access::may_write_attr(config, subject, dn, Some(entry), &attribute.name)?;
    }
    Ok(())
}

/// The entry as sent, value order kept; rejects empty and duplicate values and attributes
/// only the server may set. The schema check happens on the shard, on the entry as stored.
/// `relaxed`: with the relax rules control, the NO-USER-MODIFICATION types given are
/// gathered there (their access is checked later) instead of refused.
fn build_entry(
    request: &AddRequest,
    config: &DirectoryConfig,
    relaxed: Option<&mut Vec<String>>,
) -> LdapResultOf<Entry> {
    let mut relaxed = relaxed;
    let mut entry = Entry::default();
    for attribute in &request.attributes {
        let name = text(&attribute.r#type)?.to_string();
        if name.is_empty() {
            return Err(LdapError::protocol("empty attribute description"));
        }
        if attribute.vals.is_empty() {
            return Err(LdapError::protocol(format!("{name}: no values")));
        }
        match relaxed.as_deref_mut() {
            Some(list) if no_user_modification(config, &name) => list.push(name.clone()),
            _ => reject_no_user_modification(config, &name)?,
        }
        let mut seen = std::collections::HashSet::new();
        for value in &attribute.vals {
            if !seen.insert(value_key(&config.rules, &name, value)) {
                return Err(LdapError::new(
                    ResultCode::ATTRIBUTE_OR_VALUE_EXISTS,
                    format!("{name}: duplicate value"),
                ));
            }
        }
        if find_attr(&config.rules, &entry, &name).is_some() {
            return Err(LdapError::new(
                ResultCode::ATTRIBUTE_OR_VALUE_EXISTS,
                format!("{name}: given twice"),
            ));
        }
        let stored_name = config.rules.display(&name);
        let values = canonical_values(config, &name, attribute.vals.iter().map(|v| v.to_vec()).collect())?;
        crate::ppolicy::policy::check_policy_values(config, &name, &values)?;
        entry.attrs.push(Attribute::new(stored_name, values));
    }
    Ok(entry)
}

/// RFC 4512 §4.1.2: NO-USER-MODIFICATION attributes are maintained by the server; a client
/// supplying one gets constraintViolation, as slapd answers.
/// Whether the schema marks `name` NO-USER-MODIFICATION.
pub fn no_user_modification(config: &DirectoryConfig, name: &str) -> bool {
    config.schema.attribute(name).is_some_and(|a| a.no_user_modification)
}

pub fn reject_no_user_modification(config: &DirectoryConfig, name: &str) -> LdapResultOf<()> {
    if no_user_modification(config, name) {
        return Err(LdapError::new(
            ResultCode::CONSTRAINT_VIOLATION,
            format!("{name}: no user modification allowed"),
        ));
    }
    Ok(())
}

/// slapd adds the RDN's values to an entry that lacks them (RFC 4512 §2.3.1 requires them),
/// unless the naming attribute is operational or single-valued with another value already.
fn add_rdn_values(
    config: &DirectoryConfig,
    entry: &mut Entry,
    rdn: &ferrodir_proto::Rdn,
) -> LdapResultOf<()> {
    let naming = |message: String| LdapError::new(ResultCode::NAMING_VIOLATION, message);
    for ava in &rdn.avas {
        let Some(attr_type) = config.schema.attribute(&ava.attr) else { continue };
        if attr_type.is_operational() {
            return Err(naming(format!("naming attribute '{}' is operational", ava.attr)));
        }
        let key = value_key(&config.rules, &ava.attr, &ava.value);
        match find_attr(&config.rules, entry, &ava.attr).and_then(|index| entry.attrs.get_mut(index)) {
            Some(attr) => {
                if !attr.values.iter().any(|v| value_key(&config.rules, &ava.attr, v) == key) {
                    if attr_type.single_value {
                        return Err(naming(format!(
                            "value of single-valued naming attribute '{}' conflicts with value present in entry",
                            ava.attr
                        )));
                    }
                    attr.values.push(ava.value.clone());
                }
            }
            None => {
                entry.attrs.push(Attribute::new(config.rules.display(&ava.attr), vec![ava.value.clone()]))
            }
        }
    }
    Ok(())
}

/// Values as slapd stores them: objectClass values by the class's own name (`2.5.6.6` is
/// stored as `person`), and DN-syntax values in their pretty form. Values that don't parse
/// are kept, for the schema check to refuse with invalidAttributeSyntax.
pub fn canonical_values(
    config: &DirectoryConfig,
    name: &str,
    values: Vec<Vec<u8>>,
) -> LdapResultOf<Vec<Vec<u8>>> {
    let Some(attr) = config.schema.attribute(name) else { return Ok(values) };
    if attr.name().eq_ignore_ascii_case("objectClass") {
        return Ok(values
            .into_iter()
            .map(|v| match std::str::from_utf8(&v).ok().and_then(|c| config.rules.class_name(c)) {
                Some(class) => class.as_bytes().to_vec(),
                None => v,
            })
            .collect());
    }
    if attr.syntax.as_deref() == Some(DN_SYNTAX) {
        let mut out = Vec::with_capacity(values.len());
        for (index, value) in values.into_iter().enumerate() {
            if !dn_types_known(config, &value) {
                return Err(LdapError::new(
                    ResultCode::INVALID_ATTRIBUTE_SYNTAX,
                    format!("{name}: value #{index} invalid per syntax"),
                ));
            }
            let name_of = |oid: &str| config.rules.get(oid).map(|r| r.display.clone());
            out.push(pretty_dn(&value, &name_of).unwrap_or(value));
        }
        return Ok(out);
    }
    Ok(values)
}

/// A DN value must name attribute types the schema knows, by name or numeric OID (slapd
/// refuses the RFC 1779 `OID.` prefix in values). Unparsable values are left to the syntax
/// check.
fn dn_types_known(config: &DirectoryConfig, value: &[u8]) -> bool {
    let Some(dn) = std::str::from_utf8(value).ok().and_then(|t| ferrodir_proto::Dn::parse(t).ok()) else {
        return true;
    };
    dn.rdns.iter().flat_map(|r| r.avas.iter()).all(|ava| {
        !ava.attr.to_ascii_lowercase().starts_with("oid.") && config.rules.get(&ava.attr).is_some()
    })
}

const DN_SYNTAX: &str = "1.3.6.1.4.1.1466.115.121.1.12";

/// slapd's pretty form of a DN value (`ferrodir_proto::Dn::pretty`); None when it is no DN.
pub fn pretty_dn(value: &[u8], name_of: &dyn Fn(&str) -> Option<String>) -> Option<Vec<u8>> {
    let dn = ferrodir_proto::Dn::parse(std::str::from_utf8(value).ok()?).ok()?;
    Some(dn.pretty(name_of))
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::SearchScope;
    use ferrodir_proto::ResultCode;

    use crate::testkit::{run, Client, TestDirectory, ROOT_DN, ROOT_PASSWORD};

    const CAROL: &str = "uid=carol,ou=people,dc=example,dc=com";
    const CAROL_ATTRS: &[(&str, &[&str])] =
        &[("objectClass", &["inetOrgPerson"]), ("uid", &["carol"]), ("cn", &["Carol"]), ("sn", &["C"])];

    async fn as_root(directory: &TestDirectory) -> Client {
        let mut client = directory.connect();
        assert_eq!(client.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
        client
    }

    #[test]
    fn an_added_entry_is_found_with_its_operational_attributes() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = as_root(&directory).await;
            let added = root.add(CAROL, CAROL_ATTRS).await;
            assert_eq!(added.result_code, ResultCode::SUCCESS, "{added:?}");
            let found =
                root.search(CAROL, SearchScope::BaseObject, "(objectClass=*)", &["cn", "creatorsName"]).await;
            assert_eq!(found.dns(), vec![CAROL]);
            assert_eq!(found.values(CAROL, "cn"), vec!["Carol"]);
            assert_eq!(found.values(CAROL, "creatorsName"), vec![ROOT_DN]);
        });
    }

    #[test]
    fn the_root_dse_and_the_subschema_entry_exist_already() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = as_root(&directory).await;
            assert_eq!(root.add("", CAROL_ATTRS).await.result_code, ResultCode::ENTRY_ALREADY_EXISTS);
            assert_eq!(
                root.add("CN=subschema", CAROL_ATTRS).await.result_code,
                ResultCode::ENTRY_ALREADY_EXISTS
            );
            assert_eq!(root.add("  ", CAROL_ATTRS).await.result_code, ResultCode::INVALID_DN_SYNTAX);
        });
    }

    #[test]
    fn a_dn_given_by_oid_is_stored_by_name() {
        let name_of = |oid: &str| (oid == "2.5.4.3").then(|| "cn".to_string());
        let pretty = super::pretty_dn(b"2.5.4.3=John Doe+SN=x,OU=People", &name_of);
        assert_eq!(pretty.as_deref(), Some(&b"cn=John Doe+sn=x,ou=People"[..]));
    }

    #[test]
    fn adding_an_existing_entry_is_entry_already_exists() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = as_root(&directory).await;
            assert_eq!(root.add(CAROL, CAROL_ATTRS).await.result_code, ResultCode::SUCCESS);
            assert_eq!(root.add(CAROL, CAROL_ATTRS).await.result_code, ResultCode::ENTRY_ALREADY_EXISTS);
            // The same name in another case and spacing is the same entry.
            let again = root.add("UID=Carol, ou=People,dc=example,dc=com", CAROL_ATTRS).await;
            assert_eq!(again.result_code, ResultCode::ENTRY_ALREADY_EXISTS);
        });
    }

    #[test]
    fn adding_under_a_missing_parent_is_no_such_object_with_the_matched_dn() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = as_root(&directory).await;
            let added = root.add("uid=dan,ou=nowhere,dc=example,dc=com", CAROL_ATTRS).await;
            assert_eq!(added.result_code, ResultCode::NO_SUCH_OBJECT);
            assert_eq!(added.matched_dn.as_ref(), b"dc=example,dc=com");
        });
    }

    #[test]
    fn an_entry_under_a_leaf_turns_the_leaf_into_a_container() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = as_root(&directory).await;
            let under_alice = "cn=device,uid=alice,ou=people,dc=example,dc=com";
            let added = root.add(under_alice, &[("objectClass", &["device"]), ("cn", &["device"])]).await;
            assert_eq!(added.result_code, ResultCode::SUCCESS, "{added:?}");
            let alice = "uid=alice,ou=people,dc=example,dc=com";
            let found = root.search(alice, SearchScope::SingleLevel, "(objectClass=*)", &[]).await;
            assert_eq!(found.dns(), vec![under_alice]);
        });
    }

    #[test]
    fn anonymous_may_not_add() {
        run(async {
            let directory = TestDirectory::with_people(1).await;
            let mut anonymous = directory.connect();
            let added = anonymous.add(CAROL, CAROL_ATTRS).await;
            assert_eq!(added.result_code, ResultCode::STRONGER_AUTH_REQUIRED);
        });
    }
}
