//! `lease-store fingerprint` (K5): why was this request a 409?
//!
//! Prints every step of the K4 fingerprint for a request an operator
//! describes — method, normalized path, sorted query, how the body was
//! digested (RFC 8785 canonical JSON, or raw bytes and why), the body digest,
//! the selected headers — and the fingerprint itself, using the very
//! function the filter runs ([`keyflight_protocol::fingerprint::explain`]).
//! With `--key` it also prints the scope digest (K3), which is how records
//! are found with `lease-store records show`.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use keyflight_protocol::fingerprint::{
    BodyForm, DEFAULT_FINGERPRINT_HEADERS, Explanation, FingerprintInput, RawReason, explain,
};
use keyflight_protocol::key::parse_key;
use keyflight_protocol::{Digest, Principal, ScopeInput, ScopeMode, scope};

use super::records::parse_header;

/// Flags of `lease-store fingerprint`.
#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// The request method.
    #[arg(long)]
    method: String,
    /// Path and query as sent (`/payments?x=1`).
    #[arg(long)]
    path: String,
    /// The request's `content-type`.
    #[arg(long)]
    content_type: Option<String>,
    /// File holding the request body.
    #[arg(long, conflicts_with = "body")]
    body_file: Option<PathBuf>,
    /// The request body, inline.
    #[arg(long)]
    body: Option<String>,
    /// A request header, `name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A header that enters the fingerprint (repeatable; default: if-match, x-approval-digest).
    #[arg(long = "fingerprint-header")]
    fingerprint_headers: Vec<String>,
    #[command(flatten)]
    scope: ScopeArgs,
}

/// Inputs of the scope digest (all needed once `--key` is given).
#[derive(Debug, Args)]
struct ScopeArgs {
    /// The `Idempotency-Key` value as sent; prints the scope digest too.
    #[arg(long, requires = "authority")]
    key: Option<String>,
    /// The effective principal (actor, else caller).
    #[arg(long, conflicts_with = "anonymous")]
    principal: Option<String>,
    /// The policy's shared anonymous scope (`anonymous: shared`).
    #[arg(long)]
    anonymous: bool,
    /// The request's authority (host), lowercase.
    #[arg(long)]
    authority: Option<String>,
    /// The policy's scope mode.
    #[arg(long, value_enum, default_value_t = ScopeModeArg::Route)]
    scope_mode: ScopeModeArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ScopeModeArg {
    Route,
    Service,
}

/// Why the request description is unusable.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// A flag's value is malformed.
    #[error("{0}")]
    Input(String),
}

/// Prints the explanation (and scope) of the described request.
pub fn run(args: FingerprintArgs) -> Result<(), FingerprintError> {
    let body = match (&args.body_file, &args.body) {
        (Some(path), _) => std::fs::read(path)
            .map_err(|e| FingerprintError::Input(format!("cannot read {}: {e}", path.display())))?,
        (None, Some(text)) => text.clone().into_bytes(),
        (None, None) => Vec::new(),
    };
    let headers = args
        .headers
        .iter()
        .map(|h| parse_header(h).map_err(FingerprintError::Input))
        .collect::<Result<Vec<_>, _>>()?;
    let selected_names: Vec<String> = if args.fingerprint_headers.is_empty() {
        DEFAULT_FINGERPRINT_HEADERS.map(str::to_owned).to_vec()
    } else {
        args.fingerprint_headers
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .collect()
    };
    let selected: Vec<(&str, Option<&[u8]>)> = selected_names
        .iter()
        .map(|name| {
            let value = headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_bytes());
            (name.as_str(), value)
        })
        .collect();
    let explanation = explain(&FingerprintInput {
        method: &args.method,
        path_and_query: &args.path,
        content_type: args.content_type.as_deref(),
        body: &body,
        selected_headers: &selected,
    });
    let mut out = render(&explanation);
    if let Some(digest) = scope_digest(&args)? {
        let _ = writeln!(out, "{:<18}{digest}", "scope:");
        let _ = writeln!(
            out,
            "{:<18}lease-store records show {}",
            "find it with:",
            digest.to_hex()
        );
    }
    print!("{out}");
    Ok(())
}

/// The scope digest when `--key` was given.
fn scope_digest(args: &FingerprintArgs) -> Result<Option<Digest>, FingerprintError> {
    let Some(raw_key) = &args.scope.key else {
        return Ok(None);
    };
    let key = parse_key(&[raw_key.as_bytes()])
        .map_err(|e| FingerprintError::Input(format!("--key: {e}")))?
        .ok_or_else(|| FingerprintError::Input("--key is empty".into()))?;
    let principal = match (&args.scope.principal, args.scope.anonymous) {
        (Some(name), false) => Principal::Named(name),
        (None, true) => Principal::AnonymousShared,
        _ => {
            return Err(FingerprintError::Input(
                "--key needs --principal NAME or --anonymous".into(),
            ));
        }
    };
    let authority = args.scope.authority.as_deref().unwrap_or_default();
    Ok(Some(scope(&ScopeInput {
        principal,
        authority,
        method: &args.method,
        path_and_query: &args.path,
        key: &key,
        mode: match args.scope.scope_mode {
            ScopeModeArg::Route => ScopeMode::Route,
            ScopeModeArg::Service => ScopeMode::Service,
        },
    })))
}

/// The explanation as aligned `label: value` lines.
fn render(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<18}{}", "method:", e.method);
    let _ = writeln!(out, "{:<18}{}", "path:", e.normalized_path);
    if e.sorted_query.is_empty() {
        let _ = writeln!(out, "{:<18}(none)", "query:");
    }
    for (i, (name, value)) in e.sorted_query.iter().enumerate() {
        let label = if i == 0 { "query:" } else { "" };
        let _ = writeln!(out, "{label:<18}{name}={value}");
    }
    match &e.body_form {
        BodyForm::CanonicalJson(text) => {
            let _ = writeln!(out, "{:<18}canonical JSON (RFC 8785)", "body form:");
            let _ = writeln!(out, "{:<18}{text}", "canonical body:");
        }
        BodyForm::Raw(reason) => {
            let why = match reason {
                RawReason::NotJsonContentType => "the content type is not JSON",
                RawReason::InvalidJson => "the content type says JSON but the body does not parse",
                RawReason::LossyNumber => {
                    "a number's canonical form would denote a different value"
                }
            };
            let _ = writeln!(out, "{:<18}raw bytes ({why})", "body form:");
        }
    }
    let _ = writeln!(out, "{:<18}{}", "body digest:", e.body_digest);
    for (name, value) in &e.headers {
        let shown = value.as_deref().unwrap_or("(absent)");
        let _ = writeln!(out, "{:<18}{name}: {shown}", "header:");
    }
    let _ = writeln!(out, "{:<18}{}", "fingerprint:", e.fingerprint);
    out
}
