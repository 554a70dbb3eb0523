//! Reading schema text: RFC 4512 §4.1 descriptions, OpenLDAP's `.schema` file format around
//! them, and printing a description back in the form cn=Subschema publishes.
//!
//! A description is tokenized first (parentheses, `$`, quoted strings, bare words), then read
//! field by field. Fields may come in any order, as OpenLDAP accepts, but the printed form
//! always uses RFC 4512's order, so a definition loaded from a file with `DESC` after
//! `EQUALITY`, lowercase keywords or OID macros is published the way slapd publishes it.

use std::collections::HashMap;

use super::{ObjectClassKind, Usage};

/// The longest description accepted, in bytes. The longest in the standard schemas is under
/// 2 KiB; anything near this limit is a broken file (an unclosed parenthesis swallowing the
/// rest), not a definition.
const DESCRIPTION_BYTES_MAX: usize = 64 * 1024;

/// One lexical token of an RFC 4512 description (§4.1: `LPAREN`, `RPAREN`, `DOLLAR`,
/// `qdstring`, and the bare words that keywords, OIDs and descriptors are made of).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    Dollar,
    Quoted(String),
    Word(String),
}

impl Token {
    /// How an error message shows the token.
    fn describe(&self) -> String {
        match self {
            Token::Open => "'('".to_string(),
            Token::Close => "')'".to_string(),
            Token::Dollar => "'$'".to_string(),
            Token::Quoted(text) => format!("quoted string '{text}'"),
            Token::Word(word) => format!("'{word}'"),
        }
    }
}

/// Splits a description into tokens. A word runs up to whitespace or one of `(`, `)`, `$`,
/// `'`, so `a$b` and `oid{64}` need no spaces (RFC 4512 §4.1 allows none around `$`).
fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    if text.len() > DESCRIPTION_BYTES_MAX {
        return Err(format!("description longer than {DESCRIPTION_BYTES_MAX} bytes"));
    }
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, ch)) = chars.next() {
        match ch {
            c if c.is_whitespace() => {}
            '(' => tokens.push(Token::Open),
            ')' => tokens.push(Token::Close),
            '$' => tokens.push(Token::Dollar),
            '\'' => {
                let rest = &text[start + 1..];
                let end = rest.find('\'').ok_or("unterminated quoted string")?;
                tokens.push(Token::Quoted(unescape_qdstring(&rest[..end])?));
                // Skip the string and its closing quote.
                while chars.next_if(|&(i, _)| i <= start + 1 + end).is_some() {}
            }
            _ => {
                let mut end = text.len();
                while let Some(&(i, c)) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '$' | '\'') {
                        end = i;
                        break;
                    }
                    chars.next();
                }
                tokens.push(Token::Word(text[start..end].to_string()));
            }
        }
    }
    Ok(tokens)
}

