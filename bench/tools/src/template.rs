//! Entry names with one numeric placeholder, as `ldclt -b uid=userXXXXX,...` uses them:
//! `uid=user{:05},ou=people,dc=example,dc=com` renders entry 42 as
//! `uid=user00042,ou=people,dc=example,dc=com`.
//!
//! The placeholder follows Rust's format syntax for the few forms that make sense here:
//! `{}` (no padding), `{:N}` (space-padded to N), `{:0N}` (zero-padded to N). A template
//! without a placeholder renders the same text for every number.

use crate::error::Error;

/// The widest padding we accept; wider is certainly a typo.
const WIDTH_MAX: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The text it was parsed from.
    source: String,
    prefix: String,
    /// `None` when the template has no placeholder.
    placeholder: Option<Padding>,
    suffix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Padding {
    width: usize,
    zero: bool,
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, Error> {
        let Some(open) = text.find('{') else {
            if text.contains('}') {
                return Err(Error::Config(format!("template {text:?} has '}}' without '{{'")));
            }
            let (source, prefix) = (text.to_string(), text.to_string());
            return Ok(Template { source, prefix, placeholder: None, suffix: String::new() });
        };
        let close = text[open..]
            .find('}')
            .map(|offset| open + offset)
            .ok_or_else(|| Error::Config(format!("template {text:?} has '{{' without '}}'")))?;
        let suffix = &text[close + 1..];
        if suffix.contains(['{', '}']) {
            return Err(Error::Config(format!("template {text:?} has more than one placeholder")));
        }
        let placeholder = parse_spec(&text[open + 1..close])
            .ok_or_else(|| Error::Config(format!("template {text:?}: use {{}}, {{:N}} or {{:0N}}")))?;
        Ok(Template {
            source: text.to_string(),
            prefix: text[..open].to_string(),
            placeholder: Some(placeholder),
            suffix: suffix.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn has_placeholder(&self) -> bool {
        self.placeholder.is_some()
    }

    /// Appends the template rendered for `number` to `out`.
    pub fn render_into(&self, number: u64, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(&self.prefix);
        // Writing to a String cannot fail.
        let _ = match self.placeholder {
            None => Ok(()),
            Some(Padding { width, zero: true }) => write!(out, "{number:0width$}"),
            Some(Padding { width, zero: false }) => write!(out, "{number:width$}"),
        };
        out.push_str(&self.suffix);
    }

    pub fn render(&self, number: u64) -> String {
        let mut out = String::with_capacity(self.prefix.len() + self.suffix.len() + 20);
        self.render_into(number, &mut out);
        out
    }
}

/// The text between the braces: empty, `:N` or `:0N`.
fn parse_spec(spec: &str) -> Option<Padding> {
    if spec.is_empty() {
        return Some(Padding { width: 0, zero: false });
    }
    let digits = spec.strip_prefix(':')?;
    let (zero, digits) = match digits.strip_prefix('0') {
        Some(rest) if !rest.is_empty() => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let width: usize = digits.parse().ok()?;
    (width <= WIDTH_MAX).then_some(Padding { width, zero })
}

/// A DN template cut at its first RDN, for searching a subtree for the entry by that RDN:
/// `uid=user{:05},ou=people,dc=example,dc=com` gives attribute `uid`, value template
/// `user{:05}` and parent `ou=people,dc=example,dc=com`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstRdn {
    pub attribute: String,
    pub value: Template,
    pub parent: String,
}

impl FirstRdn {
    /// Splits at the first `,` that is not escaped (RFC 4514 §2.4 `\,`). The value is used
    /// as the filter's assertion value exactly as written, so it should not need escaping.
    pub fn split(text: &str) -> Result<FirstRdn, Error> {
        let bytes = text.as_bytes();
        let mut comma = None;
        let mut index = 0;
        while index < bytes.len() {
            match bytes[index] {
                b'\\' => index += 1,
                b',' => {
                    comma = Some(index);
                    break;
                }
                _ => {}
            }
            index += 1;
        }
        let (rdn, parent) = match comma {
            Some(at) => (&text[..at], text[at + 1..].trim()),
            None => (text, ""),
        };
        let (attribute, value) =
            rdn.split_once('=').ok_or_else(|| Error::Config(format!("{rdn:?} is not attribute=value")))?;
        if rdn.contains('+') {
            return Err(Error::Config(format!("multi-valued RDN {rdn:?} is not supported here")));
        }
        if parent.contains(['{', '}']) {
            return Err(Error::Config(format!("the placeholder of {text:?} must be in its first RDN")));
        }
        Ok(FirstRdn {
            attribute: attribute.trim().to_string(),
            value: Template::parse(value.trim())?,
            parent: parent.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_padded() {
        let template = Template::parse("uid=user{:05},ou=people,dc=example,dc=com").unwrap();
        assert_eq!(template.render(42), "uid=user00042,ou=people,dc=example,dc=com");
        assert_eq!(template.render(123_456), "uid=user123456,ou=people,dc=example,dc=com");
    }

    #[test]
    fn plain_space_padded_and_none() {
        assert_eq!(Template::parse("password{}").unwrap().render(7), "password7");
        assert_eq!(Template::parse("[{:3}]").unwrap().render(7), "[  7]");
        let fixed = Template::parse("cn=admin,dc=example,dc=com").unwrap();
        assert!(!fixed.has_placeholder());
        assert_eq!(fixed.render(7), "cn=admin,dc=example,dc=com");
    }

    #[test]
    fn bad_templates() {
        for text in ["a{", "a}", "{x}", "{:}", "{:5x}", "{}{}", "{:99}"] {
            assert!(Template::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn first_rdn() {
        let split = FirstRdn::split("uid=user{:05},ou=people,dc=example,dc=com").unwrap();
        assert_eq!(split.attribute, "uid");
        assert_eq!(split.value.render(3), "user00003");
        assert_eq!(split.parent, "ou=people,dc=example,dc=com");
        let escaped = FirstRdn::split(r"cn=a\,b{},o=x").unwrap();
        assert_eq!(escaped.value.render(1), r"a\,b1");
        assert_eq!(escaped.parent, "o=x");
        assert!(FirstRdn::split("uid=u,ou={}").is_err());
        assert!(FirstRdn::split("novalue,o=x").is_err());
    }
}
