//! What the router needs to know about the directory: naming contexts, the root identity,
//! the access rules and the limits per identity class. Built by `server` from the TOML config.

use std::sync::Arc;

use ferrodir_proto::schema::{DnNormalizer, Schema};
use ferrodir_proto::{Dn, NormDn};
use ferrodir_shard::RuleTable;

use crate::acl::RuleSet;
use crate::limits::{ClassLimits, LimitsConfig};
use crate::requester::Identity;

/// A naming context served by this server.
#[derive(Clone, Debug)]
pub struct Suffix {
    pub dn: Dn,
    /// As configured: the DN clients see.
    pub display: String,
    /// The normalised form: the suffix entry's name under the virtual root.
    pub norm: String,
    /// Each RDN's normalised form, leftmost first: a DN is matched against these without
    /// normalising the suffix again.
    rdn_norms: Vec<String>,
}

impl Suffix {
    /// `dn` normalised by the schema's rules (`RuleTable::dn`).
    pub fn new(dn: Dn, rules: &DnNormalizer) -> Self {
        let rdn_norms: Vec<String> = dn.rdns.iter().map(|r| rules.rdn(r)).collect();
        Self { display: dn.to_string(), norm: rdn_norms.join(","), rdn_norms, dn }
    }

    /// Whether a DN whose RDNs normalise to `rdn_norms` (leftmost first) is this suffix or
    /// lies below it.
    fn holds(&self, rdn_norms: &[String]) -> bool {
        rdn_norms.len() >= self.rdn_norms.len()
            && rdn_norms.iter().rev().zip(self.rdn_norms.iter().rev()).all(|(a, b)| a == b)
    }
}

/// How a worker reads a shard it doesn't own.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RemoteReads {
    /// A message to the shard's actor (one hop there and back).
    Message,
    /// The shard's last committed snapshot, read on the asking worker's thread.
    Snapshot,
}

/// `[sasl] authz_policy`: which authorization rules let an identity act as another
/// (crate::authz).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum AuthzPolicy {
    /// Nobody (but the rootDN) may act as another: slapd's default.
    #[default]
    None,
    /// The authenticated entry's authzTo names the target.
    To,
    /// The target entry's authzFrom names the authenticated identity.
    From,
    /// Either.
    Any,
    /// Both.
    All,
}

/// One `authz_regexp` rule, compiled once at start.
#[derive(Clone, Debug)]
pub struct AuthzRule {
    /// Anchored at both ends and case-insensitive, as slapd's.
    pub pattern: regex::Regex,
    /// `$1`, `$2`... name the pattern's groups.
    pub replace: String,
}

impl AuthzRule {
    pub fn new(pattern: &str, replace: &str) -> Result<Self, regex::Error> {
        let pattern = regex::RegexBuilder::new(&format!("^(?:{pattern})$")).case_insensitive(true).build()?;
        Ok(Self { pattern, replace: replace.to_string() })
    }
}

