//! The rows a settle opens (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`):
//! the earlier claim was released as a status the policy forgets, or for a cooldown that then
//! passed ([`settled_row`]).

use std::collections::HashMap;

use keyflight_filter::guarantee::Cause;

use super::evidence::{ClaimWon, DbStamps, Release, STAMP_ROUNDING_MS, TAKEOVER};
use super::lifecycle::previous_release_forgot;
use super::verdict::{CooldownCause, Row, SETTLE_LOG_SLACK_MS};
use crate::history::{Attempt, Execution, History, Ms};

/// The rows in which the earlier claim was settled by a release that lets a retry run
/// again: `Ok(None)` when no store applied such a release of `claim`; `Err` when one did
/// but the row's conditions are not all shown.
///
/// - `release_forget`: the upstream answered the earlier execution a status the policy
///   forgets, and `successor` inserted a fresh record (`claimed`) after the release
///   ([`SETTLE_LOG_SLACK_MS`]).
/// - `release_cooldown`: the upstream answered a `5xx`, `408` or `429`, or (under
///   `uncertain: retry` only) reset the connection, or its caller got no answer (gave up,
///   or its connection was closed); and
///   `successor` took the failed record over ([`TAKEOVER`]) no earlier than the cooldown
///   after the release ([`SETTLE_LOG_SLACK_MS`]).
pub(super) fn settled_row(
    earlier: &Execution,
    claim: &ClaimWon,
    successor: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let fence = claim.fence;
    let Some(release) = history
        .evidence
        .release(claim, &["release_forget", "release_cooldown"])?
    else {
        return Ok(None);
    };
    let answered = earlier.answered;
    let shown = |status: Option<u16>| status.map_or("no status".to_owned(), |s| s.to_string());
    if release.call == "release_forget" {
        let previous = previous_release_forgot(history, earlier);
        let forgets = |s: &u16| history.policy.forget_statuses.contains(s) || previous.is_some();
        let Some(status) = answered.filter(forgets) else {
            return Err(format!(
                "fence {fence} was released as forget, but the upstream answered {}, which \
                 the policy records",
                shown(answered)
            ));
        };
        if took_the_pending_lease_over(successor, &release) {
            return Ok(None);
        }
        if successor.how != "claimed" || successor.at_ms < freed_from(&release) {
            return Err(format!(
                "fence {} won by `{}` at {} ms, not by a fresh insert after the forget of \
                 fence {fence} at {} ms",
                successor.fence,
                successor.how,
                successor.at_ms,
                applied_ms(&release)
            ));
        }
        return Ok(Some(match previous {
            Some(fault) if !history.policy.forget_statuses.contains(&status) => {
                Row::ForgottenByThePreviousRelease { status, fault }
            }
            _ => Row::Forgotten { status },
        }));
    }
    if took_the_pending_lease_over(successor, &release) {
        return Ok(None);
    }
    let retry = history
        .policy
        .reruns(Cause::UncertainOutcome, &earlier.path);
    let no_answer = earlier
        .caller_request_id
        .as_deref()
        .and_then(|id| attempts_by_id.get(id))
        .is_some_and(|attempt| attempt.answered_at().is_none());
    let cause = match answered {
        Some(status @ (408 | 429 | 500..=599)) => CooldownCause::RetryableStatus(status),
        _ if retry && earlier.reset => CooldownCause::UpstreamReset,
        _ if retry && no_answer => CooldownCause::CallerGotNoAnswer,
        _ => {
            return Err(format!(
                "fence {fence} was released as a failure, but the upstream answered {}{}",
                shown(answered),
                match retry {
                    true => " and its outcome was not uncertain",
                    false => " under `uncertain: hold`",
                }
            ));
        }
    };
    let cooldown = Ms::try_from(history.policy.failure_cooldown_ms).unwrap_or(Ms::MAX);
    let cooled = match release.stamps {
        // The database's own times: the takeover needed the cooldown's end.
        Some(DbStamps {
            applied_ms,
            cooldown_ends_ms: Some(ends),
        }) => {
            if ends - applied_ms < cooldown - STAMP_ROUNDING_MS {
                return Err(format!(
                    "fence {fence} cooled down for {} ms, not the policy's {cooldown} ms",
                    ends - applied_ms
                ));
            }
            ends - STAMP_ROUNDING_MS
        }
        Some(DbStamps {
            cooldown_ends_ms: None,
            ..
        }) => {
            return Err(format!(
                "fence {fence}'s release as cooldown names no end of the cooldown"
            ));
        }
        // A store that predates the stamps: from its log line, or from a caller told the
        // record was cooling down before the line.
        None => {
            let released = cooling_seen_by(earlier, claim, successor, attempts_by_id)
                .map_or(release.logged_ms, |seen| seen.min(release.logged_ms));
            released.saturating_add(cooldown) - SETTLE_LOG_SLACK_MS
        }
    };
    if successor.how != TAKEOVER || successor.at_ms < cooled {
        return Err(format!(
            "fence {} won by `{}` at {} ms, not by a takeover after the cooldown of fence \
             {fence} released at {} ms",
            successor.fence,
            successor.how,
            successor.at_ms,
            applied_ms(&release)
        ));
    }
    Ok(Some(Row::Cooldown { cause }))
}

/// The earliest a claim that needed `release`'s commit may be logged: the database's stamp
/// (less rounding), or — from a store that predates the stamps — its first line less
/// [`SETTLE_LOG_SLACK_MS`].
pub(super) fn freed_from(release: &Release) -> Ms {
    match release.stamps {
        Some(stamps) => stamps.applied_ms - STAMP_ROUNDING_MS,
        None => release.logged_ms - SETTLE_LOG_SLACK_MS,
    }
}

/// When `release` was applied, as best known: its stamp, or its first line.
pub(super) fn applied_ms(release: &Release) -> Ms {
    release
        .stamps
        .map_or(release.logged_ms, |stamps| stamps.applied_ms)
}

/// When a caller of the key was told the record is cooling down (`503
/// retryable_cooldown`: the store read it `failed`) by a request that started after
/// `claim` was won and ended before `successor`: the release of `claim` had committed by
/// then, even when the store logged it later (its first line lost or late: a store frozen
/// between the commit and the log).
fn cooling_seen_by(
    earlier: &Execution,
    claim: &ClaimWon,
    successor: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
) -> Option<Ms> {
    attempts_by_id
        .values()
        .filter(|attempt| earlier.key.as_deref() == Some(attempt.key.as_str()))
        .filter(|attempt| attempt.outcome.problem_code() == Some("retryable_cooldown"))
        .filter(|attempt| claim.at_ms < attempt.start_ms && attempt.end_ms < successor.at_ms)
        .map(|attempt| attempt.end_ms)
        .min()
}

/// Whether `successor` took the earlier claim's lease over while it was still `pending`:
/// before `release` landed (its outbox delivered it late, or as a repeat). Then the release
/// settled nothing, and the takeover is judged by the other rows (a dead or cut-off proxy,
/// an outbox that gave up).
fn took_the_pending_lease_over(successor: &ClaimWon, release: &Release) -> bool {
    successor.how == TAKEOVER && successor.at_ms < applied_ms(release)
}
