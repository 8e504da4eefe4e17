//! Differential check of the target rules (K3, K4) against real parsers on
//! this machine: Node's WHATWG `URL`/`URLSearchParams` and Python's
//! `urllib.parse` (`tests/differential/readings.{js,py}`).
//!
//! The claim under test: two request targets an upstream could read
//! differently never share a fingerprint, nor a route-scope scope. A parser's
//! *reading* of a target is what an application behind it can tell apart:
//! the path's segments, percent-decoded, and the query's values grouped by
//! name, each name's values in order. So for every group of targets keyflight
//! calls one (same fingerprint and same scope), each parser must read every
//! member alike. (The converse is not claimed: keyflight keeps apart targets
//! a parser may merge, e.g. `/a/../b` and `/b`, or `+` and `%20`.)
//!
//! The targets are generated, deterministically, as random targets from an
//! alphabet of troublesome pieces and as respellings of them (escape case,
//! encoded or decoded unreserved characters, swapped parameters, `a` vs `a=`),
//! so that most groups have several members. Node and Python are prerequisites
//! of the build (`make prereqs`); without them this test fails, loudly.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use keyflight_protocol::fingerprint::explain;
use keyflight_protocol::key::parse_key;
use keyflight_protocol::media_type::MediaType;
use keyflight_protocol::{
    Digest, FingerprintInput, Principal, PrincipalSource, ScopeInput, ScopeMode, Target, scope,
};

const SEGMENTS: &[&str] = &[
    "a", "b", "A", ".", "..", "", "%2E", "%2e%2E", ".%2e", "%2F", "%2f", "%41", "~", "%7E", "%7e",
    "%25", "%", "%zz", "%%30", "%250", "+", "%20", "%2B", ";", "%3B", "a;b", "é", "%C3%A9",
    "%c3%a9",
];
const NAMES: &[&str] = &[
    "a", "A", "%61", "%41", "b", "a+b", "a%20b", "A+B", "to", "", "%", "%25", "x;y", "%3D", "c%3Db",
];
const VALUES: &[&str] = &[
    "1", "2", "", "+", "%20", "%2B", "%26", "x=y", "~", "%7E", "%7e", "%", "%zz", "ann", "bob",
];

/// A small deterministic generator (xorshift64*), so every run checks the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("small")
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// A target: a path of segments and a query of `name[=value]` pairs.
#[derive(Clone)]
struct Spelled {
    segments: Vec<String>,
    pairs: Vec<(String, Option<String>)>,
    question_mark: bool,
}

