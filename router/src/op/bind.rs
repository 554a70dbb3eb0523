//! Bind (RFC 4511 §4.2, RFC 4513 §5.1): anonymous, and simple binds as the configured rootDN
//! or as an entry holding userPassword. An unknown DN, an entry without userPassword and a
//! wrong password get the same answer, invalidCredentials with no diagnostic, after the
//! same work: the first two check the offered password against a dummy hash of the
//! configured scheme, so that the time taken doesn't tell which DNs exist either. Every
//! check runs on the hash pool (`password::pool`); when its queue is full, the bind gets
//! busy (51).

use ferrodir_proto::message::ppolicy::{PasswordPolicyResponse, PASSWORD_POLICY_OID};
use ferrodir_proto::message::{
    AuthenticationChoice, BindRequest, BindResponse, Control, LdapResult, OctetString, ProtocolOp,
};
use ferrodir_proto::ResultCode;

use crate::error::LdapError;
use crate::op::context::OpContext;
use crate::op::credentials::verify;
use crate::op::parse_dn;
use crate::op::sasl;
use crate::requester::Identity;

pub fn response(result: LdapResult) -> ProtocolOp {
    ProtocolOp::BindResponse(BindResponse { result, server_sasl_creds: None })
}

/// Runs the bind, answers it, and returns the connection's new identity (anonymous on any
/// failure, RFC 4511 §4.2.1, and while a SASL exchange is under way) and the SASL exchange
/// now under way, if any (`pending`: the one the connection had, which this bind continues
/// or drops).
pub async fn bind(
    ctx: &OpContext,
    request: BindRequest,
    pending: Option<sasl::scram::Pending>,
) -> (Identity, Option<sasl::scram::Pending>) {
    let mut policy = None;
    let mut step = sasl::Step::default();
    let (result, identity) = match authenticate(ctx, request, pending, &mut policy, &mut step).await {
        Ok(identity) => (LdapResult::success(), identity),
        Err(e) => (e.to_result(), Identity::Anonymous),
    };
    // A bind that must be followed by a change of password restricts the connection until
    // then (ppolicy::reset); any other bind lifts it.
    let reset = policy
        .is_some_and(|p| p.error == Some(ferrodir_proto::message::ppolicy::PolicyError::ChangeAfterReset));
    ctx.must_change.set(reset && result.result_code == ferrodir_proto::ResultCode::SUCCESS);
    let response = ProtocolOp::BindResponse(BindResponse {
        result,
        server_sasl_creds: step.server_creds.map(OctetString::from),
    });
    ctx.respond_with(response, policy_control(ctx, policy)).await;
    (identity, step.pending)
}

/// The Password Policy response control, when the request asked for it and a simple bind
/// checked an entry's password (draft-behera-ldap-password-policy-10 §8.1.2). Also for a
/// DN that names no entry, unlike slapd: a control only existing entries got would tell
/// which DNs exist.
fn policy_control(ctx: &OpContext, policy: Option<PasswordPolicyResponse>) -> Option<Vec<Control>> {
    let asked =
        ctx.controls.iter().flatten().any(|c| c.control_type.as_ref() == PASSWORD_POLICY_OID.as_bytes());
    let value = policy.filter(|_| asked)?.encode_value().ok()?;
    Some(vec![Control {
        control_type: OctetString::from_static(PASSWORD_POLICY_OID.as_bytes()),
        criticality: false,
        control_value: Some(OctetString::from(value)),
    }])
}

/// `policy`: set to the policy's word when a simple bind checked an entry's password.
async fn authenticate(
    ctx: &OpContext,
    request: BindRequest,
    pending: Option<sasl::scram::Pending>,
    policy: &mut Option<PasswordPolicyResponse>,
    step: &mut sasl::Step,
) -> Result<Identity, LdapError> {
    if request.version != 3 {
        return Err(LdapError::protocol("only LDAPv3 is supported"));
    }
    let password = match request.authentication {
        AuthenticationChoice::Simple(password) => password,
        AuthenticationChoice::Sasl(credentials) => {
            return sasl::authenticate(ctx, credentials, pending, step).await
        }
    };
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    match (request.name.is_empty(), password.is_empty()) {
        (true, true) => return Ok(Identity::Anonymous),
        (true, false) => return Err(invalid()),
        // RFC 4513 §5.1.2: an unauthenticated bind is refused.
        (false, true) => {
            return Err(LdapError::unwilling("unauthenticated bind (DN with no password) disallowed"))
        }
        (false, false) => {}
    }
    if !ctx.transport.password_allowed(ctx.config.require_tls_for_binds) {
        return Err(LdapError::new(ResultCode::CONFIDENTIALITY_REQUIRED, "confidentiality required"));
    }
    let dn = parse_dn(&ctx.config, &request.name)?;
    let root = ctx.config.is_root_dn(&dn);
    let verified = verify(&ctx.worker, &ctx.transport, dn, &password).await;
    if !root {
        *policy = Some(verified.policy);
    }
    verified.identity
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::ResultCode;

    use crate::testkit::{run, TestDirectory, ROOT_DN, ROOT_PASSWORD, USER_PASSWORD};

    const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

    #[test]
    fn the_root_dn_and_an_entry_bind_with_their_passwords() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut client = directory.connect();
            assert_eq!(client.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
            // Names compare by the schema's rules: case and spacing don't matter.
            assert_eq!(client.bind("CN=Admin, dc=Example,dc=COM", ROOT_PASSWORD).await, ResultCode::SUCCESS);
            assert_eq!(client.bind(ALICE, USER_PASSWORD).await, ResultCode::SUCCESS);
        });
    }

    #[test]
    fn a_wrong_password_an_unknown_dn_and_a_bad_name_are_all_invalid_credentials() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut client = directory.connect();
            let invalid = ResultCode::INVALID_CREDENTIALS;
            assert_eq!(client.bind(ROOT_DN, "wrong").await, invalid);
            assert_eq!(client.bind(ALICE, "wrong").await, invalid);
            assert_eq!(client.bind("uid=nobody,ou=people,dc=example,dc=com", USER_PASSWORD).await, invalid);
            // A password with no name is no anonymous bind.
            assert_eq!(client.bind("", USER_PASSWORD).await, invalid);
        });
    }

    #[test]
    fn anonymous_binds_and_a_name_without_password_is_refused() {
        run(async {
            let directory = TestDirectory::with_people(1).await;
            let mut client = directory.connect();
            assert_eq!(client.bind("", "").await, ResultCode::SUCCESS);
            // RFC 4513 §5.1.2: an unauthenticated bind (a DN, no password) is refused.
            assert_eq!(client.bind(ALICE, "").await, ResultCode::UNWILLING_TO_PERFORM);
        });
    }

    #[test]
    fn a_failed_bind_leaves_the_connection_anonymous() {
        run(async {
            let directory = TestDirectory::with_people(1).await;
            let mut client = directory.connect();
            assert_eq!(client.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
            assert_eq!(client.bind(ROOT_DN, "wrong").await, ResultCode::INVALID_CREDENTIALS);
            let added =
                client.add("cn=x,dc=example,dc=com", &[("objectClass", &["person"]), ("sn", &["x"])]).await;
            assert_eq!(added.result_code, ResultCode::STRONGER_AUTH_REQUIRED, "{added:?}");
        });
    }
}
