//! The ports a stack is about to start on: free ones for tests, or the shipped ones
//! (`envoy/*.yaml`, `lease-store serve`'s defaults) for `make up`, handed out per part
//! before anything starts.

use super::PortPlan;
use crate::envoy_config::{self, Ports};
use crate::process::free_port;

/// The ports of a stack about to start.
pub(super) struct PlanPorts {
    pub(super) envoys: Vec<(u16, u16)>,
    pub(super) lease_stores: Vec<u16>,
    /// Where the Envoys reach the lease-stores: the stores themselves, or their sidecar.
    pub(super) store_route: Vec<u16>,
    pub(super) lease_store_admins: Vec<u16>,
    pub(super) upstream: u16,
}

/// The shipped stack's first lease-store admin port (`lease-store serve`'s default); a
/// second replica takes the next.
const SHIPPED_STORE_ADMIN_PORT: u16 = 9480;

impl PlanPorts {
    pub(super) fn new(plan: PortPlan, envoys: usize, replicas: usize) -> PlanPorts {
        match plan {
            PortPlan::Free => {
                let lease_stores: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
                PlanPorts {
                    envoys: (0..envoys).map(|_| (free_port(), free_port())).collect(),
                    store_route: lease_stores.clone(),
                    lease_stores,
                    lease_store_admins: (0..replicas).map(|_| free_port()).collect(),
                    upstream: free_port(),
                }
            }
            PortPlan::Shipped => {
                let first = envoy_config::shipped_ports();
                let second = envoy_config::shipped_second_replica_ports();
                PlanPorts {
                    envoys: [
                        (first.listener, first.admin),
                        (second.listener, second.admin),
                    ][..replicas]
                        .to_vec(),
                    lease_stores: second.lease_stores[..replicas].to_vec(),
                    store_route: second.lease_stores[..replicas].to_vec(),
                    lease_store_admins: (SHIPPED_STORE_ADMIN_PORT..).take(replicas).collect(),
                    upstream: first.upstream,
                }
            }
        }
    }

    pub(super) fn envoy(&self, index: usize) -> Ports {
        let (listener, admin) = self.envoys[index];
        Ports {
            listener,
            admin,
            lease_stores: self.store_route.clone(),
            upstream: self.upstream,
        }
    }
}
