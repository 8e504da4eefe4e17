//! The console's pages, rendered with `maud` (`docs/console.md#what-it-shows`).
//!
//! `maud` escapes every `(value)` it interpolates (`&`, `<`, `>`, `"`, `'`), and no value
//! here is ever marked pre-escaped, so a recorded body or header is text on the page,
//! never markup; [`visible`] also spells out the characters escaping leaves invisible. No
//! value from a record becomes a link: the only links name a scope digest, 64 hex digits.
//! The pages are pure: what they show, and the time, come in as arguments.

use keyflight_protocol::wire::{RecordDetail, RecordState, RecordSummary, StoredResponse};
use maud::{DOCTYPE, Markup, html};

use super::queue::{AgeFilter, age_label, age_ms};
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
    /// The filter applied.
    pub filter: AgeFilter,
    /// The records that pass it, newest first.
    pub shown: Vec<&'a RecordSummary>,
    /// Now, Unix milliseconds.
    pub now_ms: u64,
}

/// The queue: `unknown` records, newest first, with the age filter's form.
pub fn queue(view: &Queue<'_>) -> Markup {
    let body = html! {
        h1 { "Records in " code { "unknown" } }
        p {
            (view.listed) " record(s) in " code { "unknown" } " among the newest " (view.limit)
            " (what " code { "GET /v1/records?state=unknown&limit=" (view.limit) } " lists); "
            (view.shown.len()) " shown by the age filter."
        }
        form method="get" action="/console" {
            label { "At least " input type="number" name="min_age_minutes" min="0"
                value=[view.filter.min_minutes]; " minutes old" }
            " "
            label { "at most " input type="number" name="max_age_minutes" min="0"
                value=[view.filter.max_minutes]; " minutes old" }
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
                thead { tr { th { "scope" } th { "age" } th { "created" } th { "fence" } th { "retained until" } } }
                tbody {
                    @for record in &view.shown {
                        tr {
                            td { a href=(record_path(record)) { code { (record.scope.to_hex()) } } }
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

/// One record: its metadata and its recorded answer, as text.
pub fn record(operator: &str, detail: &RecordDetail, now_ms: u64) -> Markup {
    let summary = &detail.summary;
    let body = html! {
        h1 { "Record " code { (summary.scope.to_hex()) } }
        dl {
            dt { "state" } dd { code { (summary.state.as_str()) } }
            dt { "scope digest" } dd { code { (summary.scope.to_hex()) } }
            dt { "request fingerprint" } dd { code { (summary.fingerprint.to_hex()) } }
            dt { "fence of the latest claim" } dd { (summary.fence) }
            dt { "created" } dd { (summary.created_at) " (" (age(&summary.created_at, now_ms)) " ago)" }
            @if let Some(until) = &summary.lease_expires_at {
                dt { (lease_label(summary.state)) } dd { (until) }
            }
            dt { "retained until" } dd { (summary.expires_at) " (then eligible for cleanup)" }
            dt { "replayable" } dd { (if summary.replayable { "yes" } else { "no" }) }
        }
        h2 { "Recorded answer" }
        @match &detail.response {
            Some(response) => (answer(response)),
            None => p { "None recorded." },
        }
        h2 { "Audit" }
        p {
            "Not shown yet: the store's show call does not return the operator audit rows "
            "(docs/console.md, what is not built yet)."
        }
    };
    page("Record", operator, body)
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

/// The console's page of `record`.
fn record_path(record: &RecordSummary) -> String {
    format!("/console/records/{}", record.scope.to_hex())
}

/// The frame every page shares: no script, one stylesheet from the console itself.
fn page(title: &str, operator: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · keyflight console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    a href="/console" { "keyflight console" }
                    span { " · operator " strong { (operator) } }
                }
                main { (body) }
            }
        }
    }
}
