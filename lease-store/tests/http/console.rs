//! The operator's console on the admin listener (`docs/console.md`): the queue of `unknown`
//! records, a record's page, hostile recorded values shown only as escaped text, the
//! security headers on every answer, and no console without an operator's token or on the
//! data plane.

#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use serde_json::json;

use crate::support::*;

/// The headers every console answer carries.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; \
         base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

fn assert_secured(answer: &Answer, what: &str) {
    for (name, value) in SECURITY_HEADERS {
        assert_eq!(
            answer.headers.get(name).and_then(|v| v.to_str().ok()),
            Some(value),
            "{what}: {name}"
        );
    }
}

/// Wins a fresh scope and releases it `unknown`, as a lapsed at-most-once claim would be.
async fn unknown_record(api: &Api, label: &str) -> (String, String) {
    let (scope, fingerprint, claim_id) = api.win(label).await;
    let released = api
        .post(
            &format!("/v1/claims/{scope}/release"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "as": "unknown" }),
        )
        .await;
    assert_eq!(released.status, 200, "{}", released.text);
    (scope, fingerprint)
}

#[tokio::test]
async fn the_queue_lists_an_unknown_record_and_its_page_shows_it() {
    let server = start_server(&[]).await;
    let (scope, fingerprint) = unknown_record(&server.api, "console-queue").await;

    let queue = server.admin.get("/console", Some(ADMIN)).await;
    assert_eq!(queue.status, 200, "{}", queue.text);
    assert_eq!(
        queue.headers.get("content-type").unwrap(),
        "text/html; charset=utf-8"
    );
    assert_secured(&queue, "the queue");
    assert!(
        queue
            .text
            .contains(&format!("href=\"/console/records/{scope}\"")),
        "{}",
        queue.text
    );
    assert!(queue.text.contains("operator <strong>admin</strong>"));

    // The age filter: a record made just now is not an hour old, and is under a minute.
    let old = server
        .admin
        .get(
            "/console?min_age_minutes=60&max_age_minutes=&limit=1000",
            Some(ADMIN),
        )
        .await;
    assert_eq!(old.status, 200, "{}", old.text);
    assert!(!old.text.contains(&scope), "filtered out by age");
    let fresh = server
        .admin
        .get("/console?max_age_minutes=5", Some(ADMIN))
        .await;
    assert!(fresh.text.contains(&scope), "{}", fresh.text);
    server
        .admin
        .get("/console?limit=0", Some(ADMIN))
        .await
        .assert_problem(400, "bad_request");

    let page = server
        .admin
        .get(&format!("/console/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_secured(&page, "a record's page");
    for shown in [
        scope.as_str(),
        fingerprint.as_str(),
        "<code>unknown</code>",
        "None recorded.",
    ] {
        assert!(page.text.contains(shown), "{shown} in {}", page.text);
    }

    // A completed record is not in the queue; its page is there.
    let (done, _, claim_id) = server.api.win("console-completed").await;
    server.api.finalize(&done, &claim_id).await;
    let queue = server.admin.get("/console?limit=1000", Some(ADMIN)).await;
    assert!(!queue.text.contains(&done));
    let page = server
        .admin
        .get(&format!("/console/records/{done}"), Some(ADMIN))
        .await;
    assert!(
        page.text.contains("<code>completed</code>"),
        "{}",
        page.text
    );
    assert!(page.text.contains("{&quot;id&quot;:42}"), "{}", page.text);

    server
        .admin
        .get(
            &format!("/console/records/{}", fresh_digest("console-missing")),
            Some(ADMIN),
        )
        .await
        .assert_problem(404, "not_found");
}

#[tokio::test]
async fn hostile_recorded_values_are_shown_only_as_escaped_text() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("console-hostile").await;
    let body = "<script>alert(1)</script><a href=\"javascript:alert(2)\">pay</a>\
                <img src=x onerror=alert(3)>\u{202e}gnp.exe\u{2028}next";
    let response = json!({
        "status": 200,
        "headers": [
            ["content-type", "text/html"],
            ["x-note", "<script>alert(4)</script>"],
            ["link", "<javascript:alert(5)>; rel=\"next\""],
        ],
        "body_b64": base64::engine::general_purpose::STANDARD.encode(body),
    });
    server.api.finalize_with(&scope, &claim_id, &response).await;

    let page = server
        .admin
        .get(&format!("/console/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_secured(&page, "a hostile record's page");
    let html = page.text.to_lowercase();
    assert!(!html.contains("<script"), "a raw <script: {}", page.text);
    assert!(!html.contains("<img"), "a raw <img: {}", page.text);
    assert!(!html.contains("href=\"javascript:"), "{}", page.text);
    assert!(!html.contains("<javascript:"), "{}", page.text);
    for escaped in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;a href=&quot;javascript:alert(2)&quot;&gt;pay&lt;/a&gt;",
        "&lt;script&gt;alert(4)&lt;/script&gt;",
        "&lt;javascript:alert(5)&gt;",
        "\\u{202e}gnp.exe\\u{2028}next",
    ] {
        assert!(page.text.contains(escaped), "{escaped} in {}", page.text);
    }
    assert!(
        !page.text.contains('\u{202e}') && !page.text.contains('\u{2028}'),
        "bidi and line-separator characters are spelled out, never sent"
    );
}

#[tokio::test]
async fn no_console_without_an_operator_token_or_on_the_data_plane() {
    let server = start_server(&[]).await;
    let (scope, _) = unknown_record(&server.api, "console-refused").await;
    let record = format!("/console/records/{scope}");
    for path in ["/console", record.as_str(), "/console/style.css"] {
        for (token, status, code) in [
            (None, 401, "unauthorized"),
            (Some("not-a-token"), 401, "unauthorized"),
            (Some(TOKEN), 403, "forbidden"),
        ] {
            let answer = server.admin.get(path, token).await;
            answer.assert_problem(status, code);
            assert!(!answer.text.contains(&scope), "{path}: {}", answer.text);
            assert_secured(&answer, path);
        }
        // The data plane serves no console, whatever the token.
        for token in [Some(ADMIN), Some(TOKEN)] {
            server
                .api
                .get(path, token)
                .await
                .assert_problem(404, "not_found");
        }
    }
    let style = server.admin.get("/console/style.css", Some(ADMIN)).await;
    assert_eq!(style.status, 200);
    assert_eq!(
        style.headers.get("content-type").unwrap(),
        "text/css; charset=utf-8"
    );
    assert_secured(&style, "the stylesheet");
}
