//! The database under a test or chaos stack: one throwaway Postgres, or a replicated
//! Patroni pair. Both stacks start the same two kinds and hand the lease-store one URL.

use crate::ha::HaCluster;
use crate::pg::PgCluster;

/// One throwaway node, or etcd + two Patroni nodes.
pub enum Database {
    /// One throwaway node.
    Single(PgCluster),
    /// etcd + two Patroni nodes (boxed: it is much the larger).
    Replicated(Box<HaCluster>),
}

impl Database {
    /// The URL the lease-stores are given (multi-host with `target_session_attrs=read-write`
    /// for a replicated one).
    pub fn url(&self) -> String {
        match self {
            Database::Single(cluster) => cluster.url(),
            Database::Replicated(cluster) => cluster.url(),
        }
    }

    /// The single node; panics on a replicated database, whose nodes are reached through
    /// its [`HaCluster`].
    pub fn single(&self) -> &PgCluster {
        match self {
            Database::Single(cluster) => cluster,
            Database::Replicated(_) => {
                panic!("this needs a single-node database; a replicated stack's is its HaCluster")
            }
        }
    }
}