#[derive(Clone, Debug)]
pub struct DirectoryConfig {
    pub suffixes: Vec<Suffix>,
    /// Normalised once, at start: every bind compares against it.
    pub root_dn: Option<NormDn>,
    /// Cleartext or a value in any scheme `password::verify` reads (`{ARGON2}`, `{SSHA}`...).
    pub root_password: Option<String>,
    /// How userPassword values are hashed when written and checked on bind.
    pub passwords: crate::password::PasswordConfig,
    /// The access rules, compiled once at start: a built-in set (`access = "default"`,
    /// `"open-read"`) or the configured `[[access_rules]]`.
    pub access_rules: Arc<RuleSet>,
    /// `require_tls_for_binds`: a simple bind, SASL PLAIN or Password Modify in cleartext
    /// from a non-loopback peer gets confidentialityRequired (13).
    pub require_tls_for_binds: bool,
    /// A certificate is configured: StartTLS is offered on the plain listener and listed
    /// in the root DSE.
    pub tls_offered: bool,
    /// `authz_regexp`: SASL names to DNs, first match wins (op/sasl.rs).
    pub authz_rules: Vec<AuthzRule>,
    /// `[sasl] authz_policy`: which authzTo/authzFrom rules let an identity act as
    /// another (crate::authz).
    pub authz_policy: AuthzPolicy,
    /// Size, time, paging, PDU, pending-request and idle limits per identity class, and
    /// the bounds on a request's shape (limits.rs). Read through [`Self::limits_for`].
    pub limits: LimitsConfig,
    /// How many search result chunks one search may have queued toward its connection.
    pub search_chunks_in_flight: usize,
    /// Server-side sorting's bounds: entries, keys, sessions per connection, idle time.
    pub sort: crate::limits::SortLimits,
    pub vendor_version: String,
    /// How a worker reads other shards: by message to their actor, or from their
    /// snapshots directly.
    pub remote_reads: RemoteReads,
    /// Every shard's equality-key Bloom filter, to skip shards on equality searches.
    pub blooms: Vec<Arc<ferrodir_shard::EqBloom>>,
    /// Which indices exist and are complete (for the Bloom pruning above).
    pub indexes: Arc<ferrodir_shard::IndexConfig>,
    pub schema: Arc<Schema>,
    /// Matching facts per attribute type, resolved once from `schema`.
    pub rules: Arc<RuleTable>,
    /// `monitor_readers`: the entries, besides the rootDN, that may read cn=Monitor.
    pub monitor_readers: Vec<NormDn>,
    /// What cn=Monitor reads (router::monitor): filled by the server at start.
    pub monitor: Arc<crate::monitor::Sources>,
    /// `[[unique]]`: attribute uniqueness (slapo-unique) and the claims of writes in flight.
    pub unique: Arc<crate::unique::Uniqueness>,
    /// The syncrepl consumers this directory serves, for the metrics endpoint.
    pub syncrepl: Arc<crate::op::syncrepl::stats::ProviderStats>,
    /// `[refint]`: referential integrity after deletes and renames; None when off. Every
    /// delete then goes through the coordinator.
    pub refint: Option<Arc<crate::coordinator::RefintConfig>>,
    /// memberOf and the in-chain rule (`op::memberof`): every shard's data and the
    /// options; None with `memberof = false`.
    pub memberof: Option<Arc<ferrodir_shard::Groups>>,
    /// How paged-results cookies are sealed and how long they stay good (op/paged).
    pub paged: PagedConfig,
    /// The subtrees this server replicates from a provider (`[[replication]]`): client
    /// writes there get a referral or unwillingToPerform (`op::check_writable`).
    pub replicated: Vec<ReplicatedArea>,
    /// `[changelog] enabled`: cn=changelog is served (crate::changelog), and the root DSE
    /// names it with its first and last change numbers.
    pub changelog: bool,
    /// `[ppolicy]`: the default password policy (router `ppolicy`).
    pub ppolicy: PpolicyConfig,
    /// `[dynlist]`: dynamic groups (slapo-dynlist), their member values computed at read
    /// time (`op::dynlist`).
    pub dynlist: DynlistConfig,
    /// Free space on the data directory and `[limits] disk_free_min_bytes`: client writes
    /// are refused while it is low (`op::check_writable`). One value for the server's life,
    /// kept across reloads.
    pub disk: Arc<crate::disk::DiskSpace>,
}

/// The `[dynlist]` settings the router reads (`op::dynlist`).
#[derive(Debug, Clone)]
pub struct DynlistConfig {
    /// `members_max`: the most member values one dynamic group may compute; one more ends
    /// the operation with adminLimitExceeded (11).
    pub members_max: usize,
}

impl Default for DynlistConfig {
    fn default() -> Self {
        Self { members_max: 10_000 }
    }
}

/// The `[ppolicy]` settings the router reads (router `ppolicy`).
#[derive(Debug, Clone, Default)]
pub struct PpolicyConfig {
    /// `default_policy`: the policy of every entry without a pwdPolicySubentry. None: only
    /// entries that name a policy have one.
    pub default_policy: Option<NormDn>,
}

/// A subtree a replication consumer keeps: read-only for clients, the rootDN included,
/// unless this node is one provider of a mesh (`multi_provider`).
#[derive(Clone, Debug)]
pub struct ReplicatedArea {
    pub base: NormDn,
    /// `update_referral`: writes get a referral (10) to it; None: unwillingToPerform (53)
    /// "replica is read-only".
    pub update_referral: Option<String>,
    /// `multi_provider`: clients write here as on any provider; their changes reach the
    /// other nodes through their consumers of this one.
    pub writable: bool,
}

