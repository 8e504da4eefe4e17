//! The console's pages, rendered with `maud` (`docs/console.md#what-it-shows`).
//!
//! `maud` escapes every `(value)` it interpolates (`&`, `<`, `>`, `"`, `'`), and no value
//! here is ever marked pre-escaped, so a recorded body or header is text on the page,
//! never markup; [`visible`] also spells out the characters escaping leaves invisible. No
//! value from a record becomes a link: the only links name a scope digest, 64 hex digits.
//! The pages are pure: what they show, and the time, come in as arguments.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{RecordDetail, RecordState, RecordSummary, StoredResponse};
use maud::{DOCTYPE, Markup, html};

use super::decision::{Action, Decision, DecisionForm, Retry};
use super::queue::{QueueFilter, age_label, age_ms};
use super::text::visible;

/// What the queue page shows.
#[derive(Debug)]
pub struct Queue<'a> {
    /// The operator signed in (their token's name).
    pub operator: &'a str,
    /// How many `unknown` records the list returned (the admin API's count).
    pub listed: usize,
    /// The list's limit.
    pub limit: u32,
    /// The filters applied.
    pub filter: &'a QueueFilter,
    /// The records that pass it, newest first.
    pub shown: Vec<&'a RecordSummary>,
    /// The `unknown` records the replica's last storage measure counted (of the filtered
    /// workload, or of all); `None` before the first.
    pub measured: Option<u64>,
    /// Now, Unix milliseconds.
    pub now_ms: u64,
}

/// The queue: `unknown` records, newest first, with the filters' form.
pub fn queue(view: &Queue<'_>) -> Markup {
    let body = html! {
        h1 { "Records in " code { "unknown" } }
        p {
            (view.listed) " record(s) in " code { "unknown" } " among the newest " (view.limit)
            " (what " code { "GET /v1/records?state=unknown&limit=" (view.limit) } " lists); "
            (view.shown.len()) " shown by the filters."
        }
        p {
            @match view.measured {
                Some(measured) => {
                    "The replica's last storage measure counted " (measured) " record(s) in "
                    code { "unknown" }
                    @if view.filter.workload.is_some() { " made by that workload" }
                    " (" code { "keyflight_store_workload_unknown_records" } ", every "
                    code { "--storage-quota-interval" } ")."
                }
                None => {
                    "The replica has not measured its records yet ("
                    code { "keyflight_store_workload_unknown_records" } ")."
                }
            }
        }
        form method="get" action="/console" {
            label { "At least " input type="number" name="min_age_minutes" min="0"
                value=[view.filter.age.min_minutes]; " minutes old" }
            " "
            label { "at most " input type="number" name="max_age_minutes" min="0"
                value=[view.filter.age.max_minutes]; " minutes old" }
            " "
            label { "made by the workload " input type="text" name="workload" size="40"
                placeholder="spiffe://…" value=[view.filter.workload.as_deref()]; }
            " "
            label { "among the newest " input type="number" name="limit" min="1" max="1000"
                value=(view.limit); }
            " "
            button type="submit" { "Filter" }
        }
        @if view.shown.is_empty() {
            p { "Nothing waits for a decision." }
        } @else {
            table {
                thead { tr {
                    th { "scope" } th { "workload" } th { "age" } th { "created" }
                    th { "fence" } th { "retained until" }
                } }
                tbody {
                    @for record in &view.shown {
                        tr {
                            td { a href=(record_path(record)) { code { (record.scope.to_hex()) } } }
                            td { (workload(record)) }
                            td { (age(&record.created_at, view.now_ms)) }
                            td { (record.created_at) }
                            td { (record.fence) }
                            td { (record.expires_at) }
                        }
                    }
                }
            }
        }
    };
    page("Unknown records", view.operator, body)
}

/// One row of the operator audit about a record, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLine {
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Who: an operator's token name or `reconciler:<workload>`.
    pub actor: String,
    /// What was done.
    pub action: String,
    /// Why.
    pub reason: String,
    /// The digest of a response the decision recorded, hex.
    pub response_sha256: Option<String>,
}

