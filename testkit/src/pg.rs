//! A throwaway Postgres cluster per test run.
//!
//! Tests talk to a real Postgres 15, never a mock: the claim statement's
//! correctness rests on Postgres' concurrency semantics. [`PgCluster::start`]
//! runs `initdb` into a fresh directory under the system temp dir, starts the
//! server on a free loopback port (with its unix socket inside that directory,
//! so clusters never collide), and [`Drop`] stops it and removes the directory.
//!
//! Postgres refuses to run as root, and CI runs as root: when the current uid
//! is 0 the directory is handed to the `postgres` user and every server binary
//! runs through `runuser -u postgres --`.
//!
//! A watchdog shell process stops the cluster if the test process dies
//! without running `Drop` (a `static` shared cluster, a killed test binary), so
//! no stray `postgres` outlives the run.
//!
//! [`PgCluster::freeze`] simulates a database that stops answering without
//! closing anything (a hung host, a stalled VM): it SIGSTOPs the postmaster
//! and every server process, so TCP connections stay open but nothing
//! replies. [`PgCluster::thaw`] resumes them; `Drop` and the watchdog thaw a
//! frozen cluster first, since a stopped server cannot be shut down.
//!
//! With [`PgOptions::tls`] the server takes TCP connections over TLS only (`ssl=on`, nothing
//! but `hostssl` lines in `pg_hba.conf`), with a CA and certificates made at start
//! ([`PgTls`]).
//!
//! Everything here is synchronous (`std::process`), so it works from plain
//! tests, `#[tokio::test]` and a `OnceLock` alike.

use crate::os::{
    children_of, current_uid_is_root, process_state, send_signal, shell_words,
    spawn_watchdog_shell, unique_temp_dir,
};
use crate::pki::{CertFiles, Pki};
use crate::process::free_port;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where the Postgres 15 binaries live unless `PG_BIN` says otherwise.
const DEFAULT_PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// How a cluster trades durability for speed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgOptions {
    /// `true`: Postgres' defaults (`fsync` on), as a benchmark needs.
    /// `false` (the test default): `fsync` and `full_page_writes` off, which
    /// makes commits cheap. `synchronous_commit` stays on either way: every
    /// acknowledged commit has been written to the OS, so it survives
    /// [`PgCluster::stop`] (a process crash) — tests that crash the database
    /// rely on that; only a machine crash could lose it.
    pub durable: bool,
    /// `true`: TCP connections must use TLS ([`PgTls`]); unix-socket ones stay trusted.
    pub tls: bool,
    /// Listen on this address too (beside `127.0.0.1`), trusting its `/24`: the host side of
    /// a stack's network namespaces ([`crate::net::NetLab::host_side_ip`]).
    pub also_listen: Option<Ipv4Addr>,
}

/// The certificates of a TLS cluster and the roles its `pg_hba.conf` authenticates
/// specially. Every other role is trusted over TLS (and refused over cleartext TCP).
#[derive(Debug)]
pub struct PgTls {
    pki: Pki,
    stranger: Pki,
    server: CertFiles,
    client: CertFiles,
}

impl PgTls {
    /// The role that logs in with a client certificate alone (`cert` method, which
    /// implies `clientcert=verify-full`: the certificate's CN must be the role's name).
    /// Tests create the role; [`PgTls::client`] is its certificate.
    pub const CERT_USER: &'static str = "keyflight_cert";
    /// The role that logs in with a SCRAM-SHA-256 password (so channel binding can be
    /// required). Tests create the role with a password.
    pub const SCRAM_USER: &'static str = "keyflight_scram";

    /// Makes the CA, the server certificate (for `IP:127.0.0.1` only: `localhost` is a
    /// wrong host name for it), a client certificate for [`PgTls::CERT_USER`], and an
    /// unrelated CA, all under `dir`.
    fn generate(dir: &Path) -> PgTls {
        let pki = Pki::new_in(dir.join("ca"), "keyflight-test-postgres-ca");
        let server = pki.issue(
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        let client = pki.issue("client", PgTls::CERT_USER, "extendedKeyUsage=clientAuth\n");
        let stranger = Pki::new_in(dir.join("stranger"), "keyflight-test-stranger-ca");
        PgTls {
            pki,
            stranger,
            server,
            client,
        }
    }

    /// The CA that signed the server's certificate (and the client's).
    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }

    /// A CA that signed nothing this server presents.
    pub fn other_ca(&self) -> PathBuf {
        self.stranger.ca()
    }

    /// The client certificate of [`PgTls::CERT_USER`].
    pub fn client(&self) -> &CertFiles {
        &self.client
    }

