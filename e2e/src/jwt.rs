//! HS256 JSON Web Tokens for the JWT identity scenarios, and the JWKS Envoy verifies them with.
//!
//! Envoy's `jwt_authn` accepts a symmetric `oct` key in a local JWKS, and HS256 needs nothing
//! but HMAC-SHA-256 to sign, so the tests mint tokens in-process (no key files, no clock
//! skew: tokens carry no `exp`, which jwt_authn accepts). Test-only: never use a shared
//! secret like this between an issuer and a proxy in production.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The `iss` every token carries (and the jwt_authn provider expects).
pub const ISSUER: &str = "https://issuer.keyflight.test";

/// The key id in the JWKS and in token headers.
const KEY_ID: &str = "e2e-hs256";

/// Signs tokens with one HS256 key.
#[derive(Debug, Clone)]
pub struct Issuer {
    secret: Vec<u8>,
}

impl Default for Issuer {
    fn default() -> Self {
        Issuer {
            secret: b"keyflight end-to-end HS256 signing key (test only)".to_vec(),
        }
    }
}

impl Issuer {
    /// An issuer signing with another key under the same key id (a forger).
    pub fn with_secret(secret: &[u8]) -> Issuer {
        Issuer {
            secret: secret.to_vec(),
        }
    }

    /// The JWKS (`{"keys": [...]}`) holding this issuer's key.
    pub fn jwks(&self) -> String {
        json!({
            "keys": [{
                "kty": "oct",
                "alg": "HS256",
                "kid": KEY_ID,
                "k": URL_SAFE_NO_PAD.encode(&self.secret),
            }]
        })
        .to_string()
    }

    /// A signed token with `claims` (an object) plus `iss`.
    pub fn token(&self, claims: &Value) -> String {
        let mut claims = claims.clone();
        claims["iss"] = json!(ISSUER);
        let header = json!({"alg": "HS256", "typ": "JWT", "kid": KEY_ID});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret)
            .unwrap_or_else(|e| panic!("an HMAC key of any length is accepted: {e}"));
        mac.update(signing_input.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{signing_input}.{signature}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_has_three_parts_and_its_claims_decode() {
        let token = Issuer::default().token(&json!({"sub": "svc"}));
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        let claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("base64url"))
                .expect("JSON claims");
        assert_eq!(claims, json!({"sub": "svc", "iss": ISSUER}));
    }
}
