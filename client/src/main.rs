//! `keyflight fingerprint | recipe-diff | openapi-overlay` run the tools of
//! `keyflight_client` about the filter's configuration. `keyflight send METHOD URL`: one
//! request with an `Idempotency-Key`,
//! retried with the same key while the service says "later", its answer
//! printed as one JSON document and mapped to an exit code
//! (`keyflight_client::outcome` lists them).
//!
//! Without `--key` (alias `--operation-id`) the command generates a UUIDv4
//! key (122 bits from the operating system's CSPRNG) before sending, and the
//! report names it either way, so an operation whose answer was lost can be
//! retried as the same operation.

use std::io::Read as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};
use keyflight_client::input::{self, DataSource, InputError};
use keyflight_client::outcome::Outcome;
use keyflight_client::report::{Answer, Report};
use keyflight_client::retry::{self, Next, RetryPolicy};
use keyflight_client::{fingerprint, openapi_overlay, recipe_diff};

#[derive(Debug, Parser)]
#[command(
    name = "keyflight",
    version,
    about = "Send requests with an Idempotency-Key and retry them safely"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send one request; print a JSON report; exit 0 success, 1 failed, 2 invalid
    /// input, 3 not authorized, 4 conflict, 5 unavailable, 6 unknown.
    Send(SendArgs),
    /// Print a request's canonical form and fingerprint (and optionally its scope).
    Fingerprint(Box<fingerprint::FingerprintArgs>),
    /// Print what a plugin configuration change does to identities; fail when it is unsafe.
    RecipeDiff(recipe_diff::RecipeDiffArgs),
    /// Write an OpenAPI Overlay adding keyflight's header and answers to the guarded operations.
    OpenapiOverlay(openapi_overlay::OpenapiOverlayArgs),
}

#[derive(Debug, Args)]
struct SendArgs {
    /// HTTP method, sent as given (e.g. POST).
    method: String,
    /// Target URL (http://).
    url: String,
    /// Request body: TEXT, @FILE, or @- for standard input. Sent as
    /// `content-type: application/json` unless a --header says otherwise.
    #[arg(long, short = 'd')]
    data: Option<String>,
    /// Extra header, `name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The idempotency key; generated (UUIDv4) when absent.
    #[arg(long, visible_alias = "operation-id", value_name = "KEY")]
    key: Option<String>,
    /// Header that carries the key.
    #[arg(long, default_value = "Idempotency-Key")]
    key_header: String,
    /// Retries of a 503 or 429 that carries Retry-After, with the same key.
    #[arg(long, default_value_t = 5)]
    retries: u32,
    /// The longest Retry-After to wait for, in seconds; a longer one ends the retries.
    #[arg(long, default_value_t = 30)]
    max_retry_wait: u64,
    /// Per-attempt timeout, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = match Cli::parse().command {
        Command::Send(args) => args,
        Command::Fingerprint(args) => return tool(fingerprint::run(*args)),
        Command::RecipeDiff(args) => return tool(recipe_diff::run(args)),
        Command::OpenapiOverlay(args) => return tool(openapi_overlay::run(args)),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("keyflight: cannot start the async runtime: {e}");
            return ExitCode::from(Outcome::Failed.exit_code());
        }
    };
    runtime.block_on(send(args))
}

/// A tool's end: its failure as one line on standard error, and a non-zero exit.
fn tool<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keyflight: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A request ready to send: everything the command line said, checked.
struct Prepared {
    method: reqwest::Method,
    url: reqwest::Url,
    key: String,
    generated: bool,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

fn prepare(args: &SendArgs) -> Result<Prepared, String> {
    let invalid = |e: InputError| e.to_string();
    input::check_method(&args.method).map_err(invalid)?;
    let method = reqwest::Method::from_bytes(args.method.as_bytes())
        .map_err(|e| format!("method {:?}: {e}", args.method))?;
    let url = reqwest::Url::parse(&args.url).map_err(|e| format!("URL {:?}: {e}", args.url))?;
    if url.scheme() != "http" {
        // This build has no TLS stack: a TLS-terminating proxy or sidecar in front does.
        return Err(format!("URL {:?}: only http:// is supported", args.url));
    }
    let mut headers = args
        .headers
        .iter()
        .map(|h| input::parse_header(h, &args.key_header))
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let (key, generated) = match &args.key {
        Some(key) => {
            input::check_key(key).map_err(invalid)?;
            (key.clone(), false)
        }
        None => (uuid::Uuid::new_v4().to_string(), true),
    };
    let body = match input::DataSource::parse(args.data.as_deref()) {
        DataSource::None => None,
        DataSource::Inline(bytes) => Some(bytes),
        DataSource::File(path) => {
            Some(std::fs::read(&path).map_err(|e| format!("--data @{path}: {e}"))?)
        }
        DataSource::Stdin => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| format!("--data @-: {e}"))?;
            Some(bytes)
        }
    };
    if body.is_some() && !input::has_content_type(&headers) {
        headers.push(("content-type".into(), "application/json".into()));
    }
    Ok(Prepared {
        method,
        url,
        key,
        generated,
        headers,
        body,
    })
}

