//! The database under a test or chaos stack: one throwaway Postgres, a replicated Patroni
//! pair, or a PL/Proxy router over throwaway partitions. The lease-store is handed one URL
//! (a partitioned database's router's), and a partitioned one's partitions besides.

use crate::ha::HaCluster;
use crate::pg::PgCluster;

/// One throwaway node, etcd + two Patroni nodes, or a router and its partitions.
pub enum Database {
    /// One throwaway node.
    Single(PgCluster),
    /// etcd + two Patroni nodes (boxed: it is much the larger).
    Replicated(Box<HaCluster>),
    /// A PL/Proxy router over throwaway partitions (`docs/distributed-sql.md`).
    Partitioned {
        /// The router the lease-stores send every statement to.
        router: PgCluster,
        /// The partitions, in slot order.
        partitions: Vec<PgCluster>,
    },
}

impl Database {
    /// The URL the lease-stores are given (multi-host with `target_session_attrs=read-write`
    /// for a replicated one).
    pub fn url(&self) -> String {
        match self {
            Database::Single(cluster) => cluster.url(),
            Database::Replicated(cluster) => cluster.url(),
            Database::Partitioned { router, .. } => router.url(),
        }
    }

    /// The nodes that hold the records, for tests that read or break them directly: the single
    /// node, or every partition. Panics on a replicated database, whose nodes are reached
    /// through its [`HaCluster`].
    pub fn record_nodes(&self) -> Vec<&PgCluster> {
        match self {
            Database::Single(cluster) => vec![cluster],
            Database::Partitioned { partitions, .. } => partitions.iter().collect(),
            Database::Replicated(_) => {
                panic!("a replicated stack's nodes are reached through its HaCluster")
            }
        }
    }

    /// The ports a lease-store reaches its database on, to cut it off: the single node's, or
    /// a partitioned database's router's and partitions'. Panics on a replicated database
    /// (link faults run on a single host's network only).
    pub fn store_ports(&self) -> Vec<u16> {
        match self {
            Database::Single(cluster) => vec![cluster.port()],
            Database::Partitioned { router, partitions } => std::iter::once(router)
                .chain(partitions)
                .map(PgCluster::port)
                .collect(),
            Database::Replicated(_) => panic!("link faults need a single-host database"),
        }
    }

    /// The partitions of a partitioned database (none for the others).
    pub fn partitions(&self) -> &[PgCluster] {
        match self {
            Database::Partitioned { partitions, .. } => partitions,
            Database::Single(_) | Database::Replicated(_) => &[],
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
            Database::Partitioned { .. } => {
                panic!("this needs a single-node database; a partitioned stack has partitions")
            }
        }
    }
}