/// RFC 4512 §4.1: inside a `qdstring`, `\27` stands for `'` and `\5C` (or `\5c`) for `\`;
/// no other escape exists.
fn unescape_qdstring(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at + 1..at + 3).unwrap_or("");
        match escape {
            "27" => out.push('\''),
            "5C" | "5c" => out.push('\\'),
            _ => return Err(format!("invalid escape '\\{escape}' in quoted string '{raw}'")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The inverse of [`unescape_qdstring`], for printing.
fn escape_qdstring(text: &str) -> String {
    text.replace('\\', "\\5C").replace('\'', "\\27")
}

/// RFC 4512 §1.4 `numericoid`: digits separated by single dots. Leading zeros are tolerated
/// (some published schemas have them); they do not change what the OID names for us.
pub(super) fn is_numeric_oid(text: &str) -> bool {
    !text.is_empty() && text.split('.').all(|arc| !arc.is_empty() && arc.bytes().all(|b| b.is_ascii_digit()))
}

/// RFC 4512 §1.4 `descr`: a letter, then letters, digits and hyphens.
pub(super) fn is_descr(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// OpenLDAP's `objectidentifier` macros: a name standing for an OID arc, usable in place of a
/// numeric OID as `name` or `name:suffix`. Values are resolved when defined, so lookups never
/// recurse.
#[derive(Debug, Clone, Default)]
pub(super) struct OidMacros {
    /// Lowercased macro name → numeric OID.
    by_name: HashMap<String, String>,
}

impl OidMacros {
    /// Turns `text` into a numeric OID: itself if already numeric, else a macro expansion.
    pub(super) fn resolve(&self, text: &str) -> Result<String, String> {
        if is_numeric_oid(text) {
            return Ok(text.to_string());
        }
        let (name, suffix) = match text.split_once(':') {
            Some((name, suffix)) => (name, Some(suffix)),
            None => (text, None),
        };
        let base = self
            .by_name
            .get(&name.to_ascii_lowercase())
            .ok_or_else(|| format!("'{text}' is neither a numeric OID nor a defined objectidentifier"))?;
        match suffix {
            None => Ok(base.clone()),
            Some(suffix) if is_numeric_oid(suffix) => Ok(format!("{base}.{suffix}")),
            Some(suffix) => Err(format!("'{text}': suffix '{suffix}' is not a numeric OID")),
        }
    }

    /// `objectidentifier NAME VALUE`. Redefining a name to the same OID is harmless (two
    /// files may share a prefix); to another OID is an error, since earlier definitions
    /// already used the old meaning.
    pub(super) fn define(&mut self, name: &str, value: &str) -> Result<(), String> {
        if !is_descr(name) {
            return Err(format!("'{name}' is not a valid objectidentifier name"));
        }
        let oid = self.resolve(value)?;
        let key = name.to_ascii_lowercase();
        match self.by_name.get(&key) {
            Some(existing) if *existing != oid => {
                Err(format!("objectidentifier '{name}' is already defined as {existing}"))
            }
            _ => {
                self.by_name.insert(key, oid);
                Ok(())
            }
        }
    }
}

/// An extension field (RFC 4512 §4.2 `extensions`: `X-` name and quoted strings). Unused by
/// the server but kept, so that cn=Subschema republishes it (`X-ORDERED`, `X-ORIGIN`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Extension {
    pub name: String,
    pub values: Vec<String>,
}

/// An attribute type description as written (RFC 4512 §4.1.2), before SUP is resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct AttributeTypeDescription {
    pub oid: String,
    pub names: Vec<String>,
    pub desc: Option<String>,
    pub obsolete: bool,
    pub sup: Option<String>,
    pub equality: Option<String>,
    pub ordering: Option<String>,
    pub substr: Option<String>,
    pub syntax: Option<String>,
    /// The `{len}` upper bound after SYNTAX, digits only.
    pub syntax_len: Option<String>,
    pub single_value: bool,
    pub collective: bool,
    pub no_user_modification: bool,
    pub usage: Usage,
    pub extensions: Vec<Extension>,
}

/// An object class description as written (RFC 4512 §4.1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ObjectClassDescription {
    pub oid: String,
    pub names: Vec<String>,
    pub desc: Option<String>,
    pub obsolete: bool,
    pub sup: Vec<String>,
    /// RFC 4512 §4.1.1: "If no kind is specified, STRUCTURAL" — applied by the parser.
    pub kind: ObjectClassKind,
    pub must: Vec<String>,
    pub may: Vec<String>,
    pub extensions: Vec<Extension>,
}

/// An LDAP syntax description (RFC 4512 §4.1.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SyntaxDescription {
    pub oid: String,
    pub desc: Option<String>,
    pub extensions: Vec<Extension>,
}

