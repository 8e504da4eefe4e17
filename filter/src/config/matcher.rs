//! [`Matcher`]: which requests a policy guards (F0), and how a request's target is compared
//! with it — every path an upstream could route by, case folded as routers fold it. Apart
//! from the rest of the configuration because it runs on every request.

use keyflight_protocol::Target;

use super::PathCase;

/// Which requests a policy guards (F0).
///
/// Matching errs on the side of guarding: a policy matches when any reading
/// of the request's path an upstream could route by matches
/// ([`Target::match_paths`]: as normalized, percent-decoded, dot segments
/// removed, slashes merged, `\` read as `/`), case-folded unless the policy
/// says [`PathCase::Sensitive`]; methods compare case-insensitively, and an
/// authority without a port matches its host on any port.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// Uppercase methods.
    pub methods: Vec<String>,
    /// Prefix of the path (the query is not matched), case-folded unless
    /// `path_case` is [`PathCase::Sensitive`].
    pub path_prefix: String,
    /// Optional regex over the path (use `^…$` to anchor); built
    /// case-insensitive unless `path_case` is [`PathCase::Sensitive`].
    pub path_regex: Option<regex_lite::Regex>,
    /// The authority; `None` matches any.
    pub authority: Option<AuthorityPattern>,
    /// Whether the path matches in every case.
    pub path_case: PathCase,
}

/// A policy's `match.authority`: a host, lower-case without a trailing dot,
/// and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityPattern {
    /// The host.
    pub host: String,
    /// The port; `None` matches the host on any port.
    pub port: Option<u16>,
}

impl Matcher {
    /// Whether a request with this normalized target matches.
    pub fn matches(&self, target: &Target) -> bool {
        self.matches_read(target, Unreadable::default())
    }

    /// Whether a request matches whose target is `target` as far as it could
    /// be read: a part that was not UTF-8 matches any method or authority
    /// (`docs/identity.md#matching-policies`).
    pub fn matches_read(&self, target: &Target, unreadable: Unreadable) -> bool {
        if !unreadable.method
            && !self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(&target.method))
        {
            return false;
        }
        let authority = &target.authority;
        if !unreadable.authority
            && let Some(pattern) = &self.authority
            && (pattern.host != authority.host()
                || pattern
                    .port
                    .is_some_and(|p| Some(p) != authority.effective_port()))
        {
            return false;
        }
        target.match_paths().iter().any(|path| {
            let path = match self.path_case {
                PathCase::Sensitive => path.clone(),
                PathCase::Insensitive => fold_case(path),
            };
            path.starts_with(&self.path_prefix)
                && self.path_regex.as_ref().is_none_or(|re| re.is_match(&path))
        })
    }
}

/// Which parts of a request's target were not UTF-8.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unreadable {
    /// `:method`.
    pub method: bool,
    /// `:authority`.
    pub authority: bool,
}

/// A path as every case-insensitive router compares it: upper-cased, then
/// lower-cased, so both `K` (KELVIN SIGN, lower-case `k`) and `ſ` (LONG S,
/// upper-case `S`) meet their ASCII letter, whichever way a router folds.
pub fn fold_case(path: &str) -> String {
    if path.is_ascii() {
        return path.to_ascii_lowercase();
    }
    path.to_uppercase().to_lowercase()
}
