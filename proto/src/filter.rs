//! Search filters: the wire CHOICE of RFC 4511 §4.5.1.7 as a `rasn` type, and the RFC 4515
//! string form (parser and printer).
//!
//! The same [`Filter`] value is what the decoder produces, what `parse_filter` produces and
//! what the evaluator consumes, so there is one model, not three. AND/OR keep the order the
//! client sent (a `Vec` encoded with the SET tag, not a sorted `SetOf`): evaluation order and
//! what a client sees echoed back both stay as the client wrote them.
//!
//! Depth: the parser and the printer use explicit stacks, and the parser stops at
//! [`FILTER_DEPTH_MAX`] nested `&`/`|`/`!`. BER decoding recurses inside `rasn`, but only
//! after [`crate::frame::check_frame`] has bounded the nesting of the whole PDU.

use std::fmt;

use rasn::types::OctetString;
use rasn::{AsnType, Decode, Decoder, Encode, Encoder};

/// RFC 4511 §4.1.8 `AttributeValueAssertion`, shared by filters and CompareRequest.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttributeValueAssertion {
    pub attribute_desc: OctetString,
    pub assertion_value: OctetString,
}

/// RFC 4511 §4.5.1.7 `Filter`.
///
/// `And`/`Or` may be empty: RFC 4511 says `SIZE (1..MAX)`, but RFC 4526 gives `(&)` the
/// meaning "absolute true" and `(|)` "absolute false", and we accept both on the wire and in
/// strings. `Not` is `[2] Filter`; since `Filter` is a CHOICE that tag is explicit
/// (X.680 §31.2.7), which `rasn` does for a boxed CHOICE variant.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq, Hash)]
#[rasn(choice)]
pub enum Filter {
    #[rasn(tag(context, 0))]
    And(Vec<Filter>),
    #[rasn(tag(context, 1))]
    Or(Vec<Filter>),
    #[rasn(tag(context, 2))]
    Not(Box<Filter>),
    #[rasn(tag(context, 3))]
    EqualityMatch(AttributeValueAssertion),
    #[rasn(tag(context, 4))]
    Substrings(SubstringFilter),
    #[rasn(tag(context, 5))]
    GreaterOrEqual(AttributeValueAssertion),
    #[rasn(tag(context, 6))]
    LessOrEqual(AttributeValueAssertion),
    #[rasn(tag(context, 7))]
    Present(OctetString),
    #[rasn(tag(context, 8))]
    ApproxMatch(AttributeValueAssertion),
    #[rasn(tag(context, 9))]
    ExtensibleMatch(MatchingRuleAssertion),
}

/// RFC 4511 §4.5.1.7.2 `SubstringFilter`. The `substrings` are a SEQUENCE, so their order is
/// meaningful: at most one `Initial` first, at most one `Final` last.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubstringFilter {
    pub r#type: OctetString,
    pub substrings: Vec<Substring>,
}

#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq, Hash)]
#[rasn(choice)]
pub enum Substring {
    #[rasn(tag(context, 0))]
    Initial(OctetString),
    #[rasn(tag(context, 1))]
    Any(OctetString),
    #[rasn(tag(context, 2))]
    Final(OctetString),
}

/// RFC 4511 §4.5.1.7.7 `MatchingRuleAssertion`. `dn_attributes` is `DEFAULT FALSE`, so it is
/// left out of the encoding when false.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatchingRuleAssertion {
    #[rasn(tag(context, 1))]
    pub matching_rule: Option<OctetString>,
    #[rasn(tag(context, 2))]
    pub r#type: Option<OctetString>,
    #[rasn(tag(context, 3))]
    pub match_value: OctetString,
    #[rasn(tag(context, 4), default)]
    pub dn_attributes: bool,
}

impl Filter {
    /// `(attr=*)`.
    pub fn present(attribute_desc: impl AsRef<[u8]>) -> Self {
        Filter::Present(OctetString::from(attribute_desc.as_ref()))
    }

    /// `(attr=value)`.
    pub fn equality(attribute_desc: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        Filter::EqualityMatch(AttributeValueAssertion {
            attribute_desc: OctetString::from(attribute_desc.as_ref()),
            assertion_value: OctetString::from(value.as_ref()),
        })
    }
}

impl SubstringFilter {
    /// RFC 4511 §4.5.1.7.2: at least one substring, at most one `initial` and first, at most
    /// one `final` and last, none empty. The wire can carry anything else; slapd then treats
    /// the filter item as Undefined (its get_ssa refuses, get_filter keeps going), and a
    /// string (RFC 4515) cannot write it at all.
    pub fn is_well_formed(&self) -> bool {
        let last = self.substrings.len().saturating_sub(1);
        !self.substrings.is_empty()
            && self.substrings.iter().enumerate().all(|(index, substring)| match substring {
                Substring::Initial(value) => index == 0 && !value.is_empty(),
                Substring::Any(value) => !value.is_empty(),
                Substring::Final(value) => index == last && !value.is_empty(),
            })
    }
}

