//! Round-trip properties of the codecs, over generated values (proptest):
//! - LDAP messages (search requests with random filters, add and modify requests, results):
//!   `decode(encode(m)) == m`, and the encoding passes `check_frame` whole;
//! - filters: RFC 4515 string form, `parse(print(f)) == f`; BER, `decode(encode(f)) == f`;
//! - DNs: `parse(print(dn))` has the same normalized form and prints the same, and any string
//!   that parses does so too.
//!
//! The fuzz targets (fuzz/) check the same properties from the other side: arbitrary bytes.

use proptest::collection::vec;
use proptest::prelude::*;
use rasn::types::OctetString;

use crate::dn::{Dn, Rdn};
use crate::filter::{
    parse_filter, AttributeValueAssertion, Filter, MatchingRuleAssertion, Substring, SubstringFilter,
};
use crate::frame::{check_frame, FrameLimits};
use crate::message::{
    decode_message, encode_message, AddRequest, Change, Control, DerefAliases, LdapMessage, LdapResult,
    ModifyOperation, ModifyRequest, PartialAttribute, ProtocolOp, SearchRequest, SearchScope, MESSAGE_ID_MAX,
};
use crate::ResultCode;

fn octets(strategy: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = OctetString> {
    strategy.prop_map(OctetString::from)
}

/// An attribute description as RFC 4512 §2.5 writes it: a name or an OID, with options.
fn attribute_description() -> impl Strategy<Value = String> {
    let name = "[a-zA-Z][a-zA-Z0-9-]{0,8}";
    let oid = "[0-2](\\.(0|[1-9][0-9]{0,3})){1,4}";
    (prop_oneof![name, oid], vec("[a-zA-Z0-9-]{1,6}", 0..2))
        .prop_map(|(base, options)| options.iter().fold(base, |desc, option| format!("{desc};{option}")))
}

fn description_octets() -> impl Strategy<Value = OctetString> {
    attribute_description().prop_map(|s| OctetString::from(s.into_bytes()))
}

/// A value: any bytes, NUL, the filter and DN specials and non-UTF-8 included.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(any::<u8>(), 0..12), "[ -~\u{e9}\u{10d}\u{1F600}]{0,12}".prop_map(String::into_bytes)]
}

fn nonempty_value() -> impl Strategy<Value = OctetString> {
    octets(vec(any::<u8>(), 1..10))
}

fn assertion() -> impl Strategy<Value = AttributeValueAssertion> {
    (description_octets(), octets(value())).prop_map(|(attribute_desc, assertion_value)| {
        AttributeValueAssertion { attribute_desc, assertion_value }
    })
}