/// Reads tokens of one description. Descriptors and OIDs are checked for shape here;
/// whether they name something is the registry's business.
struct Cursor<'a> {
    tokens: &'a [Token],
    position: usize,
    macros: &'a OidMacros,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a Token> {
        let token = self.tokens.get(self.position);
        self.position += 1;
        token
    }

    fn peek(&self) -> Option<&'a Token> {
        self.tokens.get(self.position)
    }

    fn expect(&mut self, wanted: &Token) -> Result<(), String> {
        match self.next() {
            Some(token) if token == wanted => Ok(()),
            Some(token) => Err(format!("expected {} but found {}", wanted.describe(), token.describe())),
            None => Err(format!("expected {} but the description ended", wanted.describe())),
        }
    }

    fn word(&mut self, what: &str) -> Result<&'a str, String> {
        match self.next() {
            Some(Token::Word(word)) => Ok(word),
            Some(token) => Err(format!("expected {what} but found {}", token.describe())),
            None => Err(format!("expected {what} but the description ended")),
        }
    }

    /// A `numericoid`, or in OpenLDAP files an objectidentifier macro standing for one.
    fn numericoid(&mut self, what: &str) -> Result<String, String> {
        let word = self.word(what)?;
        self.macros.resolve(word)
    }

    /// RFC 4512 `oid = descr / numericoid`.
    fn oid(&mut self) -> Result<String, String> {
        let word = self.word("an OID or name")?;
        if is_descr(word) || is_numeric_oid(word) {
            Ok(word.to_string())
        } else {
            Err(format!("'{word}' is neither a name nor a numeric OID"))
        }
    }

    /// RFC 4512 `oids = oid / ( LPAREN WSP oidlist WSP RPAREN )`, `oidlist` joined by `$`.
    fn oids(&mut self) -> Result<Vec<String>, String> {
        if self.peek() != Some(&Token::Open) {
            return Ok(vec![self.oid()?]);
        }
        self.next();
        let mut oids = vec![self.oid()?];
        loop {
            match self.next() {
                Some(Token::Close) => return Ok(oids),
                Some(Token::Dollar) => oids.push(self.oid()?),
                Some(token) => {
                    return Err(format!("expected '$' or ')' in an OID list, found {}", token.describe()))
                }
                None => return Err("unterminated OID list".to_string()),
            }
        }
    }

    fn qdstring(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Quoted(text)) => Ok(text.clone()),
            Some(token) => Err(format!("expected a quoted string but found {}", token.describe())),
            None => Err("expected a quoted string but the description ended".to_string()),
        }
    }

    /// RFC 4512 `qdstrings = qdstring / ( LPAREN WSP qdstringlist WSP RPAREN )`.
    fn qdstrings(&mut self) -> Result<Vec<String>, String> {
        if self.peek() != Some(&Token::Open) {
            return Ok(vec![self.qdstring()?]);
        }
        self.next();
        let mut strings = Vec::new();
        loop {
            match self.next() {
                Some(Token::Close) => return Ok(strings),
                Some(Token::Quoted(text)) => strings.push(text.clone()),
                Some(token) => {
                    return Err(format!("expected a quoted string or ')', found {}", token.describe()))
                }
                None => return Err("unterminated list of quoted strings".to_string()),
            }
        }
    }

    /// RFC 4512 `qdescrs`: quoted descriptors, one or a parenthesised list.
    fn qdescrs(&mut self) -> Result<Vec<String>, String> {
        let names = self.qdstrings()?;
        match names.iter().find(|name| !is_descr(name)) {
            Some(bad) => Err(format!("NAME '{bad}' is not a valid descriptor")),
            None if names.is_empty() => Err("NAME lists no names".to_string()),
            None => Ok(names),
        }
    }

    /// RFC 4512 `noidlen = numericoid [ LCURLY len RCURLY ]`; the bound may also stand apart.
    fn noidlen(&mut self) -> Result<(String, Option<String>), String> {
        let word = self.word("a syntax OID")?;
        let (oid, mut len) = match word.split_once('{') {
            Some((oid, rest)) => (oid, Some(rest)),
            None => (word, None),
        };
        if len.is_none() {
            if let Some(Token::Word(next)) = self.peek() {
                if let Some(rest) = next.strip_prefix('{') {
                    len = Some(rest);
                    self.next();
                }
            }
        }
        let oid = self.macros.resolve(oid)?;
        let len = match len {
            None => None,
            Some(rest) => match rest.strip_suffix('}') {
                Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                    Some(digits.to_string())
                }
                _ => return Err(format!("invalid length bound in SYNTAX '{word}'")),
            },
        };
        Ok((oid, len))
    }
}

