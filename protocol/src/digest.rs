//! A SHA-256 digest: how scopes and fingerprints travel and print.
//!
//! On the wire (`docs/records.md#the-api`) a digest is 64 lowercase hex characters; for people
//! (logs, `keyflight fingerprint`) it prints as `sha256:<hex>` (K4).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

/// Why a string is not a wire digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected 64 lowercase hex characters (a SHA-256 digest)")]
pub struct DigestParseError;

impl Digest {
    /// SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Digest(sha2::Sha256::digest(bytes).into())
    }

    /// The 64-character lowercase hex form used on the wire and in URLs.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the wire form. Uppercase hex is rejected so that one digest has
    /// exactly one spelling (it is a primary key and a URL path segment).
    pub fn from_hex(s: &str) -> Result<Self, DigestParseError> {
        if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(DigestParseError);
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| DigestParseError)?;
        Ok(Digest(out))
    }
}

/// `sha256:<hex>`, the human-facing form (K4).
impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Digest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[0-9a-f]{64}$"))
            .description(Some("SHA-256 digest, 64 lowercase hex characters"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Digest {}