impl ReplicatedArea {
    /// Whether `dn` is in a subtree that only a provider elsewhere writes (a read replica's).
    pub fn read_only_at(&self, dn: &NormDn) -> bool {
        !self.writable && dn.is_descendant_or_self_of(&self.base)
    }

    /// What a client's write at `dn` gets, if `dn` is in this area and it is read-only.
    pub fn refusal(&self, dn: &NormDn) -> Option<crate::error::LdapError> {
        if !self.read_only_at(dn) {
            return None;
        }
        Some(match &self.update_referral {
            Some(url) => crate::error::LdapError::referral(vec![url.clone()]),
            None => crate::error::LdapError::unwilling("replica is read-only"),
        })
    }
}

/// Paged results (RFC 2696): the key that seals cookies (`paged-results.key` in the data
/// directory) and `paged_cookie_idle_max_s`, after which a cookie is stale.
#[derive(Debug, Clone)]
pub struct PagedConfig {
    pub key: crate::op::paged::cookie::CookieKey,
    pub cookie_idle_max_s: u64,
}

impl Default for PagedConfig {
    fn default() -> Self {
        Self { key: crate::op::paged::cookie::CookieKey::random(), cookie_idle_max_s: 3600 }
    }
}

impl DirectoryConfig {
    /// The suffix under which `dn` falls (the longest match).
    pub fn suffix_of(&self, dn: &NormDn) -> Option<&Suffix> {
        self.suffixes.iter().filter(|s| s.holds(&dn.rdns)).max_by_key(|s| s.dn.len())
    }

    /// The schema's DN normaliser: what every DN a request names is normalised by, once.
    pub fn dn_rules(&self) -> &DnNormalizer {
        self.rules.dn()
    }

    /// The limits `identity` runs under: its class's, a listed DN's own, or none of the
    /// policy limits for the rootDN.
    pub fn limits_for(&self, identity: &Identity) -> &ClassLimits {
        self.limits.for_identity(identity)
    }

    pub fn is_root_dn(&self, dn: &NormDn) -> bool {
        self.root_dn.as_ref().is_some_and(|root| root.same_entry(dn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dn(s: &str) -> Dn {
        Dn::parse(s).unwrap()
    }

    fn norms(d: &Dn) -> Vec<String> {
        NormDn::new(d.clone(), &DnNormalizer::plain()).rdns
    }

    #[test]
    fn the_longest_suffix_holding_a_dn_wins_whatever_its_case_and_spacing() {
        let suffixes = [
            Suffix::new(dn("dc=example,dc=com"), &DnNormalizer::plain()),
            Suffix::new(dn("ou=Sub, dc=Example,dc=COM"), &DnNormalizer::plain()),
            Suffix::new(dn("o=other"), &DnNormalizer::plain()),
        ];
        let pick = |s: &str| {
            let d = dn(s);
            let found = suffixes.iter().filter(|x| x.holds(&norms(&d))).max_by_key(|x| x.dn.len());
            found.map(|x| x.display.clone())
        };
        assert_eq!(pick("uid=a,ou=people,DC=example, dc=com").as_deref(), Some("dc=example,dc=com"));
        assert_eq!(pick("uid=a,OU=sub,dc=example,dc=com").as_deref(), Some("ou=Sub,dc=Example,dc=COM"));
        assert_eq!(pick("ou=sub,dc=example,dc=com").as_deref(), Some("ou=Sub,dc=Example,dc=COM"));
        assert_eq!(pick("dc=com"), None);
        assert_eq!(pick("dc=example,dc=org"), None);
        assert_eq!(pick("cn=x,o=Other").as_deref(), Some("o=other"));
        // The same answers as the RDN-by-RDN comparison of Dn::is_descendant_or_self_of.
        for s in ["uid=a,ou=people,dc=example,dc=com", "ou=sub,dc=example,dc=com", "dc=com", "o=other"] {
            let d = dn(s);
            for x in &suffixes {
                assert_eq!(
                    x.holds(&norms(&d)),
                    d.is_descendant_or_self_of(&x.dn, &DnNormalizer::plain()),
                    "{s} under {}",
                    x.display
                );
            }
        }
    }
}
