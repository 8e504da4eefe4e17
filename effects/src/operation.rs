//! The operation a request belongs to, as keyflight forwards it: the claim's scope (which
//! operation) and fence (which run of it).
//!
//! keyflight sets both headers on the requests it lets through on a won claim and removes a
//! caller's copies from every request (`docs/effects.md#what-the-filter-forwards`), so a
//! service that is reachable only through keyflight can trust them.

use http::HeaderMap;

/// The header with the claim's scope: 64 lowercase hex characters.
pub const SCOPE_HEADER: &str = "idempotency-scope";

/// The header with the claim's fence: a positive decimal integer.
pub const FENCE_HEADER: &str = "idempotency-fence";

/// One run of one guarded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    scope: String,
    fence: i64,
}

/// Why the forwarded headers name no operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOperation {
    /// The scope is not 64 lowercase hex characters.
    #[error("{SCOPE_HEADER} must be 64 lowercase hex characters")]
    Scope,
    /// The fence is not a positive integer that fits a Postgres `bigint`.
    #[error("{FENCE_HEADER} must be a positive integer")]
    Fence,
    /// One header came without the other: keyflight always sends both, so the request did
    /// not come through it (or a proxy between edited it).
    #[error("{SCOPE_HEADER} and {FENCE_HEADER} come together or not at all")]
    Incomplete,
}

impl Operation {
    /// The operation named by a scope and a fence, as header text.
    pub fn new(scope: &str, fence: &str) -> Result<Self, InvalidOperation> {
        if scope.len() != 64
            || !scope
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(InvalidOperation::Scope);
        }
        // One spelling per fence, as the filter writes it (no sign, no leading zero).
        match fence.parse::<i64>() {
            Ok(number) if number > 0 && number.to_string() == fence => Ok(Operation {
                scope: scope.to_owned(),
                fence: number,
            }),
            _ => Err(InvalidOperation::Fence),
        }
    }

    /// The operation a request's headers name; `None` when it carries neither header (a
    /// request keyflight did not guard: it runs as it would without this crate).
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, InvalidOperation> {
        let text = |name: &str| {
            headers
                .get(name)
                .map(|value| value.to_str().map_err(|_| ()))
        };
        match (text(SCOPE_HEADER), text(FENCE_HEADER)) {
            (None, None) => Ok(None),
            (Some(Err(())), _) => Err(InvalidOperation::Scope),
            (_, Some(Err(()))) => Err(InvalidOperation::Fence),
            (Some(Ok(scope)), Some(Ok(fence))) => Operation::new(scope, fence).map(Some),
            _ => Err(InvalidOperation::Incomplete),
        }
    }

    /// The scope, 64 lowercase hex characters.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The fence.
    pub fn fence(&self) -> i64 {
        self.fence
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const SCOPE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn both_headers_name_an_operation() {
        let operation = Operation::from_headers(&headers(&[
            ("idempotency-scope", SCOPE),
            ("idempotency-fence", "42"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no operation"));
        assert_eq!((operation.scope(), operation.fence()), (SCOPE, 42));
    }

    #[test]
    fn neither_header_is_an_unguarded_request() {
        assert_eq!(Operation::from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn one_header_alone_is_refused() {
        assert_eq!(
            Operation::from_headers(&headers(&[("idempotency-fence", "42")])),
            Err(InvalidOperation::Incomplete)
        );
        assert_eq!(
            Operation::from_headers(&headers(&[("idempotency-scope", SCOPE)])),
            Err(InvalidOperation::Incomplete)
        );
    }

    #[test]
    fn a_scope_has_one_spelling() {
        let upper = SCOPE.to_ascii_uppercase();
        for scope in [&SCOPE[1..], upper.as_str(), "sha256:0123", ""] {
            assert_eq!(
                Operation::new(scope, "1"),
                Err(InvalidOperation::Scope),
                "{scope}"
            );
        }
    }

    #[test]
    fn a_fence_is_a_positive_bigint() {
        for fence in ["0", "-1", "+1", "01", " 1", "9223372036854775808", "x", ""] {
            assert_eq!(
                Operation::new(SCOPE, fence),
                Err(InvalidOperation::Fence),
                "{fence}"
            );
        }
        assert_eq!(
            Operation::new(SCOPE, "9223372036854775807").map(|o| o.fence()),
            Ok(i64::MAX)
        );
    }
}
