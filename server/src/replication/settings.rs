//! `[[replication]]`: one RFC 4533 consumer per entry, with its checks and slapd's retry
//! schedule syntax.

use std::path::PathBuf;
use std::time::Duration;

use ferrodir_proto::Dn;
use serde::Deserialize;

/// One `[[replication]]` entry (docs/OPERATIONS.md, "Replication consumer").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replication {
    /// The replica id, 1-999, unique per server: the cookie's `rid=`.
    pub rid: u32,
    /// `ldap://host:port` or `ldaps://host:port`.
    pub provider: String,
    /// StartTLS on an `ldap://` provider; a refusal fails the connection (no fallback).
    #[serde(default)]
    pub starttls: bool,
    /// The CA certificates (PEM) that verify the provider; needed with ldaps:// or StartTLS.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    pub bind_dn: String,
    /// The bind password: the file's first line. Never logged.
    pub password_file: PathBuf,
    /// The subtree replicated: at or under a configured suffix.
    pub search_base: String,
    /// "refreshAndPersist" (default) or "refreshOnly".
    #[serde(default = "default_type", rename = "type")]
    pub kind: String,
    /// refreshOnly: seconds between the end of one refresh and the start of the next.
    #[serde(default = "default_interval_s")]
    pub interval_s: u64,
    /// slapd's `retry`: pairs of "seconds count", `+` as a count means forever.
    #[serde(default = "default_retry")]
    pub retry: String,
    /// Client writes in `search_base` get a referral (10) to this URL; unset: unwillingToPerform.
    #[serde(default)]
    pub update_referral: Option<String>,
}

fn default_type() -> String {
    "refreshAndPersist".into()
}

fn default_interval_s() -> u64 {
    60
}

fn default_retry() -> String {
    "5 10 60 +".into()
}

/// The provider's address, parsed from `provider`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl ProviderUrl {
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("ldaps://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("ldap://") {
            (false, rest)
        } else {
            anyhow::bail!("provider {url:?} must start with ldap:// or ldaps://");
        };
        let hostport = rest.trim_end_matches('/');
        if hostport.is_empty() || hostport.contains('/') {
            anyhow::bail!("provider {url:?}: expected ldap://HOST[:PORT]");
        }
        let default_port = if tls { 636 } else { 389 };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || hostport.starts_with('[') => {
                let port =
                    port.parse().map_err(|_| anyhow::anyhow!("provider {url:?}: bad port {port:?}"))?;
                (host.trim_start_matches('[').trim_end_matches(']').to_string(), port)
            }
            _ => (hostport.to_string(), default_port),
        };
        Ok(Self { tls, host, port })
    }
}

/// slapd's retry schedule: wait `seconds` between attempts, `count` times, then the next pair;
/// a `+` count repeats forever. After the last pair the consumer gives up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    pairs: Vec<(u64, Option<u32>)>,
}

impl RetrySchedule {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() || !words.len().is_multiple_of(2) {
            anyhow::bail!("retry {text:?}: expected pairs of \"seconds count\" (count + = forever)");
        }
        let mut pairs = Vec::new();
        for pair in words.chunks(2) {
            let [seconds, count] = pair else { continue };
            let seconds: u64 =
                seconds.parse().map_err(|_| anyhow::anyhow!("retry {text:?}: bad seconds {seconds:?}"))?;
            let count = match *count {
                "+" => None,
                n => Some(n.parse().map_err(|_| anyhow::anyhow!("retry {text:?}: bad count {n:?}"))?),
            };
            pairs.push((seconds.max(1), count));
        }
        Ok(Self { pairs })
    }

    /// The wait before retry number `attempt` (0: the first retry after a failure); None:
    /// the schedule is used up.
    pub fn delay(&self, attempt: u64) -> Option<Duration> {
        let mut left = attempt;
        for (seconds, count) in &self.pairs {
            match count {
                None => return Some(Duration::from_secs(*seconds)),
                Some(n) if left < u64::from(*n) => return Some(Duration::from_secs(*seconds)),
                Some(n) => left -= u64::from(*n),
            }
        }
        None
    }
}

