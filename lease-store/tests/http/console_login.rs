//! Signing in to the console (`docs/console.md#signing-in`): an operator's token opens a
//! session cookie the console's pages accept and the admin API does not; the filter token,
//! a wrong one or a forged cookie open nothing, and a page opened without a session sends
//! the browser to sign in; sign-out ends the session; refused sign-ins are rate-limited per
//! peer address.

#![allow(clippy::unwrap_used)]

use reqwest::redirect::Policy;

use crate::console::form;
use crate::support::*;

/// An answer, redirects not followed (a browser would follow them with its cookie).
struct Reply {
    status: u16,
    location: Option<String>,
    set_cookie: Vec<String>,
    retry_after: Option<String>,
    csp: Option<String>,
    text: String,
}

/// A client that sends only what each call names: no redirects, no cookie jar.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// [`browser`], its connections from another loopback address.
fn browser_from(local: std::net::IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .local_address(local)
        .build()
        .unwrap()
}

async fn reply(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.unwrap();
    let header = |name| {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let location = header("location").into_iter().next();
    let set_cookie = header("set-cookie");
    let retry_after = header("retry-after").into_iter().next();
    let csp = header("content-security-policy").into_iter().next();
    Reply {
        status: response.status().as_u16(),
        location,
        set_cookie,
        retry_after,
        csp,
        text: response.text().await.unwrap(),
    }
}

/// Posts the sign-in form with `token`.
async fn login(admin: &Api, token: &str) -> Reply {
    login_with(&browser(), admin, token).await
}

/// Posts the sign-in form with `token` through `client`.
async fn login_with(client: &reqwest::Client, admin: &Api, token: &str) -> Reply {
    reply(
        client
            .post(format!("{}/console/login", admin.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("token", token)])),
    )
    .await
}

/// Asserts `reply` sends the browser to the sign-in page.
fn assert_sent_to_sign_in(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 303, "{what}: {}", reply.text);
    assert_eq!(reply.location.as_deref(), Some("/console/login"), "{what}");
    assert!(
        reply
            .csp
            .as_deref()
            .is_some_and(|csp| csp.contains("default-src 'none'")),
        "{what}: the console's headers on the redirect too"
    );
}

/// GETs `path` with the session cookie `cookie` (`name=value`) only.
async fn get_with(admin: &Api, path: &str, cookie: &str) -> Reply {
    reply(
        browser()
            .get(format!("{}{path}", admin.base))
            .header("cookie", cookie),
    )
    .await
}

/// Posts a confirmed erase of the record page `record` as a browser would, with `cookie`
/// (the session) or none.
async fn post_erase(admin: &Api, record: &str, cookie: Option<&str>) -> Reply {
    let mut request = browser()
        .post(format!("{}{record}/decide", admin.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("action", "erase"),
            ("confirm", "yes"),
            ("reason", "x"),
        ]));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    reply(request).await
}

/// Signs in as the test operator; returns the cookie as a browser sends it back.
async fn signed_in(admin: &Api) -> String {
    let signed = login(admin, ADMIN).await;
    assert_eq!(signed.status, 303, "{}", signed.text);
    assert_eq!(signed.location.as_deref(), Some("/console"));
    assert_eq!(signed.set_cookie.len(), 1, "{:?}", signed.set_cookie);
    let set = &signed.set_cookie[0];
    let (pair, attributes) = set.split_once(';').unwrap();
    let id = pair.strip_prefix("keyflight_console=").unwrap();
    assert_eq!(id.len(), 64, "{set}");
    assert!(
        attributes.contains("HttpOnly")
            && attributes.contains("SameSite=Strict")
            && attributes.contains("Path=/console"),
        "{set}"
    );
    assert!(!set.contains(ADMIN), "the cookie never carries the token");
    pair.to_owned()
}

#[tokio::test]
async fn an_operator_token_signs_in_and_the_queue_answers_the_cookie() {
    let server = start_server(&[]).await;
    let admin = &server.admin;
    let page = reply(browser().get(format!("{}/console/login", admin.base))).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text
            .contains("<form method=\"post\" action=\"/console/login\">"),
        "{}",
        page.text
    );

    let cookie = signed_in(admin).await;
    let queue = get_with(admin, "/console", &cookie).await;
    assert_eq!(queue.status, 200, "{}", queue.text);
    assert!(queue.text.contains("operator <strong>admin</strong>"));
    assert!(queue.text.contains("action=\"/console/logout\""));
    let style = get_with(admin, "/console/style.css", &cookie).await;
    assert_eq!(style.status, 200);

    // A decision still needs its form's CSRF token: the cookie alone takes none.
    let scope = fresh_digest("console-login-decide");
    let decided = post_erase(admin, &format!("/console/records/{scope}"), Some(&cookie)).await;
    assert_eq!(decided.status, 403, "{}", decided.text);

    // Sign-out ends the session: the same cookie opens nothing after it.
    let out = reply(
        browser()
            .post(format!("{}/console/logout", admin.base))
            .header("cookie", &cookie),
    )
    .await;
    assert_eq!(out.status, 303);
    assert_eq!(out.location.as_deref(), Some("/console/login"));
    assert!(
        out.set_cookie[0].contains("Max-Age=0"),
        "{:?}",
        out.set_cookie
    );
    assert_sent_to_sign_in(&get_with(admin, "/console", &cookie).await, "signed out");
}

