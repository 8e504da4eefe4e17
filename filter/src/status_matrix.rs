//! F6: what an upstream answer turns the record into.
//!
//! Deterministic answers are recorded and replayed; answers that depend on
//! revocable context (authz, redirects) are forgotten; transient failures leave
//! a short cooldown. A 5xx that the proxy generated itself (upstream reset,
//! timeout, no healthy host) says nothing about whether the upstream acted, so
//! it is *uncertain* and the policy's `uncertain` setting decides.

/// Who produced the response the filter sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOrigin {
    /// The upstream answered (Envoy `response.code_details` is `via_upstream`).
    Upstream,
    /// Envoy (or a filter after this one) generated it.
    Proxy,
}

/// What to do with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Finalize as completed (replayable unless over the response cap).
    Record,
    /// Release `forget`: nothing recorded, a retry runs again.
    Forget,
    /// Release `cooldown`: failed; a same-body retry may run after the cooldown.
    Cooldown,
    /// The upstream may or may not have acted: the policy's `uncertain` decides.
    Uncertain,
}

/// Classifies a response (F6).
///
/// 4xx codes the matrix does not name (405, 412, 413, 423, …) are forgotten:
/// they mean the upstream refused without acting, so running the retry again
/// is safe, while recording a possibly transient refusal would not be.
pub fn classify(status: u16, origin: ResponseOrigin) -> Disposition {
    match (status, origin) {
        (500..=599, ResponseOrigin::Proxy) => Disposition::Uncertain,
        (200..=299 | 400 | 404 | 409 | 422, _) => Disposition::Record,
        (408 | 429 | 500..=599, _) => Disposition::Cooldown,
        _ => Disposition::Forget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_rows() {
        use Disposition::*;
        use ResponseOrigin::*;
        let table = [
            (200, Upstream, Record),
            (201, Upstream, Record),
            (204, Upstream, Record),
            (400, Upstream, Record),
            (404, Upstream, Record),
            (409, Upstream, Record),
            (422, Upstream, Record),
            (401, Upstream, Forget),
            (403, Upstream, Forget),
            (301, Upstream, Forget),
            (302, Upstream, Forget),
            (304, Upstream, Forget),
            (405, Upstream, Forget),
            (500, Upstream, Cooldown),
            (502, Upstream, Cooldown),
            (503, Upstream, Cooldown),
            (408, Upstream, Cooldown),
            (429, Upstream, Cooldown),
            (503, Proxy, Uncertain),
            (504, Proxy, Uncertain),
            (403, Proxy, Forget),
            (200, Proxy, Record),
        ];
        for (status, origin, want) in table {
            assert_eq!(classify(status, origin), want, "{status} {origin:?}");
        }
    }
}
