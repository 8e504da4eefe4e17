//! What a guarded route answers on its own, so the answers can be written into the
//! service's OpenAPI (`keyflight openapi-overlay`, `docs/operations.md#the-contract-in-a-services-openapi`).
//!
//! Each answer is one problem code the state machine can reply with on a request the
//! policy guards, with the status it gets under this configuration. The list lives
//! here, beside the machine that sends them, so a new refusal or status setting changes
//! the documented contract in the same crate.

use keyflight_protocol::ProblemCode;

use crate::config::{Anonymous, Config, Mode, Policy, Uncertain};

/// One answer keyflight itself may give on a request `policy` guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The problem code (`code` of the problem+json body).
    pub code: ProblemCode,
    /// Its HTTP status under this configuration.
    pub status: u16,
    /// Whether it carries `Retry-After` (every 503, and an in-flight or cooldown refusal
    /// under any status profile).
    pub retry_after: bool,
}

/// Every problem code the filter itself answers with, whatever the configuration.
pub const CODES: [ProblemCode; 13] = [
    ProblemCode::IdempotencyKeyRequired,
    ProblemCode::IdempotencyKeyInvalid,
    // A request target that is not UTF-8 where a policy could match it (F0).
    ProblemCode::BadRequest,
    ProblemCode::PrincipalRequired,
    ProblemCode::PrincipalAmbiguous,
    ProblemCode::PayloadTooLarge,
    ProblemCode::IdempotencyConflict,
    ProblemCode::RequestInProgress,
    ProblemCode::RetryableCooldown,
    ProblemCode::ResponseNotReplayable,
    ProblemCode::OperationUnknown,
    ProblemCode::JournalUnavailable,
    // A caller's request to a policy's reconcile endpoint, which is not a guarded route.
    ProblemCode::Forbidden,
];

/// Every answer keyflight may give on a request `policy` guards, in status order; none
/// under `mode: dry_run`, which never blocks or replays (F11).
pub fn answers(config: &Config, policy: &Policy) -> Vec<Answer> {
    if config.mode == Mode::DryRun {
        return Vec::new();
    }
    let identity = &config.identity;
    let has_sources = !identity.actor.is_empty() || !identity.principal.is_empty();
    let given = |code: ProblemCode| match code {
        ProblemCode::IdempotencyKeyRequired => policy.require_key,
        ProblemCode::PrincipalRequired => policy.anonymous == Anonymous::Reject,
        ProblemCode::PrincipalAmbiguous => has_sources,
        // `record` holds a caller-gone outcome as `unknown` too (there is no answer to record).
        ProblemCode::OperationUnknown => policy.uncertain != Uncertain::Retry,
        ProblemCode::Forbidden => false,
        // Also when failure_mode is open: a record the store returns malformed is refused.
        _ => true,
    };
    let mut out: Vec<Answer> = CODES
        .into_iter()
        .filter(|code| given(*code))
        .map(|code| {
            let status = policy.status_of(code, config.status_profile);
            // Under `uncertain: reconcile` a retry may find the service's answer.
            let suggests_wait = matches!(
                code,
                ProblemCode::RequestInProgress | ProblemCode::RetryableCooldown
            ) || (code == ProblemCode::OperationUnknown
                && policy.reconcile.is_some());
            Answer {
                code,
                status,
                retry_after: suggests_wait || status == 503,
            }
        })
        .collect();
    out.sort_by_key(|a| a.status);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_plugin_config;

    fn config(extra_top: &str, policy: &str) -> Config {
        let json = format!(
            r#"{{"lease_store": {{"cluster": "ls"}}, {extra_top}
                "policies": [{{"name": "p", {policy} "match": {{"path_prefix": "/p"}}}}]}}"#
        );
        parse_plugin_config(json.as_bytes()).unwrap()
    }

    fn codes(config: &Config) -> Vec<(ProblemCode, u16, bool)> {
        answers(config, &config.policies[0])
            .into_iter()
            .map(|a| (a.code, a.status, a.retry_after))
            .collect()
    }

    /// Every code the state machine replies with is in [`CODES`], so a new refusal cannot
    /// be left out of the documented contract.
    #[test]
    fn codes_cover_every_refusal_of_the_machine() {
        let sources = [
            include_str!("machine/mod.rs"),
            include_str!("machine/request.rs"),
            include_str!("machine/replies.rs"),
            include_str!("machine/claim_answer.rs"),
            include_str!("machine/response.rs"),
            include_str!("machine/settle.rs"),
            include_str!("machine/reconcile.rs"),
        ];
        let listed: Vec<String> = CODES.iter().map(|c| format!("{c:?}")).collect();
        let mut seen = 0;
        for source in sources {
            for (_, rest) in source
                .match_indices("ProblemCode::")
                .map(|(i, _)| source.split_at(i + 13))
            {
                let name: String = rest
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                assert!(listed.contains(&name), "{name} is not in contract::CODES");
                seen += 1;
            }
        }
        assert!(seen >= CODES.len(), "only {seen} uses found");
    }

    #[test]
    fn default_policy_answers() {
        use ProblemCode::*;
        assert_eq!(
            codes(&config("", "")),
            vec![
                (IdempotencyKeyInvalid, 400, false),
                (BadRequest, 400, false),
                (PrincipalRequired, 401, false),
                (IdempotencyConflict, 409, false),
                (ResponseNotReplayable, 409, false),
                (OperationUnknown, 409, false),
                (PayloadTooLarge, 413, false),
                (RequestInProgress, 503, true),
                (RetryableCooldown, 503, true),
                (JournalUnavailable, 503, true),
            ]
        );
    }

    #[test]
    fn settings_add_and_move_answers() {
        use ProblemCode::*;
        let c = config(
            r#""status_profile": "ietf", "identity": {"principal": [{"header": "x-user"}]},"#,
            r#""require_key": true, "anonymous": "shared", "uncertain": "hold","#,
        );
        assert_eq!(
            codes(&c),
            vec![
                (IdempotencyKeyRequired, 400, false),
                (IdempotencyKeyInvalid, 400, false),
                (BadRequest, 400, false),
                (PrincipalAmbiguous, 400, false),
                (RequestInProgress, 409, true),
                (ResponseNotReplayable, 409, false),
                (OperationUnknown, 409, false),
                (PayloadTooLarge, 413, false),
                (IdempotencyConflict, 422, false),
                (RetryableCooldown, 503, true),
                (JournalUnavailable, 503, true),
            ]
        );
    }

    /// A policy's own draft settings (`docs/stream-machine.md#the-ietf-drafts-semantics`)
    /// move its answers under the default profile.
    #[test]
    fn a_policys_draft_settings_move_its_answers() {
        use ProblemCode::*;
        let c = config(
            "",
            r#""mismatch_status": 422, "in_progress": "conflict", "follower_wait_ms": 0,
               "uncertain": "record","#,
        );
        let of = |code| codes(&c).into_iter().find(|(c, _, _)| *c == code);
        assert_eq!(
            of(IdempotencyConflict),
            Some((IdempotencyConflict, 422, false))
        );
        assert_eq!(of(RequestInProgress), Some((RequestInProgress, 409, true)));
        assert_eq!(of(OperationUnknown), Some((OperationUnknown, 409, false)));
    }

    #[test]
    fn dry_run_answers_nothing() {
        assert!(codes(&config(r#""mode": "dry_run","#, "")).is_empty());
    }
}
