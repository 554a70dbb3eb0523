//! OpenLDAP `.schema` text loaded on top of the built-in schema: never panics, and a failed
//! load leaves the schema as it was.
#![no_main]

use std::sync::OnceLock;

use ferrodir_proto::schema::Schema;
use libfuzzer_sys::fuzz_target;

fn standard() -> &'static Schema {
    static STANDARD: OnceLock<Schema> = OnceLock::new();
    STANDARD.get_or_init(Schema::standard)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut schema = standard().clone();
    if schema.load_openldap_schema(text).is_err() {
        let before = standard().attribute_types().count() + standard().object_classes().count();
        let after = schema.attribute_types().count() + schema.object_classes().count();
        assert_eq!(after, before, "a failed load changed the schema");
    }
    for attribute in schema.attribute_types() {
        let _ = schema.subtypes(attribute);
    }
    for class in schema.object_classes() {
        let _ = schema.superclasses(class);
    }
});