/// The deepest nesting of `&`, `|` and `!` that [`parse_filter`] accepts. A PDU carrying such
/// a filter nests a few levels deeper still, which `FrameLimits::nesting_depth_max` bounds.
pub const FILTER_DEPTH_MAX: usize = 64;

/// Why a filter string was refused, and the byte offset in the input where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter at offset {offset}: {message}")]
pub struct FilterParseError {
    pub offset: usize,
    pub message: String,
}

/// Parses the RFC 4515 string form, e.g. `(&(objectClass=person)(cn=Babs J*))`.
///
/// Also accepts a single item without the outer parentheses (`uid=foo`), as `ldapsearch`
/// does, leading whitespace, and whitespace after the closing parenthesis.
pub fn parse_filter(input: &str) -> Result<Filter, FilterParseError> {
    Parser { input: input.as_bytes(), position: 0, depth_max: FILTER_DEPTH_MAX }.parse()
}

/// Which composite filter an open `(` started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Composite {
    And,
    Or,
    Not,
}

/// A composite filter whose closing `)` has not been seen yet.
struct OpenComposite {
    kind: Composite,
    children: Vec<Filter>,
}

/// What the part before `=` says about an item (RFC 4515 §3 `filtertype`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Equal,
    Approx,
    GreaterOrEqual,
    LessOrEqual,
    Extensible,
}

struct Parser<'a> {
    input: &'a [u8],
    position: usize,
    depth_max: usize,
}

