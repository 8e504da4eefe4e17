//! The CSRF token on every decision form (`docs/console.md#decisions`).
//!
//! An operator may reach the console through something that adds their bearer token to
//! every request to the admin listener, and so would add it to a request another site's
//! page makes the browser send (the sign-in cookie is `SameSite=Strict`, the header is not).
//! A decision is therefore taken only with the token its preview page rendered: an
//! HMAC-SHA-256, under a key drawn when the replica starts, of the operator's name, the
//! decision and the record's scope. Another site can neither read the page nor compute it;
//! it opens one decision on one record for one operator, on the replica that rendered it
//! (a restart means previewing again).

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use keyflight_protocol::Digest;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::decision::Action;

/// This replica's key for the console's form tokens.
#[derive(Clone)]
pub struct CsrfKey(Arc<[u8; 64]>);

impl std::fmt::Debug for CsrfKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CsrfKey(…)")
    }
}

impl CsrfKey {
    /// A fresh random key, as long as SHA-256's block.
    pub fn random() -> Self {
        CsrfKey(Arc::new(rand::random()))
    }

    /// A key from known bytes (tests).
    pub fn from_bytes(key: [u8; 64]) -> Self {
        CsrfKey(Arc::new(key))
    }

    /// The token of `operator`'s form for `action` on `scope`, 64 lowercase hex.
    pub fn token(&self, operator: &str, action: Action, scope: &Digest) -> String {
        hex::encode(self.mac(operator, action, scope))
    }

    /// Whether `presented` is that token (compared in constant time).
    pub fn admits(
        &self,
        operator: &str,
        action: Action,
        scope: &Digest,
        presented: Option<&str>,
    ) -> bool {
        let Some(presented) = presented.and_then(|hex_token| hex::decode(hex_token).ok()) else {
            return false;
        };
        let expected = self.mac(operator, action, scope);
        presented.len() == expected.len() && bool::from(presented.ct_eq(&expected))
    }

    /// The MAC over the name's length, the name, the action and the scope: no two forms
    /// share an input.
    fn mac(&self, operator: &str, action: Action, scope: &Digest) -> Vec<u8> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new(&(*self.0).into());
        mac.update(&(operator.len() as u64).to_be_bytes());
        mac.update(operator.as_bytes());
        mac.update(action.as_str().as_bytes());
        mac.update(&[0]);
        mac.update(&scope.0);
        mac.finalize().into_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_one_decision_on_one_record_for_one_operator() {
        let key = CsrfKey::from_bytes([7; 64]);
        let scope = Digest::of(b"record");
        let token = key.token("alice", Action::Erase, &scope);
        assert!(key.admits("alice", Action::Erase, &scope, Some(&token)));
        assert!(!key.admits("bob", Action::Erase, &scope, Some(&token)));
        assert!(!key.admits("alice", Action::ResolveFailed, &scope, Some(&token)));
        assert!(!key.admits("alice", Action::Erase, &Digest::of(b"other"), Some(&token)));
        assert!(!key.admits("alice", Action::Erase, &scope, None));
        assert!(!key.admits("alice", Action::Erase, &scope, Some("")));
        assert!(!key.admits("alice", Action::Erase, &scope, Some(&token[..62])));
        let other_replica = CsrfKey::from_bytes([8; 64]);
        assert!(!other_replica.admits("alice", Action::Erase, &scope, Some(&token)));
    }
}
