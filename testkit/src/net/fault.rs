//! What a link fault does, rendered as the nftables ruleset or the `tc` commands that do it
//! inside one namespace (pure: `mod.rs` runs them).
//!
//! | fault | mechanism, inside the namespace |
//! |---|---|
//! | [`LinkFault::Partition`] | nft: drop every packet to a peer (output hook) and from it (input hook) |
//! | [`LinkFault::AnswersLost`] | nft: drop what comes from a peer (input hook); what the namespace sends still arrives |
//! | [`LinkFault::Slow`] | `htb` picks the traffic to the peers (inside) and from them (on the host-side veth end) into a class whose `tbf` lets a few hundred bytes a second through |
//!
//! Drops are silent (`drop`, not `reject`), as a cut cable or a black-holing firewall:
//! the sender learns nothing and times out, and TCP retransmits what was lost once the
//! fault heals.

use std::net::Ipv4Addr;

/// The token bucket of a slow link: one full-size frame, so a packet is never refused for
/// its size and nothing beyond it passes at once.
const SLOW_BURST_BYTES: u32 = 1600;

/// The other end of a faulty link: an address, and a TCP port when only one service there
/// is cut off (Postgres on the host side, whose address the namespaces' health probes
/// share).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its TCP port, when only that service is meant.
    pub port: Option<u16>,
}

impl Peer {
    /// Every packet to and from `ip`.
    pub fn host(ip: Ipv4Addr) -> Peer {
        Peer { ip, port: None }
    }

    /// Only TCP to and from `ip:port`.
    pub fn service(ip: Ipv4Addr, port: u16) -> Peer {
        Peer {
            ip,
            port: Some(port),
        }
    }
}

/// A fault of the links between one namespace and its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkFault {
    /// Nothing passes either way.
    Partition {
        /// The other ends.
        peers: Vec<Peer>,
    },
    /// What the peers send to the namespace is lost; what it sends them arrives (on a TCP
    /// connection already open, a request lands and its answer never comes back).
    AnswersLost {
        /// The other ends.
        peers: Vec<Peer>,
    },
    /// Both ways squeezed through `bytes_per_s`: each packet queues behind those before it.
    Slow {
        /// The other ends.
        peers: Vec<Peer>,
        /// The rate each way.
        bytes_per_s: u32,
    },
}

impl LinkFault {
    /// The nft ruleset (one table named `table`) that makes the fault; `None` for a fault
    /// made with `tc` ([`LinkFault::tc_commands`]).
    pub fn nft_table(&self, table: &str) -> Option<String> {
        let (peers, outbound) = match self {
            LinkFault::Partition { peers } => (peers, true),
            LinkFault::AnswersLost { peers } => (peers, false),
            LinkFault::Slow { .. } => return None,
        };
        let rules = |to_peer: bool| -> String {
            peers
                .iter()
                .map(|peer| {
                    let (addr, port) = if to_peer {
                        ("daddr", "dport")
                    } else {
                        ("saddr", "sport")
                    };
                    let service = peer
                        .port
                        .map_or(String::new(), |p| format!(" tcp {port} {p}"));
                    format!("    ip {addr} {}{service} drop\n", peer.ip)
                })
                .collect()
        };
        let mut text = format!("table ip {table} {{\n");
        text.push_str("  chain inbound {\n    type filter hook input priority 0; policy accept;\n");
        text.push_str(&rules(false));
        text.push_str("  }\n");
        if outbound {
            text.push_str(
                "  chain outbound {\n    type filter hook output priority 0; policy accept;\n",
            );
            text.push_str(&rules(true));
            text.push_str("  }\n");
        }
        text.push_str("}\n");
        Some(text)
    }

