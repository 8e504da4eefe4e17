//! The guarantee's table as data (`docs/guarantee.md#at-most-once-and-at-least-once-policies`):
//! after which cause a same-body retry may run an operation again, under each `uncertain`
//! setting. The filter's behaviour is what the table describes; the chaos judge and the
//! model both excuse a re-run only where [`reruns`] says so, so the two cannot disagree
//! about what is allowed.

use crate::config::Uncertain;

/// Why an operation's record let a same-body retry run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The winner's proxy was lost before its record landed: it died, its VM was retired
    /// or its hot restart's parent exited with the record in its outbox, it was cut off
    /// from every lease-store until its lease ran out, or its outbox gave the record up.
    ProxyLost,
    /// The outcome was uncertain: the upstream reset or timed out, or the caller left
    /// while the upstream ran.
    UncertainOutcome,
    /// The upstream answered a retryable failure (`5xx`, `408`, `429`) and the cooldown
    /// passed.
    RetryableStatus,
    /// The upstream answered a status the policy forgets.
    ForgottenStatus,
    /// An operator erased the record, or resolved an `unknown` one as failed.
    Operator,
    /// The service answered keyflight's reconcile question `absent`, fencing the earlier
    /// run out (`docs/reconcile.md#the-rule`).
    ServiceAnsweredAbsent,
}

/// Whether `cause` lets a same-body retry run again under `uncertain`.
pub const fn reruns(cause: Cause, uncertain: Uncertain) -> bool {
    match cause {
        Cause::ProxyLost | Cause::UncertainOutcome => matches!(uncertain, Uncertain::Retry),
        Cause::RetryableStatus | Cause::ForgottenStatus | Cause::Operator => true,
        Cause::ServiceAnsweredAbsent => matches!(uncertain, Uncertain::Reconcile),
    }
}

/// Whether `uncertain` never runs an operation again when its outcome is unknown: every
/// setting but `retry`. Under such a setting a re-run after a run known to have committed
/// is a certain double, unless an operator or an upstream failure status let it in.
pub const fn at_most_once(uncertain: Uncertain) -> bool {
    !reruns(Cause::ProxyLost, uncertain) && !reruns(Cause::UncertainOutcome, uncertain)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Uncertain; 4] = Uncertain::ALL;

    #[test]
    fn only_retry_runs_again_after_a_lost_proxy_or_an_uncertain_outcome() {
        for uncertain in ALL {
            let retry = uncertain == Uncertain::Retry;
            assert_eq!(reruns(Cause::ProxyLost, uncertain), retry, "{uncertain:?}");
            assert_eq!(
                reruns(Cause::UncertainOutcome, uncertain),
                retry,
                "{uncertain:?}"
            );
            assert_eq!(at_most_once(uncertain), !retry, "{uncertain:?}");
        }
    }

    #[test]
    fn only_reconcile_runs_again_on_the_services_absent() {
        for uncertain in ALL {
            assert_eq!(
                reruns(Cause::ServiceAnsweredAbsent, uncertain),
                uncertain == Uncertain::Reconcile,
                "{uncertain:?}"
            );
        }
    }

    #[test]
    fn what_the_upstream_or_an_operator_asked_for_runs_again_under_every_setting() {
        for uncertain in ALL {
            for cause in [
                Cause::RetryableStatus,
                Cause::ForgottenStatus,
                Cause::Operator,
            ] {
                assert!(reruns(cause, uncertain), "{cause:?} {uncertain:?}");
            }
        }
    }
}