impl Parser<'_> {
    fn error(&self, offset: usize, message: impl Into<String>) -> FilterParseError {
        FilterParseError { offset, message: message.into() }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.position += 1;
        }
    }

    fn expect(&mut self, wanted: u8) -> Result<(), FilterParseError> {
        match self.peek() {
            Some(found) if found == wanted => {
                self.position += 1;
                Ok(())
            }
            Some(found) => Err(self
                .error(self.position, format!("expected '{}', found '{}'", wanted as char, found as char))),
            None => Err(self.error(self.position, format!("expected '{}'", wanted as char))),
        }
    }

    fn parse(mut self) -> Result<Filter, FilterParseError> {
        self.skip_whitespace();
        if self.peek().is_none() {
            return Err(self.error(self.position, "empty filter"));
        }
        if self.peek() != Some(b'(') {
            // The ldapsearch form: one item, no parentheses, the value runs to the end.
            return self.parse_item(false);
        }
        let filter = self.parse_parenthesised()?;
        self.skip_whitespace();
        if self.position != self.input.len() {
            return Err(self.error(self.position, "unexpected text after the filter"));
        }
        Ok(filter)
    }

    /// RFC 4515 §3 `filter`, with an explicit stack of open composites instead of recursion.
    fn parse_parenthesised(&mut self) -> Result<Filter, FilterParseError> {
        let mut open: Vec<OpenComposite> = Vec::new();
        loop {
            let completed = match open.last() {
                // RFC 4526: `(&)` and `(|)` are allowed, so `)` may follow at once.
                Some(top) if top.kind != Composite::Not && self.peek() == Some(b')') => {
                    self.position += 1;
                    match open.pop() {
                        Some(OpenComposite { kind: Composite::And, children }) => Filter::And(children),
                        Some(OpenComposite { children, .. }) => Filter::Or(children),
                        None => return Err(self.error(self.position, "internal: empty stack")),
                    }
                }
                _ => {
                    let start = self.position;
                    self.expect(b'(')?;
                    let kind = match self.peek() {
                        Some(b'&') => Some(Composite::And),
                        Some(b'|') => Some(Composite::Or),
                        Some(b'!') => Some(Composite::Not),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        if open.len() >= self.depth_max {
                            return Err(self.error(start, "filter nested too deeply"));
                        }
                        self.position += 1;
                        open.push(OpenComposite { kind, children: Vec::new() });
                        continue;
                    }
                    let item = self.parse_item(true)?;
                    self.expect(b')')?;
                    item
                }
            };
            if let Some(filter) = self.attach(&mut open, completed)? {
                return Ok(filter);
            }
        }
    }

    /// Hands a finished filter to its parent. A `!` is finished by its one child plus `)`,
    /// which may in turn finish its own parent. Returns the whole filter once nothing is open.
    fn attach(
        &mut self,
        open: &mut Vec<OpenComposite>,
        mut completed: Filter,
    ) -> Result<Option<Filter>, FilterParseError> {
        loop {
            match open.last_mut() {
                None => return Ok(Some(completed)),
                Some(top) if top.kind == Composite::Not => {
                    self.expect(b')')?;
                    open.pop();
                    completed = Filter::Not(Box::new(completed));
                }
                Some(top) => {
                    top.children.push(completed);
                    return Ok(None);
                }
            }
        }
    }

    /// RFC 4515 §3 `item`: simple, present, substring or extensible. `parenthesised` says
    /// whether a `)` ends the value (otherwise the end of input does).
    fn parse_item(&mut self, parenthesised: bool) -> Result<Filter, FilterParseError> {
        let start = self.position;
        let equals = self.find_equals()?;
        let lhs = self.input.get(start..equals).unwrap_or_default();
        let (kind, description) = match lhs.split_last() {
            Some((b'~', description)) => (ItemKind::Approx, description),
            Some((b'>', description)) => (ItemKind::GreaterOrEqual, description),
            Some((b'<', description)) => (ItemKind::LessOrEqual, description),
            Some((b':', description)) => (ItemKind::Extensible, description),
            _ => (ItemKind::Equal, lhs),
        };
        self.position = equals + 1;
        let value_start = self.position;
        let parts = self.parse_value(parenthesised)?;
        if kind == ItemKind::Extensible {
            return self.extensible(description, start, parts, value_start);
        }
        check_attribute_description(description)
            .map_err(|(index, message)| self.error(start + index, message))?;
        let attribute_desc = OctetString::from(description);
        if kind == ItemKind::Equal && parts.len() > 1 {
            return self.substrings_or_present(attribute_desc, parts, value_start);
        }
        let assertion_value = single_part(parts)
            .ok_or_else(|| self.error(value_start, "'*' is only allowed in an equality filter"))?;
        let ava = AttributeValueAssertion { attribute_desc, assertion_value };
        Ok(match kind {
            ItemKind::Approx => Filter::ApproxMatch(ava),
            ItemKind::GreaterOrEqual => Filter::GreaterOrEqual(ava),
            ItemKind::LessOrEqual => Filter::LessOrEqual(ava),
            _ => Filter::EqualityMatch(ava),
        })
    }

    /// The offset of the `=` that ends the attribute part. Attribute descriptions, matching
    /// rule names and `dn` never contain `=`, so the first one is the operator.
    fn find_equals(&self) -> Result<usize, FilterParseError> {
        for (offset, &byte) in self.input.iter().enumerate().skip(self.position) {
            match byte {
                b'=' => return Ok(offset),
                b'(' | b')' | b'*' | b'\\' => {
                    return Err(self.error(offset, format!("unexpected '{}' before '='", byte as char)))
                }
                _ => {}
            }
        }
        Err(self.error(self.input.len(), "expected '=' in filter item"))
    }

    /// Reads an RFC 4515 `assertionvalue` (or substring pattern) up to `)` or the end of
    /// input, decoding `\XX` escapes and splitting on unescaped `*`. RFC 4515 §3: `(`, `)`,
    /// `*` and `\` must be escaped in values; NUL too, which `&str` input cannot hold raw
    /// except as U+0000, so we refuse it as well.
    fn parse_value(&mut self, parenthesised: bool) -> Result<Vec<Vec<u8>>, FilterParseError> {
        let mut parts = vec![Vec::new()];
        loop {
            let Some(byte) = self.peek() else {
                if parenthesised {
                    return Err(self.error(self.position, "missing ')'"));
                }
                return Ok(parts);
            };
            match byte {
                b')' if parenthesised => return Ok(parts),
                b'(' | b')' | 0 => {
                    return Err(self.error(self.position, "unescaped '(', ')' or NUL in value"))
                }
                b'*' => parts.push(Vec::new()),
                b'\\' => {
                    let decoded = self.escaped_byte()?;
                    if let Some(part) = parts.last_mut() {
                        part.push(decoded);
                    }
                    continue;
                }
                _ => {
                    if let Some(part) = parts.last_mut() {
                        part.push(byte);
                    }
                }
            }
            self.position += 1;
        }
    }

    /// RFC 4515 §3 `escaped = ESC HEX HEX`; advances past all three characters.
    fn escaped_byte(&mut self) -> Result<u8, FilterParseError> {
        let high = self.input.get(self.position + 1).copied().and_then(hex_value);
        let low = self.input.get(self.position + 2).copied().and_then(hex_value);
        match (high, low) {
            (Some(high), Some(low)) => {
                self.position += 3;
                Ok(high << 4 | low)
            }
            _ => Err(self.error(self.position, "'\\' must be followed by two hex digits")),
        }
    }

    /// RFC 4515 §3 `present` (`attr=*`) or `substring` (`attr=[initial]*[any*]...[final]`).
    fn substrings_or_present(
        &self,
        attribute_desc: OctetString,
        parts: Vec<Vec<u8>>,
        value_start: usize,
    ) -> Result<Filter, FilterParseError> {
        if parts.len() == 2 && parts.iter().all(Vec::is_empty) {
            return Ok(Filter::Present(attribute_desc));
        }
        let last = parts.len() - 1;
        let mut substrings = Vec::with_capacity(parts.len());
        for (index, part) in parts.into_iter().enumerate() {
            // An empty `any` (`a**b`) says nothing; libldap drops it too.
            if part.is_empty() {
                continue;
            }
            let part = OctetString::from(part);
            substrings.push(match index {
                0 => Substring::Initial(part),
                i if i == last => Substring::Final(part),
                _ => Substring::Any(part),
            });
        }
        if substrings.is_empty() {
            // RFC 4511 §4.5.1.7.2: `substrings` is SIZE (1..MAX).
            return Err(self.error(value_start, "substring filter without any substring"));
        }
        Ok(Filter::Substrings(SubstringFilter { r#type: attribute_desc, substrings }))
    }

    /// RFC 4515 §3 `extensible`: `attr [":dn"] [":" rule] ":=" value` or
    /// `[":dn"] ":" rule ":=" value`. `description` is everything before the final `:`.
    fn extensible(
        &self,
        description: &[u8],
        start: usize,
        parts: Vec<Vec<u8>>,
        value_start: usize,
    ) -> Result<Filter, FilterParseError> {
        let mut fields = description.split(|&b| b == b':');
        let attribute = fields.next().unwrap_or_default();
        let mut next = fields.next();
        let dn_attributes = next.is_some_and(|field| field.eq_ignore_ascii_case(b"dn"));
        if dn_attributes {
            next = fields.next();
        }
        let matching_rule = next;
        if fields.next().is_some() {
            return Err(self.error(start, "too many ':' in extensible match"));
        }
        if let Some(rule) = matching_rule {
            check_oid(rule).map_err(|message| self.error(start, message))?;
        }
        let r#type = if attribute.is_empty() {
            None
        } else {
            check_attribute_description(attribute)
                .map_err(|(index, message)| self.error(start + index, message))?;
            Some(OctetString::from(attribute))
        };
        if r#type.is_none() && matching_rule.is_none() {
            return Err(self.error(start, "extensible match needs an attribute or a matching rule"));
        }
        let match_value = single_part(parts)
            .ok_or_else(|| self.error(value_start, "'*' is not allowed in an extensible match"))?;
        Ok(Filter::ExtensibleMatch(MatchingRuleAssertion {
            matching_rule: matching_rule.map(OctetString::from),
            r#type,
            match_value,
            dn_attributes,
        }))
    }
}

