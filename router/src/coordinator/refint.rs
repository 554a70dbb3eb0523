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

use ferrodir_proto::{Dn, ResultCode};
use ferrodir_shard::{EntryId, FindRefs, RefRewrite, ShardError, Write, WriteOp};

use super::Inner;
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
                        Ok(_) => {}
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

/// The intent of a delete of the entry `id` named `dn`.
pub(super) fn delete_intent(id: EntryId, dn: &Dn) -> Intent {
    Intent::Refint { id, old_dn: dn.to_string(), new: None, subtree: false }
}