/// One attempt's result.
struct Received {
    status: u16,
    retry_after: Option<Duration>,
    content_type: Option<String>,
    replayed: bool,
    body: Vec<u8>,
}

async fn send(args: SendArgs) -> ExitCode {
    let prepared = match prepare(&args) {
        Ok(prepared) => prepared,
        Err(error) => {
            let key = args.key.clone().unwrap_or_default();
            return finish(&Report {
                operation_id: &key,
                generated: false,
                attempts: 0,
                outcome: Outcome::InvalidInput,
                answer: None,
                error: Some(error),
            });
        }
    };
    let policy = RetryPolicy {
        max_retries: args.retries,
        max_wait: Duration::from_secs(args.max_retry_wait),
    };
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(args.timeout))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(e) => return fail(&prepared, 0, Outcome::Failed, e.to_string()),
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let received = match attempt(&client, &args, &prepared).await {
            Ok(received) => received,
            Err(e) => {
                // Nothing left the machine when the connection was refused:
                // the service is unavailable. After sending, it may have run.
                let outcome = if e.is_connect() {
                    Outcome::Unavailable
                } else {
                    Outcome::Unknown
                };
                return fail(&prepared, attempts, outcome, error_chain(&e));
            }
        };
        match retry::next(received.status, received.retry_after, attempts - 1, &policy) {
            Next::Retry(wait) => {
                eprintln!(
                    "keyflight: HTTP {}; retrying operation {} in {} ms",
                    received.status,
                    prepared.key,
                    wait.as_millis()
                );
                tokio::time::sleep(wait).await;
            }
            Next::Stop => {
                return finish(&Report {
                    operation_id: &prepared.key,
                    generated: prepared.generated,
                    attempts,
                    outcome: Outcome::of_status(received.status),
                    answer: Some(Answer {
                        status: received.status,
                        content_type: received.content_type.as_deref(),
                        replayed: received.replayed,
                        body: &received.body,
                    }),
                    error: None,
                });
            }
        }
    }
}

async fn attempt(
    client: &reqwest::Client,
    args: &SendArgs,
    prepared: &Prepared,
) -> Result<Received, reqwest::Error> {
    let mut request = client
        .request(prepared.method.clone(), prepared.url.clone())
        .header(args.key_header.as_str(), prepared.key.as_str());
    for (name, value) in &prepared.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = &prepared.body {
        request = request.body(body.clone());
    }
    let response = request.send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after =
        header("retry-after").and_then(|value| retry::parse_retry_after(&value, SystemTime::now()));
    let content_type = header("content-type");
    let replayed = header("idempotent-replayed").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let status = response.status().as_u16();
    let body = response.bytes().await?.to_vec();
    Ok(Received {
        status,
        retry_after,
        content_type,
        replayed,
        body,
    })
}

fn fail(prepared: &Prepared, attempts: u32, outcome: Outcome, error: String) -> ExitCode {
    finish(&Report {
        operation_id: &prepared.key,
        generated: prepared.generated,
        attempts,
        outcome,
        answer: None,
        error: Some(error),
    })
}

/// Prints the report and turns its outcome into the exit code.
fn finish(report: &Report<'_>) -> ExitCode {
    let text = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
    println!("{text}");
    ExitCode::from(report.outcome.exit_code())
}

/// An error and its causes on one line ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
