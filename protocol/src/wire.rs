//! Lease-store HTTP API v1 wire types (`docs/records.md#the-api`).
//!
//! The filter, the lease-store and its CLI all speak through these types, so
//! a field renamed here is renamed everywhere at once. Field names and outcome
//! spellings are the contract: change them only with a new API version.
//!
//! The calls are grouped by who makes them: `claim.rs` the claim and the recorded
//! response, `lease.rs` renew, finalize and release, `operator.rs` the epoch and the
//! records operators list and resolve; `integral.rs` reads integer fields as JSON Schema
//! does.

pub mod batch;
mod claim;
pub mod framed;
pub(crate) mod integral;
mod lease;
mod operator;
pub mod reconcile;

pub use claim::{
    ClaimAnswer, ClaimRequest, ClaimResponse, PreviousIdentity, StoredResponse, WonHow, base64_len,
};
pub use lease::{FinalizeRequest, ReleaseAs, ReleaseRequest, RenewRequest, RenewResponse};
pub use operator::{
    EpochResponse, RecordDetail, RecordList, RecordState, RecordSummary, ResolveAs, ResolveRequest,
};

/// The longest lease a claim or renew may ask for (one day, in milliseconds):
/// far above any policy (the filter allows an hour), and small enough that
/// lease arithmetic in the database can never overflow.
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// The longest retention a claim may ask for (ten years, in seconds): the longest a
/// filter policy may ask for; the store's `--max-retention` may lower it.
pub const MAX_RETENTION_S: u64 = 315_360_000;
/// The longest cooldown a release may ask for (one day, in milliseconds).
pub const MAX_COOLDOWN_MS: u64 = 86_400_000;
/// The longest long-poll a claim may ask for (one day, in milliseconds); the
/// store waits no longer than its own `--max-wait` anyway.
pub const MAX_WAIT_MS: u64 = 86_400_000;
/// The longest reason an operator may give for an erase or a resolve, in characters.
pub const MAX_REASON_CHARS: usize = 1000;
/// Recorded status codes are final HTTP status codes (RFC 9110 §15).
pub const RECORDED_STATUS: std::ops::RangeInclusive<u16> = 100..=599;

/// Header the admin erase call must carry (L6).
pub const ACK_REPLAY_RISK_HEADER: &str = "keyflight-ack-replay-risk";

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(json: &str) -> Result<ClaimRequest, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn integer_fields_take_any_integral_number_and_nothing_else() {
        let fp = "0".repeat(64);
        let ok = claim(&format!(
            r#"{{"fingerprint":"{fp}","lease_ms":7.0,"wait_ms":1e3,"retention_s":null}}"#
        ))
        .unwrap();
        assert_eq!(
            (ok.lease_ms, ok.wait_ms, ok.retention_s),
            (7, Some(1000), None)
        );
        for bad in ["7.5", "-1", "-1.0", "\"7\"", "1e20", "true"] {
            let err = claim(&format!(r#"{{"fingerprint":"{fp}","lease_ms":{bad}}}"#)).unwrap_err();
            assert!(err.contains("integer"), "{bad}: {err}");
        }
        let status: Result<StoredResponse, _> =
            serde_json::from_str(r#"{"status":201.0,"headers":[],"body_b64":""}"#);
        assert_eq!(status.unwrap().status, 201);
        let status: Result<StoredResponse, _> =
            serde_json::from_str(r#"{"status":65536,"headers":[],"body_b64":""}"#);
        assert!(status.is_err());
    }
}
