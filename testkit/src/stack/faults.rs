//! What a harness does to a running stack: kill, freeze and restart its parts, crash
//! Postgres or fail its primary over, and push a new plugin configuration.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::{
    READY_TIMEOUT, Restart, Stack, lds_path_of, network, remove_hot_restart_memory,
    restartable_envoy_command, upstream_command_at,
};
use crate::database::Database;
use crate::ha::HaCluster;
use crate::lds;
use crate::pg::PgCluster;
use crate::process::{Signal, eventually, wait_http_ok};

/// How long a replicated Postgres may take to fail over or to get its standby back.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// What [`Stack::crash_postgres`] did, for [`Stack::recover_postgres`].
#[derive(Debug, Clone, Copy)]
pub enum Crash {
    /// The single node was stopped at once (`pg_ctl stop -m immediate`).
    Single,
    /// The primary's postmaster (node, pid) was killed; its Patroni agent restarts it.
    Primary(usize, u32),
    /// A replicated Postgres had no primary to crash.
    NoPrimary,
    /// This partition of a partitioned database was stopped at once.
    Partition(usize),
}

impl Stack {
    /// Kills lease-store `index` (`SIGKILL`) and reaps it: a crashed pod.
    pub fn kill_store(&mut self, index: usize) {
        self.stores[index].part.kill();
    }

    /// Starts lease-store `index` again on its port (killing it first if it runs) and waits
    /// until it is ready: a pod restart.
    pub async fn start_store(&mut self, index: usize) {
        self.start_store_with(index, false).await;
    }

    /// Sends `signal` to lease-store `index` (`Stop` freezes it: a hung store, until `Cont`).
    pub fn signal_store(&self, index: usize, signal: Signal) {
        self.store(index).part.signal(signal);
    }

    /// Kills Envoy `index` (`SIGKILL`) and reaps it: a crashed proxy.
    pub fn kill_envoy(&mut self, index: usize) {
        self.envoys[index].part.kill();
    }

    /// Sends `signal` to Envoy `index` (`Kill` without reaping, so requests in flight
    /// through a shared stack are cut off; `Stop` freezes it until `Cont`).
    pub fn signal_envoy(&self, index: usize, signal: Signal) {
        self.envoy(index).part.signal(signal);
    }

    /// Starts Envoy `index` again on the same ports and config (killing it first if it
    /// runs: a fresh process, epoch 0), and waits until it is ready.
    pub async fn start_envoy(&mut self, index: usize) {
        let envoy = &mut self.envoys[index];
        envoy.part.kill();
        remove_hot_restart_memory(&envoy.base_id_file);
        envoy.epoch = 0;
        let command = restartable_envoy_command(
            &envoy.binaries,
            &envoy.config,
            &self.options.envoy_log_level,
            &self.options.filter_token(),
            Restart::First {
                base_id_file: &envoy.base_id_file,
            },
        );
        let command = network::inside(self.net.as_ref(), envoy.place, command);
        envoy.part.spawn(command);
        self.wait_envoy(index).await;
    }

    /// Sends `signal` to the upstream (`Kill`: requests it holds are cut off mid-answer).
    pub fn signal_upstream(&self, signal: Signal) {
        self.upstream.signal(signal);
    }

    /// Starts a fresh upstream on the same port (its counters start at zero) and waits
    /// until it answers.
    pub async fn restart_upstream(&mut self) {
        let effects_database = self.options.upstream_effects.then(|| self.database.url());
        self.upstream.spawn(upstream_command_at(
            &self.binaries,
            self.upstream_address(),
            effects_database
                .as_deref()
                .map(|url| (url, self.dir.as_path())),
        ));
        let ready = format!("http://{}/stats", self.upstream_address());
        wait_http_ok(&ready, READY_TIMEOUT, self.upstream.child_mut()).await;
    }

    /// Crashes Postgres: `pg_ctl stop -m immediate` on a single node; on a replicated one,
    /// `SIGKILL` to the primary's postmaster (its Patroni agent restarts it in place); on a
    /// partitioned one, partition 0 stopped at once ([`Stack::crash_partition`] picks one).
    pub async fn crash_postgres(&self) -> Crash {
        match &self.database {
            Database::Single(postgres) => {
                tokio::task::block_in_place(|| postgres.stop());
                Crash::Single
            }
            Database::Partitioned { .. } => self.crash_partition(0),
            Database::Replicated(ha) => match ha.leader().await {
                Some(leader) => Crash::Primary(leader, ha.kill_postmaster(leader)),
                None => Crash::NoPrimary,
            },
        }
    }

    /// Brings Postgres back after [`Stack::crash_postgres`] (crash recovery runs) and waits
    /// until every running lease-store is ready again.
    pub async fn recover_postgres(&self, crash: Crash) {
        match (&self.database, crash) {
            (Database::Single(postgres), _) => {
                tokio::task::block_in_place(|| postgres.restart());
            }
            (Database::Replicated(ha), Crash::Primary(node, postmaster)) => {
                ha.wait_for_postmaster_restart(node, postmaster, FAILOVER_TIMEOUT)
                    .await;
                // Healthy again means a synchronous standby again: Patroni promotes only
                // a standby it had marked synchronous, so a primary that dies before the
                // restarted pair re-registered one would have no node it may promote.
                ha.wait_for_leader_and_sync_standby(FAILOVER_TIMEOUT).await;
            }
            (Database::Partitioned { partitions, .. }, Crash::Partition(index)) => {
                tokio::task::block_in_place(|| partitions[index].restart());
            }
            (Database::Replicated(_) | Database::Partitioned { .. }, _) => {}
        }
        self.wait_stores_ready().await;
    }