    /// The `tc` argument lists that make a slow link: those run inside the namespace (on
    /// `inner_link`, shaping what goes to the peers) and those run on the host side (on
    /// `outer_link`, shaping what comes from them). Empty for an nft fault.
    pub fn tc_commands(
        &self,
        inner_link: &str,
        outer_link: &str,
    ) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
        let LinkFault::Slow { peers, bytes_per_s } = self else {
            return (Vec::new(), Vec::new());
        };
        let shape = |link: &str, toward_peer: bool| -> Vec<Vec<String>> {
            let words = |text: &str| text.split_whitespace().map(str::to_owned).collect();
            let bits = u64::from(*bytes_per_s) * 8;
            let mut commands: Vec<Vec<String>> = vec![
                words(&format!(
                    "qdisc add dev {link} root handle 1: htb default 1"
                )),
                words(&format!(
                    "class add dev {link} parent 1: classid 1:1 htb rate 10gbit"
                )),
                words(&format!(
                    "class add dev {link} parent 1: classid 1:2 htb rate 10gbit"
                )),
                // The rate itself is a `tbf` under the class: it cuts a large (GSO) packet
                // into segments before metering, where `htb` would let one 64 KiB packet
                // through whole. Its `latency` bounds the queue: long enough never to drop.
                words(&format!(
                    "qdisc add dev {link} parent 1:2 handle 20: tbf rate {bits}bit burst {SLOW_BURST_BYTES} latency 60s"
                )),
            ];
            let (addr, port) = if toward_peer {
                ("dst", "dport")
            } else {
                ("src", "sport")
            };
            for peer in peers {
                let service = peer
                    .port
                    .map_or(String::new(), |p| format!(" match ip {port} {p} 0xffff"));
                commands.push(words(&format!(
                    "filter add dev {link} parent 1: protocol ip prio 1 u32 match ip {addr} {}/32{service} flowid 1:2",
                    peer.ip
                )));
            }
            commands
        };
        (shape(inner_link, true), shape(outer_link, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORE: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 12);
    const HOST: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);

    #[test]
    fn a_partition_drops_both_ways_and_only_the_named_service() {
        let fault = LinkFault::Partition {
            peers: vec![Peer::host(STORE), Peer::service(HOST, 5432)],
        };
        let table = fault.nft_table("t").expect("nft");
        assert!(table.contains("hook input"), "{table}");
        assert!(table.contains("hook output"), "{table}");
        assert!(table.contains("ip saddr 10.213.0.12 drop"), "{table}");
        assert!(table.contains("ip daddr 10.213.0.12 drop"), "{table}");
        assert!(
            table.contains("ip saddr 10.213.0.1 tcp sport 5432 drop"),
            "{table}"
        );
        assert!(
            table.contains("ip daddr 10.213.0.1 tcp dport 5432 drop"),
            "{table}"
        );
        assert_eq!(fault.tc_commands("a", "b"), (Vec::new(), Vec::new()));
    }

    #[test]
    fn lost_answers_drop_inbound_only() {
        let fault = LinkFault::AnswersLost {
            peers: vec![Peer::host(STORE)],
        };
        let table = fault.nft_table("t").expect("nft");
        assert!(table.contains("ip saddr 10.213.0.12 drop"), "{table}");
        assert!(!table.contains("hook output"), "{table}");
        assert!(!table.contains("daddr"), "{table}");
    }

    #[test]
    fn a_slow_link_shapes_each_direction_on_its_own_side() {
        let fault = LinkFault::Slow {
            peers: vec![Peer::host(STORE)],
            bytes_per_s: 100,
        };
        assert_eq!(fault.nft_table("t"), None);
        let (inner, outer) = fault.tc_commands("in0", "out0");
        let join = |commands: &[Vec<String>]| {
            commands
                .iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (inner, outer) = (join(&inner), join(&outer));
        assert!(
            inner.contains("dev in0 parent 1:2 handle 20: tbf rate 800bit"),
            "{inner}"
        );
        assert!(
            inner.contains("match ip dst 10.213.0.12/32 flowid 1:2"),
            "{inner}"
        );
        assert!(
            outer.contains("match ip src 10.213.0.12/32 flowid 1:2"),
            "{outer}"
        );
        assert!(!outer.contains("in0"), "{outer}");
    }
}
