//! K5: `keyflight fingerprint` computes the filter's digests bit for bit, so an
//! operator's "why was this a 409?" is answered by the code that made the decision. The
//! requests here carry what used to tell the two apart: a repeated `if-match`, an
//! upper-case authority with its default port, a padded principal, the content type given
//! as a header, a quoted key, reordered query parameters.
//!
//! Twice: the filter's own state machine (natively) and the CLI on the same header lists,
//! and then real Envoy, whose recorded scope and fingerprint the CLI must reproduce from
//! the request as it was sent.

use std::rc::Rc;

use keyflight_e2e::{Stack, StackOptions, raw_http};
use keyflight_filter::machine::{Action, Event, Machine};
use keyflight_filter::store_call::StoreCall;
use keyflight_filter::{identity, parse_plugin_config};
use keyflight_protocol::Digest;

/// A request as sent: method, target, headers (repeats and padding kept), body.
struct Sent {
    method: &'static str,
    target: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    body: &'static str,
}

fn requests() -> Vec<Sent> {
    vec![
        Sent {
            method: "POST",
            target: "/payments?b=2&a=1&a=0",
            headers: vec![
                ("host", "PAYMENTS.Example:80"),
                ("x-user", "  alice "),
                ("Content-Type", "Application/JSON; charset=\"UTF-8\""),
                ("if-match", "\"v1\""),
                ("If-Match", " \"v2\" "),
                ("idempotency-key", "\"order-7\""),
            ],
            body: r#"{ "amount": 1.50e2, "currency": "EUR" }"#,
        },
        Sent {
            method: "POST",
            target: "/payments/%63apture",
            headers: vec![
                ("host", "payments.example."),
                ("x-user", "bob"),
                ("content-type", "multipart/form-data; Boundary=\"xyz\""),
                ("x-approval-digest", "sha-256=:abc:"),
                ("idempotency-key", "k-2"),
            ],
            body: "--xyz--",
        },
    ]
}

/// The demo plugin configuration, as the filter parses it.
fn config() -> Rc<keyflight_filter::Config> {
    let plugin = StackOptions::default().plugin;
    Rc::new(parse_plugin_config(plugin.to_string().as_bytes()).expect("the demo config"))
}

/// What the filter's machine claims for `sent` arriving over plain HTTP.
fn machine_digests(sent: &Sent) -> (Digest, Digest) {
    let config = config();
    let mut headers: Vec<(String, Vec<u8>)> = vec![
        (":method".into(), sent.method.into()),
        (":path".into(), sent.target.into()),
        (":scheme".into(), "http".into()),
    ];
    for (name, value) in &sent.headers {
        let name = if name.eq_ignore_ascii_case("host") {
            ":authority".to_owned()
        } else {
            name.to_ascii_lowercase()
        };
        // Envoy's HTTP/1 codec trims a value's surrounding whitespace.
        headers.push((name, value.trim().as_bytes().to_vec()));
    }
    let principal = identity::resolve(&config.identity, &headers, |_| None);
    let mut machine = Machine::new(Rc::clone(&config));
    machine.on(Event::RequestHeaders {
        headers,
        principal,
        previous_principal: None,
        end_of_stream: false,
    });
    machine.on(Event::RequestBodyChunk {
        buffered_bytes: sent.body.len(),
        end_of_stream: true,
    });
    let out = machine.on(Event::RequestBodyComplete {
        body: sent.body.as_bytes().to_vec(),
    });
    let slot_read = out
        .iter()
        .any(|a| matches!(a, Action::ReadEdgeCache { .. }));
    let out = if slot_read {
        machine.on(Event::EdgeCacheRead {
            slot: None,
            now_ms: 0,
            epoch: Some(0),
        })
    } else {
        out
    };
    out.iter()
        .find_map(|a| match a {
            Action::CallStore {
                call: StoreCall::Claim { scope, request },
                ..
            } => Some((*scope, request.fingerprint)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the machine made no claim: {out:?}"))
}

/// What `keyflight fingerprint` prints for `sent` arriving over plain HTTP.
fn cli_digests(sent: &Sent) -> (String, String) {
    let mut command = std::process::Command::new(keyflight_testkit::binaries::client());
    command.args([
        "fingerprint",
        "--method",
        sent.method,
        "--path",
        sent.target,
        "--scheme",
        "http",
        "--principal-source",
        "header:x-user",
    ]);
    // `--body=…`: a body may start with `--`.
    command.arg(format!("--body={}", sent.body));
    for (name, value) in &sent.headers {
        if name.eq_ignore_ascii_case("host") {
            command.args(["--authority", value]);
        } else {
            command.args(["--header", &format!("{name}: {value}")]);
        }
    }
    let output = command.output().expect("run keyflight fingerprint");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |label: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(label))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no `{label}` line: {text}"))
    };
    (line("scope:"), line("fingerprint:"))
}

#[test]
fn the_machine_and_the_cli_compute_the_same_digests() {
    for sent in requests() {
        let (scope, fingerprint) = machine_digests(&sent);
        assert_eq!(
            cli_digests(&sent),
            (scope.to_string(), fingerprint.to_string()),
            "{} {}",
            sent.method,
            sent.target
        );
    }
}

#[tokio::test]
async fn the_cli_reproduces_what_envoy_recorded() {
    let stack = Stack::start(StackOptions::default()).await;
    for sent in requests() {
        // Written byte for byte: the headers exactly as listed, padding and repeats kept.
        let reply = raw_http::send(
            stack.listener_port(0),
            sent.method,
            sent.target,
            &sent.headers,
            sent.body.as_bytes(),
        )
        .await;
        assert!(reply.status < 500, "{reply}");
        let (scope, fingerprint) = cli_digests(&sent);
        let shown = stack
            .records_cli(&["show", scope.trim_start_matches("sha256:")])
            .await;
        assert!(
            shown.contains(&format!("fingerprint:      {fingerprint}\n")),
            "the record Envoy wrote under the CLI's scope has the CLI's fingerprint:\n{shown}"
        );
    }
}