/// The value when no unescaped `*` split it.
fn single_part(parts: Vec<Vec<u8>>) -> Option<OctetString> {
    let mut parts = parts.into_iter();
    match (parts.next(), parts.next()) {
        (Some(only), None) => Some(OctetString::from(only)),
        _ => None,
    }
}

fn hex_value(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|digit| u8::try_from(digit).ok())
}

/// RFC 4512 §2.5 `attributedescription = attributetype options`: a descr or numericoid
/// followed by `;option`s. Returns the offset and reason on failure.
fn check_attribute_description(description: &[u8]) -> Result<(), (usize, &'static str)> {
    if description.is_empty() {
        return Err((0, "empty attribute description"));
    }
    let mut offset = 0;
    for (index, piece) in description.split(|&b| b == b';').enumerate() {
        let allowed = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || (index == 0 && *b == b'.');
        if piece.is_empty() {
            return Err((offset, "empty attribute type or option"));
        }
        if let Some(bad) = piece.iter().position(|b| !allowed(b)) {
            return Err((offset + bad, "invalid character in attribute description"));
        }
        offset += piece.len() + 1;
    }
    Ok(())
}

/// RFC 4512 §1.4 `oid = descr / numericoid`, as used for matching rule names.
fn check_oid(oid: &[u8]) -> Result<(), &'static str> {
    if oid.is_empty() {
        return Err("empty matching rule");
    }
    if !oid.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.') {
        return Err("invalid character in matching rule");
    }
    Ok(())
}

/// One step of the printer's explicit stack.
enum PrintStep<'a> {
    Open(&'a Filter),
    Close,
}

impl fmt::Display for Filter {
    /// The RFC 4515 string form. Iterative, so a deeply nested filter (built in code, not
    /// parsed) cannot overflow the stack while being logged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        print(f, self, &|_| false)
    }
}

/// A filter printed with the values of some attributes replaced by `***` (see
/// [`Filter::display_masked`]).
pub struct Masked<'a> {
    filter: &'a Filter,
    secret: &'a dyn Fn(&[u8]) -> bool,
}

impl fmt::Display for Masked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        print(f, self.filter, self.secret)
    }
}

impl Filter {
    /// The RFC 4515 string form with every value asserted on an attribute `secret` names
    /// printed as `***`, for logs: a userPassword assertion must never reach one. A
    /// typeless extensible match may test any attribute, so its value is masked when
    /// `secret` holds for userPassword.
    pub fn display_masked<'a>(&'a self, secret: &'a dyn Fn(&[u8]) -> bool) -> Masked<'a> {
        Masked { filter: self, secret }
    }
}

