//! A stack whose Envoys and lease-stores run in network namespaces of their own
//! ([`super::StackOptions::own_networks`]), and the link faults that allows ([`NetFault`]).
//!
//! ```text
//!  host side (10.213.S.1): Postgres, demo upstream, the harness
//!        │ bridge kfnSbr
//!        ├── kfnS-e0 (10.213.S.10): Envoy 0      ├── kfnS-s0 (10.213.S.12): lease-store 0
//!        └── kfnS-e1 (10.213.S.11): Envoy 1      └── kfnS-s1 (10.213.S.13): lease-store 1
//! ```
//!
//! Every socket that was `127.0.0.1` in the shipped config moves to its part's address
//! (each edit checked to apply once, [`crate::envoy_config::place`]); Postgres listens on
//! the host side's address too; the harness reaches each part at its address. A fault is
//! nftables rules or a shaped class inside one namespace ([`crate::net::LinkFault`]), so
//! nothing on the host side changes.

use std::net::IpAddr;
use std::process::Command;

use super::parts::Place;
use super::{Sites, Stack, StackOptions};
use crate::database::Database;
use crate::envoy_config::{self, Ports};
use crate::net::{CutId, LinkFault, NetLab, Peer};

/// A slow link's rate each way: a filter call (its request and answer, a few hundred bytes
/// each, behind the health checks sharing the link) takes longer than the filter's 1 s call
/// timeout.
pub const SLOW_LINK_BYTES_PER_S: u32 = 400;

/// A link fault of a stack with its own networks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    /// Envoy `envoy` cut off from every lease-store, both ways (the upstream, the clients
    /// and the other parts stay reachable).
    ProxyPartition {
        /// Which Envoy.
        envoy: usize,
    },
    /// Lease-store `store` cut off from Postgres, both ways (Envoys still reach it).
    StoreDbPartition {
        /// Which lease-store.
        store: usize,
    },
    /// Every lease-store's answers to Envoy `envoy` are lost; its calls still arrive.
    OneWayLoss {
        /// Which Envoy.
        envoy: usize,
    },
    /// The links between Envoy `envoy` and every lease-store slowed to
    /// [`SLOW_LINK_BYTES_PER_S`] each way.
    SlowLink {
        /// Which Envoy.
        envoy: usize,
    },
}

impl Stack {
    /// Applies `fault` (a stack with [`StackOptions::own_networks`] only); heal it with
    /// [`Stack::heal`].
    pub fn cut(&self, fault: NetFault) -> CutId {
        let net = self
            .net
            .as_ref()
            .unwrap_or_else(|| panic!("link faults need a stack with StackOptions::own_networks"));
        let stores = || -> Vec<Peer> {
            self.stores
                .iter()
                .filter_map(|store| match store.place.ip {
                    IpAddr::V4(ip) => Some(Peer::host(ip)),
                    IpAddr::V6(_) => None,
                })
                .collect()
        };
        let (place, link) = match fault {
            NetFault::ProxyPartition { envoy } => (
                self.envoy(envoy).place,
                LinkFault::Partition { peers: stores() },
            ),
            NetFault::StoreDbPartition { store } => {
                let ports = self.database.store_ports();
                let peers = ports
                    .into_iter()
                    .map(|port| Peer::service(net.host_side_ip(), port))
                    .collect();
                (self.store(store).place, LinkFault::Partition { peers })
            }
            NetFault::OneWayLoss { envoy } => (
                self.envoy(envoy).place,
                LinkFault::AnswersLost { peers: stores() },
            ),
            NetFault::SlowLink { envoy } => (
                self.envoy(envoy).place,
                LinkFault::Slow {
                    peers: stores(),
                    bytes_per_s: SLOW_LINK_BYTES_PER_S,
                },
            ),
        };
        let netns = place
            .netns
            .unwrap_or_else(|| panic!("{fault:?}: the part has no namespace"));
        net.apply(netns, &link)
            .unwrap_or_else(|e| panic!("{fault:?}: {e}"))
    }

