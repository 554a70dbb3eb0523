//! The names op::dynlist goes by: the class that makes an entry a dynamic group, the types
//! it reads and computes, and its fixed bound. A file of its own so that every part of the
//! stage (and `access`, through [`super::acl`]) can use them without importing the stage.

/// The most memberURL values one entry may hold and have expanded; one more is
/// adminLimitExceeded. Each is a search, so this bounds the work one entry can ask for.
pub const MEMBER_URLS_MAX: usize = 64;

/// The class that makes an entry a dynamic group, and its OID.
pub(super) const GROUP_CLASS: &str = "groupofurls";
pub(super) const GROUP_CLASS_OID: &str = "2.16.840.1.113730.3.2.33";
/// Canonical names (the rule table's) of the URL and the computed attribute.
pub(super) const URL_TYPE: &str = "memberurl";
pub(super) const MEMBER_TYPE: &str = "member";
pub(super) const CLASS_TYPE: &str = "objectclass";
