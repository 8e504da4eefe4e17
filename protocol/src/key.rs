//! K1: the `Idempotency-Key` header.
//!
//! A key is sent at most once, is 1–255 bytes of visible ASCII (spaces allowed
//! inside), and may use the IETF draft's sf-string form (`"abc"`), which is
//! unquoted here so that `abc` and `"abc"` are the same key.

/// The longest key accepted, in bytes (after unquoting).
pub const MAX_KEY_BYTES: usize = 255;

/// A validated, unquoted idempotency key. Never logged or stored raw: only
/// its scope digest (K3) leaves the filter.
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key's bytes, as hashed into the scope.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Keys are caller secrets of a kind: debug output shows only the length.
impl std::fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdempotencyKey(<{} bytes>)", self.0.len())
    }
}

/// Why a present key was rejected (all map to 400 `idempotency_key_invalid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The header is present but empty (or `""`).
    #[error("the Idempotency-Key header is empty")]
    Empty,
    /// A byte outside visible ASCII (0x21–0x7E, or a space that is not inside).
    #[error("the Idempotency-Key header must be visible ASCII (spaces allowed only inside)")]
    NotVisibleAscii,
    /// Longer than [`MAX_KEY_BYTES`].
    #[error("the Idempotency-Key header is longer than 255 bytes")]
    TooLong,
    /// The header was sent more than once.
    #[error("the Idempotency-Key header was sent more than once")]
    Repeated,
    /// An sf-string that is not well formed (unbalanced quote, bad escape).
    #[error("the Idempotency-Key header is a malformed quoted string")]
    MalformedQuotedString,
}

/// Validates every value of the key header as received.
///
/// `values` is each occurrence of the header, in order (read the full header
/// list: the single-value getter shows only the first). Returns `Ok(None)` when
/// the header is absent.
pub fn parse_key(values: &[&[u8]]) -> Result<Option<IdempotencyKey>, KeyError> {
    match values {
        [] => Ok(None),
        [one] => validate(one).map(Some),
        _ => Err(KeyError::Repeated),
    }
}

fn validate(raw: &[u8]) -> Result<IdempotencyKey, KeyError> {
    let unquoted = unquote(raw)?;
    if unquoted.is_empty() {
        return Err(KeyError::Empty);
    }
    if unquoted.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong);
    }
    let visible = |b: &u8| (0x21..=0x7e).contains(b);
    let first_last_visible =
        unquoted.first().is_some_and(visible) && unquoted.last().is_some_and(visible);
    if !first_last_visible || !unquoted.iter().all(|b| visible(b) || *b == b' ') {
        return Err(KeyError::NotVisibleAscii);
    }
    // Every byte is ASCII here, so this conversion cannot fail; mapping the
    // impossible error keeps host data away from any panic path.
    String::from_utf8(unquoted)
        .map(IdempotencyKey)
        .map_err(|_| KeyError::NotVisibleAscii)
}

/// Unquotes an RFC 8941 sf-string (`"…"` with `\"` and `\\` escapes); any
/// other value is returned as is.
fn unquote(raw: &[u8]) -> Result<Vec<u8>, KeyError> {
    let Some(inner) = raw.strip_prefix(b"\"") else {
        return Ok(raw.to_vec());
    };
    let Some(inner) = inner.strip_suffix(b"\"") else {
        return Err(KeyError::MalformedQuotedString);
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return Err(KeyError::MalformedQuotedString),
            },
            b'"' => return Err(KeyError::MalformedQuotedString),
            _ => out.push(b),
        }
    }
    Ok(out)
}
