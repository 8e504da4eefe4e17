//! What a test reads from the cluster: its members, who leads, whether it
//! takes writes, and the waits built on those.

use super::*;

impl HaCluster {
    /// Every node as Patroni's REST API (`GET /cluster`, asked of each live agent in turn)
    /// describes it; empty when no agent answers.
    pub async fn members(&self) -> Vec<Member> {
        for node in 0..NODES {
            if self.nodes[node].agent_pid().is_none() {
                continue;
            }
            let url = format!("http://127.0.0.1:{}/cluster", self.ports.rest[node]);
            let Ok(response) = self.http.get(&url).send().await else {
                continue;
            };
            let Ok(body) = response.json::<Value>().await else {
                continue;
            };
            return self.parse_members(&body);
        }
        Vec::new()
    }

    /// The node Patroni reports as the running leader, if any. A leader that just died is
    /// still reported until its key expires (up to `ttl`): etcd is Patroni's only truth.
    pub async fn leader(&self) -> Option<usize> {
        self.members()
            .await
            .into_iter()
            .find(|m| m.role == "leader" && m.state == "running")
            .map(|m| m.node)
    }

    /// Waits until one node leads and the other is its synchronous standby; returns
    /// `(leader, standby)`. Panics with the agents' logs after `timeout`.
    pub async fn wait_for_leader_and_sync_standby(&self, timeout: Duration) -> (usize, usize) {
        let deadline = Instant::now() + timeout;
        loop {
            let members = self.members().await;
            let leader = members
                .iter()
                .find(|m| m.role == "leader" && m.state == "running");
            let standby = members
                .iter()
                .find(|m| m.role == "sync_standby" && m.state == "running");
            if let (Some(leader), Some(standby)) = (leader, standby) {
                return (leader.node, standby.node);
            }
            self.check_deadline(
                deadline,
                &format!("a leader and a sync standby ({members:?})"),
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until a node other than `old` leads; returns it.
    pub async fn wait_for_leader_other_than(&self, old: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader().await
                && leader != old
            {
                return leader;
            }
            self.check_deadline(deadline, &format!("a leader other than node {old}"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until the multi-host URL accepts a write (a transaction that takes an xid and
    /// commits, so it also waits for a synchronous standby when one is required).
    pub async fn wait_writable(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.writable().await {
            self.check_deadline(deadline, "the cluster to accept a write");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// One write probe through [`HaCluster::url`].
    pub(super) async fn writable(&self) -> bool {
        let probe = async {
            let mut config: tokio_postgres::Config = self.url().parse().ok()?;
            config.connect_timeout(PROBE_TIMEOUT);
            let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
            let driver = tokio::spawn(connection);
            let result = client.batch_execute("SELECT txid_current()").await;
            drop(client);
            driver.abort();
            result.ok()
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT * 2, probe).await,
            Ok(Some(()))
        )
    }

    pub(super) fn parse_members(&self, body: &Value) -> Vec<Member> {
        let Some(members) = body["members"].as_array() else {
            return Vec::new();
        };
        members
            .iter()
            .filter_map(|m| {
                let name = m["name"].as_str()?;
                let node = self.nodes.iter().position(|n| n.name == name)?;
                Some(Member {
                    node,
                    role: m["role"].as_str()?.to_owned(),
                    state: m["state"].as_str()?.to_owned(),
                })
            })
            .collect()
    }

    /// A panic message's context: the pids the cluster knows about.
    pub(super) fn members_blocking_hint(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "{}: agent {:?}, postmaster {:?}",
                    n.name,
                    n.agent_pid(),
                    n.postmaster_pid()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Panics with every log tail once `deadline` has passed.
    pub(super) fn check_deadline(&self, deadline: Instant, what: &str) {
        if Instant::now() < deadline {
            return;
        }
        let mut message = format!(
            "timed out waiting for {what} ({})",
            self.members_blocking_hint()
        );
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(agent) = lock(&node.agent).as_ref() {
                message.push_str(&format!(
                    "\n--- node {i} agent log ---\n{}",
                    agent.log_tail()
                ));
            }
        }
        if let Some(etcd) = lock(&self.etcd).as_ref() {
            message.push_str(&format!("\n--- etcd log ---\n{}", etcd.log_tail()));
        }
        panic!("{message}");
    }

    /// Everything node `node`'s agent (and the Postgres it ran) logged since its last start.
    pub fn agent_log(&self, node: usize) -> String {
        lock(&self.nodes[node].agent)
            .as_ref()
            .map(ChildGuard::log)
            .unwrap_or_default()
    }
}
