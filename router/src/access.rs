//! Access decisions. Until real ACLs arrive, a fixed, safe policy: anyone may bind and
//! search, nobody but the rootDN reads userPassword (unless the `open-read` profile asks for
//! slapd's no-ACL behaviour), and only the rootDN writes.

use ferrodir_proto::{Dn, ResultCode};

use crate::config::{AccessProfile, DirectoryConfig};
use crate::error::LdapError;

/// Who a request runs as; captured when the request is dispatched.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Identity {
    #[default]
    Anonymous,
    /// The configured rootDN.
    Root(Dn),
    /// An entry that bound with its userPassword.
    User(Dn),
}

impl Identity {
    /// The DN stamped as creatorsName/modifiersName on this identity's writes.
    pub fn author(&self) -> String {
        match self {
            Identity::Anonymous => String::new(),
            Identity::Root(dn) | Identity::User(dn) => dn.to_string(),
        }
    }

    /// The authzId of RFC 4513 §5.2.1.8 / RFC 4532: `dn:...` or empty for anonymous.
    pub fn authz_id(&self) -> String {
        match self {
            Identity::Anonymous => String::new(),
            Identity::Root(dn) | Identity::User(dn) => format!("dn:{dn}"),
        }
    }
}

/// Whether `who` may write. Anonymous gets strongerAuthRequired, as slapd answers.
pub fn check_write(who: &Identity) -> Result<(), LdapError> {
    match who {
        Identity::Root(_) => Ok(()),
        Identity::Anonymous => {
            Err(LdapError::new(ResultCode::STRONGER_AUTH_REQUIRED, "modifications require authentication"))
        }
        Identity::User(_) => Err(LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, "no write access")),
    }
}

/// Anonymous writes are refused before the target is even looked up (slapd answers
/// strongerAuthRequired whether or not the entry exists); other identities are checked
/// after name resolution, with [`check_write`].
pub fn check_not_anonymous(who: &Identity) -> Result<(), LdapError> {
    match who {
        Identity::Anonymous => check_write(who),
        _ => Ok(()),
    }
}

/// Whether `who` may set the password of the entry named `target` by Password Modify:
/// the rootDN anyone's, a user their own (self write on userPassword), nobody else's.
/// Access rules (issue #7) decide here.
pub fn may_change_password(who: &Identity, target: &Dn) -> Result<(), LdapError> {
    match who {
        Identity::Root(_) => Ok(()),
        Identity::User(dn) if dn.normalized() == target.normalized() => Ok(()),
        Identity::User(_) => Err(LdapError::new(
            ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
            "no write access to the target's userPassword",
        )),
        Identity::Anonymous => Err(LdapError::new(
            ResultCode::STRONGER_AUTH_REQUIRED,
            "only authenticated users may change passwords",
        )),
    }
}

/// Lowercased attribute types that `who` may not read.
pub fn hidden_attributes(config: &DirectoryConfig, who: &Identity) -> Vec<String> {
    match (config.access, who) {
        (_, Identity::Root(_)) | (AccessProfile::OpenRead, _) => Vec::new(),
        _ => vec!["userpassword".to_string()],
    }
}

/// Canonical attribute types that `who` may not use in a search filter: an assertion on
/// one is Undefined (as in slapd, which needs `search` access to evaluate it). Under the
/// fixed policy these are the types `who` may not read.
pub fn unsearchable_attributes(config: &DirectoryConfig, who: &Identity) -> Vec<String> {
    hidden_attributes(config, who)
}

/// What `who` may do with an entry as a search base (RFC 4511 §4.5.1, slapd's `search`
/// and `disclose` privileges).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EntryAccess {
    /// May search from it (and so learn it exists).
    Search,
    /// May learn that it exists, not search from it.
    DiscloseOnly,
    /// May not even learn that it exists.
    Nothing,
}

/// The access `who` has to `dn` as a search base. The fixed policy lets everyone search
/// every entry; access rules (issue #7) decide here.
pub fn entry_access(_config: &DirectoryConfig, _who: &Identity, _dn: &Dn) -> EntryAccess {
    EntryAccess::Search
}

/// The answer to a search whose base the requester may not search, as slapd gives it:
/// insufficientAccessRights when the entry may be disclosed, else noSuchObject with no
/// matchedDN, exactly as if it did not exist.
pub fn base_refusal(access: EntryAccess) -> Option<LdapError> {
    match access {
        EntryAccess::Search => None,
        EntryAccess::DiscloseOnly => {
            Some(LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, "no search access to the base"))
        }
        EntryAccess::Nothing => Some(LdapError::new(ResultCode::NO_SUCH_OBJECT, "")),
    }
}

/// Whether `who` may compare against `attr_lower`.
pub fn may_read(config: &DirectoryConfig, who: &Identity, attr_lower: &str) -> bool {
    !hidden_attributes(config, who).iter().any(|h| h == attr_lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_writes() {
        assert!(check_write(&Identity::Root(Dn::default())).is_ok());
        assert_eq!(check_write(&Identity::Anonymous).unwrap_err().code, ResultCode(8));
        assert_eq!(check_write(&Identity::User(Dn::default())).unwrap_err().code, ResultCode(50));
    }

    #[test]
    fn users_change_only_their_own_password() {
        let alice = Dn::parse("uid=alice,dc=example,dc=com").unwrap();
        let bob = Dn::parse("uid=bob,dc=example,dc=com").unwrap();
        let alice_again = Dn::parse("UID=Alice, dc=example,dc=com").unwrap();
        assert!(may_change_password(&Identity::User(alice.clone()), &alice_again).is_ok());
        assert!(may_change_password(&Identity::Root(Dn::default()), &bob).is_ok());
        assert_eq!(may_change_password(&Identity::User(alice), &bob).unwrap_err().code, ResultCode(50));
        assert_eq!(may_change_password(&Identity::Anonymous, &bob).unwrap_err().code, ResultCode(8));
    }

    #[test]
    fn a_base_without_search_access_is_refused_as_slapd_does() {
        assert!(base_refusal(EntryAccess::Search).is_none());
        assert_eq!(base_refusal(EntryAccess::DiscloseOnly).map(|e| e.code), Some(ResultCode(50)));
        let hidden = base_refusal(EntryAccess::Nothing).unwrap();
        assert_eq!(hidden.code, ResultCode(32));
        assert!(hidden.matched_dn.is_empty(), "names nothing the requester may not see");
    }
}