    /// Heals a fault [`Stack::cut`] applied.
    pub fn heal(&self, cut: CutId) {
        if let Some(net) = &self.net {
            net.heal(cut)
                .unwrap_or_else(|e| panic!("heal {cut:?}: {e}"));
        }
    }
}

/// What a stack's parts get: each Envoy's and lease-store's place, the host side's address,
/// and the lab (with [`StackOptions::own_networks`]; panics saying what is missing when it
/// cannot be made).
pub(super) fn places(options: &StackOptions) -> (Option<NetLab>, Places) {
    let loopback = Places {
        envoys: vec![Place::LOOPBACK; options.envoy_count()],
        stores: vec![Place::LOOPBACK; options.replicas],
        host_side: Place::LOOPBACK.ip,
    };
    if !options.own_networks {
        return (None, loopback);
    }
    assert!(
        !options.replicated,
        "StackOptions::own_networks runs on a single Postgres only"
    );
    let mut lab = NetLab::create().unwrap_or_else(|e| panic!("own networks: {e}"));
    let mut add = |name: String| {
        let netns = lab.add_host(&name).unwrap_or_else(|e| panic!("{e}"));
        Place {
            ip: IpAddr::V4(lab.host(netns).ip),
            netns: Some(netns),
        }
    };
    let envoys = (0..options.replicas)
        .map(|i| add(format!("e{i}")))
        .collect();
    let stores = (0..options.replicas)
        .map(|i| add(format!("s{i}")))
        .collect();
    let host_side = IpAddr::V4(lab.host_side_ip());
    (
        Some(lab),
        Places {
            envoys,
            stores,
            host_side,
        },
    )
}

/// Each part's place.
pub(super) struct Places {
    pub(super) envoys: Vec<Place>,
    pub(super) stores: Vec<Place>,
    pub(super) host_side: IpAddr,
}

/// `command`, inside the namespace of `place` (unchanged for a part on the host).
pub(super) fn inside(net: Option<&NetLab>, place: Place, command: Command) -> Command {
    match (net, place.netns) {
        (Some(net), Some(netns)) => net.command_in(netns, command),
        _ => command,
    }
}

/// The database URL a lease-store at `place` is given: through the host side's address
/// from a namespace.
pub(super) fn database_url(database: &Database, place: Place, host_side: IpAddr) -> String {
    match (database, place.netns) {
        (Database::Single(postgres), Some(_)) => postgres.url_at(host_side),
        (Database::Partitioned { router, .. }, Some(_)) => router.url_at(host_side),
        _ => database.url(),
    }
}

/// The partitions' URLs as a part at `place` reaches them (none for one database).
pub(super) fn partition_urls(database: &Database, place: Place, host_side: IpAddr) -> Vec<String> {
    database
        .partitions()
        .iter()
        .map(|partition| match place.netns {
            Some(_) => partition.url_at(host_side),
            None => partition.url(),
        })
        .collect()
}

/// Envoy `index`'s rendered config with every socket on its part's address: its listener
/// and admin interface on its own, each lease-store endpoint on that store's, the upstream
/// on the host side's.
pub(super) fn place_sockets(rendered: &str, ports: &Ports, index: usize, sites: &Sites) -> String {
    let own = sites.envoys[index].ip;
    let mut sockets = vec![
        (ports.listener, own),
        (ports.admin, own),
        (ports.upstream, sites.host_side),
    ];
    sockets.extend(
        ports
            .lease_stores
            .iter()
            .zip(&sites.stores)
            .map(|(port, store)| (*port, store.ip)),
    );
    sockets
        .into_iter()
        .try_fold(rendered.to_owned(), |text, (port, ip)| {
            envoy_config::place(&text, port, ip)
        })
        .unwrap_or_else(|e| panic!("{e}"))
}
