//! The durable Redis baseline: what a team would otherwise put under an idempotency proxy.
//!
//! A proxy that records answers in Redis (ldclabs/idempotent-proxy, the peer of
//! `bench/README.md`) makes two round trips per first-time request: `SET key lease NX PX`
//! to claim the key, then `SET key record PX` to keep the answer. [`RedisPair`] does exactly
//! that, per iteration, through the same closed-loop driver as the store cycle, with the
//! same recorded body ([`crate::pgbench::recorded_body`]), against a `redis-server` run
//! with `appendonly yes` and `appendfsync always`: each write is on disk before Redis
//! answers, as Postgres' commits are (`synchronous_commit on`, `fsync on`). Without that,
//! the comparison would set a durable store against a cache.
//!
//! `redis-benchmark` (Debian's package) cannot send a two-command sequence per operation,
//! so the pair is driven here; the protocol is RESP 2, a handful of lines.

use std::path::{Path, PathBuf};
use std::process::Command;

use keyflight_testkit::process::{ChildGuard, free_port};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::BenchError;
use crate::pgbench;

/// The lease a claim asks for: the store cycle's ([`pgbench::LEASE_MS`]).
const LEASE_MS: u64 = pgbench::LEASE_MS;

/// How long a record is kept: the store's default retention, 24 h.
const RETENTION_MS: u64 = 24 * 3600 * 1000;

/// A `redis-server` with every write fsynced before its answer.
pub struct RedisServer {
    child: ChildGuard,
    port: u16,
}

impl RedisServer {
    /// `redis-server` from `REDIS_SERVER` or the `PATH`; `None` when there is none (the
    /// suite then says the row was skipped and how to get it).
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("REDIS_SERVER") {
            return Some(PathBuf::from(path));
        }
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-server"))
                .find(|candidate| candidate.is_file())
        })
    }

    /// Starts `binary` on a free port with its append-only file under `dir`, and waits
    /// until it answers `PING`.
    pub async fn start(binary: &Path, dir: &Path) -> Result<RedisServer, BenchError> {
        // A fresh append-only file per run, as the stack's Postgres is fresh: a previous
        // run's keys would first be loaded (Redis answers `LOADING` meanwhile).
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BenchError::io(format!("empty {}", dir.display()))(e)),
        }
        std::fs::create_dir_all(dir)
            .map_err(BenchError::io(format!("create {}", dir.display())))?;
        let port = free_port();
        let mut command = Command::new(binary);
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            // No RDB snapshots: the append-only file is the durability being compared.
            .args(["--save", ""])
            .arg("--dir")
            .arg(dir);
        let child = ChildGuard::spawn("redis-server", command);
        let server = RedisServer { child, port };
        let authority = server.authority();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let ping = async {
                let mut connection = RespConnection::open(&authority).await?;
                connection.command(&[b"PING"]).await
            };
            match ping.await {
                Ok(reply) if reply == "+PONG" => return Ok(server),
                Ok(reply) => {
                    return Err(BenchError::Answer(format!("redis-server PING: {reply}")));
                }
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(BenchError::Answer(format!(
                        "redis-server did not answer PING: {e}\n{}",
                        server.child.log_tail()
                    )));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(25)).await,
            }
        }
    }

    /// Its `host:port`.
    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its process id (charged the pair's CPU).
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// One iteration of the Redis baseline: claim a fresh key, then record the answer under it.
#[derive(Debug, Clone)]
pub struct RedisPair {
    /// The server's `host:port`.
    pub authority: String,
    /// The record written by the second `SET`.
    pub record: Vec<u8>,
}

impl RedisPair {
    /// A pair against `authority` recording what the store cycle records.
    pub fn new(authority: String) -> RedisPair {
        RedisPair {
            authority,
            record: pgbench::recorded_body(),
        }
    }

    /// `SET kf:{unique} pending NX PX lease`, expecting `OK` (a fresh key is always won),
    /// then `SET kf:{unique} record PX retention`.
    pub async fn run(
        &self,
        connection: &mut RespConnection,
        unique: &str,
    ) -> Result<(), BenchError> {
        let key = format!("kf:{unique}");
        let (lease, retention) = (LEASE_MS.to_string(), RETENTION_MS.to_string());
        let claim = [
            b"SET".as_slice(),
            key.as_bytes(),
            b"pending",
            b"NX",
            b"PX",
            lease.as_bytes(),
        ];
        let record = [
            b"SET".as_slice(),
            key.as_bytes(),
            &self.record,
            b"PX",
            retention.as_bytes(),
        ];
        for command in [&claim[..], &record[..]] {
            let reply = connection.command(command).await?;
            if reply != "+OK" {
                return Err(BenchError::Answer(format!("redis SET answered {reply}")));
            }
        }
        Ok(())
    }
}

/// A RESP 2 connection that sends one command and reads its one-line answer.
pub struct RespConnection {
    authority: String,
    stream: BufReader<TcpStream>,
    line: String,
}

impl RespConnection {
    /// Connects to `authority` (`host:port`).
    pub async fn open(authority: &str) -> Result<RespConnection, BenchError> {
        let stream = TcpStream::connect(authority)
            .await
            .map_err(|e| resp_error(authority, format!("connect: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| resp_error(authority, format!("set TCP_NODELAY: {e}")))?;
        Ok(RespConnection {
            authority: authority.to_owned(),
            stream: BufReader::new(stream),
            line: String::new(),
        })
    }

    /// Sends `parts` as one command and returns its answer line (`+OK`, `-ERR …`, `$-1`).
    /// Only one-line answers are read: the commands sent here answer nothing longer.
    pub async fn command(&mut self, parts: &[&[u8]]) -> Result<String, BenchError> {
        let mut frame = format!("*{}\r\n", parts.len()).into_bytes();
        for part in parts {
            frame.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
            frame.extend_from_slice(part);
            frame.extend_from_slice(b"\r\n");
        }
        self.stream
            .get_mut()
            .write_all(&frame)
            .await
            .map_err(|e| resp_error(&self.authority, format!("send: {e}")))?;
        self.line.clear();
        let read = self
            .stream
            .read_line(&mut self.line)
            .await
            .map_err(|e| resp_error(&self.authority, format!("read: {e}")))?;
        if read == 0 {
            return Err(resp_error(&self.authority, "closed by the server".into()));
        }
        Ok(self.line.trim_end().to_owned())
    }
}

fn resp_error(authority: &str, detail: String) -> BenchError {
    BenchError::Http {
        target: format!("redis {authority}"),
        detail,
    }
}
