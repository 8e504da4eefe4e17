//! [`StoreRoute`]: every kind of request the filter sends to the lease-store, with its
//! method and path pattern. One list, so the shipped AuthorizationPolicies can be checked
//! against exactly what the filter sends.

use keyflight_protocol::Digest;

/// One kind of lease-store request the filter sends: its method and path
/// pattern (`docs/records.md#the-api`). Every callout takes both from here,
/// so [`StoreRoute::ALL`] is the filter's complete set of store calls: the
/// shipped Istio AuthorizationPolicies must admit exactly these
/// (`filter/tests/shipped_configs/store_calls.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreRoute {
    /// `POST /v1/claims/{scope}`.
    Claim,
    /// `POST /v1/claims/{scope}/renew`.
    Renew,
    /// `POST /v1/claims/{scope}/finalize`.
    Finalize,
    /// `POST /v1/claims/{scope}/release`.
    Release,
    /// `POST /v1/claims/{scope}/reconciled`: the service's answer about an `unknown`
    /// record, under `uncertain: reconcile`.
    Reconciled,
    /// `GET /v1/epoch`: the operator epoch the edge cache is checked against
    /// (F9). Asked by each worker's root context, about no scope.
    Epoch,
    /// `POST /v1/batch/claims`: claims a worker coalesced (`docs/records.md#batches`).
    ClaimBatch,
    /// `POST /v1/batch/finalizes`: finalizes a worker coalesced.
    FinalizeBatch,
}

impl StoreRoute {
    /// Every request the filter sends to the lease-store.
    pub const ALL: [StoreRoute; 8] = [
        StoreRoute::Claim,
        StoreRoute::Renew,
        StoreRoute::Finalize,
        StoreRoute::Release,
        StoreRoute::Reconciled,
        StoreRoute::Epoch,
        StoreRoute::ClaimBatch,
        StoreRoute::FinalizeBatch,
    ];

    /// What stands for the scope digest (hex) in [`StoreRoute::pattern`].
    pub const SCOPE: &str = "{scope}";

    /// The HTTP method.
    pub fn method(self) -> &'static str {
        match self {
            StoreRoute::Epoch => "GET",
            StoreRoute::Claim
            | StoreRoute::Renew
            | StoreRoute::Finalize
            | StoreRoute::Release
            | StoreRoute::Reconciled
            | StoreRoute::ClaimBatch
            | StoreRoute::FinalizeBatch => "POST",
        }
    }

    /// The path, with [`StoreRoute::SCOPE`] where the scope goes.
    pub fn pattern(self) -> &'static str {
        match self {
            StoreRoute::Claim => "/v1/claims/{scope}",
            StoreRoute::Renew => "/v1/claims/{scope}/renew",
            StoreRoute::Finalize => "/v1/claims/{scope}/finalize",
            StoreRoute::Release => "/v1/claims/{scope}/release",
            StoreRoute::Reconciled => "/v1/claims/{scope}/reconciled",
            StoreRoute::Epoch => "/v1/epoch",
            StoreRoute::ClaimBatch => "/v1/batch/claims",
            StoreRoute::FinalizeBatch => "/v1/batch/finalizes",
        }
    }

    /// The path of a request about `scope` (none for the epoch and the batches).
    pub(super) fn path(self, scope: Option<Digest>) -> String {
        match scope {
            Some(scope) => self.pattern().replace(Self::SCOPE, &scope.to_hex()),
            None => self.pattern().to_owned(),
        }
    }
}