/// One record: its metadata, its recorded answer as text, the decisions' forms and the
/// audit rows about it (or why they could not be read).
pub fn record(
    operator: &str,
    detail: &RecordDetail,
    audit: &Result<Vec<AuditLine>, String>,
    now_ms: u64,
) -> Markup {
    let summary = &detail.summary;
    let body = html! {
        h1 { "Record " code { (summary.scope.to_hex()) } }
        dl {
            dt { "state" } dd { code { (summary.state.as_str()) } }
            dt { "scope digest" } dd { code { (summary.scope.to_hex()) } }
            dt { "request fingerprint" } dd { code { (summary.fingerprint.to_hex()) } }
            dt { "made by the workload" } dd { (workload(summary)) }
            dt { "fence of the latest claim" } dd { (summary.fence) }
            dt { "created" }
            dd { (summary.created_at) " (" (age(&summary.created_at, now_ms)) " ago)" }
            @if let Some(until) = &summary.lease_expires_at {
                dt { (lease_label(summary.state)) } dd { (until) }
            }
            dt { "retained until" } dd { (summary.expires_at) " (then eligible for cleanup)" }
            dt { "replayable" } dd { (if summary.replayable { "yes" } else { "no" }) }
        }
        (history(detail))
        h2 { "Recorded answer" }
        @match &detail.response {
            Some(response) => (answer(response)),
            None => p { "None recorded." },
        }
        h2 { "Decide" }
        p { "Each decision shows what a retry will get first; nothing changes until you "
            "confirm it." }
        @if summary.state == RecordState::Unknown {
            form method="get" action=(preview_path(&summary.scope)) {
                input type="hidden" name="action" value=(Action::ResolveCompleted.as_str());
                h3 { "Resolve as completed" }
                p { "The operation happened. Leave the status empty to record no answer "
                    "(retries get 409 " code { "response_not_replayable" } ")." }
                p { label { "Status " input type="number" name="status" min="100" max="599"; } }
                p { label { "Headers, one " code { "name: value" } " a line" br;
                    textarea name="headers" rows="3" cols="60" {} } }
                p { label { "Body" br; textarea name="body" rows="6" cols="60" {} } }
                button type="submit" { "Preview: resolve as completed" }
            }
            form method="get" action=(preview_path(&summary.scope)) {
                input type="hidden" name="action" value=(Action::ResolveFailed.as_str());
                h3 { "Resolve as failed" }
                p { "The operation did not happen: the next retry runs it." }
                button type="submit" { "Preview: resolve as failed" }
            }
        } @else {
            p { "Only an " code { "unknown" } " record can be resolved." }
        }
        form method="get" action=(preview_path(&summary.scope)) {
            input type="hidden" name="action" value=(Action::Erase.as_str());
            h3 { "Erase" }
            p { "Forget the record: the next request with its key runs as new." }
            button type="submit" { "Preview: erase" }
        }
        h2 { "Audit" }
        @match audit {
            Ok(rows) if rows.is_empty() => p { "No decision about this record yet." },
            Ok(rows) => table {
                thead { tr {
                    th { "when" } th { "who" } th { "what" } th { "why" }
                    th { "recorded answer (SHA-256)" }
                } }
                tbody {
                    @for row in rows {
                        tr {
                            td { (row.at) }
                            td { (visible(&row.actor)) }
                            td { code { (row.action) } }
                            td { (visible(&row.reason)) }
                            td { @if let Some(digest) = &row.response_sha256 { code { (digest) } } }
                        }
                    }
                }
            },
            Err(error) => p { "The audit could not be read: " (visible(error)) },
        }
    };
    page("Record", operator, body)
}

