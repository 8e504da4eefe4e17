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
    api.release_unknown(&scope, &claim_id).await;
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
        // Without a token a browser is sent to sign in (`console_login.rs`).
        for (token, status, code) in [
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
    // A console path called with a method it does not serve is refused as the API's are,
    // with the headers too.
    let wrong = server
        .admin
        .send(reqwest::Method::DELETE, "/console", Some(ADMIN), |r| r)
        .await;
    wrong.assert_problem(405, "method_not_allowed");
    assert_secured(&wrong, "a wrong method");
    let nowhere = server.admin.get("/console/nowhere", Some(ADMIN)).await;
    nowhere.assert_problem(404, "not_found");
    assert_secured(&nowhere, "an unknown console path");
    let style = server.admin.get("/console/style.css", Some(ADMIN)).await;
    assert_eq!(style.status, 200);
    assert_eq!(
        style.headers.get("content-type").unwrap(),
        "text/css; charset=utf-8"
    );
    assert_secured(&style, "the stylesheet");
}

/// `fields` as `application/x-www-form-urlencoded`, as a browser sends a form.
pub fn form(fields: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(
                |b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    true => char::from(b).to_string(),
                    false => format!("%{b:02X}"),
                },
            )
            .collect()
    };
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The CSRF token a preview page's confirmation form carries.
fn csrf_of(preview: &Answer) -> String {
    let (_, rest) = preview
        .text
        .split_once("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF token in {}", preview.text));
    rest[..64].to_owned()
}

/// POSTs a decision's confirmation form with `token`.
async fn decide(admin: &Api, scope: &str, token: Option<&str>, fields: &[(&str, &str)]) -> Answer {
    admin
        .send(
            reqwest::Method::POST,
            &format!("/console/records/{scope}/decide"),
            token,
            |r| {
                r.header("content-type", "application/x-www-form-urlencoded")
                    .body(form(fields))
            },
        )
        .await
}

