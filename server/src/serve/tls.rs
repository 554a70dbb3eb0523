//! TLS for LDAPS and StartTLS: rustls with the ring provider, configured by `[tls]`.
//!
//! The rustls `ServerConfig` in force sits behind an `ArcSwap`: each handshake takes the
//! current one, so a reload (SIGHUP, or a change of the files' modification times seen by
//! the poll every `reload_poll_s`) affects only handshakes that start after it. Connections
//! already established keep the session they negotiated: nothing is dropped. A reload that
//! fails (a half-written file, a key that doesn't match the certificate) keeps the
//! previous configuration and logs why, so a bad rotation never takes the listener down.
//!
//! PEM files are read with rustls-pki-types' own PEM parser (rustls-pemfile is archived).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use arc_swap::ArcSwap;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::config;

/// A rustls configuration with what SASL channel binding needs of its certificate.
#[derive(Debug)]
pub struct Served {
    config: Arc<ServerConfig>,
    /// RFC 5929 `tls-server-end-point` of the served certificate (None: its signature
    /// algorithm defines no hash for it, as with Ed25519 or RSASSA-PSS).
    end_point: Option<Vec<u8>>,
}

/// The TLS configuration in force, reloadable while serving.
pub struct TlsContext {
    settings: config::Tls,
    current: ArcSwap<Served>,
    /// The files' modification times when `current` was built.
    loaded: Mutex<Vec<Option<SystemTime>>>,
    /// The served certificate's notAfter (Unix seconds; 0 if unreadable), for the
    /// `ferrodir_tls_certificate_expiry_timestamp_seconds` gauge and its alert.
    not_after_s: AtomicI64,
}

impl TlsContext {
    /// Reads the certificate, key and client CAs; any problem stops the server at start.
    pub fn load(settings: &config::Tls) -> anyhow::Result<Arc<Self>> {
        let stamps = stamps(settings);
        let (built, not_after_s) = build(settings)?;
        Ok(Arc::new(Self {
            settings: settings.clone(),
            current: ArcSwap::from_pointee(built),
            loaded: Mutex::new(stamps),
            not_after_s: AtomicI64::new(not_after_s),
        }))
    }

    /// When the certificate in use expires (Unix seconds); None if it could not be read.
    pub fn not_after_s(&self) -> Option<i64> {
        Some(self.not_after_s.load(Ordering::Relaxed)).filter(|&s| s != 0)
    }

    /// An acceptor over the configuration in force now, and the `tls-server-end-point`
    /// channel binding of its certificate (taken together: a reload between the two would
    /// bind to a certificate the handshake did not use).
    pub fn acceptor(&self) -> (TlsAcceptor, Option<Vec<u8>>) {
        let served = self.current.load_full();
        (TlsAcceptor::from(served.config.clone()), served.end_point.clone())
    }

    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.handshake_timeout_s.max(1))
    }

    /// Builds the configuration anew from the files; on failure the old one stays.
    pub fn reload(&self, why: &str) {
        let stamps = stamps(&self.settings);
        match build(&self.settings) {
            Ok((built, not_after_s)) => {
                self.current.store(Arc::new(built));
                self.not_after_s.store(not_after_s, Ordering::Relaxed);
                *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = stamps;
                tracing::info!(why, cert = %self.settings.cert_file.display(), "TLS certificate and key reloaded");
            }
            Err(e) => {
                tracing::error!(
                    why,
                    error = format!("{e:#}"),
                    "TLS reload failed; the previous certificate stays in use"
                )
            }
        }
    }

    /// Reloads when a file's modification time differs from when it was last loaded.
    pub fn reload_if_changed(&self) {
        let now = stamps(&self.settings);
        let changed = *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) != now;
        if changed {
            self.reload("files changed");
        }
    }

    /// Runs until the process ends: checks the files every `reload_poll_s` (0: never;
    /// SIGHUP still reloads, runtime.rs). Spawned on the main thread's runtime.
    pub async fn poll(self: Arc<Self>) {
        let poll = self.settings.reload_poll_s;
        if poll == 0 {
            return;
        }
        let period = Duration::from_secs(poll);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            ticks.tick().await;
            self.reload_if_changed();
        }
    }
}

fn files(settings: &config::Tls) -> Vec<&Path> {
    let mut files = vec![settings.cert_file.as_path(), settings.key_file.as_path()];
    if let Some(ca) = &settings.client_ca_file {
        files.push(ca.as_path());
    }
    files
}

fn stamps(settings: &config::Tls) -> Vec<Option<SystemTime>> {
    files(settings).into_iter().map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).collect()
}

