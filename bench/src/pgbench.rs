//! The Postgres baseline: `pgbench` running the lease-store's own claim and finalize SQL.
//!
//! The statements are the lease-store's own, from `keyflight-store-core` ([`CLAIM_SQL`],
//! [`FINALIZE_SQL`]), so a change to the store's SQL changes the baseline with it: there is no copy to drift.
//! pgbench cannot bind bytea or uuid values from its integer variables, so each `$n`
//! parameter is replaced by an expression of pgbench variables that yields the same type
//! and shape the store binds: 32-byte SHA-256 digests for scope and fingerprint, a uuid
//! claim id, the same lease, retention, status, headers and body. The per-cycle `:scope`
//! is random over 2^63, so every cycle claims a fresh scope, as P1's HTTP cycle does.
//!
//! Its sessions plan them with the store's own planner settings ([`planner_options`],
//! through `PGOPTIONS`), so both sides plan the statements alike on any table.
//!
//! The script runs the claim, then the finalize, each in its own implicit transaction:
//! exactly the two durable commits the store makes per cycle, over the extended protocol
//! with prepared statements (`-M prepared`) as tokio-postgres uses. pgbench's TPS is
//! therefore the claim+finalize pair rate. Latencies come from pgbench's per-transaction
//! log (`-l`) into the same histogram type as the HTTP side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hdrhistogram::Histogram;
use keyflight_store_core::session::planner_options;
use keyflight_store_core::sql::claim::CLAIM_SQL;
use keyflight_store_core::sql::lease::FINALIZE_SQL;

use crate::error::BenchError;
use crate::stats::Recorder;

/// The lease P1 asks for, in milliseconds (the demo policy's `lease_ms`).
pub const LEASE_MS: u64 = 30_000;

/// The retention the store applies to a claim without `retention_s` (its default, 24 h).
pub const RETENTION_MS: u64 = 24 * 3600 * 1000;

/// What the store binds for a claim's `$n`, as pgbench expressions.
const CLAIM_PARAMS: &[(usize, &str)] = &[
    (1, "sha256(int8send(:scope::bigint))"),
    (2, "sha256(int8send(:fingerprint::bigint))"),
    (3, "md5(int8send(:scope::bigint))::uuid"),
    (4, ":lease_ms"),
    (5, ":retention_ms"),
    (6, "true"),
    // The bench's policy is the demo's, `uncertain: hold`: at-most-once.
    (7, "true"),
    // No workload: the bench's filter presents the bearer token.
    (8, "NULL"),
];

/// What the store binds for a finalize's `$n`, as pgbench expressions. The recorded
/// response is [`recorded_body`]; the header list is what the filter keeps of the demo's.
fn finalize_params(body_hex: &str) -> Vec<(usize, String)> {
    vec![
        (1, "sha256(int8send(:scope::bigint))".into()),
        (2, "md5(int8send(:scope::bigint))::uuid".into()),
        (3, ":status".into()),
        (
            4,
            r#"'[["content-type","application/json"]]'::jsonb"#.into(),
        ),
        (5, format!("'\\x{body_hex}'::bytea")),
        (6, "true".into()),
    ]
}

