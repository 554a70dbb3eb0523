//! LDAP result codes. RFC 4511's ENUMERATED is open-ended in practice (RFC 3909 adds 118-121,
//! RFC 4370 adds 123, RFC 4528 adds 122, RFC 3928 adds 4096), so the code is a plain integer
//! newtype with named constants rather than a closed enum.

/// An LDAP resultCode (RFC 4511 §4.1.9). Any value a peer sends survives a round trip.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResultCode(pub u32);

impl ResultCode {
    pub const SUCCESS: Self = Self(0);
    pub const OPERATIONS_ERROR: Self = Self(1);
    pub const PROTOCOL_ERROR: Self = Self(2);
    pub const TIME_LIMIT_EXCEEDED: Self = Self(3);
    pub const SIZE_LIMIT_EXCEEDED: Self = Self(4);
    pub const COMPARE_FALSE: Self = Self(5);
    pub const COMPARE_TRUE: Self = Self(6);
    pub const AUTH_METHOD_NOT_SUPPORTED: Self = Self(7);
    pub const STRONGER_AUTH_REQUIRED: Self = Self(8);
    pub const REFERRAL: Self = Self(10);
    pub const ADMIN_LIMIT_EXCEEDED: Self = Self(11);
    pub const UNAVAILABLE_CRITICAL_EXTENSION: Self = Self(12);
    pub const CONFIDENTIALITY_REQUIRED: Self = Self(13);
    pub const SASL_BIND_IN_PROGRESS: Self = Self(14);
    pub const NO_SUCH_ATTRIBUTE: Self = Self(16);
    pub const UNDEFINED_ATTRIBUTE_TYPE: Self = Self(17);
    pub const INAPPROPRIATE_MATCHING: Self = Self(18);
    pub const CONSTRAINT_VIOLATION: Self = Self(19);
    pub const ATTRIBUTE_OR_VALUE_EXISTS: Self = Self(20);
    pub const INVALID_ATTRIBUTE_SYNTAX: Self = Self(21);
    pub const NO_SUCH_OBJECT: Self = Self(32);
    pub const ALIAS_PROBLEM: Self = Self(33);
    pub const INVALID_DN_SYNTAX: Self = Self(34);
    pub const ALIAS_DEREFERENCING_PROBLEM: Self = Self(36);
    pub const INAPPROPRIATE_AUTHENTICATION: Self = Self(48);
    pub const INVALID_CREDENTIALS: Self = Self(49);
    pub const INSUFFICIENT_ACCESS_RIGHTS: Self = Self(50);
    pub const BUSY: Self = Self(51);
    pub const UNAVAILABLE: Self = Self(52);
    pub const UNWILLING_TO_PERFORM: Self = Self(53);
    pub const LOOP_DETECT: Self = Self(54);
    pub const NAMING_VIOLATION: Self = Self(64);
    pub const OBJECT_CLASS_VIOLATION: Self = Self(65);
    pub const NOT_ALLOWED_ON_NON_LEAF: Self = Self(66);
    pub const NOT_ALLOWED_ON_RDN: Self = Self(67);
    pub const ENTRY_ALREADY_EXISTS: Self = Self(68);
    pub const OBJECT_CLASS_MODS_PROHIBITED: Self = Self(69);
    pub const AFFECTS_MULTIPLE_DSAS: Self = Self(71);
    pub const OTHER: Self = Self(80);
    /// RFC 3909.
    pub const CANCELED: Self = Self(118);
    pub const NO_SUCH_OPERATION: Self = Self(119);
    pub const TOO_LATE: Self = Self(120);
    pub const CANNOT_CANCEL: Self = Self(121);
    /// RFC 4528.
    pub const ASSERTION_FAILED: Self = Self(122);
    /// RFC 4370.
    pub const AUTHORIZATION_DENIED: Self = Self(123);
    /// RFC 3928.
    pub const E_SYNC_REFRESH_REQUIRED: Self = Self(4096);

    pub fn is_success(self) -> bool {
        self == Self::SUCCESS
    }
}

impl std::fmt::Display for ResultCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
