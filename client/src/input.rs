//! The request as the command line describes it, checked before anything is sent.
//!
//! Everything wrong here is the caller's to fix (exit code 2) and is found
//! before the network is touched: a header that is not `name: value` with an
//! RFC 9110 token name and field-value, a key the edge would refuse (the same
//! `Idempotency-Key` rule the filter applies), a key given twice.

use keyflight_protocol::headers::{is_field_value, is_token};
use keyflight_protocol::key::parse_key;

/// What is wrong with the command line's request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// `--header` is not `name: value`.
    #[error("--header {0:?}: expected `name: value`")]
    HeaderSyntax(String),
    /// The header name is not an RFC 9110 token.
    #[error("--header {0:?}: the name is not a valid header name")]
    HeaderName(String),
    /// The header value holds a control character.
    #[error("--header {0:?}: the value holds a control character")]
    HeaderValue(String),
    /// The key header was given with `--header` instead of `--key`.
    #[error(
        "--header {0:?}: pass the key with --key (or --operation-id), so it is reported and reused on retries"
    )]
    KeyAsHeader(String),
    /// The key breaks the `Idempotency-Key` rule.
    #[error("--key: {0}")]
    Key(String),
    /// The method is not an RFC 9110 token.
    #[error("method {0:?} is not a valid HTTP method")]
    Method(String),
}

/// Where the body comes from (`--data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// No `--data`: no body.
    None,
    /// `--data TEXT`: the text itself.
    Inline(Vec<u8>),
    /// `--data @PATH`: the file's bytes.
    File(String),
    /// `--data @-`: standard input.
    Stdin,
}

impl DataSource {
    /// Reads `--data`'s argument the way curl does.
    pub fn parse(arg: Option<&str>) -> DataSource {
        match arg {
            None => DataSource::None,
            Some("@-") => DataSource::Stdin,
            Some(arg) => match arg.strip_prefix('@') {
                Some(path) => DataSource::File(path.to_owned()),
                None => DataSource::Inline(arg.as_bytes().to_vec()),
            },
        }
    }
}

/// Parses `--header 'name: value'`; the value loses surrounding whitespace.
pub fn parse_header(arg: &str, key_header: &str) -> Result<(String, String), InputError> {
    let (name, value) = arg
        .split_once(':')
        .ok_or_else(|| InputError::HeaderSyntax(arg.to_owned()))?;
    let value = value.trim_matches([' ', '\t']);
    if !is_token(name) {
        return Err(InputError::HeaderName(arg.to_owned()));
    }
    if !is_field_value(value) {
        return Err(InputError::HeaderValue(arg.to_owned()));
    }
    if name.eq_ignore_ascii_case(key_header) {
        return Err(InputError::KeyAsHeader(arg.to_owned()));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Checks a caller's key with the edge's `Idempotency-Key` rule (K1), so a
/// key the filter would refuse is reported without a round trip.
pub fn check_key(key: &str) -> Result<(), InputError> {
    parse_key(&[key.as_bytes()])
        .map(|_| ())
        .map_err(|e| InputError::Key(e.to_string()))
}

/// Checks the method: an RFC 9110 token (methods are case-sensitive, sent as given).
pub fn check_method(method: &str) -> Result<(), InputError> {
    if is_token(method) {
        Ok(())
    } else {
        Err(InputError::Method(method.to_owned()))
    }
}

/// Whether `headers` already name a content type.
pub fn has_content_type(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_inline_a_file_or_stdin() {
        assert_eq!(DataSource::parse(None), DataSource::None);
        assert_eq!(DataSource::parse(Some("@-")), DataSource::Stdin);
        assert_eq!(
            DataSource::parse(Some("@body.json")),
            DataSource::File("body.json".into())
        );
        assert_eq!(
            DataSource::parse(Some(r#"{"a":1}"#)),
            DataSource::Inline(br#"{"a":1}"#.to_vec())
        );
    }

    #[test]
    fn headers_are_name_colon_value() {
        let key = "idempotency-key";
        assert_eq!(
            parse_header("If-Match: \"v1\"", key),
            Ok(("If-Match".into(), "\"v1\"".into()))
        );
        assert_eq!(
            parse_header("x-empty:", key),
            Ok(("x-empty".into(), String::new()))
        );
        assert_eq!(
            parse_header("x-url: http://a/b", key),
            Ok(("x-url".into(), "http://a/b".into()))
        );
        assert!(matches!(
            parse_header("no colon", key),
            Err(InputError::HeaderSyntax(_))
        ));
        assert!(matches!(
            parse_header("bad name: v", key),
            Err(InputError::HeaderName(_))
        ));
        assert!(matches!(
            parse_header("x: a\rb", key),
            Err(InputError::HeaderValue(_))
        ));
        assert!(matches!(
            parse_header("Idempotency-Key: k", key),
            Err(InputError::KeyAsHeader(_))
        ));
    }

    #[test]
    fn keys_follow_the_edge_rule() {
        assert_eq!(check_key("pay-1"), Ok(()));
        assert_eq!(check_key("\"quoted\""), Ok(()));
        for bad in ["", " lead", "x\ty", "é", &"k".repeat(256)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn methods_are_tokens() {
        assert_eq!(check_method("POST"), Ok(()));
        assert!(check_method("PO ST").is_err());
        assert!(check_method("").is_err());
    }
}
