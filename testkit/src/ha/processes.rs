//! The processes behind the cluster: etcd, each node's Patroni agent and its
//! configuration, and the watchdog that cleans up after a dead test.

use super::*;

impl HaCluster {
    pub(super) fn render_config(&self, node: usize, options: &HaOptions) -> String {
        let dir = self.nodes[node].dir.display().to_string();
        let replacements = [
            ("@NODE@", self.nodes[node].name.clone()),
            ("@REST_PORT@", self.ports.rest[node].to_string()),
            ("@ETCD_PORT@", self.ports.etcd_client.to_string()),
            ("@TTL@", options.ttl.to_string()),
            ("@LOOP_WAIT@", options.loop_wait.to_string()),
            ("@RETRY_TIMEOUT@", options.retry_timeout.to_string()),
            ("@STRICT@", options.strict.to_string()),
            ("@PG_PORT@", self.ports.postgres[node].to_string()),
            ("@DIR@", dir),
            ("@PG_BIN@", self.pg_bin.display().to_string()),
        ];
        let mut config = PATRONI_TEMPLATE.to_owned();
        for (placeholder, value) in replacements {
            config = config.replace(placeholder, &value);
        }
        assert!(
            !config.contains('@'),
            "unreplaced placeholder in the Patroni template"
        );
        config
    }

    pub(super) async fn start_etcd(&self) {
        let peer = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let client = format!("http://127.0.0.1:{}", self.ports.etcd_client);
        let mut command = Command::new("etcd");
        command
            .arg("--name")
            .arg("keyflight")
            .arg("--data-dir")
            .arg(self.dir.join("etcd/data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("keyflight={peer}")])
            .args(["--log-level", "warn"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        let guard = ChildGuard::spawn("etcd", command);
        write_pid(&self.dir.join("etcd.pid"), guard.pid());
        *lock(&self.etcd) = Some(guard);
        let deadline = Instant::now() + START_TIMEOUT;
        let health = format!("{client}/health");
        loop {
            if let Ok(response) = self.http.get(&health).send().await
                && let Ok(body) = response.json::<Value>().await
                && body["health"] == "true"
            {
                return;
            }
            self.check_deadline(deadline, "etcd to answer /health");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Starts node `node`'s Patroni agent (as `postgres` when we are root).
    pub(super) fn spawn_agent(&self, node: usize) {
        let node_ref = &self.nodes[node];
        let mut command = if self.as_postgres_user {
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--init-groups",
                "--",
                "patroni",
            ]);
            command
        } else {
            Command::new("patroni")
        };
        // Patroni reads PATRONI_* variables as configuration and libpq reads PG*: keep the
        // test's environment out of the cluster.
        command
            .arg(&node_ref.config)
            .current_dir(&node_ref.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &node_ref.dir)
            .env("LANG", "C.UTF-8");
        let guard = ChildGuard::spawn(&format!("patroni-{}", node_ref.name), command);
        write_pid(&node_ref.dir.join("patroni.pid"), guard.pid());
        *lock(&node_ref.agent) = Some(guard);
    }

    /// Spawns a shell that waits for this process to exit, then kills whatever the cluster
    /// still runs (agents first, so none restarts its Postgres) and removes the directory.
    pub(super) fn spawn_watchdog(&self) {
        let dir = shell_quote(&self.dir.display().to_string());
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             for f in {dir}/node*/patroni.pid; do kill -9 $(cat \"$f\") 2>/dev/null; done; \
             for f in {dir}/node*/data/postmaster.pid; do \
               pm=$(head -n 1 \"$f\" 2>/dev/null); [ -n \"$pm\" ] && kill -9 \"$pm\" 2>/dev/null; \
             done; \
             kill -9 $(cat {dir}/etcd.pid 2>/dev/null) 2>/dev/null; sleep 1; rm -rf {dir}",
            pid = std::process::id(),
        );
        let child = spawn_watchdog_shell(&script, "HA cluster");
        *lock(&self.watchdog) = Some(child);
    }
}

/// Panics with how to install what is missing.
pub(super) fn require_prerequisites(pg_bin: &Path) {
    assert!(
        pg_bin.join("initdb").is_file(),
        "Postgres binaries not found: {} has no initdb. Install Postgres 15 \
         (apt-get install postgresql-15) or point PG_BIN at its bin directory.",
        pg_bin.display()
    );
    for program in ["patroni", "etcd"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            found,
            "{program} not found: run `make ha-prereqs` (apt-get install -y patroni etcd-server)"
        );
    }
}

pub(super) fn write_pid(path: &Path, pid: u32) {
    std::fs::write(path, format!("{pid}\n"))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
