//! The forced change after a reset (draft-behera-ldap-password-policy-10 §8.1.2.2 and
//! §8.2.1, slapd 2.5 as the reference): under pwdMustChange TRUE, a password changed by
//! anyone but the entry itself (an administrator's reset, the rootDN's included; not the
//! first one, set by an Add) sets pwdReset TRUE; the user's own change deletes it. A bind with pwdReset TRUE succeeds, says
//! changeAfterReset in the control, and leaves the connection able to do nothing but
//! change that password (and bind again, unbind, abandon): any other request answers
//! insufficientAccessRights (50), as slapd's "Operations are restricted to
//! bind/unbind/abandon/StartTLS/modify password".

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};

use crate::ppolicy::policy::Policy;

pub const RESET: &str = "pwdReset";

/// What slapd answers a restricted connection.
pub const RESTRICTED: &str = "Operations are restricted to bind/unbind/abandon/StartTLS/modify password";

/// Whether a bind to `entry` under `policy` must be followed by a change of password.
pub fn must_change(policy: &Policy, entry: &Entry) -> bool {
    policy.must_change && entry.first_str(RESET).is_some_and(|v| v.eq_ignore_ascii_case("TRUE"))
}

/// The pwdReset change that goes with a new password: deleted by the entry's own change,
/// set TRUE by anyone else's under pwdMustChange. None: nothing to change.
pub fn on_change(policy: &Policy, current: Option<&Entry>, own: bool) -> Option<LdifMod> {
    if own {
        let had = current.is_some_and(|e| e.get(RESET).is_some());
        return had.then(|| LdifMod { op: ModOp::Replace, attr: Attribute::new(RESET, Vec::new()) });
    }
    policy
        .must_change
        .then(|| LdifMod { op: ModOp::Replace, attr: Attribute::new(RESET, vec![b"TRUE".to_vec()]) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_by_another_sets_it_and_the_own_change_clears_it() {
        let policy = Policy { must_change: true, ..Policy::default() };
        let set = on_change(&policy, None, false).unwrap();
        assert_eq!(set.attr.values, vec![b"TRUE".to_vec()]);
        let mut entry = Entry::default();
        entry.attrs.push(set.attr);
        assert!(must_change(&policy, &entry));
        let cleared = on_change(&policy, Some(&entry), true).unwrap();
        assert!(cleared.attr.values.is_empty());
        assert!(on_change(&policy, Some(&Entry::default()), true).is_none(), "nothing to clear");
        let relaxed = Policy::default();
        assert!(on_change(&relaxed, None, false).is_none());
        assert!(!must_change(&relaxed, &entry), "pwdMustChange FALSE: pwdReset means nothing");
    }
}