impl Spelled {
    fn random(rng: &mut Rng) -> Spelled {
        let segments = (0..1 + rng.below(4))
            .map(|_| rng.pick(SEGMENTS).to_owned())
            .collect();
        let pairs: Vec<(String, Option<String>)> = (0..rng.below(5))
            .map(|_| {
                let name = rng.pick(NAMES).to_owned();
                let value = (rng.below(4) > 0).then(|| rng.pick(VALUES).to_owned());
                (name, value)
            })
            .collect();
        Spelled {
            question_mark: !pairs.is_empty() || rng.below(3) == 0,
            segments,
            pairs,
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            out.push('/');
            out.push_str(segment);
        }
        if self.question_mark {
            out.push('?');
            let pairs: Vec<String> = self
                .pairs
                .iter()
                .map(|(name, value)| match value {
                    Some(value) => format!("{name}={value}"),
                    None => name.clone(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        out
    }

    /// One random respelling; most keep the normal form, some do not.
    fn respell(&self, rng: &mut Rng) -> Spelled {
        let mut out = self.clone();
        match rng.below(5) {
            0 => {
                for segment in &mut out.segments {
                    *segment = flip_hex_case(segment);
                }
            }
            1 => {
                let i = rng.below(out.segments.len());
                out.segments[i] = encode_unreserved(&out.segments[i], rng);
            }
            2 if out.pairs.len() >= 2 => {
                let i = rng.below(out.pairs.len() - 1);
                out.pairs.swap(i, i + 1);
            }
            3 => {
                for (_, value) in &mut out.pairs {
                    if value.as_deref() == Some("") {
                        *value = None;
                    } else if value.is_none() {
                        *value = Some(String::new());
                    }
                }
            }
            _ => {
                for (name, value) in &mut out.pairs {
                    *name = encode_unreserved(name, rng);
                    if let Some(value) = value {
                        *value = flip_hex_case(value);
                    }
                }
            }
        }
        out
    }
}

fn flip_hex_case(text: &str) -> String {
    let mut out = String::new();
    let mut after_percent = 0;
    for c in text.chars() {
        if after_percent > 0 && c.is_ascii_hexdigit() {
            out.push(if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            });
            after_percent -= 1;
        } else {
            after_percent = if c == '%' { 2 } else { 0 };
            out.push(c);
        }
    }
    out
}

fn encode_unreserved(text: &str, rng: &mut Rng) -> String {
    text.chars()
        .map(|c| {
            if (c.is_ascii_alphanumeric() || "-._~".contains(c)) && rng.below(2) == 0 {
                format!("%{:02X}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// What keyflight makes of a target: its fingerprint and route scope.
fn identity(target: &str) -> (Digest, Digest) {
    let target = Target::new("POST", target, "h", Some("https"));
    let fingerprint = explain(&FingerprintInput {
        target: &target,
        media_type: &MediaType::Absent,
        body: b"",
        selected_headers: &[],
    })
    .fingerprint;
    let source = PrincipalSource::Header("x-user".into());
    let key = parse_key(&[b"k"]).expect("valid").expect("present");
    let scope = scope(&ScopeInput {
        principal: Principal::Named {
            source: &source,
            name: "alice",
        },
        target: &target,
        key: &key,
        mode: ScopeMode::Route,
    });
    (fingerprint, scope)
}

/// Runs a reading script over every target; one reading per target.
fn readings(program: &str, script: &str, targets: &[String]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/differential")
        .join(script);
    let mut child = Command::new(program)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "run {program} {}: {e} (a build prerequisite)",
                script.display()
            )
        });
    let input = serde_json::to_vec(targets).expect("targets serialize");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write targets");
    let output = child.wait_with_output().expect("reading script output");
    assert!(
        output.status.success(),
        "{program} {} failed",
        script.display()
    );
    let readings: Vec<String> = serde_json::from_slice(&output.stdout).expect("a JSON array");
    assert_eq!(readings.len(), targets.len());
    readings
}

#[test]
fn targets_a_parser_reads_differently_never_share_an_identity() {
    let mut rng = Rng(0x6b65_7966_6c69_6768);
    let mut targets: Vec<String> = Vec::new();
    for _ in 0..1500 {
        let base = Spelled::random(&mut rng);
        targets.push(base.text());
        let mut spelled = base;
        for _ in 0..4 {
            spelled = spelled.respell(&mut rng);
            targets.push(spelled.text());
        }
    }
    // The issue's own cases are always in.
    for fixed in [
        "/p?to=ann&to=bob",
        "/p?to=bob&to=ann",
        "/p?a+b=1&a%20b=2",
        "/p?a%20b=2&a+b=1",
    ] {
        targets.push(fixed.to_owned());
    }
    targets.sort();
    targets.dedup();

    let mut groups: BTreeMap<(Digest, Digest), Vec<usize>> = BTreeMap::new();
    for (i, target) in targets.iter().enumerate() {
        groups.entry(identity(target)).or_default().push(i);
    }
    let shared = groups.values().filter(|members| members.len() > 1).count();
    assert!(
        shared >= 300,
        "only {shared} groups with respellings: the check would prove little"
    );

    for (program, script) in [("node", "readings.js"), ("python3", "readings.py")] {
        let read = readings(program, script, &targets);
        for members in groups.values() {
            let first = members[0];
            for &other in &members[1..] {
                assert_eq!(
                    read[first], read[other],
                    "{program} reads {:?} and {:?} differently, but they share a fingerprint and scope",
                    targets[first], targets[other]
                );
            }
        }
    }
}
