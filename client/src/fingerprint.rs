//! `keyflight fingerprint` (K5): why was this request a 409?
//!
//! An operator describes a request the way it arrived — method, path,
//! authority, scheme, every header (repeats and padding included), body — and
//! gets every step of its identity: the normalized authority, path and query,
//! the media type, how the body was digested (RFC 8785 canonical JSON, or raw
//! bytes and why), the selected headers, the fingerprint (K4) and, with
//! `--key`, the principal (with `--actor-source`, the delegated principal) and
//! the scope (K3), which is how records are found with `lease-store records show`.
//!
//! The flags become the header list the filter would see (`--content-type`
//! and `--key` are shorthands for those headers), and that list goes through
//! [`keyflight_protocol::request`], the very code the filter runs, so the
//! digests are the filter's bit for bit.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use keyflight_protocol::fingerprint::{
    BodyForm, DEFAULT_FINGERPRINT_HEADERS, Explanation, RawReason,
};
use keyflight_protocol::principal::{name_from_bytes, name_from_headers};
use keyflight_protocol::{
    Identified, Party, Principal, PrincipalSource, RequestHead, Rules, ScopeMode, Target,
};

use keyflight_protocol::scope::record_scope;

use crate::input::parse_header;

/// Flags of `keyflight fingerprint`.
#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// The request method.
    #[arg(long)]
    method: String,
    /// Path and query as sent (`/payments?x=1`).
    #[arg(long)]
    path: String,
    /// The request's authority (`Host`), as sent.
    #[arg(long, default_value = "")]
    authority: String,
    /// The request's scheme (`http`, `https`): decides which port is the default.
    #[arg(long)]
    scheme: Option<String>,
    /// The request's `content-type` (the same as `--header 'content-type: …'`).
    #[arg(long)]
    content_type: Option<String>,
    /// File holding the request body.
    #[arg(long, conflicts_with = "body")]
    body_file: Option<PathBuf>,
    /// The request body, inline.
    #[arg(long)]
    body: Option<String>,
    /// A request header, `name: value` (repeatable; repeats count as the filter counts them).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A header that enters the fingerprint (repeatable; default: if-match, x-approval-digest).
    #[arg(long = "fingerprint-header")]
    fingerprint_headers: Vec<String>,
    /// The key header's name (the plugin's `key_header`).
    #[arg(long, default_value = "idempotency-key")]
    key_header: String,
    #[command(flatten)]
    scope: ScopeArgs,
}

/// Inputs of the scope digest (needed once `--key` is given).
#[derive(Debug, Args)]
struct ScopeArgs {
    /// The `Idempotency-Key` value as sent; prints the scope digest too.
    #[arg(long)]
    key: Option<String>,
    /// Where the principal was read, as the plugin configures it:
    /// `header:NAME`, `property:SEGMENT.SEGMENT`, `jwt_claim:METADATA_KEY:CLAIM.PATH`.
    #[arg(long, conflicts_with = "anonymous")]
    principal_source: Option<String>,
    /// The principal's value; for a `header:` source it is otherwise read
    /// from the `--header`s, as the filter does.
    #[arg(long, conflicts_with = "anonymous")]
    principal: Option<String>,
    /// With `identity.delegation: subject_and_actor`, where the actor was read (the
    /// principal source then names the subject): the scope is the delegated principal's.
    #[arg(long, requires = "principal_source", conflicts_with = "anonymous")]
    actor_source: Option<String>,
    /// The actor's value; for a `header:` source it is otherwise read from the `--header`s.
    #[arg(long, requires = "actor_source")]
    actor: Option<String>,
    /// The policy's shared anonymous scope (`anonymous: shared`).
    #[arg(long)]
    anonymous: bool,
    /// The policy's scope mode.
    #[arg(long, value_enum, default_value_t = ScopeModeArg::Route)]
    scope_mode: ScopeModeArg,
    /// The SPIFFE id of the proxy that claimed (a store under `--trust-xfcc`): its record
    /// is found under the record scope, in that workload's namespace.
    #[arg(long)]
    workload: Option<String>,
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

/// What the description resolves to.
struct Described {
    head: RequestHead,
    body: Vec<u8>,
    principal: Option<(PrincipalSource, String)>,
    /// The actor of a delegated principal.
    actor: Option<(PrincipalSource, String)>,
    mode: ScopeMode,
    workload: Option<String>,
}

/// Prints the explanation (and scope) of the described request.
pub fn run(args: FingerprintArgs) -> Result<(), FingerprintError> {
    let described = describe(&args)?;
    fn as_party((source, name): &(PrincipalSource, String)) -> Party<'_> {
        Party { source, name }
    }
    let principal = match (&described.principal, &described.actor) {
        (Some(subject), Some(actor)) => Principal::Delegated {
            subject: as_party(subject),
            actor: as_party(actor),
        },
        (Some((source, name)), None) => Principal::Named { source, name },
        (None, _) => Principal::AnonymousShared,
    };
    let identified = described
        .head
        .identify(principal, described.mode, &described.body);
    print!("{}", render(&described, &identified));
    Ok(())
}

