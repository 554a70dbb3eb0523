//! Referential integrity (slapd's refint overlay): after a delete or a Modify DN, the values
//! of the configured DN-valued attributes that name the entry, on every shard, are removed
//! or rewritten; after a subtree rename, so are the values naming any DN below it.
//!
//! Crash safety follows the coordinator's model: the `Intent::Refint` is durable before the
//! delete or rename takes its first step, and cleared once every reference is rewritten. At
//! start, recovery asks the entry's record whether the change happened (gone: a delete;
//! at its new place: a rename) and rewrites again; a rewrite that finds nothing to change
//! writes nothing, so running it twice is harmless.
//!
//! The client's response waits for the rewrites (docs/DECISIONS.md, "Referential integrity
//! before the response"). Rewrites are the server's own change: written as
//! `modifiers_name`, without access checks.

use std::sync::Arc;

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::{Dn, ResultCode};
use ferrodir_shard::{find_attr, EntryId, FindRefs, RefRewrite, ShardError, Write, WriteOp, WriteOutcome};

use super::Inner;
use crate::auditlog::{self, Change, Requester};
use crate::error::{LdapError, LdapResultOf};
use crate::intent::{Intent, RenamedTo};

/// `[refint]` as the router uses it.
#[derive(Clone, Debug)]
pub struct RefintConfig {
    /// Canonical (index) names of the DN-valued attributes kept in step.
    pub attrs: Vec<String>,
    /// The placeholder DN for an attribute whose last value was removed.
    pub nothing: Option<String>,
    /// modifiersName of every rewrite.
    pub modifiers_name: String,
    /// The schema's rules: the old DN is normalised as the index keys of `attrs` are.
    pub rules: Arc<ferrodir_shard::RuleTable>,
}

/// Where a change comes from. Referential integrity runs for changes made here; a change
/// that arrives by replication (none yet: a future consumer sets `Replication`) already
/// carries the supplier's own reference rewrites, which arrive as changes of their own.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    #[default]
    Client,
    Replication,
}

/// Reference rewrites of one shard sent before the first reply is awaited: the shard
/// commits them in few batches.
const IN_FLIGHT: usize = 256;

impl Inner {
    /// Records the refint intent of a change about to start, when refint is on and the change
    /// is this server's own. None: nothing to do afterwards. Fails with unavailable, before
    /// any shard is touched, if the log can't be written.
    pub(super) fn refint_begin(&self, origin: Origin, intent: Intent) -> LdapResultOf<Option<(u64, Intent)>> {
        if self.refint.is_none() || origin != Origin::Client {
            return Ok(None);
        }
        let seq =
            self.log.record(&intent).map_err(|e| LdapError::new(ResultCode::UNAVAILABLE, e.to_string()))?;
        Ok(Some((seq, intent)))
    }

    /// After the change (done, refused or of unknown outcome): rewrites the references if it
    /// happened, then clears the intent. A failure leaves the intent for recovery at the next
    /// start; the change's own result stands either way.
    pub(super) async fn refint_end(&self, begun: Option<(u64, Intent)>) {
        let Some((seq, intent)) = begun else { return };
        match self.settle_refint(&intent).await {
            Ok(()) => self.clear_intent(seq),
            Err(e) => tracing::warn!(
                ?intent,
                error = %e,
                "references not all rewritten; the intent stays, and the next start finishes them"
            ),
        }
    }

    /// Rewrites the references of a refint intent if its change happened (the entry's record
    /// decides). Used after every change and by recovery.
    pub(super) async fn settle_refint(&self, intent: &Intent) -> LdapResultOf<()> {
        let Intent::Refint { id, old_dn, new, subtree } = intent else { return Ok(()) };
        let Some(config) = self.refint.clone() else {
            tracing::warn!(
                ?intent,
                "refint is off now: the references of an interrupted change stay as they are"
            );
            return Ok(());
        };
        let record = self.fetch(*id).await?;
        let happened = match new {
            None => record.is_none(),
            Some(RenamedTo { parent, rdn_norm, .. }) => {
                record.is_some_and(|r| r.parent == *parent && &r.rdn_norm == rdn_norm)
            }
        };
        if !happened {
            return Ok(());
        }
        let parse = |text: &str| {
            Dn::parse_with(text, config.rules.dn())
                .map_err(|e| LdapError::new(ResultCode::OTHER, e.to_string()))
        };
        let rewrite = Arc::new(RefRewrite {
            attrs: config.attrs.clone(),
            old: parse(old_dn)?,
            new: new.as_ref().map(|to| parse(&to.dn)).transpose()?,
            subtree: *subtree,
            nothing: config.nothing.as_ref().map(|n| n.as_bytes().to_vec()),
        });
        self.rewrite_refs(&config, rewrite).await
    }

