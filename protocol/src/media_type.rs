//! The request's media type (`content-type`) as the fingerprint reads it (K4).
//!
//! The same bytes under another media type are another request: a JSON Patch
//! and a JSON Merge Patch of one document do different things, and a multipart
//! body means something else under another boundary. So the media type with
//! every parameter is part of the fingerprint, in a normal form that only
//! equates spellings RFC 9110 §8.3.1 and §5.6.6 declare equal:
//!
//! - type and subtype are lower-cased (they are case-insensitive);
//! - parameter names are lower-cased (case-insensitive), and parameters are
//!   sorted by name, stably (MIME parameters are unordered; a repeated name,
//!   which is ambiguous, keeps its order and is hashed as sent);
//! - a parameter value is unquoted: `"x"` and `x` are equal, and a
//!   quoted-pair `\c` stands for `c`. Values stay case-sensitive (a boundary
//!   is), except `charset`, whose names are case-insensitive (§8.3.2) and which
//!   is lower-cased;
//! - the optional whitespace around `;` and at either end is dropped;
//! - on JSON media types a `charset=utf-8` is dropped: JSON text is UTF-8 by
//!   definition and that parameter has no effect on it (RFC 8259 §8.1, §11).
//!
//! A value that is not a media type by that grammar (whitespace around `=`, a
//! missing subtype, several values joined by `,` because the header was sent
//! twice) is kept whole, minus surrounding whitespace, as an *unparsed* media
//! type: equal only to the very same bytes.

use crate::framing::FramedHasher;

/// A normalized media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaType {
    /// No `content-type` header.
    Absent,
    /// `type/subtype` and parameters in normal form.
    Parsed {
        /// Lower-case type.
        kind: String,
        /// Lower-case subtype.
        subtype: String,
        /// Lower-case names with unquoted values, sorted by name.
        parameters: Vec<(String, Vec<u8>)>,
    },
    /// Not a media type; the trimmed bytes as sent.
    Unparsed(Vec<u8>),
}

impl MediaType {
    /// Normalizes the `content-type` field value(s): [`MediaType::Absent`] when
    /// the header is absent; several values (a repeated header) are joined
    /// with `,` first, as Envoy itself combines a repeated `content-type`.
    pub fn from_values(values: &[&[u8]]) -> MediaType {
        if values.is_empty() {
            return MediaType::Absent;
        }
        let joined = values.join(&b","[..]);
        let trimmed = trim_ows(&joined);
        parse(trimmed).unwrap_or_else(|| MediaType::Unparsed(trimmed.to_vec()))
    }

    /// Normalizes one `content-type` value.
    pub fn parse(value: &[u8]) -> MediaType {
        MediaType::from_values(&[value])
    }

    /// True for `application/json` and `application/*+json`.
    pub fn is_json(&self) -> bool {
        match self {
            MediaType::Parsed { kind, subtype, .. } => is_json(kind, subtype),
            _ => false,
        }
    }

    /// The `charset` parameter, lower-cased, if there is exactly one.
    pub fn charset(&self) -> Option<&[u8]> {
        let MediaType::Parsed { parameters, .. } = self else {
            return None;
        };
        let mut charsets = parameters.iter().filter(|(name, _)| name == "charset");
        match (charsets.next(), charsets.next()) {
            (Some((_, value)), None) => Some(value),
            _ => None,
        }
    }

    /// Whether JCS may canonicalize a body of this type (K4): JSON with no
    /// other charset than UTF-8 (which normalization already removed).
    pub fn is_utf8_json(&self) -> bool {
        match self {
            MediaType::Parsed { parameters, .. } => {
                self.is_json() && !parameters.iter().any(|(name, _)| name == "charset")
            }
            _ => false,
        }
    }

    /// Appends this media type to a fingerprint preimage.
    pub(crate) fn frame(&self, h: &mut FramedHasher) {
        match self {
            MediaType::Absent => {
                h.field(b"absent");
            }
            MediaType::Parsed {
                kind,
                subtype,
                parameters,
            } => {
                h.field(b"parsed")
                    .field(kind.as_bytes())
                    .field(subtype.as_bytes());
                h.count(parameters.len());
                for (name, value) in parameters {
                    h.field(name.as_bytes()).field(value);
                }
            }
            MediaType::Unparsed(raw) => {
                h.field(b"unparsed").field(raw);
            }
        }
    }
}

/// The normal form for people (`keyflight fingerprint`): `type/subtype;
/// name=value`, values quoted when they are not tokens; `(none)` when absent;
/// an unparsed value as sent, marked.
impl std::fmt::Display for MediaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MediaType::Absent => f.write_str("(none)"),
            MediaType::Parsed {
                kind,
                subtype,
                parameters,
            } => {
                write!(f, "{kind}/{subtype}")?;
                for (name, value) in parameters {
                    let text = String::from_utf8_lossy(value);
                    if !value.is_empty() && value.iter().all(|&b| is_token_byte(b)) {
                        write!(f, "; {name}={text}")?;
                    } else {
                        let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
                        write!(f, "; {name}=\"{escaped}\"")?;
                    }
                }
                Ok(())
            }
            MediaType::Unparsed(raw) => {
                write!(f, "(not a media type) {}", String::from_utf8_lossy(raw))
            }
        }
    }
}

fn is_json(kind: &str, subtype: &str) -> bool {
    kind == "application"
        && (subtype == "json" || (subtype.len() > "+json".len() && subtype.ends_with("+json")))
}