/// The response body both P1 sides record: the size of a demo-upstream answer.
pub fn recorded_body() -> Vec<u8> {
    let padding = "x".repeat(120);
    format!(r#"{{"payment_id":"bench","execution":1,"request":{{"amount":1}},"pad":"{padding}"}}"#)
        .into_bytes()
}

/// Replaces every `$n` in `sql` by its expression; fails when a placeholder has none or an
/// expression was never used (the store's SQL changed shape).
pub fn substitute(sql: &str, params: &[(usize, &str)]) -> Result<String, BenchError> {
    let mut out = String::with_capacity(sql.len() * 2);
    let mut used = vec![false; params.len()];
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let number: usize = digits.parse().map_err(|_| {
            BenchError::Pgbench(format!("a `$` without a parameter number in: {sql}"))
        })?;
        let (index, (_, expression)) = params
            .iter()
            .enumerate()
            .find(|(_, (n, _))| *n == number)
            .ok_or_else(|| {
            BenchError::Pgbench(format!("no pgbench expression for ${number}"))
        })?;
        used[index] = true;
        out.push_str(expression);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    if let Some(index) = used.iter().position(|u| !u) {
        return Err(BenchError::Pgbench(format!(
            "${} is not in the statement any more",
            params[index].0
        )));
    }
    Ok(out)
}

/// The pgbench script: variables, then the store's claim and finalize statements.
pub fn script() -> Result<String, BenchError> {
    let finalize = finalize_params(&recorded_body_hex());
    let finalize: Vec<(usize, &str)> = finalize.iter().map(|(n, e)| (*n, e.as_str())).collect();
    let claim = substitute(CLAIM_SQL, CLAIM_PARAMS)?;
    let finalize = substitute(FINALIZE_SQL, &finalize)?;
    Ok(format!(
        "{}{};\n{};\n",
        variables(9_223_372_036_854_775_806),
        claim.trim(),
        finalize.trim()
    ))
}

/// The script's variables, each line ending in a newline: a random scope base in 1..=`max_scope`
/// and the values every claim and finalize binds.
pub fn variables(max_scope: u64) -> String {
    format!(
        "\\set scope random(1, {max_scope})\n\
         \\set fingerprint 42\n\
         \\set lease_ms {LEASE_MS}\n\
         \\set retention_ms {RETENTION_MS}\n\
         \\set status 201\n"
    )
}

/// [`recorded_body`] as the hex of a `bytea` literal.
pub fn recorded_body_hex() -> String {
    recorded_body().iter().map(|b| format!("{b:02x}")).collect()
}

/// One pgbench run's figures.
#[derive(Debug, Clone)]
pub struct PgbenchRun {
    /// Script runs (claim+finalize pairs) completed.
    pub transactions: u64,
    /// Failed script runs.
    pub failures: u64,
    /// The run's wall time as pgbench measured it (transactions / tps).
    pub elapsed: Duration,
    /// Per-pair latencies from the transaction log, in microseconds.
    pub histogram: Histogram<u64>,
}

/// How to reach the database and where pgbench lives.
#[derive(Debug, Clone)]
pub struct Pgbench {
    /// The `pgbench` binary.
    pub binary: PathBuf,
    /// Postgres' TCP port on 127.0.0.1.
    pub port: u16,
    /// A directory for the script and the transaction logs.
    pub work_dir: PathBuf,
    /// The script's file name in `work_dir`.
    pub script: String,
}

impl Pgbench {
    /// pgbench on `port`, running the store's claim and finalize ([`script`]) from
    /// `work_dir`.
    pub fn new(binary: PathBuf, port: u16, work_dir: PathBuf) -> Pgbench {
        Pgbench {
            binary,
            port,
            work_dir,
            script: "claim_finalize.sql".into(),
        }
    }

    /// Writes the claim+finalize script into the work directory.
    pub fn prepare(&self) -> Result<(), BenchError> {
        self.write_script(&script()?)
    }

    /// The same pgbench running `text` as `name` (written into the work directory).
    pub fn with_script(&self, name: &str, text: &str) -> Result<Pgbench, BenchError> {
        let other = Pgbench {
            script: name.to_owned(),
            ..self.clone()
        };
        other.write_script(text)?;
        Ok(other)
    }

    fn write_script(&self, text: &str) -> Result<(), BenchError> {
        std::fs::create_dir_all(&self.work_dir).map_err(BenchError::io(format!(
            "create {}",
            self.work_dir.display()
        )))?;
        std::fs::write(self.script_path(), text).map_err(BenchError::io(format!(
            "write the pgbench script {}",
            self.script
        )))
    }

    fn script_path(&self) -> PathBuf {
        self.work_dir.join(&self.script)
    }

    /// Runs the script with `clients` connections for `seconds` (whole seconds: pgbench's
    /// `-T`), latencies corrected like the HTTP side's.
    pub fn run(
        &self,
        clients: usize,
        seconds: u64,
        expected_interval: Option<Duration>,
    ) -> Result<PgbenchRun, BenchError> {
        let log_dir = self
            .work_dir
            .join(format!("log-{}-{clients}-{seconds}", self.script));
        // Leftovers of an earlier round would be read as this round's transactions.
        let _ = std::fs::remove_dir_all(&log_dir);
        std::fs::create_dir_all(&log_dir)
            .map_err(BenchError::io(format!("create {}", log_dir.display())))?;
        let threads = clients.clamp(1, 2);
        let output = Command::new(&self.binary)
            .env("PGOPTIONS", planner_options())
            .args(["-n", "-M", "prepared", "-h", "127.0.0.1", "-U", "postgres"])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg(clients.to_string())
            .arg("-j")
            .arg(threads.to_string())
            .arg("-T")
            .arg(seconds.max(1).to_string())
            .arg("-f")
            .arg(self.script_path())
            .arg("-l")
            .arg(format!("--log-prefix={}", log_dir.join("tx").display()))
            .arg("postgres")
            .output()
            .map_err(BenchError::io(format!("run {}", self.binary.display())))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(BenchError::Pgbench(format!(
                "exited with {}: {stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let (transactions, failures, tps) = parse_summary(&stdout)?;
        let mut recorder = Recorder::new(expected_interval);
        for latency in read_logs(&log_dir)? {
            recorder.record(latency);
        }
        let _ = std::fs::remove_dir_all(&log_dir);
        Ok(PgbenchRun {
            transactions,
            failures,
            elapsed: Duration::from_secs_f64(if tps > 0.0 {
                transactions as f64 / tps
            } else {
                0.0
            }),
            histogram: recorder.into_histogram(),
        })
    }
}

/// Transactions, failures and TPS from pgbench's summary.
pub fn parse_summary(stdout: &str) -> Result<(u64, u64, f64), BenchError> {
    let field = |prefix: &str| -> Option<&str> {
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let transactions = field("number of transactions actually processed:")
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| BenchError::Pgbench(format!("no transaction count in: {stdout}")))?;
    let failures = field("number of failed transactions:")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let tps = field("tps =")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| BenchError::Pgbench(format!("no tps in: {stdout}")))?;
    Ok((transactions, failures, tps))
}

/// Latencies (third field, microseconds) of every transaction-log file in `dir`.
fn read_logs(dir: &Path) -> Result<Vec<Duration>, BenchError> {
    let mut latencies = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(BenchError::io(format!("read {}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(BenchError::io(format!("read {}", dir.display())))?
            .path();
        let text = std::fs::read_to_string(&path)
            .map_err(BenchError::io(format!("read {}", path.display())))?;
        latencies.extend(parse_log(&text));
    }
    Ok(latencies)
}

/// Latencies from a pgbench transaction log (`client tx latency_us script epoch us`);
/// failed transactions (latency `failed`/`skipped`) are left out.
pub fn parse_log(text: &str) -> impl Iterator<Item = Duration> + '_ {
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(2)?.parse::<u64>().ok())
        .map(Duration::from_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_sessions_plan_with_the_stores_settings() {
        assert_eq!(
            planner_options(),
            "-c enable_seqscan=off -c jit=off -c plan_cache_mode=force_generic_plan"
        );
    }

    #[test]
    fn every_placeholder_is_replaced_including_two_digit_ones() {
        let sql = "SELECT $1, $2::bigint, $10, $1";
        let out = substitute(sql, &[(1, ":a"), (2, ":b"), (10, "ten")]).expect("substitutes");
        assert_eq!(out, "SELECT :a, :b::bigint, ten, :a");
        assert!(substitute("SELECT $3", &[(1, ":a")]).is_err(), "missing $3");
        assert!(
            substitute("SELECT $1", &[(1, ":a"), (2, ":b")]).is_err(),
            "unused $2"
        );
    }

    #[test]
    fn the_script_is_the_stores_own_sql_with_pgbench_variables() {
        let script = script().expect("the store's SQL has the expected parameters");
        assert!(!script.contains('$'), "no placeholder left:\n{script}");
        assert!(
            script.contains("ON CONFLICT (scope) DO NOTHING"),
            "{script}"
        );
        assert!(script.contains("SET state = 'completed'"), "{script}");
        // Two statements, each ending the command for pgbench.
        assert_eq!(script.matches(";\n").count(), 2, "{script}");
        // pgbench reads `:name` as a variable: only the ones set above may appear.
        for word in script.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            if let Some(name) = word.strip_prefix(':').filter(|n| !n.starts_with(':')) {
                let name = name.split("::").next().unwrap_or(name);
                assert!(
                    script.contains(&format!("\\set {name} ")),
                    "`:{name}` is not set:\n{script}"
                );
            }
        }
    }

    #[test]
    fn the_summary_and_the_transaction_log_are_read() {
        let stdout = "transaction type: claim_finalize.sql\n\
                      number of transactions actually processed: 1234\n\
                      number of failed transactions: 0 (0.000%)\n\
                      latency average = 12.9 ms\n\
                      tps = 308.5 (without initial connection time)\n";
        assert_eq!(parse_summary(stdout).expect("parses"), (1234, 0, 308.5));
        let log =
            "0 0 3301 0 1700000000 123\n1 0 failed 0 1700000000 200\n0 1 2999 0 1700000000 500\n";
        let latencies: Vec<_> = parse_log(log).collect();
        assert_eq!(
            latencies,
            vec![Duration::from_micros(3301), Duration::from_micros(2999)]
        );
    }
}