/// The request as the filter would see it: its header list, then its head.
fn describe(args: &FingerprintArgs) -> Result<Described, FingerprintError> {
    let input = FingerprintError::Input;
    let body = match (&args.body_file, &args.body) {
        (Some(path), _) => std::fs::read(path)
            .map_err(|e| input(format!("cannot read {}: {e}", path.display())))?,
        (None, Some(text)) => text.clone().into_bytes(),
        (None, None) => Vec::new(),
    };
    let key_header = args.key_header.trim().to_ascii_lowercase();
    let mut headers: Vec<(String, Vec<u8>)> = vec![
        (":method".into(), args.method.clone().into_bytes()),
        (":path".into(), args.path.clone().into_bytes()),
        (":authority".into(), args.authority.clone().into_bytes()),
    ];
    if let Some(scheme) = &args.scheme {
        headers.push((":scheme".into(), scheme.clone().into_bytes()));
    }
    for text in &args.headers {
        // The key may come as a header here (as it arrived): no header name is refused.
        let (name, value) = parse_header(text, "").map_err(|e| input(e.to_string()))?;
        headers.push((name.to_ascii_lowercase(), value.into_bytes()));
    }
    if let Some(content_type) = &args.content_type {
        headers.push(("content-type".into(), content_type.clone().into_bytes()));
    }
    if let Some(key) = &args.scope.key {
        headers.push((key_header.clone(), key.clone().into_bytes()));
    }
    let fingerprint_headers: Vec<String> = if args.fingerprint_headers.is_empty() {
        DEFAULT_FINGERPRINT_HEADERS.map(str::to_owned).to_vec()
    } else {
        args.fingerprint_headers
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .collect()
    };
    let target = Target::from_headers(&headers)
        .ok_or_else(|| input("--method, --path and --authority must be UTF-8".into()))?;
    let rules = Rules {
        key_header: &key_header,
        fingerprint_headers: &fingerprint_headers,
    };
    let head = RequestHead::read(target, &headers, &rules)
        .map_err(|e| input(format!("idempotency_key_invalid: {e}")))?;
    let (principal, actor) = match (&head.key, args.scope.anonymous) {
        (None, _) | (Some(_), true) => (None, None),
        (Some(_), false) => {
            let Some(source) = &args.scope.principal_source else {
                return Err(input(
                    "--key needs --principal-source SOURCE (or --anonymous)".into(),
                ));
            };
            let subject = party(
                "--principal",
                source,
                args.scope.principal.as_deref(),
                &headers,
            )?;
            let actor = match &args.scope.actor_source {
                Some(source) => Some(party(
                    "--actor",
                    source,
                    args.scope.actor.as_deref(),
                    &headers,
                )?),
                None => None,
            };
            (Some(subject), actor)
        }
    };
    Ok(Described {
        head,
        body,
        principal,
        actor,
        mode: match args.scope.scope_mode {
            ScopeModeArg::Route => ScopeMode::Route,
            ScopeModeArg::Service => ScopeMode::Service,
        },
        workload: args.scope.workload.clone(),
    })
}

/// A name for the scope (`flag` is `--principal` or `--actor`), from its source's
/// description and its value, read as the filter reads it.
fn party(
    flag: &str,
    description: &str,
    value: Option<&str>,
    headers: &[(String, Vec<u8>)],
) -> Result<(PrincipalSource, String), FingerprintError> {
    let input = FingerprintError::Input;
    let source = PrincipalSource::from_description(description)
        .map_err(|e| input(format!("{flag}-source: {e}")))?;
    let name = match (value, &source) {
        (Some(value), _) => name_from_bytes(&source, value.as_bytes()),
        (None, PrincipalSource::Header(name)) => name_from_headers(&source, name, headers),
        (None, _) => {
            return Err(input(format!(
                "{flag} VALUE is needed for {}",
                source.describe()
            )));
        }
    }
    .map_err(|e| input(format!("principal_ambiguous: {e}")))?
    .ok_or_else(|| {
        input(format!(
            "principal_required: {} is absent or empty",
            source.describe()
        ))
    })?;
    Ok((source, name))
}

/// The explanation as aligned `label: value` lines.
fn render(described: &Described, identified: &Identified) -> String {
    let e: &Explanation = &identified.explanation;
    let mut out = String::new();
    let _ = writeln!(out, "{:<18}{}", "method:", e.method);
    let _ = writeln!(
        out,
        "{:<18}{}",
        "authority:",
        described.head.target.authority.normalized()
    );
    let _ = writeln!(out, "{:<18}{}", "path:", e.normalized_path);
    if e.sorted_query.is_empty() {
        let _ = writeln!(out, "{:<18}(none)", "query:");
    }
    for (i, (name, value)) in e.sorted_query.iter().enumerate() {
        let label = if i == 0 { "query:" } else { "" };
        let _ = writeln!(out, "{label:<18}{name}={value}");
    }
    let _ = writeln!(out, "{:<18}{}", "media type:", e.media_type);
    match &e.body_form {
        BodyForm::CanonicalJson(text) => {
            let _ = writeln!(out, "{:<18}canonical JSON (RFC 8785)", "body form:");
            let _ = writeln!(out, "{:<18}{text}", "canonical body:");
        }
        BodyForm::Raw(reason) => {
            let why = match reason {
                RawReason::NotJsonContentType => "the content type is not JSON",
                RawReason::NotUtf8Charset => {
                    "the JSON content type names a charset other than UTF-8"
                }
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
    if let Some(scope) = identified.scope {
        let who = match (&described.principal, &described.actor) {
            (Some((source, name)), Some((actor_source, actor))) => format!(
                "{name} (from {}) acted for by {actor} (from {})",
                source.describe(),
                actor_source.describe()
            ),
            (Some((source, name)), None) => format!("{name} (from {})", source.describe()),
            (None, _) => "anonymous, shared".to_owned(),
        };
        let _ = writeln!(out, "{:<18}{who}", "principal:");
        let _ = writeln!(out, "{:<18}{scope}", "scope:");
        let record = match &described.workload {
            Some(workload) => {
                let record = record_scope(workload, &scope);
                let _ = writeln!(out, "{:<18}{record} (of {workload})", "record scope:");
                record
            }
            None => scope,
        };
        let _ = writeln!(
            out,
            "{:<18}lease-store records show {}",
            "find it with:",
            record.to_hex()
        );
    }
    out
}