#[tokio::test]
async fn the_filter_token_a_wrong_token_or_a_forged_cookie_open_nothing() {
    let server = start_server(&[]).await;
    let admin = &server.admin;
    for (token, status) in [(TOKEN, 403), ("not-a-token", 401), ("", 401)] {
        let refused = login(admin, token).await;
        assert_eq!(refused.status, status, "{token}: {}", refused.text);
        assert!(refused.set_cookie.is_empty(), "{token}: sets nothing");
        assert!(refused.text.contains("action=\"/console/login\""));
    }
}

#[tokio::test]
async fn a_page_opened_without_a_session_sends_the_browser_to_sign_in() {
    let server = start_server(&[]).await;
    let admin = &server.admin;
    let scope = fresh_digest("console-login-redirect");
    let record = format!("/console/records/{scope}");
    let forged = format!("keyflight_console={}", "ab".repeat(32));
    for path in ["/console", "/console?min_age_minutes=5", record.as_str()] {
        let without = reply(browser().get(format!("{}{path}", admin.base))).await;
        assert_sent_to_sign_in(&without, path);
        assert!(
            without.set_cookie.is_empty(),
            "{path}: no cookie, none cleared"
        );
        let stale = get_with(admin, path, &forged).await;
        assert_sent_to_sign_in(&stale, path);
        assert!(
            stale.set_cookie.iter().any(|set| set.contains("Max-Age=0")),
            "{path}: the stale cookie is dropped: {:?}",
            stale.set_cookie
        );
        assert!(!stale.text.contains(&scope));
    }
    // A decision posted without a session is sent to sign in too, and takes nothing.
    let decided = post_erase(admin, &record, None).await;
    assert_sent_to_sign_in(&decided, "a decision");
    // A bearer header is answered as the admin API answers it: a script gets the status.
    for (token, status) in [("not-a-token", 401), (TOKEN, 403)] {
        let refused = reply(
            browser()
                .get(format!("{}/console", admin.base))
                .bearer_auth(token),
        )
        .await;
        assert_eq!(refused.status, status, "{token}: {}", refused.text);
        assert_eq!(refused.location, None);
    }
}

#[tokio::test]
async fn refused_sign_ins_are_limited_per_peer_address() {
    let server = start_server(&[]).await;
    let admin = &server.admin;
    for attempt in 1..=5 {
        let refused = login(admin, "not-a-token").await;
        assert_eq!(refused.status, 401, "attempt {attempt}: {}", refused.text);
    }
    // The sixth within the minute waits, whatever its token: the token is not looked at.
    for token in ["not-a-token", TOKEN, ADMIN] {
        let limited = login(admin, token).await;
        assert_eq!(limited.status, 429, "{token}: {}", limited.text);
        let wait: u64 = limited.retry_after.as_deref().unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
        assert!(limited.set_cookie.is_empty(), "{token}: no session");
        assert!(limited.text.contains("action=\"/console/login\""));
    }
    // Another address signs in; the admin API's bearer calls are not limited.
    let elsewhere = browser_from("127.0.0.2".parse().unwrap());
    let signed = login_with(&elsewhere, admin, ADMIN).await;
    assert_eq!(signed.status, 303, "{}", signed.text);
    assert_eq!(admin.get("/v1/records", Some(ADMIN)).await.status, 200);
}

#[tokio::test]
async fn the_session_cookie_does_not_open_the_admin_api() {
    let server = start_server(&[]).await;
    let admin = &server.admin;
    let cookie = signed_in(admin).await;
    let records = get_with(admin, "/v1/records", &cookie).await;
    assert_eq!(records.status, 401, "{}", records.text);
    let scope = fresh_digest("console-login-api");
    let shown = get_with(admin, &format!("/v1/records/{scope}"), &cookie).await;
    assert_eq!(shown.status, 401, "{}", shown.text);
}

#[tokio::test]
async fn a_session_names_its_operator_and_ends_when_the_token_is_revoked() {
    let file = std::env::temp_dir().join(format!("keyflight-console-{}", fresh_digest("f")));
    std::fs::write(&file, "alice:alice-token-for-tests\n").unwrap();
    let server = start_server(&["--admin-tokens-file", file.to_str().unwrap()]).await;
    let admin = &server.admin;
    let signed = login(admin, "alice-token-for-tests").await;
    assert_eq!(signed.status, 303, "{}", signed.text);
    let cookie = signed.set_cookie[0].split_once(';').unwrap().0.to_owned();
    let queue = get_with(admin, "/console", &cookie).await;
    assert!(queue.text.contains("operator <strong>alice</strong>"));

    // Taken out of the file (write, then rename, as a Secret volume does), the token ends
    // the sessions it opened: each request checks it again.
    let staged = file.with_extension("staged");
    std::fs::write(&staged, "bob:bob-token-for-tests\n").unwrap();
    std::fs::rename(&staged, &file).unwrap();
    keyflight_testkit::process::eventually(
        "the revoked token's session is refused",
        std::time::Duration::from_secs(20),
        || async { get_with(admin, "/console", &cookie).await.status == 303 },
    )
    .await;
    std::fs::remove_file(&file).unwrap();
}