    /// `pg_hba.conf`: sockets trusted; TCP over TLS only, by certificate, password or trust.
    fn hba(&self) -> String {
        format!(
            "local all all trust\n\
             hostssl all {cert} 127.0.0.1/32 cert\n\
             hostssl all {scram} 127.0.0.1/32 scram-sha-256\n\
             hostssl all all 127.0.0.1/32 trust\n",
            cert = PgTls::CERT_USER,
            scram = PgTls::SCRAM_USER,
        )
    }

    /// The server settings that turn TLS on.
    fn server_options(&self) -> String {
        format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
            self.server.cert.display(),
            self.server.key.display(),
            self.pki.ca().display()
        )
    }
}

/// A running Postgres cluster owned by this test process.
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    options: PgOptions,
    /// Boxed: most clusters have none, and `Database::Single` holds a cluster inline.
    tls: Option<Box<PgTls>>,
    as_postgres_user: bool,
    watchdog: Mutex<Option<Child>>,
    frozen: AtomicBool,
}

impl PgCluster {
    /// Starts a fast (non-durable) cluster. Panics with a clear message when
    /// Postgres is not installed or does not start.
    pub fn start() -> PgCluster {
        PgCluster::start_with(PgOptions::default())
    }

    /// Starts a cluster with the given options.
    pub fn start_with(options: PgOptions) -> PgCluster {
        let bin = std::env::var_os("PG_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PG_BIN));
        assert!(
            bin.join("initdb").is_file(),
            "Postgres binaries not found: {} has no initdb. Install Postgres 15 \
             (apt-get install postgresql-15) or point PG_BIN at its bin directory.",
            bin.display()
        );
        let dir = unique_temp_dir("pg");
        std::fs::create_dir_all(dir.join("sock")).expect("create the cluster directory");
        let tls = options
            .tls
            .then(|| Box::new(PgTls::generate(&dir.join("tls"))));
        let as_postgres_user = current_uid_is_root();
        if as_postgres_user {
            run_checked(Command::new("chown").arg("-R").arg("postgres:").arg(&dir));
        }
        let cluster = PgCluster {
            dir,
            port: free_port(),
            bin,
            options,
            tls,
            as_postgres_user,
            watchdog: Mutex::new(None),
            frozen: AtomicBool::new(false),
        };
        cluster.initdb();
        if let Some(ip) = cluster.options.also_listen {
            cluster.trust_subnet_of(ip);
        }
        if let Some(tls) = &cluster.tls {
            let hba = cluster.data_dir().join("pg_hba.conf");
            std::fs::write(&hba, tls.hba())
                .unwrap_or_else(|e| panic!("write {}: {e}", hba.display()));
        }
        cluster.pg_ctl_start();
        cluster.spawn_watchdog();
        cluster
    }

    /// A libpq-style URL for the `postgres` superuser on the `postgres` database.
    pub fn url(&self) -> String {
        self.url_at(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// [`PgCluster::url`] through address `ip` (`127.0.0.1` or [`PgOptions::also_listen`]).
    pub fn url_at(&self, ip: IpAddr) -> String {
        format!("postgres://postgres@{ip}:{}/postgres", self.port)
    }

    /// The certificates of a cluster started with [`PgOptions::tls`]; panics otherwise.
    pub fn tls(&self) -> &PgTls {
        self.tls
            .as_deref()
            .expect("this cluster was started without PgOptions::tls")
    }

    /// The TCP port the cluster listens on (stable across [`PgCluster::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs `sql` with `psql` (from the same bin directory) as the superuser
    /// and returns what it printed, unaligned and without headers. For tests
    /// that must put the database in a state no API call produces (a row an
    /// older release, or an operator by hand, could have written). Panics
    /// with psql's output when the statement fails.
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .arg(self.url())
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("could not run psql: {e}"));
        assert!(
            output.status.success(),
            "psql failed ({}) on {sql}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`), as a crash would:
    /// open connections are cut, nothing is flushed gracefully.
    pub fn stop(&self) {
        let mut cmd = self.server_command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"]);
        run_checked(&mut cmd);
    }

    /// Starts the server again on the same directory and port.
    pub fn restart(&self) {
        self.pg_ctl_start();
    }

    /// Freezes the server: SIGSTOP to the postmaster, then (once it is
    /// stopped, so it can fork no more) to every process it started. Open
    /// connections stay open and the kernel still accepts new ones, but
    /// nothing answers until [`PgCluster::thaw`]. Always thaw (a guard) before
    /// asserting anything that may panic; `Drop` thaws too, as a last resort.
    pub fn freeze(&self) {
        let postmaster = self.postmaster_pid();
        self.frozen.store(true, Ordering::SeqCst);
        send_signal("STOP", &[postmaster]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_state(postmaster) != Some('T') {
            assert!(
                Instant::now() < deadline,
                "postmaster {postmaster} did not stop within 10 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        send_signal("STOP", &children_of(postmaster));
    }

    /// Resumes a server stopped by [`PgCluster::freeze`] (a no-op otherwise).
    pub fn thaw(&self) {
        if !self.frozen.swap(false, Ordering::SeqCst) {
            return;
        }
        let postmaster = self.postmaster_pid();
        let mut pids = children_of(postmaster);
        pids.push(postmaster);
        send_signal("CONT", &pids);
    }

    /// The running postmaster's pid, from the first line of `postmaster.pid`.
    fn postmaster_pid(&self) -> u32 {
        let path = self.data_dir().join("postmaster.pid");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e} (is the server running?)", path.display()));
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("{} has no pid on its first line", path.display()))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn initdb(&self) {
        let mut cmd = self.server_command("initdb");
        cmd.arg("-D").arg(self.data_dir()).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        run_checked(&mut cmd);
    }

    /// Trusts TCP connections from `ip`'s `/24` (the namespaces of a stack's network lab).
    fn trust_subnet_of(&self, ip: Ipv4Addr) {
        let [a, b, c, _] = ip.octets();
        let hba = self.data_dir().join("pg_hba.conf");
        let mut text =
            std::fs::read_to_string(&hba).unwrap_or_else(|e| panic!("read {}: {e}", hba.display()));
        text.push_str(&format!("host all all {a}.{b}.{c}.0/24 trust\n"));
        std::fs::write(&hba, text).unwrap_or_else(|e| panic!("write {}: {e}", hba.display()));
    }

    fn pg_ctl_start(&self) {
        let listen = match self.options.also_listen {
            Some(ip) => format!("127.0.0.1,{ip}"),
            None => "127.0.0.1".to_owned(),
        };
        let mut server_options = format!(
            "-p {} -k {} -c listen_addresses={listen} -c max_connections=300",
            self.port,
            self.dir.join("sock").display()
        );
        if !self.options.durable {
            server_options.push_str(" -c fsync=off -c full_page_writes=off");
        }
        if let Some(tls) = &self.tls {
            server_options.push_str(&tls.server_options());
        }
        let mut cmd = self.server_command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .arg("-o")
            .arg(server_options)
            .args(["-w", "-t", "60", "start"]);
        let output = cmd.output().expect("run pg_ctl start");
        assert!(
            output.status.success(),
            "pg_ctl start failed ({}): {}\n--- server.log ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
    }

    /// Spawns a shell that waits for this process to exit, then stops the
    /// cluster and removes its directory (unless `Drop` already did).
    /// A frozen cluster is thawed first (a stopped server ignores `pg_ctl stop`).
    fn spawn_watchdog(&self) {
        let stop = shell_words(&self.server_command_line("pg_ctl"));
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             pm=$(head -n 1 '{data}/postmaster.pid' 2>/dev/null); \
             if [ -n \"$pm\" ]; then kill -CONT \"$pm\"; pkill -CONT -P \"$pm\"; fi 2>/dev/null; \
             {stop} -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            data = self.data_dir().display(),
            dir = self.dir.display(),
        );
        let child = spawn_watchdog_shell(&script, "cluster");
        *self.watchdog.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
    }

    /// The command line that runs a server binary as the right user.
    fn server_command_line(&self, binary: &str) -> Vec<String> {
        let path = self.bin.join(binary).display().to_string();
        if self.as_postgres_user {
            vec![
                "runuser".into(),
                "-u".into(),
                "postgres".into(),
                "--".into(),
                path,
            ]
        } else {
            vec![path]
        }
    }

    fn server_command(&self, binary: &str) -> Command {
        let line = self.server_command_line(binary);
        let mut cmd = Command::new(&line[0]);
        cmd.args(&line[1..]);
        cmd
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.frozen.load(Ordering::SeqCst) {
            // Best effort: a panic here would abort a test that is already unwinding.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.thaw()));
        }
        if let Some(mut child) = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut cmd = self.server_command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = cmd.status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a command and panics with its output if it fails.
pub(crate) fn run_checked(cmd: &mut Command) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits until `n` backends whose connections are named `app` (`application_name`) wait for
/// a lock: how a test knows the statements it sent reached a row its own transaction holds.
pub async fn wait_for_lock_waits(db: &tokio_postgres::Client, app: &str, n: i64) {
    crate::process::eventually(
        &format!("{n} of the store's statements wait for a lock"),
        std::time::Duration::from_secs(20),
        || async {
            db.query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .await
            .expect("read pg_stat_activity")
            .get::<_, i64>(0)
                >= n
        },
    )
    .await;
}
