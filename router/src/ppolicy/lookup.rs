//! Which policy governs an entry, read from the tree at bind time: the entry's own
//! pwdPolicySubentry, else `[ppolicy] default_policy`. Policies are ordinary entries,
//! edited over LDAP; nothing is loaded at start and nothing is global.
//!
//! A worker keeps the policies it read (`cache::PolicyCache`), valid while nothing anywhere was
//! written: filled under the count of batches every shard has published
//! (`shard::Hub::publications`, read before the data) and the skeleton's version, dropped
//! whole when either moves, as `memberids` does. A directory mostly read (binds that
//! succeed write nothing) reads each policy once per worker; under writes a bind reads its
//! policy again, one base lookup through the entry cache.

use std::sync::Arc;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::NormDn;

use crate::memberids::Token;
use crate::ppolicy::policy::Policy;
use crate::resolve::locate;
use crate::worker::Worker;

/// The policy that governs `entry`, None when no policy does (no pwdPolicySubentry and no
/// default, or one naming no entry, or an entry that is no policy for userPassword: slapd
/// then applies none either).
pub async fn policy_for(worker: &Worker, entry: &Entry) -> Option<Arc<Policy>> {
    let config = &worker.config();
    let named = match entry.first_str("pwdPolicySubentry") {
        Some(text) => match config.dn_rules().parse(text) {
            Ok(dn) => dn,
            Err(_) => return None,
        },
        None => config.ppolicy.default_policy.clone()?,
    };
    let key = named.rdns.join(",");
    let token = Token { publications: worker.hub().publications(), skeleton: worker.skeleton().version };
    if let Some(cached) = worker.policies.borrow_mut().get(token, &key) {
        return cached;
    }
    let policy = read_policy(worker, &named).await;
    worker.policies.borrow_mut().put(token, key, policy.clone());
    policy
}

/// Reads and parses the policy entry named `dn` (no access check: the server reads its own
/// configuration).
async fn read_policy(worker: &Worker, dn: &NormDn) -> Option<Arc<Policy>> {
    let located = locate(worker, dn).await.ok()?;
    let record = match worker.fetch(located.id).await {
        Ok(Some(record)) => record,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(policy = %dn.dn, error = %e.message, "a password policy entry could not be read");
            return None;
        }
    };
    let policy = Policy::from_entry(&worker.config(), &dn.dn.to_string(), &record.entry);
    if policy.is_none() {
        tracing::debug!(policy = %dn.dn, "the named password policy is no pwdPolicy for userPassword");
    }
    policy.map(Arc::new)
}