/// The rustls configuration, and the leaf certificate's notAfter (0 if unreadable).
fn build(settings: &config::Tls) -> anyhow::Result<(Served, i64)> {
    let certs = read_certs(&settings.cert_file)?;
    let not_after_s = certs.first().and_then(not_after).unwrap_or(0);
    let end_point = certs.first().and_then(server_end_point);
    let key = PrivateKeyDer::from_pem_file(&settings.key_file)
        .with_context(|| format!("reading the private key {}", settings.key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&'static SupportedProtocolVersion] = match settings.min_version.as_str() {
        "1.2" => &[&rustls::version::TLS13, &rustls::version::TLS12],
        "1.3" => &[&rustls::version::TLS13],
        other => bail!("[tls] min_version {other:?}: use \"1.2\" or \"1.3\" (older versions are insecure)"),
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .context("TLS protocol versions")?;
    let builder = match settings.client_certs.as_str() {
        "never" => builder.with_no_client_auth(),
        mode @ ("try" | "demand") => {
            let Some(ca_file) = &settings.client_ca_file else {
                bail!("[tls] client_certs = {mode:?} needs client_ca_file (the CAs that sign client certificates)")
            };
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca_file)? {
                roots.add(cert).with_context(|| format!("a CA certificate in {}", ca_file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == "try" { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().context("client certificate verifier")?)
        }
        other => bail!("[tls] client_certs {other:?}: use \"never\", \"try\" or \"demand\""),
    };
    let config =
        builder.with_single_cert(certs, key).context("the certificate and key do not fit together")?;
    Ok((Served { config: Arc::new(config), end_point }, not_after_s))
}

/// RFC 5929 §4.1 `tls-server-end-point`: the certificate hashed with the hash of its
/// signature algorithm, SHA-256 where that is MD5 or SHA-1. None where the algorithm names
/// no single hash (Ed25519, Ed448, RSASSA-PSS's parameters not read here): RFC 5929 leaves
/// the binding undefined there, and SCRAM's -PLUS mechanisms then refuse it.
pub fn server_end_point(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    use sha2::{Digest as _, Sha224, Sha256, Sha384, Sha512};
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let der = cert.as_ref();
    Some(match parsed.signature_algorithm.algorithm.to_id_string().as_str() {
        // md5WithRSA, sha1WithRSA, sha256WithRSA, ecdsa-with-SHA1, ecdsa-with-SHA256,
        // dsa-with-sha1, dsa-with-sha256
        "1.2.840.113549.1.1.4"
        | "1.2.840.113549.1.1.5"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.10045.4.1"
        | "1.2.840.10045.4.3.2"
        | "1.2.840.10040.4.3"
        | "2.16.840.1.101.3.4.3.2" => Sha256::digest(der).to_vec(),
        // sha224WithRSA, ecdsa-with-SHA224
        "1.2.840.113549.1.1.14" | "1.2.840.10045.4.3.1" => Sha224::digest(der).to_vec(),
        // sha384WithRSA, ecdsa-with-SHA384
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => Sha384::digest(der).to_vec(),
        // sha512WithRSA, ecdsa-with-SHA512
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => Sha512::digest(der).to_vec(),
        _ => return None,
    })
}

/// A certificate's notAfter, in Unix seconds.
fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

fn read_certs(path: &PathBuf) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    if certs.is_empty() {
        bail!("no certificate in {}", path.display());
    }
    Ok(certs)
}

/// The subject of a verified client certificate as an RFC 4514 string (last RDN first,
/// as LDAP writes DNs; attribute types by their usual short names), for SASL EXTERNAL.
pub fn certificate_subject(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    Some(rfc4514(parsed.subject()))
}

fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let value = match atv.as_str() {
                        Ok(text) => escape_value(text),
                        Err(_) => format!("#{}", hex(atv.attr_value().data)),
                    };
                    format!("{}={value}", short_name(&oid).unwrap_or(&oid))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// RFC 4514 §2.4: escape the characters that would end or change the value.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(dir: &Path) -> config::Tls {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Example, Inc.");
        params.distinguished_name.push(rcgen::DnType::CommonName, "ferrodir");
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
        config::Tls { cert_file: dir.join("c.pem"), key_file: dir.join("k.pem"), ..config::Tls::default() }
    }

    #[test]
    fn settings_are_checked_when_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let settings = self_signed(dir.path());
        assert!(build(&settings).is_ok());
        let message = |s: &config::Tls| format!("{:#}", build(s).unwrap_err());
        let old = config::Tls { min_version: "1.1".into(), ..settings.clone() };
        assert!(message(&old).contains("min_version"));
        let no_ca = config::Tls { client_certs: "demand".into(), ..settings.clone() };
        assert!(message(&no_ca).contains("client_ca_file"));
        let with_ca = config::Tls { client_ca_file: Some(settings.cert_file.clone()), ..no_ca };
        assert!(build(&with_ca).is_ok());
        let wrong_key = config::Tls { key_file: settings.cert_file.clone(), ..settings.clone() };
        assert!(message(&wrong_key).contains("private key"));
    }

    #[test]
    fn a_failed_reload_keeps_the_previous_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let settings = self_signed(dir.path());
        let context = TlsContext::load(&settings).unwrap();
        let before = context.current.load_full();
        std::fs::write(&settings.key_file, "not a key").unwrap();
        context.reload_if_changed();
        assert!(Arc::ptr_eq(&before, &context.current.load_full()), "a bad key replaced the good pair");
        self_signed(dir.path());
        context.reload("test");
        assert!(!Arc::ptr_eq(&before, &context.current.load_full()), "a good pair was not loaded");
    }

    #[test]
    fn subjects_read_as_rfc_4514_strings_last_rdn_first() {
        let dir = tempfile::tempdir().unwrap();
        let settings = self_signed(dir.path());
        let cert = CertificateDer::from_pem_file(&settings.cert_file).unwrap();
        assert_eq!(certificate_subject(&cert).as_deref(), Some("CN=ferrodir,O=Example\\, Inc."));
    }

    /// rcgen's default key is ECDSA P-256 signed with SHA-256: the binding is the
    /// certificate's SHA-256; an Ed25519 certificate has none.
    #[test]
    fn server_end_point_follows_the_signature_hash() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let settings = self_signed(dir.path());
        let cert = CertificateDer::from_pem_file(&settings.cert_file).unwrap();
        assert_eq!(server_end_point(&cert), Some(sha2::Sha256::digest(cert.as_ref()).to_vec()));
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let ed =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
        assert_eq!(server_end_point(ed.der()), None);
        let context = TlsContext::load(&settings).unwrap();
        assert_eq!(context.acceptor().1, server_end_point(&cert));
    }

    #[test]
    fn values_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape_value("a,b"), "a\\,b");
        assert_eq!(escape_value("#x "), "\\#x\\ ");
        assert_eq!(escape_value("plain"), "plain");
    }
}