/// The audit rows of `scope`, oldest first: (actor, action, reason).
async fn audit_rows(scope: &str) -> Vec<(String, String, String)> {
    let client = db_client(&cluster().url()).await;
    let scope = keyflight_protocol::Digest::from_hex(scope).unwrap();
    client
        .query(
            "SELECT actor, action, reason FROM keyflight_operator_audit
             WHERE scope = $1 ORDER BY id",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

async fn state_of(admin: &Api, scope: &str) -> String {
    let shown = admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    shown.json["state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_previewed_resolve_takes_the_admin_api_path_and_only_with_its_csrf_token() {
    let server = start_server(&[]).await;
    let (api, admin) = (&server.api, &server.admin);
    let (scope, fingerprint) = unknown_record(api, "console-resolve").await;
    let page = admin
        .get(&format!("/console/records/{scope}"), Some(ADMIN))
        .await;
    assert!(
        page.text
            .contains(&format!("action=\"/console/records/{scope}/preview\"")),
        "{}",
        page.text
    );
    assert!(page.text.contains("No decision about this record yet."));

    let answer = [
        ("action", "resolve_completed"),
        ("status", "201"),
        ("headers", "Content-Type: application/json"),
        ("body", "{\"id\":7,\"note\":\"<script>alert(1)</script>\"}"),
    ];
    let preview = admin
        .get(
            &format!("/console/records/{scope}/preview?{}", form(&answer)),
            Some(ADMIN),
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text);
    assert_secured(&preview, "a preview");
    assert!(
        preview
            .text
            .contains("A retry with this key and body will then get")
    );
    assert!(!preview.text.contains("<script"), "{}", preview.text);
    assert!(
        preview
            .text
            .contains("&lt;script&gt;alert(1)&lt;/script&gt;")
    );
    assert_eq!(
        state_of(admin, &scope).await,
        "unknown",
        "a preview changes nothing"
    );
    let csrf = csrf_of(&preview);
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut fields = answer.to_vec();
        fields.extend_from_slice(extra);
        fields
    };
    let confirmed = [
        ("reason", "INC-9: the charge committed"),
        ("confirm", "yes"),
    ];

    // Refused, and nothing changes: no CSRF token, another form's, another operator's
    // family of token, no confirmation, the data plane.
    decide(admin, &scope, Some(ADMIN), &with(&confirmed))
        .await
        .assert_problem(403, "forbidden");
    let erase_preview = admin
        .get(
            &format!("/console/records/{scope}/preview?action=erase"),
            Some(ADMIN),
        )
        .await;
    let erase_csrf = csrf_of(&erase_preview);
    let mut other_form = with(&confirmed);
    other_form.push(("csrf", &erase_csrf));
    decide(admin, &scope, Some(ADMIN), &other_form)
        .await
        .assert_problem(403, "forbidden");
    let mut complete = with(&confirmed);
    complete.push(("csrf", &csrf));
    decide(admin, &scope, Some(TOKEN), &complete)
        .await
        .assert_problem(403, "forbidden");
    decide(admin, &scope, Some("not-a-token"), &complete)
        .await
        .assert_problem(401, "unauthorized");
    decide(api, &scope, Some(ADMIN), &complete)
        .await
        .assert_problem(404, "not_found");
    let mut unconfirmed = with(&[("reason", "INC-9")]);
    unconfirmed.push(("csrf", &csrf));
    decide(admin, &scope, Some(ADMIN), &unconfirmed)
        .await
        .assert_problem(400, "bad_request");
    assert_eq!(state_of(admin, &scope).await, "unknown");
    assert!(audit_rows(&scope).await.is_empty(), "no audit row");

    let done = decide(admin, &scope, Some(ADMIN), &complete).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_secured(&done, "a decision's answer");
    assert_eq!(state_of(admin, &scope).await, "completed");
    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"]["status"], 201);
    assert_eq!(
        replay.json["response"]["headers"],
        json!([["content-type", "application/json"]])
    );
    assert_eq!(
        audit_rows(&scope).await,
        [(
            "admin".to_owned(),
            "resolve_completed".to_owned(),
            "INC-9: the charge committed".to_owned()
        )]
    );
    // The record's page shows the decision's audit row, and no decision form but erase.
    let page = admin
        .get(&format!("/console/records/{scope}"), Some(ADMIN))
        .await;
    for shown in [
        "<td>admin</td>",
        "<code>resolve_completed</code>",
        "<td>INC-9: the charge committed</td>",
    ] {
        assert!(page.text.contains(shown), "{shown} in {}", page.text);
    }
    assert!(!page.text.contains("value=\"resolve_completed\""));
    // The form cannot be replayed into a second decision: the record is no longer unknown.
    decide(admin, &scope, Some(ADMIN), &complete)
        .await
        .assert_problem(409, "not_unknown");
}

#[tokio::test]
async fn a_previewed_erase_lets_the_key_run_again_and_is_audited() {
    let server = start_server(&[]).await;
    let (api, admin) = (&server.api, &server.admin);
    let (scope, fingerprint) = unknown_record(api, "console-erase").await;
    let preview = admin
        .get(
            &format!("/console/records/{scope}/preview?action=erase"),
            Some(ADMIN),
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text);
    assert!(
        preview.text.contains("The request runs as new"),
        "{}",
        preview.text
    );
    let csrf = csrf_of(&preview);
    decide(
        admin,
        &scope,
        Some(ADMIN),
        &[("action", "erase"), ("confirm", "yes"), ("csrf", &csrf)],
    )
    .await
    .assert_problem(400, "bad_request");
    assert_eq!(
        state_of(admin, &scope).await,
        "unknown",
        "no reason, no erase"
    );
    let done = decide(
        admin,
        &scope,
        Some(ADMIN),
        &[
            ("action", "erase"),
            ("reason", "INC-10"),
            ("confirm", "yes"),
            ("csrf", &csrf),
        ],
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text);
    admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        audit_rows(&scope).await,
        [("admin".to_owned(), "erase".to_owned(), "INC-10".to_owned())]
    );
    assert_eq!(api.claim(&scope, &fingerprint, 0).await.outcome(), "won");
}

#[tokio::test]
async fn the_queue_counts_and_orders_what_the_admin_list_does() {
    // A cluster of its own: the count is of every `unknown` record in the database.
    let cluster = keyflight_testkit::pg::PgCluster::start();
    migrate(&cluster.url());
    let server = start_server_on(&cluster.url(), &["--storage-quota-interval", "1s"]).await;
    let mut made = Vec::new();
    for n in 0..3 {
        made.push(
            unknown_record(&server.api, &format!("console-count-{n}"))
                .await
                .0,
        );
    }
    let (done, _, claim_id) = server.api.win("console-count-done").await;
    server.api.finalize(&done, &claim_id).await;

    for limit in [2, 100] {
        let listed = server
            .admin
            .get(
                &format!("/v1/records?state=unknown&limit={limit}"),
                Some(ADMIN),
            )
            .await;
        let listed: Vec<&str> = listed.json["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|record| record["scope"].as_str().unwrap())
            .collect();
        let queue = server
            .admin
            .get(&format!("/console?limit={limit}"), Some(ADMIN))
            .await;
        assert!(
            queue.text.contains(&format!(
                "{} record(s) in <code>unknown</code> among the newest {limit}",
                listed.len()
            )),
            "{}",
            queue.text
        );
        let shown: Vec<&str> = queue
            .text
            .split("href=\"/console/records/")
            .skip(1)
            .map(|rest| &rest[..64])
            .collect();
        assert_eq!(shown, listed, "the same records, newest first");
    }
    let newest_first: Vec<&str> = made.iter().rev().map(String::as_str).collect();
    // The metric the queue's count must match, once the replica measured after the records.
    server
        .api
        .wait_counter(
            "keyflight_store_workload_unknown_records{workload=\"bearer\"}",
            3,
        )
        .await;
    let queue = server.admin.get("/console", Some(ADMIN)).await;
    assert!(queue.text.contains("3 record(s) in"), "{}", queue.text);
    assert!(
        queue
            .text
            .contains("last storage measure counted 3 record(s) in"),
        "the queue says what the metric says: {}",
        queue.text
    );
    assert!(!queue.text.contains(&done));
    let shown: Vec<&str> = queue
        .text
        .split("href=\"/console/records/")
        .skip(1)
        .map(|rest| &rest[..64])
        .collect();
    assert_eq!(shown, newest_first);
}

#[tokio::test]
async fn a_records_page_tells_its_fence_history_as_far_as_the_store_keeps_it() {
    let server = start_server(&[]).await;
    let (api, admin) = (&server.api, &server.admin);
    let (scope, _, claim_id) = api.win("console-history").await;
    let page_of = async |scope: &str| {
        let page = admin
            .get(&format!("/console/records/{scope}"), Some(ADMIN))
            .await;
        assert_eq!(page.status, 200, "{}", page.text);
        page.text
    };
    let record = admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    let (fence, created_at) = (&record.json["fence"], &record.json["created_at"]);
    let claimed = format!(
        "Claimed under fence <strong>{fence}</strong> at {}",
        created_at.as_str().unwrap()
    );
    let running = page_of(&scope).await;
    for shown in [
        "<h2>Fence history</h2>",
        claimed.as_str(),
        &format!("idempotency-fence: {fence}"),
        &format!(
            "lease runs until {}",
            record.json["lease_expires_at"].as_str().unwrap()
        ),
        "Not kept by the store",
    ] {
        assert!(running.contains(shown), "{shown} in {running}");
    }

    api.release_unknown(&scope, &claim_id).await;
    let held = page_of(&scope).await;
    assert!(held.contains(&claimed), "{held}");
    assert!(
        held.contains("Now <code>unknown</code>: nobody knows whether the run under fence"),
        "{held}"
    );
    assert!(!held.contains("lease runs until"), "{held}");
}