fn print(f: &mut fmt::Formatter<'_>, root: &Filter, secret: &dyn Fn(&[u8]) -> bool) -> fmt::Result {
    let mut steps = vec![PrintStep::Open(root)];
    while let Some(step) = steps.pop() {
        let filter = match step {
            PrintStep::Close => {
                f.write_str(")")?;
                continue;
            }
            PrintStep::Open(filter) => filter,
        };
        let (prefix, children): (&str, &[Filter]) = match filter {
            Filter::And(children) => ("(&", children),
            Filter::Or(children) => ("(|", children),
            Filter::Not(child) => ("(!", std::slice::from_ref(child.as_ref())),
            leaf => {
                write_item(f, leaf, secret)?;
                continue;
            }
        };
        f.write_str(prefix)?;
        steps.push(PrintStep::Close);
        steps.extend(children.iter().rev().map(PrintStep::Open));
    }
    Ok(())
}

/// Prints one non-composite filter, parentheses included.
fn write_item(f: &mut fmt::Formatter<'_>, filter: &Filter, secret: &dyn Fn(&[u8]) -> bool) -> fmt::Result {
    f.write_str("(")?;
    match filter {
        Filter::EqualityMatch(ava) => write_ava(f, ava, "=", secret)?,
        Filter::GreaterOrEqual(ava) => write_ava(f, ava, ">=", secret)?,
        Filter::LessOrEqual(ava) => write_ava(f, ava, "<=", secret)?,
        Filter::ApproxMatch(ava) => write_ava(f, ava, "~=", secret)?,
        Filter::Present(attribute) => {
            write_name(f, attribute)?;
            f.write_str("=*")?;
        }
        Filter::Substrings(substrings) if secret(&substrings.r#type) => {
            write_name(f, &substrings.r#type)?;
            f.write_str("=***")?;
        }
        Filter::Substrings(substrings) => write_substrings(f, substrings)?,
        Filter::ExtensibleMatch(assertion) => {
            if let Some(attribute) = &assertion.r#type {
                write_name(f, attribute)?;
            }
            if assertion.dn_attributes {
                f.write_str(":dn")?;
            }
            if let Some(rule) = &assertion.matching_rule {
                f.write_str(":")?;
                write_name(f, rule)?;
            }
            f.write_str(":=")?;
            let masked = match &assertion.r#type {
                Some(attribute) => secret(attribute),
                // Typeless: it may match any attribute, a secret one included.
                None => secret(b"userPassword"),
            };
            if masked {
                f.write_str("***")?;
            } else {
                write_value(f, &assertion.match_value)?;
            }
        }
        Filter::And(_) | Filter::Or(_) | Filter::Not(_) => {}
    }
    f.write_str(")")
}

fn write_ava(
    f: &mut fmt::Formatter<'_>,
    ava: &AttributeValueAssertion,
    operator: &str,
    secret: &dyn Fn(&[u8]) -> bool,
) -> fmt::Result {
    write_name(f, &ava.attribute_desc)?;
    f.write_str(operator)?;
    if secret(&ava.attribute_desc) {
        return f.write_str("***");
    }
    write_value(f, &ava.assertion_value)
}

/// `initial*any*...*final`, in the order the substrings were given.
fn write_substrings(f: &mut fmt::Formatter<'_>, filter: &SubstringFilter) -> fmt::Result {
    write_name(f, &filter.r#type)?;
    f.write_str("=")?;
    for substring in &filter.substrings {
        match substring {
            Substring::Initial(value) => write_value(f, value)?,
            Substring::Any(value) | Substring::Final(value) => {
                f.write_str("*")?;
                write_value(f, value)?;
            }
        }
    }
    if !matches!(filter.substrings.last(), Some(Substring::Final(_))) {
        f.write_str("*")?;
    }
    Ok(())
}

/// Attribute descriptions and rule names have no escape syntax (RFC 4512 §2.5: letters,
/// digits, `-`, `.` and `;` for options). A wire name with any other byte is printed with
/// that byte as `\xx`, which no parser takes for a name: so the string never reads as some
/// other filter (`o=x` as a name would print `(o=x=*)`, an equality match), and control
/// characters never reach a log raw.
fn write_name(f: &mut fmt::Formatter<'_>, name: &[u8]) -> fmt::Result {
    // Runs of plain bytes go out in one write (the access log prints every filter).
    let plain = |byte: &u8| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b';');
    let mut rest = name;
    while !rest.is_empty() {
        let run = rest.iter().take_while(|b| plain(b)).count();
        let (head, tail) = rest.split_at(run);
        // ASCII by construction.
        f.write_str(std::str::from_utf8(head).unwrap_or_default())?;
        let Some((&byte, tail)) = tail.split_first() else { break };
        write!(f, "\\{byte:02x}")?;
        rest = tail;
    }
    Ok(())
}