    /// Stops partition `index` of a partitioned database at once (`pg_ctl stop -m
    /// immediate`), as its primary's crash would; [`Stack::recover_postgres`] brings it back.
    /// Panics on a stack with one database.
    pub fn crash_partition(&self, index: usize) -> Crash {
        let partition = self.database.partitions().get(index).unwrap_or_else(|| {
            panic!("there is no partition {index}: use StackOptions::partitioned")
        });
        tokio::task::block_in_place(|| partition.stop());
        Crash::Partition(index)
    }

    /// Freezes Postgres, every process of it (`SIGSTOP`), as a hung host or a stalled VM
    /// stops it: connections stay open and the kernel keeps acknowledging what they are
    /// sent, but nothing answers. On a partitioned database, partition `index`. Panics on a
    /// replicated one, where a frozen primary is a failover (`primary node death`).
    pub fn freeze_postgres(&self, index: usize) {
        self.frozen_node(index).freeze();
    }

    /// Resumes what [`Stack::freeze_postgres`] froze (`SIGCONT`) and waits until every
    /// running lease-store is ready again.
    pub async fn thaw_postgres(&self, index: usize) {
        self.frozen_node(index).thaw();
        self.wait_stores_ready().await;
    }

    /// The node [`Stack::freeze_postgres`] freezes.
    fn frozen_node(&self, index: usize) -> &PgCluster {
        match &self.database {
            Database::Single(postgres) => postgres,
            Database::Partitioned { partitions, .. } => &partitions[index],
            Database::Replicated(_) => {
                panic!("a replicated Postgres is not frozen: its frozen primary fails over")
            }
        }
    }

    /// Kills the primary's node of a replicated Postgres and waits until the standby is
    /// promoted and writable; returns the old primary and the failover window. `None` on a
    /// single Postgres.
    pub async fn fail_primary_node(&self) -> Option<(usize, Duration)> {
        let Database::Replicated(ha) = &self.database else {
            return None;
        };
        let failover = ha.fail_primary_node(FAILOVER_TIMEOUT).await;
        Some((failover.old_leader, failover.window()))
    }

    /// Brings a dead node back as the new primary's synchronous standby (without one, a
    /// second failover would have no node Patroni may promote), then waits for the stores.
    pub async fn rejoin_node(&self, node: usize) {
        if let Database::Replicated(ha) = &self.database {
            ha.restart_node(node).await;
            ha.wait_for_leader_and_sync_standby(FAILOVER_TIMEOUT).await;
        }
        self.wait_stores_ready().await;
    }

    /// The replicated database, for its own faults. Panics on a single-node stack.
    pub fn ha(&self) -> &HaCluster {
        match &self.database {
            Database::Replicated(cluster) => cluster,
            Database::Single(_) | Database::Partitioned { .. } => {
                panic!("not a replicated stack: use StackOptions::replicated_postgres")
            }
        }
    }

    /// Pushes a new plugin configuration to Envoy 0 of a [`super::StackOptions::reconfigurable`]
    /// stack, as a control plane does: Envoy builds a new listener with it and drains the
    /// old one. Returns once Envoy has accepted the update.
    pub async fn reconfigure(&mut self, edit: impl FnOnce(&mut Value)) {
        edit(&mut self.options.plugin);
        self.push_listener(0).await;
    }

    /// Writes Envoy `index`'s listener, rendered again from the options and its programs,
    /// to its LDS file, and returns once Envoy has accepted the update.
    pub(super) async fn push_listener(&mut self, index: usize) {
        assert!(
            self.options.listener_from_file,
            "pushing a listener needs StackOptions::reconfigurable"
        );
        let rendered = self.render_envoy(index);
        let lds_path = lds_path_of(&self.envoys[index].config);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        let admin = SocketAddr::new(self.envoys[index].place.ip, self.envoys[index].ports.admin);
        let updates_before = lds_updates(admin).await;
        lds::write_atomically(&lds_path, &split.listeners)
            .unwrap_or_else(|e| panic!("write {}: {e}", lds_path.display()));
        eventually("Envoy accepted the new listener", READY_TIMEOUT, || async {
            lds_updates(admin).await > updates_before
        })
        .await;
    }

    async fn wait_stores_ready(&self) {
        for store in &self.stores {
            if store.part.pid().is_some() {
                let ready = format!("http://{}:{}/readyz", store.place.ip, store.port);
                wait_http_ok(&ready, READY_TIMEOUT, None).await;
            }
        }
    }
}

/// Envoy's count of accepted listener updates (`listener_manager.lds.update_success`).
async fn lds_updates(admin: SocketAddr) -> u64 {
    const STAT: &str = "listener_manager.lds.update_success";
    let url = format!("http://{admin}/stats?filter=^{STAT}$");
    let text = match reqwest::get(&url).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{STAT}: ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}