/// Reads `( numericoid field* )`, handing each known keyword (uppercased) to `field`, which
/// returns false for a keyword it does not know. Extensions (`X-...`) are collected; any
/// keyword given twice is an error.
fn read_description(
    text: &str,
    macros: &OidMacros,
    mut field: impl FnMut(&str, &mut Cursor<'_>) -> Result<bool, String>,
) -> Result<(String, Vec<Extension>), String> {
    let tokens = tokenize(text)?;
    let mut cursor = Cursor { tokens: &tokens, position: 0, macros };
    cursor.expect(&Token::Open)?;
    let oid = cursor.numericoid("a numeric OID")?;
    let mut extensions = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let written = match cursor.next() {
            Some(Token::Close) => break,
            Some(Token::Word(word)) => word,
            Some(token) => return Err(format!("expected a keyword but found {}", token.describe())),
            None => return Err("missing ')' at the end of the description".to_string()),
        };
        let keyword = written.to_ascii_uppercase();
        if seen.contains(&keyword) {
            return Err(format!("{keyword} given twice"));
        }
        seen.push(keyword.clone());
        if keyword.starts_with("X-") {
            extensions.push(Extension { name: written.clone(), values: cursor.qdstrings()? });
        } else if !field(&keyword, &mut cursor)? {
            return Err(format!("unknown keyword '{keyword}'"));
        }
    }
    if let Some(token) = cursor.peek() {
        return Err(format!("unexpected {} after the closing ')'", token.describe()));
    }
    Ok((oid, extensions))
}

