//! The example entries a new data directory gets with `example_data = true` (the README's
//! first command), and the password they publish.

/// What a new data directory holds when `example_data` is set.
pub const EXAMPLE_LDIF: &str = include_str!("../example.ldif");

/// The password of every example entry with a userPassword (example.ldif says so: alice's
/// stored as `{SSHA}`, bob's in cleartext). Printed in the README, so a server beyond
/// loopback refuses to start while one of them still has it (serve/exposure.rs).
pub const EXAMPLE_PASSWORD: &str = "password";