/// RFC 9110 §8.3.1: `type "/" subtype *( OWS ";" OWS [ parameter ] )`.
fn parse(value: &[u8]) -> Option<MediaType> {
    let mut r = Cursor(value);
    let kind = r.token()?.to_ascii_lowercase();
    r.expect(b'/')?;
    let subtype = r.token()?.to_ascii_lowercase();
    let mut parameters: Vec<(String, Vec<u8>)> = Vec::new();
    loop {
        r.skip_ows();
        if r.is_empty() {
            break;
        }
        r.expect(b';')?;
        r.skip_ows();
        if r.is_empty() || r.peek() == Some(b';') {
            continue;
        }
        let name = r.token()?.to_ascii_lowercase();
        r.expect(b'=')?;
        let mut value = if r.peek() == Some(b'"') {
            r.quoted_string()?
        } else {
            r.token()?.as_bytes().to_vec()
        };
        if name == "charset" {
            value.make_ascii_lowercase();
        }
        parameters.push((name, value));
    }
    if is_json(&kind, &subtype) {
        parameters.retain(|(name, value)| !(name == "charset" && value == b"utf-8"));
    }
    parameters.sort_by(|a, b| a.0.cmp(&b.0));
    Some(MediaType::Parsed {
        kind,
        subtype,
        parameters,
    })
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(crate) fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |at| at + 1);
    value.get(start..end).unwrap_or_default()
}

/// A cursor over a field value; every read is bounds-checked.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn expect(&mut self, want: u8) -> Option<()> {
        (self.bump()? == want).then_some(())
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.bump();
        }
    }

    /// A non-empty token (ASCII, so a `String`).
    fn token(&mut self) -> Option<String> {
        let len = self.0.iter().take_while(|&&b| is_token_byte(b)).count();
        if len == 0 {
            return None;
        }
        let (token, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(String::from_utf8_lossy(token).into_owned())
    }

    /// RFC 9110 §5.6.4, unescaped: `DQUOTE *( qdtext / quoted-pair ) DQUOTE`.
    fn quoted_string(&mut self) -> Option<Vec<u8>> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.bump()? {
                b'"' => return Some(out),
                b'\\' => {
                    let escaped = self.bump()?;
                    is_quoted_pair_byte(escaped).then_some(())?;
                    out.push(escaped);
                }
                b if is_qdtext(b) => out.push(b),
                _ => return None,
            }
        }
    }
}

/// `qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text`.
fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5B | 0x5D..=0x7E | 0x80..=0xFF)
}

/// `quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )`.
fn is_quoted_pair_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21..=0x7E | 0x80..=0xFF)
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn mt(value: &str) -> MediaType {
        MediaType::parse(value.as_bytes())
    }

    #[test]
    fn spellings_of_one_media_type_are_equal() {
        let reference = mt("multipart/form-data; boundary=abc; charset=utf-8");
        for spelling in [
            "Multipart/Form-Data;boundary=abc;charset=utf-8",
            "multipart/form-data ;  Charset=UTF-8 ; Boundary=\"abc\"",
            "  multipart/form-data; boundary=\"a\\bc\"; charset=\"utf-8\"\t",
            "multipart/form-data;; boundary=abc;charset=utf-8;",
        ] {
            assert_eq!(mt(spelling), reference, "{spelling}");
        }
        assert_eq!(
            reference.to_string(),
            "multipart/form-data; boundary=abc; charset=utf-8"
        );
    }

    #[test]
    fn type_parameters_and_values_tell_requests_apart() {
        let different = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "multipart/form-data; boundary=abc",
            "multipart/form-data; boundary=ABC",
            "multipart/form-data; boundary=abd",
            "text/plain; charset=utf-8",
            "text/plain; charset=iso-8859-1",
            "text/plain",
            "application/json; charset=iso-8859-1",
            "application/json",
        ];
        for (i, a) in different.iter().enumerate() {
            for b in &different[i + 1..] {
                assert_ne!(mt(a), mt(b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn json_and_utf8_json_are_one_type() {
        assert_eq!(
            mt("application/json; charset=UTF-8"),
            mt("application/json")
        );
        assert_eq!(
            mt("application/vnd.api+json;charset=\"utf-8\""),
            mt("application/vnd.api+json")
        );
        assert!(mt("application/json; charset=utf-8").is_utf8_json());
        assert!(!mt("application/json; charset=utf-16").is_utf8_json());
        assert!(!mt("application/json; charset=utf-8; charset=utf-16").is_utf8_json());
        assert!(!mt("text/json").is_utf8_json());
        assert!(!mt("application/+json").is_json());
        assert!(mt("application/problem+json").is_json());
        // A text type keeps its charset: it is its real encoding.
        assert_ne!(mt("text/plain; charset=utf-8"), mt("text/plain"));
    }

    #[test]
    fn what_does_not_parse_is_kept_as_sent() {
        for bad in [
            "application/json; charset = utf-8",
            "application",
            "application/",
            "/json",
            "application/json; boundary=\"open",
            "application/json, text/plain",
            "application/json; =x",
        ] {
            assert_eq!(
                mt(bad),
                MediaType::Unparsed(bad.as_bytes().to_vec()),
                "{bad}"
            );
        }
        assert_eq!(
            MediaType::from_values(&[b"application/json", b"application/json"]),
            MediaType::Unparsed(b"application/json,application/json".to_vec())
        );
        assert_eq!(MediaType::from_values(&[]), MediaType::Absent);
        assert_eq!(mt(""), MediaType::Unparsed(Vec::new()));
        assert_ne!(mt(""), MediaType::Absent);
    }

    #[test]
    fn repeated_parameters_keep_their_order() {
        assert_ne!(mt("text/plain; a=1; a=2"), mt("text/plain; a=2; a=1"));
        assert_eq!(mt("text/plain; b=1; a=2"), mt("text/plain; a=2; b=1"));
        assert_eq!(mt("text/plain; charset=a; charset=b").charset(), None);
        assert_eq!(mt("text/plain; charset=A").charset(), Some(&b"a"[..]));
    }
}
