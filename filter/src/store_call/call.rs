//! [`StoreCall`]: one lease-store call about a scope, as the state machine asks for it —
//! which route, which scope, and the JSON body. Kept apart from the [`Callout`](super::Callout)
//! that wraps it so the machine's vocabulary carries no transport details.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use keyflight_protocol::wire::{ClaimRequest, FinalizeRequest, ReleaseRequest, RenewRequest};

use super::StoreRoute;

/// One call to the lease-store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreCall {
    /// `POST /v1/claims/{scope}`.
    Claim {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ClaimRequest,
    },
    /// `POST /v1/claims/{scope}/renew`.
    Renew {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: RenewRequest,
    },
    /// `POST /v1/claims/{scope}/finalize`.
    Finalize {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: FinalizeRequest,
    },
    /// `POST /v1/claims/{scope}/release`.
    Release {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ReleaseRequest,
    },
    /// `POST /v1/claims/{scope}/reconciled` (`docs/reconcile.md#what-the-store-records`).
    Reconciled {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ReconciledRequest,
    },
}

impl StoreCall {
    /// Which request this is.
    pub fn route(&self) -> StoreRoute {
        match self {
            StoreCall::Claim { .. } => StoreRoute::Claim,
            StoreCall::Renew { .. } => StoreRoute::Renew,
            StoreCall::Finalize { .. } => StoreRoute::Finalize,
            StoreCall::Release { .. } => StoreRoute::Release,
            StoreCall::Reconciled { .. } => StoreRoute::Reconciled,
        }
    }

    /// The request path.
    pub fn path(&self) -> String {
        self.route().path(Some(self.scope()))
    }

    /// The scope the call is about.
    pub fn scope(&self) -> Digest {
        match self {
            StoreCall::Claim { scope, .. }
            | StoreCall::Renew { scope, .. }
            | StoreCall::Finalize { scope, .. }
            | StoreCall::Release { scope, .. }
            | StoreCall::Reconciled { scope, .. } => *scope,
        }
    }

    /// The call's name, for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            StoreCall::Claim { .. } => "claim",
            StoreCall::Renew { .. } => "renew",
            StoreCall::Finalize { .. } => "finalize",
            StoreCall::Release { .. } => "release",
            StoreCall::Reconciled { .. } => "reconciled",
        }
    }

    /// The JSON request body.
    pub fn body(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail; an empty body would be
        // refused by the store as malformed rather than crash the worker.
        match self {
            StoreCall::Claim { request, .. } => serde_json::to_vec(request),
            StoreCall::Renew { request, .. } => serde_json::to_vec(request),
            StoreCall::Finalize { request, .. } => serde_json::to_vec(request),
            StoreCall::Release { request, .. } => serde_json::to_vec(request),
            StoreCall::Reconciled { request, .. } => serde_json::to_vec(request),
        }
        .unwrap_or_default()
    }
}