/// A record's fence history as far as the store keeps it (`docs/console.md#what-it-shows`):
/// one row per record, which each claim, renewal and settle overwrites, so its latest
/// claim and the state that claim's run left; the page says what is not kept.
fn history(detail: &RecordDetail) -> Markup {
    let summary = &detail.summary;
    let fence = summary.fence;
    html! {
        h2 { "Fence history" }
        ol {
            li { "Claimed under fence " strong { (fence) } " at " (summary.created_at)
                ": the latest claim, whose run the upstream sees as "
                code { "idempotency-fence: " (fence) } "." }
            li {
                @match summary.state {
                    RecordState::Pending => {
                        "Now " code { "pending" } ": the winner's lease runs until "
                        (summary.lease_expires_at.as_deref().unwrap_or("?"))
                        " (each renewal moves it; only the latest is kept)."
                    }
                    RecordState::Unknown => {
                        "Now " code { "unknown" } ": nobody knows whether the run under fence "
                        (fence) " acted (it ended without a settle saying how: the upstream "
                        "reset or timed out, the caller left, or the lease lapsed); retries get "
                        code { "409 operation_unknown" } " until a decision."
                    }
                    RecordState::Completed if detail.response.is_some() => {
                        "Now " code { "completed" } ", with the answer below, which retries "
                        "replay."
                    }
                    RecordState::Completed => {
                        "Now " code { "completed" } ", with no answer kept: retries get "
                        code { "409 response_not_replayable" } "."
                    }
                    RecordState::Failed => {
                        "Now " code { "failed" } ": a retry of the same request runs again from "
                        (summary.lease_expires_at.as_deref().unwrap_or("?")) "."
                    }
                }
            }
        }
        p { "Not kept by the store, so not shown: the claims before the latest (their fences "
            "and times), each renewal of a lease, each settle attempt and how it ended (only "
            "the state it left), and reconcile questions the service did not answer (the "
            "filter counts them as " code { "keyflight.event.reconcile_unanswered" } "). "
            "Decisions by an operator or by a service's reconcile answer are in the audit "
            "below." }
    }
}

/// What the preview page shows.
#[derive(Debug)]
pub struct Preview<'a> {
    /// The operator signed in.
    pub operator: &'a str,
    /// The record as it is now.
    pub detail: &'a RecordDetail,
    /// The decision's form, carried on to the confirmation.
    pub form: &'a DecisionForm,
    /// The decision it describes.
    pub decision: &'a Decision,
    /// The confirmation form's CSRF token.
    pub csrf: &'a str,
    /// Now, Unix milliseconds.
    pub now_ms: u64,
}

/// A decision's preview and its confirmation form.
pub fn preview(view: &Preview<'_>) -> Markup {
    let summary = &view.detail.summary;
    let action = view.form.action;
    let body = html! {
        h1 { "Preview: " (action_label(action)) }
        p {
            "Record " a href=(format!("/console/records/{}", summary.scope.to_hex())) {
                code { (summary.scope.to_hex()) } }
            ", now " code { (summary.state.as_str()) } ", fence " (summary.fence)
            ", created " (age(&summary.created_at, view.now_ms)) " ago."
        }
        @if action != Action::Erase && summary.state != RecordState::Unknown {
            p { strong { "This record is not unknown: the store will refuse to resolve it." } }
        }
        h2 { "A retry with this key and body will then get" }
        @match view.decision.retry() {
            Retry::Replays(response) => {
                p { "This answer, replayed from the record (with "
                    code { "idempotent-replayed: true" } "); the upstream is not called:" }
                (answer(response))
            }
            Retry::NotReplayable => p { code { "409 response_not_replayable" }
                ": completed, with no answer kept; the upstream is not called." },
            Retry::RunsAgain => p { "The request runs again: the upstream is called once more, "
                "under a fence higher than " (summary.fence) "." },
            Retry::RunsAsNew => p { "The request runs as new: the record and its fingerprint are "
                "gone, so the key's next request reaches the upstream, whatever its body." },
        }
        form method="post" action=(format!("/console/records/{}/decide", summary.scope.to_hex())) {
            input type="hidden" name="action" value=(action.as_str());
            input type="hidden" name="status" value=(view.form.status);
            input type="hidden" name="headers" value=(view.form.headers);
            input type="hidden" name="body" value=(view.form.body);
            input type="hidden" name="csrf" value=(view.csrf);
            p { label { "Reason (kept in the audit) " input type="text" name="reason" required
                maxlength="1000" size="60"; } }
            p { label { input type="checkbox" name="confirm" value="yes" required;
                " I have checked what happened, and a retry should get the above." } }
            button type="submit" { (action_label(action)) }
        }
    };
    page("Preview", view.operator, body)
}