impl Replication {
    pub fn persist(&self) -> bool {
        self.kind == "refreshAndPersist"
    }

    /// The bind password: the first line of `password_file`.
    pub fn password(&self) -> anyhow::Result<String> {
        let text = std::fs::read_to_string(&self.password_file)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", self.password_file.display()))?;
        Ok(text.lines().next().unwrap_or_default().to_string())
    }
}

/// Checks every `[[replication]]` entry against itself, the others and the suffixes.
pub fn check(entries: &[Replication], suffixes: &[String], multi_provider: bool) -> anyhow::Result<()> {
    let mut rids = std::collections::HashSet::new();
    for r in entries {
        let at = format!("[[replication]] rid={}", r.rid);
        if !(1..=999).contains(&r.rid) {
            anyhow::bail!("{at}: rid must be 1-999");
        }
        if !rids.insert(r.rid) {
            anyhow::bail!("{at}: rid is used twice");
        }
        let url = ProviderUrl::parse(&r.provider).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        if url.tls && r.starttls {
            anyhow::bail!("{at}: starttls is for ldap:// providers; ldaps:// is TLS already");
        }
        if (url.tls || r.starttls) && r.tls_ca_file.is_none() {
            anyhow::bail!("{at}: TLS to the provider needs tls_ca_file (the CA that verifies it)");
        }
        if r.kind != "refreshAndPersist" && r.kind != "refreshOnly" {
            anyhow::bail!("{at}: type must be \"refreshAndPersist\" or \"refreshOnly\"");
        }
        if r.interval_s == 0 {
            anyhow::bail!("{at}: interval_s must be at least 1");
        }
        RetrySchedule::parse(&r.retry).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        Dn::parse(&r.bind_dn).map_err(|e| anyhow::anyhow!("{at}: bad bind_dn: {e}"))?;
        let base = Dn::parse(&r.search_base).map_err(|e| anyhow::anyhow!("{at}: bad search_base: {e}"))?;
        let under_suffix = suffixes
            .iter()
            .filter_map(|s| Dn::parse(s).ok())
            // Checked with the config, before any schema is loaded: names as written.
            .any(|suffix| base.is_descendant_or_self_of(&suffix, &ferrodir_proto::value::PlainAvas));
        if !under_suffix {
            anyhow::bail!("{at}: search_base {:?} is not at or under a configured suffix", r.search_base);
        }
        if let Some(url) = &r.update_referral {
            if !url.starts_with("ldap://") && !url.starts_with("ldaps://") {
                anyhow::bail!("{at}: update_referral must be an ldap:// or ldaps:// URL");
            }
        }
    }
    if multi_provider {
        // A mesh: one consumer of each other node, all of the same subtree, each keeping
        // what the others wrote (`apply`'s multi-provider rules).
        let first = entries.first().and_then(|r| Dn::parse(&r.search_base).ok());
        let plain = &ferrodir_proto::value::PlainAvas;
        for r in entries {
            let same = Dn::parse(&r.search_base).ok().zip(first.as_ref()).is_some_and(|(dn, first)| {
                dn.is_descendant_or_self_of(first, plain) && first.is_descendant_or_self_of(&dn, plain)
            });
            if !same {
                anyhow::bail!(
                    "[[replication]] rid={}: with multi_provider every consumer replicates the same search_base",
                    r.rid
                );
            }
            if r.kind != "refreshAndPersist" {
                anyhow::bail!(
                    "[[replication]] rid={}: with multi_provider, type must be \"refreshAndPersist\"",
                    r.rid
                );
            }
        }
        return Ok(());
    }
    // Two consumers of overlapping subtrees would delete each other's entries.
    let bases: Vec<Dn> = entries.iter().filter_map(|r| Dn::parse(&r.search_base).ok()).collect();
    for (i, a) in bases.iter().enumerate() {
        for b in bases.iter().skip(i + 1) {
            let plain = &ferrodir_proto::value::PlainAvas;
            if a.is_descendant_or_self_of(b, plain) || b.is_descendant_or_self_of(a, plain) {
                anyhow::bail!("[[replication]]: search bases {a} and {b} overlap");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rid: u32, base: &str) -> Replication {
        Replication {
            rid,
            provider: "ldap://127.0.0.1:3890".into(),
            starttls: false,
            tls_ca_file: None,
            bind_dn: "cn=admin,dc=example,dc=com".into(),
            password_file: "/nonexistent".into(),
            search_base: base.into(),
            kind: default_type(),
            interval_s: 60,
            retry: default_retry(),
            update_referral: None,
        }
    }

    #[test]
    fn retry_schedules_as_slapd_reads_them() {
        let s = RetrySchedule::parse("5 2 60 +").unwrap();
        let secs = |n| s.delay(n).map(|d| d.as_secs());
        assert_eq!([secs(0), secs(1), secs(2), secs(1000)], [Some(5), Some(5), Some(60), Some(60)]);
        let finite = RetrySchedule::parse("1 1").unwrap();
        assert_eq!(finite.delay(1), None);
        assert!(RetrySchedule::parse("5").is_err());
        assert!(RetrySchedule::parse("x 1").is_err());
    }

    #[test]
    fn urls() {
        let u = ProviderUrl::parse("ldaps://p.example:1636/").unwrap();
        assert_eq!(u, ProviderUrl { tls: true, host: "p.example".into(), port: 1636 });
        assert_eq!(ProviderUrl::parse("ldap://h").unwrap().port, 389);
        assert!(ProviderUrl::parse("http://h").is_err());
    }

    #[test]
    fn the_sample_keys_parse() {
        let text = r#"
suffixes = ["dc=example,dc=com"]
[[replication]]
rid = 1
provider = "ldap://127.0.0.1:3890"
starttls = true
tls_ca_file = "/etc/ferrodir/ca.pem"
bind_dn = "cn=admin,dc=example,dc=com"
password_file = "/etc/ferrodir/replication.password"
search_base = "dc=example,dc=com"
type = "refreshOnly"
interval_s = 30
retry = "5 10 60 +"
update_referral = "ldap://provider:389"
"#;
        let config = crate::config::Config::parse(text).unwrap();
        let r = &config.replication[0];
        assert!(!r.persist());
        assert_eq!((r.interval_s, r.update_referral.as_deref()), (30, Some("ldap://provider:389")));
        let bad = text.replace("rid = 1", "rid = 1000");
        assert!(crate::config::Config::parse(&bad).is_err());
    }

    #[test]
    fn checks() {
        let suffixes = vec!["dc=example,dc=com".to_string()];
        assert!(check(&[entry(1, "dc=example,dc=com")], &suffixes, false).is_ok());
        assert!(check(&[entry(1, "ou=people,dc=example,dc=com")], &suffixes, false).is_ok());
        assert!(check(&[entry(0, "dc=example,dc=com")], &suffixes, false).is_err());
        assert!(check(&[entry(1, "dc=other")], &suffixes, false).is_err());
        let twice = [entry(1, "ou=a,dc=example,dc=com"), entry(1, "ou=b,dc=example,dc=com")];
        assert!(check(&twice, &suffixes, false).is_err());
        let overlap = [entry(1, "dc=example,dc=com"), entry(2, "ou=b,dc=example,dc=com")];
        assert!(check(&overlap, &suffixes, false).is_err());
        // A mesh: one consumer per peer, all of the same subtree, persisting.
        let mesh = [entry(1, "dc=example,dc=com"), entry(2, "DC=Example,DC=Com")];
        assert!(check(&mesh, &suffixes, true).is_ok());
        assert!(check(&overlap, &suffixes, true).is_err(), "a mesh replicates one subtree");
        let mut only = entry(3, "dc=example,dc=com");
        only.kind = "refreshOnly".into();
        assert!(check(&[only], &suffixes, true).is_err(), "a mesh persists");
        let mut tls = entry(1, "dc=example,dc=com");
        tls.starttls = true;
        assert!(check(&[tls], &suffixes, false).is_err(), "StartTLS without a CA");
    }
}