/// RFC 4515 §3 `valueencoding`: `*`, `(`, `)`, `\` and NUL must be escaped; we also escape
/// control characters and bytes that are not UTF-8 so the result is printable.
fn write_value(f: &mut fmt::Formatter<'_>, value: &[u8]) -> fmt::Result {
    for chunk in value.utf8_chunks() {
        let valid = chunk.valid();
        let mut run_start = 0;
        for (at, ch) in valid.char_indices() {
            if matches!(ch, '*' | '(' | ')' | '\\') || ch.is_control() {
                f.write_str(valid.get(run_start..at).unwrap_or_default())?;
                let mut buf = [0u8; 4];
                for byte in ch.encode_utf8(&mut buf).bytes() {
                    write!(f, "\\{byte:02x}")?;
                }
                run_start = at + ch.len_utf8();
            }
        }
        f.write_str(valid.get(run_start..).unwrap_or_default())?;
        for byte in chunk.invalid() {
            write!(f, "\\{byte:02x}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &[u8]) -> OctetString {
        OctetString::from(s)
    }

    fn ava(attribute: &str, value: &[u8]) -> AttributeValueAssertion {
        AttributeValueAssertion { attribute_desc: os(attribute.as_bytes()), assertion_value: os(value) }
    }

    fn parse(s: &str) -> Filter {
        match parse_filter(s) {
            Ok(filter) => filter,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    /// RFC 4515 §4 examples; each prints back exactly as written, except for the escape and
    /// case normalisations listed in `printed_differently`.
    const RFC4515_EXAMPLES: [&str; 17] = [
        "(cn=Babs Jensen)",
        "(!(cn=Tim Howes))",
        "(&(objectClass=Person)(|(sn=Jensen)(cn=Babs J*)))",
        "(o=univ*of*mich*)",
        "(seeAlso=)",
        "(cn:caseExactMatch:=Fred Flintstone)",
        "(cn:=Betty Rubble)",
        "(sn:dn:2.4.6.8.10:=Barney Rubble)",
        "(o:dn:=Ace Industry)",
        "(:1.2.3:=Wilma Flintstone)",
        "(:DN:2.4.6.8.10:=Dino)",
        "(o=Parens R Us \\28for all your parenthetical needs\\29)",
        "(cn=*\\2A*)",
        "(filename=C:\\5cMyFile)",
        "(bin=\\00\\00\\00\\04)",
        "(sn=Lu\\c4\\8di\\c4\\87)",
        "(1.3.6.1.4.1.1466.0=\\04\\02\\48\\69)",
    ];

    fn printed_differently(s: &str) -> Option<&'static str> {
        Some(match s {
            "(:DN:2.4.6.8.10:=Dino)" => "(:dn:2.4.6.8.10:=Dino)",
            "(cn=*\\2A*)" => "(cn=*\\2a*)",
            "(sn=Lu\\c4\\8di\\c4\\87)" => "(sn=Lu\u{10d}i\u{107})",
            "(1.3.6.1.4.1.1466.0=\\04\\02\\48\\69)" => "(1.3.6.1.4.1.1466.0=\\04\\02Hi)",
            _ => return None,
        })
    }

    #[test]
    fn rfc4515_examples_print_back() {
        for example in RFC4515_EXAMPLES {
            let filter = parse(example);
            let printed = filter.to_string();
            assert_eq!(printed, printed_differently(example).unwrap_or(example));
            assert_eq!(parse(&printed), filter, "{example}");
        }
    }

    #[test]
    fn rfc4515_examples_ber_round_trip() {
        for example in RFC4515_EXAMPLES {
            let filter = parse(example);
            let encoded = rasn::ber::encode(&filter).unwrap();
            assert_eq!(rasn::ber::decode::<Filter>(&encoded).unwrap(), filter, "{example}");
        }
    }

    fn substrings(attribute: &str, substrings: Vec<Substring>) -> Filter {
        Filter::Substrings(SubstringFilter { r#type: os(attribute.as_bytes()), substrings })
    }

    #[test]
    fn parsed_structure() {
        let babs = substrings("cn", vec![Substring::Initial(os(b"Babs J"))]);
        let expected = Filter::And(vec![
            Filter::equality("objectClass", "Person"),
            Filter::Or(vec![Filter::equality("sn", "Jensen"), babs]),
        ]);
        assert_eq!(parse("(&(objectClass=Person)(|(sn=Jensen)(cn=Babs J*)))"), expected);
        let (univ, of, mich) = (os(b"univ"), os(b"of"), os(b"mich"));
        let expected = vec![Substring::Initial(univ), Substring::Any(of), Substring::Any(mich)];
        assert_eq!(parse("(o=univ*of*mich*)"), substrings("o", expected));
        let expected = substrings("cn", vec![Substring::Any(os(b"*"))]);
        assert_eq!(parse("(cn=*\\2A*)"), expected);
        assert_eq!(parse("(seeAlso=)"), Filter::equality("seeAlso", ""));
        assert_eq!(parse("(bin=\\00\\00\\00\\04)"), Filter::equality("bin", [0, 0, 0, 4]));
        assert_eq!(parse("(objectClass=*)"), Filter::present("objectClass"));
        assert_eq!(parse("(cn=\\2a)"), Filter::equality("cn", "*"));
        assert_eq!(parse("(x=a=b)"), Filter::equality("x", "a=b"));
        assert_eq!(parse("(cn;lang-en=x)"), Filter::equality("cn;lang-en", "x"));
        assert_eq!(parse("(x=a**b)").to_string(), "(x=a*b)");
        assert_eq!(parse("(x=*b)").to_string(), "(x=*b)");
    }

    #[test]
    fn extensible_forms() {
        let cases = [
            ("(sn:dn:2.4.6.8.10:=Barney Rubble)", Some("2.4.6.8.10"), Some("sn"), "Barney Rubble", true),
            ("(:DN:2.4.6.8.10:=Dino)", Some("2.4.6.8.10"), None, "Dino", true),
            ("(cn:=Betty Rubble)", None, Some("cn"), "Betty Rubble", false),
            ("(o:dn:=Ace Industry)", None, Some("o"), "Ace Industry", true),
        ];
        for (input, rule, attribute, value, dn_attributes) in cases {
            let expected = Filter::ExtensibleMatch(MatchingRuleAssertion {
                matching_rule: rule.map(|r| os(r.as_bytes())),
                r#type: attribute.map(|a| os(a.as_bytes())),
                match_value: os(value.as_bytes()),
                dn_attributes,
            });
            assert_eq!(parse(input), expected, "{input}");
        }
    }

    #[test]
    fn ordering_and_approx_operators() {
        assert_eq!(parse("(age>=30)"), Filter::GreaterOrEqual(ava("age", b"30")));
        assert_eq!(parse("(age<=30)"), Filter::LessOrEqual(ava("age", b"30")));
        assert_eq!(parse("(cn~=bab)"), Filter::ApproxMatch(ava("cn", b"bab")));
    }

    #[test]
    fn without_outer_parentheses_and_whitespace() {
        assert_eq!(parse("uid=foo"), Filter::equality("uid", "foo"));
        assert_eq!(parse("objectClass=*"), Filter::present("objectClass"));
        assert_eq!(parse("  (uid=foo)  "), Filter::equality("uid", "foo"));
        assert_eq!(parse("uid=foo bar "), Filter::equality("uid", "foo bar "));
    }

    #[test]
    fn absolute_true_and_false() {
        assert_eq!(parse("(&)"), Filter::And(vec![]));
        assert_eq!(parse("(|)"), Filter::Or(vec![]));
        assert_eq!(parse("(!(&))"), Filter::Not(Box::new(Filter::And(vec![]))));
        for filter in [Filter::And(vec![]), Filter::Or(vec![])] {
            let encoded = rasn::ber::encode(&filter).unwrap();
            assert_eq!(encoded.len(), 2);
            assert_eq!(rasn::ber::decode::<Filter>(&encoded).unwrap(), filter);
            assert_eq!(parse(&filter.to_string()), filter);
        }
    }

    #[test]
    fn and_or_keep_order_on_the_wire() {
        let filter = parse("(|(z=1)(a=2)(m=3))");
        let encoded = rasn::ber::encode(&filter).unwrap();
        // [1] constructed, then the three equality matches in the order written.
        let expected = [
            0xa1, 0x18, 0xa3, 0x06, 0x04, 0x01, b'z', 0x04, 0x01, b'1', 0xa3, 0x06, 0x04, 0x01, b'a', 0x04,
            0x01, b'2', 0xa3, 0x06, 0x04, 0x01, b'm', 0x04, 0x01, b'3',
        ];
        assert_eq!(encoded, expected);
        assert_eq!(rasn::ber::decode::<Filter>(&encoded).unwrap(), filter);
    }

    #[test]
    fn not_is_explicitly_tagged() {
        let encoded = rasn::ber::encode(&parse("(!(cn=*))")).unwrap();
        assert_eq!(encoded, [0xa2, 0x04, 0x87, 0x02, b'c', b'n']);
    }

    #[test]
    fn extensible_dn_attributes_default_omitted() {
        let encoded = rasn::ber::encode(&parse("(cn:=x)")).unwrap();
        assert_eq!(encoded, [0xa9, 0x07, 0x82, 0x02, b'c', b'n', 0x83, 0x01, b'x']);
        let encoded = rasn::ber::encode(&parse("(cn:dn:=x)")).unwrap();
        assert_eq!(&encoded[9..], [0x84, 0x01, 0xff]);
    }

    fn parse_error(s: &str) -> FilterParseError {
        match parse_filter(s) {
            Ok(filter) => panic!("{s} parsed as {filter:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn unbalanced_parentheses() {
        assert_eq!(parse_error("(cn=x").offset, 5);
        assert_eq!(parse_error("(&(cn=x)").offset, 8);
        assert_eq!(parse_error("(cn=x))").offset, 6);
        assert_eq!(parse_error("(!(cn=x)(sn=y))").offset, 8);
        assert_eq!(parse_error("((cn=x))").offset, 1);
        parse_error("(cn=a(b)");
        parse_error(")");
        parse_error("(");
        parse_error("");
        parse_error("(!)");
    }

    #[test]
    fn bad_escapes() {
        assert_eq!(parse_error("(cn=a\\zz)").offset, 5);
        assert_eq!(parse_error("(cn=a\\2)").offset, 5);
        assert_eq!(parse_error("(cn=a\\").offset, 5);
        parse_error("cn=\\4");
    }

    #[test]
    fn bad_attribute_descriptions() {
        assert_eq!(parse_error("(=x)").offset, 1);
        assert_eq!(parse_error("(>=x)").offset, 1);
        parse_error("(c n=x)");
        parse_error("(cn;=x)");
        parse_error("(:=x)");
        parse_error("(cn::=x)");
        parse_error("(cn:dn:rule:extra:=x)");
        parse_error("(cn)");
        parse_error("(cn>=a*)");
        parse_error("(cn:=a*)");
        parse_error("(cn=**)");
    }

    #[test]
    fn depth_limit() {
        let nested = |depth: usize| format!("{}(cn=x){}", "(!".repeat(depth), ")".repeat(depth));
        assert!(parse_filter(&nested(FILTER_DEPTH_MAX)).is_ok());
        assert_eq!(parse_error(&nested(FILTER_DEPTH_MAX + 1)).message, "filter nested too deeply");
        let deep_and = format!("{}{}", "(&".repeat(100_000), ")".repeat(100_000));
        assert!(parse_filter(&deep_and).is_err());
    }

    #[test]
    fn printer_escapes_and_is_iterative() {
        let filter = Filter::equality("x", b"a*(b)\\\0\x01\xff\xc3");
        assert_eq!(filter.to_string(), "(x=a\\2a\\28b\\29\\5c\\00\\01\\ff\\c3)");
        assert_eq!(parse(&filter.to_string()), filter);
        let mut deep = Filter::present("cn");
        for _ in 0..100_000 {
            deep = Filter::And(vec![deep]);
        }
        assert_eq!(deep.to_string().len(), 100_000 * 3 + "(cn=*)".len());
        // Dropping the value recurses; unwind it by hand so the test itself stays shallow.
        while let Filter::And(mut children) = deep {
            match children.pop() {
                Some(child) => deep = child,
                None => break,
            }
        }
    }

    /// Found by fuzz/filter_ber: a present filter whose attribute description is `o=je` plus
    /// a control character and bytes that are not UTF-8 printed as `(o=je...=*)`, a string
    /// that parses as an equality match and prints differently again.
    #[test]
    fn names_that_are_not_descriptions_print_escaped() {
        let wire = [135, 11, 111, 61, 106, 101, 11, 106, 101, 251, 186, 186, 253];
        let filter = rasn::der::decode::<Filter>(&wire).unwrap();
        let printed = filter.to_string();
        assert_eq!(printed, "(o\\3dje\\0bje\\fb\\ba\\ba\\fd=*)");
        assert!(parse_filter(&printed).is_err());
        let rule = Filter::ExtensibleMatch(MatchingRuleAssertion {
            matching_rule: Some(OctetString::from_static(b"1.2 3")),
            r#type: Some(OctetString::from_static(b"cn;lang-en")),
            match_value: OctetString::from_static(b"v"),
            dn_attributes: false,
        });
        assert_eq!(rule.to_string(), "(cn;lang-en:1.2\\203:=v)");
    }

    #[test]
    fn substring_order_and_emptiness() {
        let substrings = |parts: Vec<Substring>| SubstringFilter {
            r#type: OctetString::from_static(b"cn"),
            substrings: parts,
        };
        let v = |s: &'static str| OctetString::from_static(s.as_bytes());
        let Filter::Substrings(parsed) = parse("(cn=a*b*c)") else { panic!("not substrings") };
        assert!(parsed.is_well_formed());
        assert!(substrings(vec![Substring::Any(v("x"))]).is_well_formed());
        assert!(!substrings(vec![]).is_well_formed());
        assert!(!substrings(vec![Substring::Any(v(""))]).is_well_formed());
        assert!(!substrings(vec![Substring::Any(v("a")), Substring::Initial(v("b"))]).is_well_formed());
        assert!(!substrings(vec![Substring::Final(v("a")), Substring::Any(v("b"))]).is_well_formed());
        // Found by fuzz/filter_ber: three finals and an empty any.
        let wire =
            [164, 20, 4, 2, 65, 110, 48, 14, 130, 129, 1, 120, 130, 129, 1, 120, 130, 129, 1, 130, 129, 0];
        let Ok(Filter::Substrings(fuzzed)) = rasn::der::decode::<Filter>(&wire) else { panic!("decodes") };
        assert!(!fuzzed.is_well_formed());
    }
}
