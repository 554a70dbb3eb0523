//! The root DSE (RFC 4512 §5.1) and the subschema entry, served by the router from config
//! without a trip to the shards.

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::message::{OctetString, PartialAttribute, SearchResultEntry};
use ferrodir_proto::schema::Schema;
use ferrodir_shard::AttrSelection;

use crate::config::DirectoryConfig;
use crate::op::{controls, extended, sasl};
use crate::requester::Transport;

pub const SUBSCHEMA_DN: &str = "cn=Subschema";

/// Features (RFC 4512 §5.1.5): all operational attributes `+` (RFC 3673), absolute
/// true/false filters (RFC 4526), Modify increment (RFC 4525).
/// RFC 3673 `+` (4203.1.5.1), RFC 4529 `@objectClass` (4203.1.5.2), RFC 4526 absolute
/// true and false filters (4203.1.5.3), RFC 4525 Modify-Increment (1.3.6.1.1.14).
const SUPPORTED_FEATURES: &[&str] =
    &["1.3.6.1.4.1.4203.1.5.1", "1.3.6.1.4.1.4203.1.5.2", "1.3.6.1.4.1.4203.1.5.3", "1.3.6.1.1.14"];

/// The root DSE; everything but objectClass is operational, as slapd publishes it.
/// `transport`: the asking connection's, which decides the SASL mechanisms listed.
pub fn root_dse(config: &DirectoryConfig, transport: &Transport) -> (Entry, Entry) {
    let user = Entry::new(vec![attr("objectClass", &["top", "OpenLDAProotDSE"])]);
    let contexts: Vec<&str> = config.suffixes.iter().map(|s| s.display.as_str()).collect();
    let operational = Entry::new(vec![
        attr("namingContexts", &contexts),
        attr("supportedControl", controls::SUPPORTED),
        attr("supportedExtension", &extended::supported(config)),
        attr("supportedFeatures", SUPPORTED_FEATURES),
        attr("supportedLDAPVersion", &["3"]),
        attr("supportedSASLMechanisms", &sasl::mechanisms(transport)),
        attr("subschemaSubentry", &[SUBSCHEMA_DN]),
        attr("vendorName", &["Ferrodir"]),
        attr("vendorVersion", &[config.vendor_version.as_str()]),
        attr("entryDN", &[""]),
        attr("structuralObjectClass", &["OpenLDAProotDSE"]),
    ]);
    (user, operational)
}

/// The subschema entry (RFC 4512 §4.2): the schema in force, as data.
pub fn subschema(schema: &Schema) -> (Entry, Entry) {
    let user = Entry::new(vec![
        attr("objectClass", &["top", "subentry", "subschema", "extensibleObject"]),
        attr("cn", &["Subschema"]),
    ]);
    let mut operational = Entry::new(vec![attr("structuralObjectClass", &["subentry"])]);
    for (name, values) in schema.subschema_values() {
        operational.attrs.push(Attribute::new(name, values.into_iter().map(String::into_bytes).collect()));
    }
    (user, operational)
}

fn attr(name: &str, values: &[&str]) -> Attribute {
    Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
}

/// The SearchResultEntry for a router-served entry under `sel`.
pub fn encode(dn: &str, user: &Entry, operational: &Entry, sel: &AttrSelection) -> SearchResultEntry {
    let mut attributes = Vec::new();
    let mut push = |a: &Attribute| {
        if a.values.is_empty() {
            return;
        }
        let vals = if sel.types_only {
            Vec::new()
        } else {
            a.values.iter().map(|v| OctetString::from(v.as_slice())).collect()
        };
        attributes.push(PartialAttribute { r#type: OctetString::from(a.name.as_bytes()), vals });
    };
    for a in &user.attrs {
        let lower = a.name.to_ascii_lowercase();
        if sel.all_user || sel.names.contains(&lower) {
            push(a);
        }
    }
    for a in &operational.attrs {
        let lower = a.name.to_ascii_lowercase();
        if sel.all_operational || sel.names.contains(&lower) {
            push(a);
        }
    }
    SearchResultEntry { object_name: OctetString::from(dn.as_bytes()), attributes }
}
