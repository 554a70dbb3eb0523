//! Who is asking, and over what: the identity a request runs as and the transport its
//! connection guarantees. Value types below the session, the operations, the access rules
//! and the limits, which all read them and none of which the others' imports should pull in.

use std::sync::Arc;

use ferrodir_proto::NormDn;

/// Who a request runs as; captured when the request is dispatched. The DN was normalised
/// once, at bind: the access rules, the limits and paged cookies compare that form. Shared:
/// every request of the connection takes a copy of the identity.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Identity {
    #[default]
    Anonymous,
    /// The configured rootDN.
    Root(Arc<NormDn>),
    /// An entry that bound with its userPassword.
    User(Arc<NormDn>),
}

impl Identity {
    /// The DN stamped as creatorsName/modifiersName on this identity's writes.
    pub fn author(&self) -> String {
        match self {
            Identity::Anonymous => String::new(),
            Identity::Root(dn) | Identity::User(dn) => dn.to_string(),
        }
    }

    /// The authzId of RFC 4513 §5.2.1.8 / RFC 4532: `dn:` and the DN in slapd's pretty
    /// form (types in lower case, a numeric OID by its name from `name_of`, no spaces around
    /// separators, special characters as `\XX`; values as the client wrote them), as slapd
    /// answers Who am I?, or empty for anonymous.
    pub fn authz_id(&self, name_of: &dyn Fn(&str) -> Option<String>) -> String {
        match self {
            Identity::Anonymous => String::new(),
            Identity::Root(dn) | Identity::User(dn) => {
                format!("dn:{}", String::from_utf8_lossy(&dn.dn.pretty(name_of)))
            }
        }
    }
}

/// What the connection's transport guarantees, as access decisions need it: whether the
/// peer is on this host and whether the channel is confidential. Set when the connection
/// is accepted, and again after StartTLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transport {
    /// A loopback TCP peer (127.0.0.0/8, ::1) or a local (ldapi) socket.
    pub local: bool,
    /// TLS is in force: LDAPS, or StartTLS completed.
    pub tls: bool,
    /// The Unix-domain (ldapi) listener; the peer's credentials are in `peer_cred`.
    pub ldapi: bool,
    /// On ldapi: the peer process's uid and gid (SO_PEERCRED).
    pub peer_cred: Option<(u32, u32)>,
    /// Under TLS with a verified client certificate: its subject DN, RFC 4514 string form.
    pub client_cert_subject: Option<String>,
    /// Under TLS: RFC 5929's `tls-server-end-point` channel binding (a hash of the server's
    /// certificate), when the certificate's signature algorithm defines one.
    pub tls_server_end_point: Option<Vec<u8>>,
    /// Under TLS 1.3: RFC 9266's `tls-exporter` channel binding (32 bytes exported with the
    /// label "EXPORTER-Channel-Binding"). Not under TLS 1.2, where it is safe only with the
    /// extended master secret, which rustls doesn't report.
    pub tls_exporter: Option<Vec<u8>>,
    /// The peer as slapd names it (its audit log, cn=Monitor): `IP=127.0.0.1:40522`,
    /// `IP=[::1]:40522`, or `PATH=/run/ldapi` for ldapi; "" when unknown.
    pub peer_name: String,
}

impl Transport {
    /// Whether what travels is protected from others on the network: TLS, or a socket
    /// that never leaves the host (ldapi). Loopback TCP is not confidential by itself; the
    /// `require_tls_for_binds` exemption for loopback peers is decided where it applies.
    pub fn confidential(&self) -> bool {
        self.tls || self.ldapi
    }

    /// Whether a password may travel on this connection: always when `require_tls` is off,
    /// else only when it is confidential or the peer is on this host (loopback is exempt).
    /// A refusal is confidentialityRequired (13), RFC 4513 §5.1.2 and §6.3.1.
    pub fn password_allowed(&self, require_tls: bool) -> bool {
        !require_tls || self.confidential() || self.local
    }
}
