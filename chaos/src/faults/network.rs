//! The link faults (`--faults proxy-partition,store-db-partition,one-way-loss,slow-link`):
//! real kernel faults in the network namespaces the launcher puts each Envoy and lease-store
//! in (`keyflight_testkit::stack::NetFault`, `keyflight_testkit::net`).
//!
//! | kind | inject | heal |
//! |---|---|---|
//! | proxy partition | nftables in Envoy N's namespace drop every packet to and from every lease-store (a third held past the lease, a third for lengths that may let a lease run out or not) | delete the table |
//! | store db partition | nftables in lease-store N's namespace drop every packet to and from Postgres's port | delete the table |
//! | one way loss | nftables in Envoy N's namespace drop every packet from every lease-store: calls arrive, answers never come back | delete the table |
//! | slow link | `htb` + `tbf` in Envoy N's namespace and on its host-side veth end: its traffic with the lease-stores at a few hundred bytes a second each way, so calls outlast the 1 s call timeout (held as a proxy partition is) | delete the qdiscs |
//!
//! The fault's end is the moment the link healed; its `in_place_ms` is the span the cut
//! certainly held (from the rules in place to the start of their removal), on which the
//! partition row of the guarantee is judged (`checker/partition.rs`).

use keyflight_testkit::net::CutId;
use keyflight_testkit::stack::{NetFault, Stack};

use crate::history::FaultKind;
use crate::plan::FaultStep;

/// Applies a link fault; [`Stack::heal`] with the answer restores the link.
pub fn cut(stack: &Stack, step: &FaultStep) -> CutId {
    let fault = match step.kind {
        FaultKind::ProxyPartition => NetFault::ProxyPartition { envoy: step.target },
        FaultKind::StoreDbPartition => NetFault::StoreDbPartition { store: step.target },
        FaultKind::OneWayLoss => NetFault::OneWayLoss { envoy: step.target },
        FaultKind::SlowLink => NetFault::SlowLink { envoy: step.target },
        other => panic!("{other:?} is not a link fault"),
    };
    stack.cut(fault)
}
