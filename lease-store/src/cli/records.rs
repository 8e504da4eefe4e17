//! `lease-store records …`: the operator's client for the admin API (L6).
//!
//! Talks to a running store over HTTP with the admin token, so operators need
//! no database credentials and every action goes through the same checks and
//! logs as the API. Output is a readable table or text by default and the
//! API's JSON with `--json`; a problem+json answer becomes one error line
//! with its status, code and detail.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use keyflight_protocol::Digest;
use keyflight_protocol::problem::Problem;
use keyflight_protocol::wire::{
    ACK_REPLAY_RISK_HEADER, RecordDetail, RecordList, RecordState, RecordSummary, ResolveAs,
    ResolveRequest, StoredResponse,
};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;

use crate::settings::{AdminTokenArgs, ConfigError};

/// Flags of `lease-store records`.
#[derive(Debug, Args)]
pub struct RecordsArgs {
    /// Base URL of a running lease-store's admin listener (`serve --admin-listen`).
    #[arg(
        long,
        env = "KEYFLIGHT_ADMIN_URL",
        default_value = "http://127.0.0.1:9480"
    )]
    url: String,
    #[command(flatten)]
    admin: AdminTokenArgs,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: RecordsCommand,
}

/// The record operations.
#[derive(Debug, Subcommand)]
enum RecordsCommand {
    /// List records, newest first.
    List {
        /// Only records in this state.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
        /// At most this many records (1–1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one record with its recorded response.
    Show {
        /// The scope digest (64 lowercase hex).
        scope: String,
    },
    /// Settle an `unknown` record.
    Resolve {
        /// The scope digest (64 lowercase hex).
        scope: String,
        /// What really happened.
        #[arg(long = "as", value_enum)]
        resolve_as: ResolveArg,
        /// Status of the response retries should get (with `--as completed`;
        /// without it the record is completed but not replayable).
        #[arg(long)]
        status: Option<u16>,
        /// File holding that response's body.
        #[arg(long, requires = "status")]
        body_file: Option<PathBuf>,
        /// A header of that response, `name: value` (repeatable).
        #[arg(long = "header", requires = "status")]
        headers: Vec<String>,
        /// Why (a ticket, an incident): kept in the store's audit with your name.
        #[arg(long)]
        reason: String,
    },
    /// Erase a record: a retry with its key will run the operation again.
    Erase {
        /// The scope digest (64 lowercase hex).
        scope: String,
        /// Confirms you accept that the operation may run twice.
        #[arg(long)]
        i_understand_replay_risk: bool,
        /// Why (a ticket, an incident): kept in the store's audit with your name.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StateArg {
    Pending,
    Completed,
    Failed,
    Unknown,
}

impl From<StateArg> for RecordState {
    fn from(state: StateArg) -> Self {
        match state {
            StateArg::Pending => RecordState::Pending,
            StateArg::Completed => RecordState::Completed,
            StateArg::Failed => RecordState::Failed,
            StateArg::Unknown => RecordState::Unknown,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ResolveArg {
    Completed,
    Failed,
}

/// Why a `records` command failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// No admin token given.
    #[error("no admin token: set KEYFLIGHT_ADMIN_TOKEN or KEYFLIGHT_ADMIN_TOKEN_FILE")]
    MissingToken,
    /// The token settings are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Bad command-line input.
    #[error("{0}")]
    Input(String),
    /// The store could not be reached or answered garbage.
    #[error("request to the lease-store failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The store answered with a problem.
    #[error("{status} {code}: {detail}", code = .problem.code.as_str(), detail = .problem.detail)]
    Problem {
        /// HTTP status.
        status: StatusCode,
        /// The problem details.
        problem: Problem,
    },
    /// The store answered an error without problem details.
    #[error("unexpected answer {status}: {body}")]
    Unexpected {
        /// HTTP status.
        status: StatusCode,
        /// The body, as text.
        body: String,
    },
}

/// Runs a `records` subcommand and prints its result.
pub async fn run(args: RecordsArgs) -> Result<(), RecordsError> {
    let token = args.admin.resolve()?.ok_or(RecordsError::MissingToken)?;
    let client = Client {
        http: reqwest::Client::new(),
        base: args.url.trim_end_matches('/').to_owned(),
        token: token.expose().to_owned(),
    };
    match args.command {
        RecordsCommand::List { state, limit } => {
            let mut path = format!("/v1/records?limit={limit}");
            if let Some(state) = state {
                path.push_str("&state=");
                path.push_str(RecordState::from(state).as_str());
            }
            let list: RecordList = client.call(Method::GET, &path, |r| r).await?;
            if args.json {
                print_json(&list);
            } else {
                print!("{}", table(&list.records));
            }
        }
        RecordsCommand::Show { scope } => {
            let scope = parse_scope(&scope)?;
            let detail: RecordDetail = client
                .call(
                    Method::GET,
                    &format!("/v1/records/{}", scope.to_hex()),
                    |r| r,
                )
                .await?;
            if args.json {
                print_json(&detail);
            } else {
                print!("{}", describe(&detail));
            }
        }
        RecordsCommand::Resolve {
            scope,
            resolve_as,
            status,
            body_file,
            headers,
            reason,
        } => {
            let scope = parse_scope(&scope)?;
            let request = resolve_request(resolve_as, status, body_file, &headers, reason)?;
            client
                .call_empty(
                    Method::POST,
                    &format!("/v1/records/{}/resolve", scope.to_hex()),
                    |r| r.json(&request),
                )
                .await?;
            println!("resolved {} as {:?}", scope.to_hex(), request.resolve_as);
        }
        RecordsCommand::Erase {
            scope,
            i_understand_replay_risk,
            reason,
        } => {
            if !i_understand_replay_risk {
                return Err(RecordsError::Input(
                    "erasing a record lets a retry run the operation again; \
                     pass --i-understand-replay-risk to confirm"
                        .into(),
                ));
            }
            let scope = parse_scope(&scope)?;
            client
                .call_empty(
                    Method::DELETE,
                    &format!(
                        "/v1/records/{}?reason={}",
                        scope.to_hex(),
                        percent_encoded(&reason)
                    ),
                    |r| r.header(ACK_REPLAY_RISK_HEADER, "true"),
                )
                .await?;
            println!("erased {}", scope.to_hex());
        }
    }
    Ok(())
}

/// An admin-API client: base URL plus bearer token.
struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn send(
        &self,
        method: Method,
        path: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<reqwest::Response, RecordsError> {
        let request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        let response = build(request).send().await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.bytes().await?;
        Err(match serde_json::from_slice::<Problem>(&body) {
            Ok(problem) => RecordsError::Problem { status, problem },
            Err(_) => RecordsError::Unexpected {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            },
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<T, RecordsError> {
        Ok(self.send(method, path, build).await?.json().await?)
    }

    async fn call_empty(
        &self,
        method: Method,
        path: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<(), RecordsError> {
        self.send(method, path, build).await.map(drop)
    }
}

fn parse_scope(text: &str) -> Result<Digest, RecordsError> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    Digest::from_hex(hex).map_err(|e| RecordsError::Input(format!("scope `{text}`: {e}")))
}

fn resolve_request(
    resolve_as: ResolveArg,
    status: Option<u16>,
    body_file: Option<PathBuf>,
    headers: &[String],
    reason: String,
) -> Result<ResolveRequest, RecordsError> {
    let resolve_as = match resolve_as {
        ResolveArg::Completed => ResolveAs::Completed,
        ResolveArg::Failed => ResolveAs::Failed,
    };
    let response = match status {
        None => None,
        Some(_) if resolve_as == ResolveAs::Failed => {
            return Err(RecordsError::Input(
                "--status/--body-file/--header only apply to --as completed".into(),
            ));
        }
        Some(status) => {
            let body = match body_file {
                Some(path) => std::fs::read(&path).map_err(|e| {
                    RecordsError::Input(format!("cannot read {}: {e}", path.display()))
                })?,
                None => Vec::new(),
            };
            let headers = headers
                .iter()
                .map(|h| parse_header(h).map_err(RecordsError::Input))
                .collect::<Result<Vec<_>, _>>()?;
            Some(StoredResponse::new(status, headers, &body))
        }
    };
    Ok(ResolveRequest {
        resolve_as,
        response,
        reason,
    })
}

/// `text` as a query value: every byte but RFC 3986's unreserved ones percent-encoded.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Parses `name: value` into a lowercase name and a trimmed value.
fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("header `{text}` is not `name: value`"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("header `{text}` has no name"));
    }
    Ok((name.to_ascii_lowercase(), value.trim().to_owned()))
}

fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("cannot render JSON: {e}"),
    }
}

/// A fixed-width table of records.
fn table(records: &[RecordSummary]) -> String {
    if records.is_empty() {
        return "no records\n".to_owned();
    }
    let mut out = format!(
        "{:<64}  {:<9}  {:>6}  {:>10}  {:<25}  {}\n",
        "SCOPE", "STATE", "STATUS", "FENCE", "CREATED", "EXPIRES"
    );
    for r in records {
        let status = r
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<64}  {:<9}  {:>6}  {:>10}  {:<25}  {}\n",
            r.scope.to_hex(),
            r.state.as_str(),
            status,
            r.fence,
            r.created_at,
            r.expires_at
        ));
    }
    out
}