/// After a decision.
pub fn done(operator: &str, scope: &Digest, action: Action) -> Markup {
    let body = html! {
        h1 { "Done: " (action_label(action)) }
        p { "Record " code { (scope.to_hex()) } ": " (action_label(action).to_lowercase())
            " by " strong { (operator) } "; the audit row with your name and reason was written "
            "with the change." }
        p {
            @if action != Action::Erase {
                a href=(format!("/console/records/{}", scope.to_hex())) { "The record" } " · "
            }
            a href="/console" { "The queue" }
        }
    };
    page("Done", operator, body)
}

/// A decision as a button and a heading name it.
fn action_label(action: Action) -> &'static str {
    match action {
        Action::ResolveCompleted => "Resolve as completed",
        Action::ResolveFailed => "Resolve as failed",
        Action::Erase => "Erase",
    }
}

/// The preview of a decision on `scope`.
fn preview_path(scope: &Digest) -> String {
    format!("/console/records/{}/preview", scope.to_hex())
}

/// A recorded response: status, headers, and the body as escaped text.
fn answer(response: &StoredResponse) -> Markup {
    let text = String::from_utf8_lossy(&response.body);
    let lossy = std::str::from_utf8(&response.body).is_err();
    html! {
        dl { dt { "status" } dd { (response.status) } }
        h3 { "Headers" }
        @if response.headers.is_empty() {
            p { "None." }
        } @else {
            table {
                thead { tr { th { "name" } th { "value" } } }
                tbody {
                    @for (name, value) in &response.headers {
                        tr { td { code { (visible(name)) } } td { code { (visible(value)) } } }
                    }
                }
            }
        }
        h3 { "Body (" (response.body.len()) " bytes, shown as text, never rendered)" }
        @if lossy {
            p { "Not UTF-8: bytes that are not are shown as \u{fffd}." }
        }
        pre { (visible(&text)) }
    }
}

/// What a record's lease expiry means in its state.
fn lease_label(state: RecordState) -> &'static str {
    match state {
        RecordState::Failed => "retryable from",
        _ => "lease expires",
    }
}

/// A record's age as the page shows it.
fn age(created_at: &str, now_ms: u64) -> String {
    age_ms(created_at, now_ms).map_or_else(|| "?".to_owned(), age_label)
}

/// The workload that made `record`, or what stands for none.
fn workload(record: &RecordSummary) -> String {
    record
        .workload
        .as_deref()
        .map_or_else(|| "— (a bearer-token caller)".to_owned(), visible)
}

/// The console's page of `record`.
fn record_path(record: &RecordSummary) -> String {
    format!("/console/records/{}", record.scope.to_hex())
}

/// The frame every page shares: no script, one stylesheet from the console itself.
fn page(title: &str, operator: &str, body: Markup) -> Markup {
    let header = html! {
        a href="/console" { "keyflight console" }
        span { " · operator " strong { (operator) } }
        form.signout method="post" action="/console/logout" {
            button type="submit" { "Sign out" }
        }
    };
    document(title, true, header, body)
}

/// The sign-in page (`docs/console.md#signing-in`), with why the last try was refused.
/// It links no stylesheet: that is behind the sign-in.
pub fn login(refused: Option<&str>) -> Markup {
    let body = html! {
        h1 { "Sign in" }
        p { "With your operator token (" code { "--admin-tokens-file" } "); the filter "
            "token does not open the console." }
        @if let Some(refused) = refused {
            p.refused { (refused) }
        }
        form method="post" action="/console/login" {
            label { "Operator token " input type="password" name="token" autocomplete="off"
                required; }
            " "
            button type="submit" { "Sign in" }
        }
    };
    document("Sign in", false, html! { "keyflight console" }, body)
}

/// The document around every page; `styled` links the stylesheet.
fn document(title: &str, styled: bool, header: Markup, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · keyflight console" }
                @if styled {
                    link rel="stylesheet" href="/console/style.css";
                }
            }
            body {
                header { (header) }
                main { (body) }
            }
        }
    }
}
