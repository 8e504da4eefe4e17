//! Reconciliation (`uncertain: reconcile`, `docs/reconcile.md`): what a service answers
//! when keyflight asks what became of a run whose outcome is uncertain, and what the filter
//! then tells the lease-store.
//!
//! The filter asks the service's reconcile endpoint `POST <path>` with only the operation's
//! `idempotency-scope` and `idempotency-fence` (and keyflight's bearer token), never anything
//! a caller sent; the service answers a [`ServiceAnswer`] from its own ledger. The filter
//! then settles the record with a [`ReconciledRequest`] on
//! `POST /v1/claims/{scope}/reconciled`.

use serde::{Deserialize, Serialize};

use super::{StoredResponse, integral};
use crate::Digest;

/// The default path of a service's reconcile endpoint.
pub const DEFAULT_PATH: &str = "/.well-known/keyflight/reconcile";

/// A service's answer: what its ledger says about run `fence` of operation `scope`. Both
/// echo the question, so an answer about another operation or run is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServiceAnswer {
    /// A run of the operation committed its effect: `response` is what it answered, and
    /// what every retry replays.
    Committed {
        /// The scope asked about.
        scope: Digest,
        /// The fence asked about.
        fence: i64,
        /// The committed run's answer, as keyflight records it (the recorded-header rule
        /// applies).
        response: StoredResponse,
    },
    /// No run committed, and the ledger now refuses any later commit by a run whose fence
    /// is `fence` or lower, so the operation may run again under a higher one.
    Absent {
        /// The scope asked about.
        scope: Digest,
        /// The fence asked about, now fenced out.
        fence: i64,
    },
}

/// `POST /v1/claims/{scope}/reconciled`: settles an `unknown` record with what the
/// service's ledger said, by the `outcome` it names. Applied only while the record is
/// `unknown` at `fence` with `fingerprint`; audited as a decision of the reconciler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReconciledRequest {
    /// The run committed: the record becomes `completed` with the service's answer.
    Committed {
        /// The fingerprint of the request the record holds.
        fingerprint: Digest,
        /// The fence of the run whose outcome was uncertain.
        #[serde(deserialize_with = "integral::i64")]
        #[cfg_attr(
            feature = "openapi",
            schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
        )]
        fence: i64,
        /// The response retries get.
        response: StoredResponse,
    },
    /// Nothing committed and the run is fenced out: the record becomes `failed` with its
    /// cooldown over, so the next same-fingerprint claim runs under a higher fence.
    Absent {
        /// The fingerprint of the request the record holds.
        fingerprint: Digest,
        /// The fence of the run whose outcome was uncertain.
        #[serde(deserialize_with = "integral::i64")]
        #[cfg_attr(
            feature = "openapi",
            schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)
        )]
        fence: i64,
    },
}

impl ReconciledRequest {
    /// The fingerprint of the request the record holds.
    pub fn fingerprint(&self) -> Digest {
        let (ReconciledRequest::Committed { fingerprint, .. }
        | ReconciledRequest::Absent { fingerprint, .. }) = self;
        *fingerprint
    }

    /// The fence of the run whose outcome was uncertain.
    pub fn fence(&self) -> i64 {
        let (ReconciledRequest::Committed { fence, .. } | ReconciledRequest::Absent { fence, .. }) =
            self;
        *fence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCOPE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_committed_answer_carries_its_response() {
        let text = format!(
            r#"{{"outcome":"committed","scope":"{SCOPE}","fence":7,
                "response":{{"status":201,"headers":[["content-type","application/json"]],"body_b64":"e30="}}}}"#
        );
        let answer: ServiceAnswer = serde_json::from_str(&text).unwrap();
        let ServiceAnswer::Committed {
            scope,
            fence,
            response,
        } = answer
        else {
            panic!("committed")
        };
        assert_eq!((scope.to_hex().as_str(), fence), (SCOPE, 7));
        assert_eq!(
            (response.status, response.body.as_slice()),
            (201, &b"{}"[..])
        );
    }

    #[test]
    fn unknown_outcomes_and_fields_are_refused() {
        for text in [
            format!(r#"{{"outcome":"maybe","scope":"{SCOPE}","fence":7}}"#),
            format!(r#"{{"outcome":"absent","scope":"{SCOPE}","fence":7,"extra":1}}"#),
            format!(
                r#"{{"outcome":"absent","scope":"{}","fence":7}}"#,
                SCOPE.to_uppercase()
            ),
            format!(r#"{{"outcome":"committed","scope":"{SCOPE}","fence":7}}"#),
        ] {
            assert!(
                serde_json::from_str::<ServiceAnswer>(&text).is_err(),
                "{text}"
            );
        }
    }
}