/// A record as `field: value` lines, with its response.
fn describe(detail: &RecordDetail) -> String {
    let r = &detail.summary;
    let mut out = format!(
        "scope:            {}\nstate:            {}\nfingerprint:      {}\nfence:            {}\n\
         created_at:       {}\nlease_expires_at: {}\nexpires_at:       {}\nreplayable:       {}\n",
        r.scope.to_hex(),
        r.state.as_str(),
        r.fingerprint,
        r.fence,
        r.created_at,
        r.lease_expires_at.as_deref().unwrap_or("-"),
        r.expires_at,
        r.replayable,
    );
    match &detail.response {
        None => out.push_str("response:         -\n"),
        Some(response) => {
            out.push_str(&format!("response status:  {}\n", response.status));
            for (name, value) in &response.headers {
                out.push_str(&format!("response header:  {name}: {value}\n"));
            }
            match std::str::from_utf8(&response.body) {
                Ok(text) => out.push_str(&format!("response body:\n{text}\n")),
                Err(_) => out.push_str(&format!(
                    "response body:    <{} bytes, not UTF-8; see --json>\n",
                    response.body.len()
                )),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_percent_encoded() {
        assert_eq!(
            percent_encoded("INC-42 done/ok é"),
            "INC-42%20done%2Fok%20%C3%A9"
        );
    }

    #[test]
    fn headers_parse_as_lowercase_name_and_trimmed_value() {
        assert_eq!(
            parse_header("Content-Type:  application/json "),
            Ok(("content-type".into(), "application/json".into()))
        );
        assert!(parse_header("no-colon").is_err());
        assert!(parse_header(": value").is_err());
    }

    #[test]
    fn scopes_accept_the_printed_form() {
        let hex = "ab".repeat(32);
        assert!(parse_scope(&hex).is_ok());
        assert!(parse_scope(&format!("sha256:{hex}")).is_ok());
        assert!(parse_scope("ABCD").is_err());
    }

    #[test]
    fn failed_resolutions_carry_no_response() {
        assert!(resolve_request(ResolveArg::Failed, Some(200), None, &[], "r".into()).is_err());
        let request = resolve_request(
            ResolveArg::Completed,
            Some(201),
            None,
            &["etag: v1".into()],
            "r".into(),
        )
        .expect("valid");
        let response = request.response.expect("has a response");
        assert_eq!(response.status, 201);
        assert_eq!(response.headers, vec![("etag".into(), "v1".into())]);
    }
}
