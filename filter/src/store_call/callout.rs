//! [`Callout`]: a lease-store request as the host dispatches it — method, path, headers,
//! body and timeout — built from a [`StoreCall`], the epoch question or a batch. Everything
//! the host needs is decided here, so the drivers hand it over as it is.

use std::time::Duration;

use keyflight_protocol::wire::batch::{BatchedClaim, BatchedFinalize, ClaimBatch, FinalizeBatch};
use keyflight_protocol::wire::{ClaimRequest, framed};

use super::{StoreCall, StoreRoute};
use crate::config::LeaseStore;

/// A lease-store request as the host dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callout {
    /// A call about a scope (`POST`).
    Call {
        /// The call.
        call: StoreCall,
        /// How long the host waits for its answer.
        timeout: Duration,
    },
    /// The operator epoch question (`GET /v1/epoch`).
    Epoch {
        /// How long the host waits for its answer.
        timeout: Duration,
    },
    /// Claims, or finalizes, of one kind, sent as one batch (`docs/records.md#batches`).
    Batch {
        /// The calls, all claims or all finalizes; a claim's `wait_ms` is not sent (a
        /// batch never long-polls).
        calls: Vec<StoreCall>,
        /// How long the host waits for its answer.
        timeout: Duration,
    },
}

impl Callout {
    /// Which request this is.
    pub fn route(&self) -> StoreRoute {
        match self {
            Callout::Call { call, .. } => call.route(),
            Callout::Epoch { .. } => StoreRoute::Epoch,
            Callout::Batch { calls, .. } => match calls.first() {
                Some(StoreCall::Finalize { .. }) => StoreRoute::FinalizeBatch,
                _ => StoreRoute::ClaimBatch,
            },
        }
    }

    /// The HTTP method.
    pub fn method(&self) -> &'static str {
        self.route().method()
    }

    /// The request path.
    pub fn path(&self) -> String {
        match self {
            Callout::Call { call, .. } => call.path(),
            Callout::Epoch { .. } | Callout::Batch { .. } => self.route().path(None),
        }
    }

    /// The request body (`None` for the epoch question).
    pub fn body(&self) -> Option<Vec<u8>> {
        match self {
            Callout::Call { call, .. } => Some(call.body()),
            Callout::Epoch { .. } => None,
            Callout::Batch { calls, .. } => Some(batch_body(calls)),
        }
    }

    /// The request headers. A callout needs `:method`, `:path` and
    /// `:authority` (`docs/envoy-facts.md#callouts`); the bearer token is the
    /// filter's (`docs/records.md#the-api`). A claim on its single route asks for a
    /// replay's body as raw bytes ([`framed`]); a store that predates frames answers JSON.
    pub fn headers(&self, store: &LeaseStore) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            (":method", self.method().to_owned()),
            (":path", self.path()),
            (":authority", store.authority.clone()),
            ("content-type", "application/json".to_owned()),
        ];
        if self.route() == StoreRoute::Claim {
            headers.push((
                "accept",
                format!("{}, application/json", framed::MEDIA_TYPE),
            ));
        }
        if let Some(token) = &store.token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        headers
    }

    /// How long the host waits, never zero: a zero timeout would mean none
    /// at all (`docs/envoy-facts.md#callouts`).
    pub fn timeout(&self) -> Duration {
        let (Callout::Call { timeout, .. }
        | Callout::Epoch { timeout }
        | Callout::Batch { timeout, .. }) = self;
        (*timeout).max(Duration::from_millis(1))
    }
}

/// The JSON body of a batch of `calls`: the claims' (without `wait_ms`), or the
/// finalizes'; a call of another kind is not sent (the root batches one kind at a time).
fn batch_body(calls: &[StoreCall]) -> Vec<u8> {
    let claims: Vec<BatchedClaim> = calls
        .iter()
        .filter_map(|call| match call {
            StoreCall::Claim { scope, request } => Some(BatchedClaim {
                scope: *scope,
                request: ClaimRequest {
                    wait_ms: None,
                    ..request.clone()
                },
            }),
            _ => None,
        })
        .collect();
    let body = if claims.is_empty() {
        let calls = calls
            .iter()
            .filter_map(|call| match call {
                StoreCall::Finalize { scope, request } => Some(BatchedFinalize {
                    scope: *scope,
                    request: request.clone(),
                }),
                _ => None,
            })
            .collect();
        serde_json::to_vec(&FinalizeBatch { calls })
    } else {
        serde_json::to_vec(&ClaimBatch { calls: claims })
    };
    // As for a single call: an empty body is refused by the store, never a crash.
    body.unwrap_or_default()
}