/// Parses an AttributeTypeDescription (RFC 4512 §4.1.2).
pub(super) fn attribute_type(text: &str, macros: &OidMacros) -> Result<AttributeTypeDescription, String> {
    let mut d = AttributeTypeDescription::default();
    let (oid, extensions) = read_description(text, macros, |keyword, cursor| {
        match keyword {
            "NAME" => d.names = cursor.qdescrs()?,
            "DESC" => d.desc = Some(cursor.qdstring()?),
            "OBSOLETE" => d.obsolete = true,
            "SUP" => d.sup = Some(cursor.oid()?),
            "EQUALITY" => d.equality = Some(cursor.oid()?),
            "ORDERING" => d.ordering = Some(cursor.oid()?),
            "SUBSTR" => d.substr = Some(cursor.oid()?),
            "SYNTAX" => (d.syntax, d.syntax_len) = cursor.noidlen().map(|(oid, len)| (Some(oid), len))?,
            "SINGLE-VALUE" => d.single_value = true,
            "COLLECTIVE" => d.collective = true,
            "NO-USER-MODIFICATION" => d.no_user_modification = true,
            "USAGE" => d.usage = parse_usage(cursor.word("a usage")?)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    d.oid = oid;
    d.extensions = extensions;
    Ok(d)
}

/// RFC 4512 §4.1.2 `usage`; matched without regard to case, as slapd does.
fn parse_usage(word: &str) -> Result<Usage, String> {
    match word.to_ascii_lowercase().as_str() {
        "userapplications" => Ok(Usage::UserApplications),
        "directoryoperation" => Ok(Usage::DirectoryOperation),
        "distributedoperation" => Ok(Usage::DistributedOperation),
        "dsaoperation" => Ok(Usage::DsaOperation),
        _ => Err(format!("unknown USAGE '{word}'")),
    }
}

/// Parses an ObjectClassDescription (RFC 4512 §4.1.1).
pub(super) fn object_class(text: &str, macros: &OidMacros) -> Result<ObjectClassDescription, String> {
    let mut d = ObjectClassDescription {
        oid: String::new(),
        names: Vec::new(),
        desc: None,
        obsolete: false,
        sup: Vec::new(),
        kind: ObjectClassKind::Structural,
        must: Vec::new(),
        may: Vec::new(),
        extensions: Vec::new(),
    };
    let mut kind_given = false;
    let (oid, extensions) = read_description(text, macros, |keyword, cursor| {
        match keyword {
            "NAME" => d.names = cursor.qdescrs()?,
            "DESC" => d.desc = Some(cursor.qdstring()?),
            "OBSOLETE" => d.obsolete = true,
            "SUP" => d.sup = cursor.oids()?,
            "MUST" => d.must = cursor.oids()?,
            "MAY" => d.may = cursor.oids()?,
            "ABSTRACT" | "STRUCTURAL" | "AUXILIARY" => {
                if std::mem::replace(&mut kind_given, true) {
                    return Err("more than one of ABSTRACT, STRUCTURAL, AUXILIARY".to_string());
                }
                d.kind = match keyword {
                    "ABSTRACT" => ObjectClassKind::Abstract,
                    "AUXILIARY" => ObjectClassKind::Auxiliary,
                    _ => ObjectClassKind::Structural,
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    d.oid = oid;
    d.extensions = extensions;
    Ok(d)
}

/// Parses a SyntaxDescription (RFC 4512 §4.1.5).
pub(super) fn ldap_syntax(text: &str, macros: &OidMacros) -> Result<SyntaxDescription, String> {
    let mut desc = None;
    let (oid, extensions) = read_description(text, macros, |keyword, cursor| {
        if keyword != "DESC" {
            return Ok(false);
        }
        desc = Some(cursor.qdstring()?);
        Ok(true)
    })?;
    Ok(SyntaxDescription { oid, desc, extensions })
}

/// Accumulates the printed form of a description, one field at a time.
struct Printer(String);

impl Printer {
    fn new(oid: &str) -> Printer {
        Printer(format!("( {oid}"))
    }

    fn keyword(&mut self, keyword: &str, present: bool) {
        if present {
            self.0.push(' ');
            self.0.push_str(keyword);
        }
    }

    fn word(&mut self, keyword: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.0.push_str(&format!(" {keyword} {value}"));
        }
    }

    fn qdstrings(&mut self, keyword: &str, values: &[String]) {
        let quoted: Vec<String> = values.iter().map(|v| format!("'{}'", escape_qdstring(v))).collect();
        match quoted.as_slice() {
            [] => {}
            [one] => self.0.push_str(&format!(" {keyword} {one}")),
            many => self.0.push_str(&format!(" {keyword} ( {} )", many.join(" "))),
        }
    }

    fn oids(&mut self, keyword: &str, oids: &[String]) {
        match oids {
            [] => {}
            [one] => self.0.push_str(&format!(" {keyword} {one}")),
            many => self.0.push_str(&format!(" {keyword} ( {} )", many.join(" $ "))),
        }
    }

    fn finish(mut self, extensions: &[Extension]) -> String {
        for extension in extensions {
            self.qdstrings(&extension.name, &extension.values);
        }
        self.0.push_str(" )");
        self.0
    }
}

/// The printed form of an OID list as RFC 4512 writes it (`a` or `( a $ b )`), for
/// matchingRuleUse's APPLIES.
pub(super) fn format_oids(keyword: &str, oids: &[String]) -> String {
    let mut printer = Printer(String::new());
    printer.oids(keyword, oids);
    printer.0.trim_start().to_string()
}

/// A quoted string for a printed description.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", escape_qdstring(text))
}

impl AttributeTypeDescription {
    /// The description in RFC 4512 §4.1.2 field order, which is also slapd's.
    pub(super) fn definition(&self) -> String {
        let mut p = Printer::new(&self.oid);
        p.qdstrings("NAME", &self.names);
        p.qdstrings("DESC", self.desc.as_slice());
        p.keyword("OBSOLETE", self.obsolete);
        p.word("SUP", self.sup.as_deref());
        p.word("EQUALITY", self.equality.as_deref());
        p.word("ORDERING", self.ordering.as_deref());
        p.word("SUBSTR", self.substr.as_deref());
        let syntax = self.syntax.as_ref().map(|oid| match &self.syntax_len {
            Some(len) => format!("{oid}{{{len}}}"),
            None => oid.clone(),
        });
        p.word("SYNTAX", syntax.as_deref());
        p.keyword("SINGLE-VALUE", self.single_value);
        p.keyword("COLLECTIVE", self.collective);
        p.keyword("NO-USER-MODIFICATION", self.no_user_modification);
        let usage = match self.usage {
            Usage::UserApplications => None,
            Usage::DirectoryOperation => Some("directoryOperation"),
            Usage::DistributedOperation => Some("distributedOperation"),
            Usage::DsaOperation => Some("dSAOperation"),
        };
        p.word("USAGE", usage);
        p.finish(&self.extensions)
    }
}

impl ObjectClassDescription {
    /// The description in RFC 4512 §4.1.1 field order. The kind is always printed, as slapd
    /// does, even when the file left it to the STRUCTURAL default.
    pub(super) fn definition(&self) -> String {
        let mut p = Printer::new(&self.oid);
        p.qdstrings("NAME", &self.names);
        p.qdstrings("DESC", self.desc.as_slice());
        p.keyword("OBSOLETE", self.obsolete);
        p.oids("SUP", &self.sup);
        p.keyword(
            match self.kind {
                ObjectClassKind::Abstract => "ABSTRACT",
                ObjectClassKind::Structural => "STRUCTURAL",
                ObjectClassKind::Auxiliary => "AUXILIARY",
            },
            true,
        );
        p.oids("MUST", &self.must);
        p.oids("MAY", &self.may);
        p.finish(&self.extensions)
    }
}

impl SyntaxDescription {
    pub(super) fn definition(&self) -> String {
        let mut p = Printer::new(&self.oid);
        p.qdstrings("DESC", self.desc.as_slice());
        p.finish(&self.extensions)
    }
}

/// One directive of an OpenLDAP `.schema` file: its keyword, the rest of its logical line,
/// and the physical line it starts on (1-based), for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Directive {
    pub line: usize,
    pub keyword: String,
    pub rest: String,
}

/// Splits a `.schema` file into directives, as slapd.conf(5) reads it: `#` starts a comment
/// line, blank lines are ignored, and a line starting with whitespace continues the previous
/// one.
pub(super) fn directives(text: &str) -> Result<Vec<Directive>, String> {
    let mut out: Vec<Directive> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if raw.starts_with(char::is_whitespace) {
            let current =
                out.last_mut().ok_or(format!("line {line}: continuation line before any directive"))?;
            if current.rest.len() + trimmed.len() > DESCRIPTION_BYTES_MAX {
                return Err(format!(
                    "line {}: definition longer than {DESCRIPTION_BYTES_MAX} bytes",
                    current.line
                ));
            }
            current.rest.push(' ');
            current.rest.push_str(trimmed);
            continue;
        }
        let (keyword, rest) = trimmed.split_once(char::is_whitespace).unwrap_or((trimmed, ""));
        out.push(Directive { line, keyword: keyword.to_string(), rest: rest.trim().to_string() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_macros() -> OidMacros {
        OidMacros::default()
    }

    #[test]
    fn tokenizes_words_quotes_and_dollars_without_spaces() {
        let tokens = tokenize("( 1.2 NAME 'a' MAY (b$c) SYNTAX 1.3{64} )").unwrap();
        assert_eq!(
            tokens,
            vec![
                Token::Open,
                Token::Word("1.2".into()),
                Token::Word("NAME".into()),
                Token::Quoted("a".into()),
                Token::Word("MAY".into()),
                Token::Open,
                Token::Word("b".into()),
                Token::Dollar,
                Token::Word("c".into()),
                Token::Close,
                Token::Word("SYNTAX".into()),
                Token::Word("1.3{64}".into()),
                Token::Close,
            ]
        );
    }

    #[test]
    fn quoted_strings_unescape_27_and_5c() {
        let d = attribute_type(r"( 1.2 DESC 'it\27s a \5C and \5c' SYNTAX 1.3 )", &no_macros()).unwrap();
        assert_eq!(d.desc.as_deref(), Some(r"it's a \ and \"));
        // Printing escapes them again.
        assert_eq!(d.definition(), r"( 1.2 DESC 'it\27s a \5C and \5C' SYNTAX 1.3 )");
        assert!(attribute_type(r"( 1.2 DESC 'bad \41' SYNTAX 1.3 )", &no_macros()).is_err());
        assert!(attribute_type("( 1.2 DESC 'unterminated SYNTAX 1.3 )", &no_macros()).is_err());
    }

    #[test]
    fn attribute_type_fields_in_any_order_and_case() {
        let text = "( 1.3.6.1.4.1.4203.1.12.1.1.1 NAME 'x509CertificateIssuer' \
                    equality distinguishedNameMatch DESC 'Aliasing attribute: Issuer, use' \
                    syntax 1.3.6.1.4.1.1466.115.121.1.12 single-value )";
        let d = attribute_type(text, &no_macros()).unwrap();
        assert_eq!(d.names, vec!["x509CertificateIssuer"]);
        assert_eq!(d.equality.as_deref(), Some("distinguishedNameMatch"));
        assert!(d.single_value);
        assert_eq!(
            d.definition(),
            "( 1.3.6.1.4.1.4203.1.12.1.1.1 NAME 'x509CertificateIssuer' DESC 'Aliasing attribute: \
             Issuer, use' EQUALITY distinguishedNameMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.12 SINGLE-VALUE )"
        );
    }

    #[test]
    fn syntax_length_and_usage_and_extensions() {
        let text = "( 1.2.3 NAME ( 'a' 'b' ) SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{32768} \
                    NO-USER-MODIFICATION USAGE dSAOperation X-ORDERED 'VALUES' X-TWO ( 'p' 'q' ) )";
        let d = attribute_type(text, &no_macros()).unwrap();
        assert_eq!(d.syntax.as_deref(), Some("1.3.6.1.4.1.1466.115.121.1.15"));
        assert_eq!(d.syntax_len.as_deref(), Some("32768"));
        assert_eq!(d.usage, Usage::DsaOperation);
        assert_eq!(d.extensions.len(), 2);
        assert_eq!(
            d.definition(),
            "( 1.2.3 NAME ( 'a' 'b' ) SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{32768} NO-USER-MODIFICATION \
             USAGE dSAOperation X-ORDERED 'VALUES' X-TWO ( 'p' 'q' ) )"
        );
        // A bound standing apart from the OID is accepted too.
        let d = attribute_type("( 1.2.3 SYNTAX 1.4 {64} )", &no_macros()).unwrap();
        assert_eq!(d.syntax_len.as_deref(), Some("64"));
    }

    #[test]
    fn object_class_lists_and_default_kind() {
        let text = "( 1.3.6.1.4.1.4203.1.12.1.2.1 name 'testPerson' sup OpenLDAPperson may testTime )";
        let d = object_class(text, &no_macros()).unwrap();
        assert_eq!(d.kind, ObjectClassKind::Structural);
        assert_eq!(d.sup, vec!["OpenLDAPperson"]);
        assert_eq!(
            d.definition(),
            "( 1.3.6.1.4.1.4203.1.12.1.2.1 NAME 'testPerson' SUP OpenLDAPperson STRUCTURAL MAY testTime )"
        );
        let d =
            object_class("( 2.5.6.6 SUP top STRUCTURAL MUST ( sn $ cn ) MAY (a$b) )", &no_macros()).unwrap();
        assert_eq!(d.must, vec!["sn", "cn"]);
        assert_eq!(d.may, vec!["a", "b"]);
    }

    #[test]
    fn malformed_descriptions_are_rejected() {
        let m = no_macros();
        for bad in [
            "1.2.3 NAME 'a' )",
            "( 1.2.3 NAME 'a'",
            "( 1.2.3 NAME 'a' ) trailing",
            "( 1.2.3 NAME 'a' NAME 'b' )",
            "( 1.2.3 NAME '1bad' )",
            "( 1.2.3 FROB x )",
            "( 1.2.3 USAGE nobody )",
            "( 1.2.3 SYNTAX 1.2{x} )",
            "( notAnOid NAME 'a' )",
            "( 1.2.3 SUP ( a b ) )",
        ] {
            assert!(attribute_type(bad, &m).is_err() || object_class(bad, &m).is_err(), "{bad}");
        }
        assert!(object_class("( 1.2 ABSTRACT AUXILIARY )", &m).is_err());
        assert!(object_class("( 1.2 SUP ( a b ) )", &m).is_err());
    }

    #[test]
    fn macros_expand_in_oid_and_syntax() {
        let mut macros = OidMacros::default();
        macros.define("OpenLDAP", "1.3.6.1.4.1.4203").unwrap();
        macros.define("OLcfg", "OpenLDAP:1.12").unwrap();
        macros.define("OLcfgAt", "OLcfg:3").unwrap();
        macros.define("MySyntax", "1.3.6.1.4.1.1466.115.121.1.15").unwrap();
        let d = attribute_type("( OLcfgAt:1.2 NAME 'x' SYNTAX MySyntax{8} )", &macros).unwrap();
        assert_eq!(d.oid, "1.3.6.1.4.1.4203.1.12.3.1.2");
        assert_eq!(
            d.definition(),
            "( 1.3.6.1.4.1.4203.1.12.3.1.2 NAME 'x' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{8} )"
        );
        assert_eq!(macros.resolve("olcfgat").unwrap(), "1.3.6.1.4.1.4203.1.12.3");
        assert!(macros.resolve("Nope:1").is_err());
        assert!(macros.resolve("OLcfg:x").is_err());
        // Same value again is fine, another value is not.
        assert!(macros.define("OLcfg", "1.3.6.1.4.1.4203.1.12").is_ok());
        assert!(macros.define("OLcfg", "1.2").is_err());
    }

    #[test]
    fn directives_join_continuations_and_skip_comments() {
        let text = "# comment\nattributetype ( 1.2\n\tNAME 'a'\n  # inner comment\n\n  SYNTAX 1.3 )\n\
                    objectidentifier Foo 1.2.3\n";
        let found = directives(text).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].line, 2);
        assert_eq!(found[0].rest, "( 1.2 NAME 'a' SYNTAX 1.3 )");
        assert_eq!(
            found[1],
            Directive { line: 7, keyword: "objectidentifier".into(), rest: "Foo 1.2.3".into() }
        );
        assert!(directives("  ( 1.2 )\n").is_err());
    }

    #[test]
    fn syntax_description_round_trips() {
        let d = ldap_syntax("( 1.2.3 DESC 'Thing' X-NOT-HUMAN-READABLE 'TRUE' )", &no_macros()).unwrap();
        assert_eq!(d.definition(), "( 1.2.3 DESC 'Thing' X-NOT-HUMAN-READABLE 'TRUE' )");
        assert!(ldap_syntax("( 1.2.3 NAME 'x' )", &no_macros()).is_err());
    }
}
