//! A store call as it travels: the wire form the database mirror takes, made from the
//! filter's own [`StoreCall`], and the claim ids it carries.

use keyflight_filter::store_call::StoreCall;
use keyflight_protocol::Digest;
use keyflight_protocol::wire::ReleaseAs;
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use uuid::Uuid;

use crate::Params;
use crate::db::Recorded;

/// The store's default cooldown (`--failure-cooldown`), for a release that names none.
const STORE_COOLDOWN_MS: u64 = 2000;

/// A store call on the wire, as the database mirror takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wire {
    /// `POST /v1/claims/{scope}`.
    Claim {
        /// The fingerprint.
        fingerprint: Digest,
        /// `lease_ms`.
        lease_ms: u64,
        /// The retention, ms.
        retention_ms: u64,
        /// `at_most_once`.
        at_most_once: bool,
    },
    /// `…/renew`.
    Renew {
        /// The claim.
        claim: u16,
        /// `lease_ms`.
        lease_ms: u64,
    },
    /// `…/finalize` or `…/release`.
    Settle {
        /// The claim.
        claim: u16,
        /// What it writes.
        settle: SettleWire,
    },
    /// `…/reconciled`: what the service said about run `fence` (its answer: committed).
    Reconciled {
        /// The fingerprint.
        fingerprint: Digest,
        /// The fence asked about.
        fence: u16,
        /// The committed run's answer; `None` is absent.
        committed: Option<Recorded>,
    },
    /// The reconcile question to the service (not the lease-store) about run `fence`.
    Question {
        /// `idempotency-scope`.
        scope: Digest,
        /// `idempotency-fence`.
        fence: u16,
    },
}

/// A settle call's payload, ordered for the network's canonical order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SettleWire {
    /// Finalize: status, body, replayable.
    Finalize(u16, Vec<u8>, bool),
    /// Release as cooldown.
    Cooldown(u64),
    /// Release as unknown.
    Unknown,
    /// Release as forget.
    Forget,
}

pub(super) fn id16(id: Uuid) -> u16 {
    u16::try_from(id.as_u128()).unwrap_or(u16::MAX)
}

pub(super) fn uuid(claim: u16) -> Uuid {
    Uuid::from_u128(u128::from(claim))
}

impl Wire {
    pub(super) fn of(call: &StoreCall, proxy: u8, params: &Params) -> Wire {
        match call {
            StoreCall::Claim { request, .. } => Wire::Claim {
                fingerprint: request.fingerprint,
                lease_ms: request.lease_ms,
                retention_ms: request
                    .retention_s
                    .map_or(params.filter.retention_s * 1000, |s| s * 1000),
                at_most_once: request.at_most_once && params.unflagged_proxy != Some(proxy),
            },
            StoreCall::Renew { request, .. } => Wire::Renew {
                claim: id16(request.claim_id),
                lease_ms: request.lease_ms,
            },
            StoreCall::Finalize { request, .. } => Wire::Settle {
                claim: id16(request.claim_id),
                settle: SettleWire::Finalize(
                    request.response.status,
                    request.response.body.clone(),
                    request.replayable,
                ),
            },
            StoreCall::Release { request, .. } => Wire::Settle {
                claim: id16(request.claim_id),
                settle: match request.release_as {
                    ReleaseAs::Cooldown => {
                        SettleWire::Cooldown(request.cooldown_ms.unwrap_or(STORE_COOLDOWN_MS))
                    }
                    ReleaseAs::Unknown => SettleWire::Unknown,
                    ReleaseAs::Forget => SettleWire::Forget,
                },
            },
            StoreCall::Reconciled { request, .. } => match request {
                ReconciledRequest::Committed {
                    fingerprint,
                    fence,
                    response,
                } => Wire::Reconciled {
                    fingerprint: *fingerprint,
                    fence: u16::try_from(*fence).unwrap_or(u16::MAX),
                    committed: Some(Recorded {
                        status: response.status,
                        headers: response.headers.clone(),
                        body: response.body.clone(),
                    }),
                },
                ReconciledRequest::Absent { fingerprint, fence } => Wire::Reconciled {
                    fingerprint: *fingerprint,
                    fence: u16::try_from(*fence).unwrap_or(u16::MAX),
                    committed: None,
                },
            },
        }
    }
}