/// Substrings as a string can write them: initial and final optional, every part non-empty,
/// at least one part.
fn substrings() -> impl Strategy<Value = SubstringFilter> {
    let parts = (
        proptest::option::of(nonempty_value()),
        vec(nonempty_value(), 0..3),
        proptest::option::of(nonempty_value()),
    );
    (description_octets(), parts)
        .prop_filter("at least one part", |(_, (initial, any, last))| {
            initial.is_some() || !any.is_empty() || last.is_some()
        })
        .prop_map(|(r#type, (initial, any, last))| {
            let mut substrings: Vec<Substring> = initial.into_iter().map(Substring::Initial).collect();
            substrings.extend(any.into_iter().map(Substring::Any));
            substrings.extend(last.into_iter().map(Substring::Final));
            SubstringFilter { r#type, substrings }
        })
}

/// An extensible match as a string can write it: a type or a matching rule, or both.
fn extensible() -> impl Strategy<Value = MatchingRuleAssertion> {
    (
        proptest::option::of(description_octets()),
        proptest::option::of(description_octets()),
        octets(value()),
        any::<bool>(),
    )
        .prop_filter("a type or a rule", |(rule, r#type, _, _)| rule.is_some() || r#type.is_some())
        .prop_map(|(matching_rule, r#type, match_value, dn_attributes)| {
            // A rule in the string form is a name or an OID without options.
            let matching_rule = matching_rule.map(|rule| {
                let text = rule.split(|&b| b == b';').next().unwrap_or_default().to_vec();
                OctetString::from(text)
            });
            MatchingRuleAssertion { matching_rule, r#type, match_value, dn_attributes }
        })
}

fn filter() -> impl Strategy<Value = Filter> {
    let leaf = prop_oneof![
        description_octets().prop_map(Filter::Present),
        assertion().prop_map(Filter::EqualityMatch),
        assertion().prop_map(Filter::GreaterOrEqual),
        assertion().prop_map(Filter::LessOrEqual),
        assertion().prop_map(Filter::ApproxMatch),
        substrings().prop_map(Filter::Substrings),
        extensible().prop_map(Filter::ExtensibleMatch),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Filter::And),
            vec(inner.clone(), 0..4).prop_map(Filter::Or),
            inner.prop_map(|f| Filter::Not(Box::new(f))),
        ]
    })
}

fn partial_attribute(min_values: usize) -> impl Strategy<Value = PartialAttribute> {
    (description_octets(), vec(octets(value()), min_values..4))
        .prop_map(|(r#type, vals)| PartialAttribute { r#type, vals })
}

fn search_request() -> impl Strategy<Value = ProtocolOp> {
    let scope = prop_oneof![
        Just(SearchScope::BaseObject),
        Just(SearchScope::SingleLevel),
        Just(SearchScope::WholeSubtree),
        Just(SearchScope::SubordinateSubtree),
    ];
    let deref = prop_oneof![
        Just(DerefAliases::NeverDerefAliases),
        Just(DerefAliases::DerefInSearching),
        Just(DerefAliases::DerefFindingBaseObj),
        Just(DerefAliases::DerefAlways),
    ];
    let limits = (0..=MESSAGE_ID_MAX, 0..=MESSAGE_ID_MAX, any::<bool>());
    (octets(value()), scope, deref, limits, filter(), vec(description_octets(), 0..4)).prop_map(
        |(base_object, scope, deref_aliases, (size_limit, time_limit, types_only), filter, attributes)| {
            ProtocolOp::SearchRequest(SearchRequest {
                base_object,
                scope,
                deref_aliases,
                size_limit,
                time_limit,
                types_only,
                filter,
                attributes,
            })
        },
    )
}

fn modify_request() -> impl Strategy<Value = ProtocolOp> {
    let operation = prop_oneof![
        Just(ModifyOperation::Add),
        Just(ModifyOperation::Delete),
        Just(ModifyOperation::Replace),
        Just(ModifyOperation::Increment),
    ];
    let change = (operation, partial_attribute(0))
        .prop_map(|(operation, modification)| Change { operation, modification });
    (octets(value()), vec(change, 0..4))
        .prop_map(|(object, changes)| ProtocolOp::ModifyRequest(ModifyRequest { object, changes }))
}

fn add_request() -> impl Strategy<Value = ProtocolOp> {
    (octets(value()), vec(partial_attribute(1), 0..4))
        .prop_map(|(entry, attributes)| ProtocolOp::AddRequest(AddRequest { entry, attributes }))
}

fn result() -> impl Strategy<Value = LdapResult> {
    let referral = proptest::option::of(vec(octets(value()), 1..3));
    (0..=MESSAGE_ID_MAX, octets(value()), octets(value()), referral).prop_map(
        |(code, matched_dn, diagnostic_message, referral)| {
            let mut result = LdapResult::new(ResultCode(code), String::new(), String::new());
            result.matched_dn = matched_dn;
            result.diagnostic_message = diagnostic_message;
            result.referral = referral;
            result
        },
    )
}

fn response() -> impl Strategy<Value = ProtocolOp> {
    prop_oneof![
        result().prop_map(ProtocolOp::SearchResultDone),
        result().prop_map(ProtocolOp::ModifyResponse),
        result().prop_map(ProtocolOp::AddResponse),
        result().prop_map(ProtocolOp::DelResponse),
        result().prop_map(ProtocolOp::CompareResponse),
    ]
}

fn control() -> impl Strategy<Value = Control> {
    (description_octets(), any::<bool>(), proptest::option::of(octets(value()))).prop_map(
        |(control_type, criticality, control_value)| Control { control_type, criticality, control_value },
    )
}

fn message() -> impl Strategy<Value = LdapMessage> {
    let op = prop_oneof![search_request(), modify_request(), add_request(), response()];
    (0..=MESSAGE_ID_MAX, op, proptest::option::of(vec(control(), 0..3)))
        .prop_map(|(message_id, protocol_op, controls)| LdapMessage { message_id, protocol_op, controls })
}

/// An RDN value as text: printable ASCII with every DN special, spaces at the ends, `#`
/// first, and non-ASCII letters.
fn rdn_value() -> impl Strategy<Value = String> {
    "[ -~\u{e9}\u{10d}]{1,10}"
}

fn dn() -> impl Strategy<Value = Dn> {
    let rdn = ("[a-zA-Z][a-zA-Z0-9-]{0,6}", rdn_value());
    vec(rdn, 0..5).prop_map(|rdns| {
        rdns.into_iter()
            .rev()
            .fold(Dn::root(), |parent, (attr, value)| parent.child(Rdn::new(attr, value.into_bytes())))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn messages_round_trip(message in message()) {
        let encoded = encode_message(&message).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(check_frame(&encoded, &FrameLimits::default()), Ok(Some(encoded.len())));
        prop_assert_eq!(decode_message(&encoded), Ok(message));
    }

    #[test]
    fn filters_round_trip_through_ber(filter in filter()) {
        let encoded = rasn::ber::encode(&filter).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(rasn::der::decode::<Filter>(&encoded).ok(), Some(filter));
    }

    #[test]
    fn filters_round_trip_through_strings(filter in filter()) {
        let printed = filter.to_string();
        prop_assert_eq!(parse_filter(&printed).map_err(|e| e.to_string()), Ok(filter), "{}", printed);
    }

    #[test]
    fn filter_strings_that_parse_print_to_a_fixpoint(text in "\\(([a-z]{1,3}[=~<>:*]{1,3}[ -~]{0,8})\\)") {
        if let Ok(filter) = parse_filter(&text) {
            let printed = filter.to_string();
            prop_assert_eq!(parse_filter(&printed).map_err(|e| e.to_string()), Ok(filter));
        }
    }

    #[test]
    fn dns_round_trip(dn in dn()) {
        let printed = dn.to_string();
        let reparsed = Dn::parse(&printed).map_err(|e| TestCaseError::fail(format!("{printed:?}: {e}")))?;
        prop_assert_eq!(reparsed.normalized(&crate::value::PlainAvas), dn.normalized(&crate::value::PlainAvas), "{}", printed);
        prop_assert_eq!(reparsed.to_string(), printed);
    }

    #[test]
    fn dn_strings_that_parse_round_trip(text in "([a-zA-Z]{1,3}=[ -~\u{e9}]{0,8}[,+;]?){0,4}") {
        if let Ok(dn) = Dn::parse(&text) {
            let printed = dn.to_string();
            let reparsed = Dn::parse(&printed).map_err(|e| TestCaseError::fail(format!("{printed:?}: {e}")))?;
            prop_assert_eq!(reparsed.normalized(&crate::value::PlainAvas), dn.normalized(&crate::value::PlainAvas), "{} printed as {}", text, printed);
            prop_assert_eq!(reparsed.to_string(), printed);
        }
    }
}
