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
    let before = (standard().attribute_types().count(), standard().object_classes().count());
    let after = |schema: &Schema| (schema.attribute_types().count(), schema.object_classes().count());
    if schema.load_openldap_schema(text).is_err() {
        assert_eq!(after(&schema), before, "a failed load changed the schema");
        return;
    }
    let (attributes, classes) = after(&schema);
    assert!(attributes >= before.0 && classes >= before.1, "a load removed definitions");
    // The class chains of what was loaded must be walkable (no loop, no panic).
    for class in schema.object_classes() {
        let _ = schema.superclasses(class);
    }
});