    /// Finds the referencing entries on every shard and rewrites each on its shard.
    async fn rewrite_refs(&self, config: &RefintConfig, rewrite: Arc<RefRewrite>) -> LdapResultOf<()> {
        let base_norm = config.rules.dn().dn(&rewrite.old);
        for (shard, addr) in self.shards.iter().enumerate() {
            let find = FindRefs {
                attrs: config.attrs.clone(),
                base_norm: base_norm.clone(),
                subtree: rewrite.subtree,
            };
            let ids = addr.send(find).await??;
            for chunk in ids.chunks(IN_FLIGHT) {
                // `send` queues at once: the shard stages the whole chunk before the first
                // reply is awaited, so it commits them together.
                let sent: Vec<_> = chunk
                    .iter()
                    .map(|&id| {
                        let op = WriteOp::RewriteRefs {
                            id,
                            rewrite: rewrite.clone(),
                            author: config.modifiers_name.clone(),
                        };
                        (id, addr.send(Write(op)))
                    })
                    .collect();
                for (id, reply) in sent {
                    match reply.await.map_err(|e| ShardError::Unavailable(e.to_string())).and_then(|r| r) {
                        Ok(outcome) => self.audit_rewrite(config, &rewrite, outcome),
                        // Refused for sure (a schema rule: the last value of a MUST attribute
                        // without a placeholder): retrying can't help, the reference stays.
                        Err(e) if !e.is_outcome_unknown() => {
                            tracing::error!(%id, shard, error = %e, "refint could not rewrite a reference; it stays");
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }
}

impl Inner {
    /// A rewrite that changed an entry, in the audit log: slapd's refint modifies through
    /// the overlays, so slapo-auditlog records it as a modify by `modifiers_name` on an
    /// internal connection (no peer, conn=-1). Each refint attribute the entry holds is
    /// written as a `replace:` with the values it now holds, which says exactly what the
    /// entry holds after the rewrite without a read before it; when a delete may have
    /// removed an attribute's last value (no `nothing` placeholder), each one it lacks is a
    /// `replace:` with no values, which removes it if present.
    fn audit_rewrite(&self, config: &RefintConfig, rewrite: &RefRewrite, outcome: WriteOutcome) {
        let (Some(sink), WriteOutcome::Record(after)) = (&self.audit, outcome) else { return };
        let (dn, suffix) = {
            let skeleton = self.skeleton.borrow();
            (skeleton.dn_of_child(after.parent, &after.rdn), naming_context(&skeleton, after.parent))
        };
        let suffix = suffix.unwrap_or_else(|| dn.clone());
        let may_vanish = rewrite.new.is_none() && rewrite.nothing.is_none();
        let mods: Vec<LdifMod> = config
            .attrs
            .iter()
            .filter_map(|name| {
                let held = find_attr(&config.rules, &after.entry, name)
                    .and_then(|index| after.entry.attrs.get(index).cloned());
                let attr = match held {
                    Some(attr) => attr,
                    None if may_vanish => Attribute::new(config.rules.display(name), Vec::new()),
                    None => return None,
                };
                Some(LdifMod { op: ModOp::Replace, attr })
            })
            .collect();
        let pending = auditlog::prepare(&dn, &suffix, Change::Modify(&mods));
        sink.commit(
            &pending,
            &Requester { author: &config.modifiers_name, peer: "", conn: -1, proxied_by: None },
        );
    }
}

/// The DN of the naming context an entry whose parent is `parent` lies in: its topmost
/// container; None when the entry is a naming context itself.
fn naming_context(skeleton: &ferrodir_shard::Skeleton, parent: EntryId) -> Option<String> {
    let mut node = skeleton.get(parent)?;
    while let Some(up) = skeleton.get(node.parent) {
        node = up;
    }
    Some(node.dn.to_string())
}

/// The intent of a delete of the entry `id` named `dn`.
pub(super) fn delete_intent(id: EntryId, dn: &Dn) -> Intent {
    Intent::Refint { id, old_dn: dn.to_string(), new: None, subtree: false }
}
