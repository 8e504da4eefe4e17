//! The faults: a node's death, a postmaster crash, a node's return, a
//! planned switchover.

use super::*;

impl HaCluster {
    /// Kills node `node` at once: its Patroni agent, its postmaster and every server
    /// process, in one `SIGKILL` (a node death; open connections see a reset).
    pub fn kill_node(&self, node: usize) {
        let node = &self.nodes[node];
        let mut agent = lock(&node.agent);
        let mut pids: Vec<u32> = agent.iter().map(ChildGuard::pid).collect();
        if let Some(postmaster) = node.postmaster_pid() {
            pids.extend(children_of(postmaster));
            pids.push(postmaster);
        }
        send_signal("KILL", &pids);
        if let Some(mut guard) = agent.take() {
            guard.kill();
        }
    }

    /// Kills the current leader's node ([`HaCluster::kill_node`]); returns which it was.
    /// Panics when no node leads.
    pub async fn kill_primary_node(&self) -> usize {
        let leader = self
            .leader()
            .await
            .unwrap_or_else(|| panic!("no leader to kill: {:?}", self.members_blocking_hint()));
        self.kill_node(leader);
        leader
    }

    /// Kills the primary's node, waits for Patroni to promote the standby and for the
    /// multi-host URL to accept a write; returns the timings. Panics after `timeout`.
    pub async fn fail_primary_node(&self, timeout: Duration) -> Failover {
        let killed_at = Instant::now();
        let old_leader = self.kill_primary_node().await;
        let new_leader = self.wait_for_leader_other_than(old_leader, timeout).await;
        let promoted_at = Instant::now();
        self.wait_writable(timeout.saturating_sub(killed_at.elapsed()))
            .await;
        Failover {
            old_leader,
            new_leader,
            killed_at,
            promoted_at,
            writable_at: Instant::now(),
        }
    }

    /// Kills only node `node`'s postmaster (its backends exit when they notice): the agent
    /// lives on and restarts Postgres in place. Returns the killed pid (for
    /// [`HaCluster::wait_for_postmaster_restart`]). Panics when the node runs no postmaster.
    pub fn kill_postmaster(&self, node: usize) -> u32 {
        let postmaster = self
            .postmaster_pid(node)
            .unwrap_or_else(|| panic!("node {node} runs no postmaster"));
        send_signal("KILL", &[postmaster]);
        postmaster
    }

    /// Node `node`'s live postmaster, if it runs one.
    pub fn postmaster_pid(&self, node: usize) -> Option<u32> {
        self.nodes[node].postmaster_pid()
    }

    /// Waits until node `node` runs a postmaster other than `old` and Patroni reports the
    /// node running again (after [`HaCluster::kill_postmaster`]).
    pub async fn wait_for_postmaster_restart(&self, node: usize, old: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let restarted = self.postmaster_pid(node).is_some_and(|pid| pid != old);
            if restarted
                && self
                    .members()
                    .await
                    .iter()
                    .any(|m| m.node == node && m.state == "running")
            {
                return;
            }
            self.check_deadline(deadline, &format!("node {node}'s postmaster restarted"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Starts node `node`'s agent again (after [`HaCluster::kill_node`]) and waits until
    /// Patroni reports it running; it rejoins as a standby of the current leader.
    pub async fn restart_node(&self, node: usize) {
        if self.nodes[node].agent_pid().is_none() {
            self.spawn_agent(node);
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let members = self.members().await;
            if members
                .iter()
                .any(|m| m.node == node && m.state == "running")
            {
                return;
            }
            self.check_deadline(
                deadline,
                &format!("node {node} running again ({members:?})"),
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A planned switchover to `candidate` through Patroni's REST API; returns once
    /// `candidate` leads. The old primary is demoted: Postgres restarts as a standby.
    pub async fn switchover(&self, candidate: usize, timeout: Duration) {
        let leader = self
            .leader()
            .await
            .unwrap_or_else(|| panic!("no leader to switch over from"));
        assert_ne!(leader, candidate, "node {candidate} already leads");
        let url = format!("http://127.0.0.1:{}/switchover", self.ports.rest[leader]);
        let body = serde_json::json!({
            "leader": self.nodes[leader].name,
            "candidate": self.nodes[candidate].name,
        });
        let response = reqwest::Client::new()
            .post(&url)
            .json(&body)
            .timeout(timeout)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {url}: {status}: {text}");
        let deadline = Instant::now() + timeout;
        while self.leader().await != Some(candidate) {
            self.check_deadline(deadline, &format!("node {candidate} leading"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}
