//! The security headers on every console answer (`docs/console.md#security-headers`).
//!
//! Applied outside every other layer of the admin listener, so a refusal (401, 403, a shed
//! call) carries them as a page does. The policy allows no script at all and styles only
//! from the console's own stylesheet: whatever a recorded body smuggles past escaping has
//! nothing to run with.

use axum::extract::Request;
use axum::http::header::{self, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// No script, no frames, no plug-ins; styles and forms only from the console itself.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The headers, in the order they are set.
pub const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::CACHE_CONTROL, "no-store"),
];

/// Whether `path` is the console's.
pub fn is_console(path: &str) -> bool {
    path == super::PREFIX
        || path
            .strip_prefix(super::PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Middleware for the admin listener: sets [`SECURITY_HEADERS`] on the console's answers,
/// replacing any the inner layers set.
pub async fn secure(request: Request, next: Next) -> Response {
    let console = is_console(request.uri().path());
    let mut response = next.run(request).await;
    if console {
        let headers = response.headers_mut();
        for (name, value) in SECURITY_HEADERS {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_paths_are_the_console() {
        assert!(is_console("/console"));
        assert!(is_console("/console/records/ab"));
        assert!(!is_console("/consoles"));
        assert!(!is_console("/v1/records"));
    }
}
