//! Network namespaces for a stack whose links can be cut: real kernel faults, no mocks.
//!
//! A [`NetLab`] is one Linux bridge on the host (`kfn<slot>br`, address `10.213.<slot>.1/24`)
//! and one network namespace per part put on it (`kfn<slot>-<name>`), each joined to the
//! bridge by a veth pair and given `10.213.<slot>.<10+i>`. The namespaces have no default
//! route: from inside one, only the bridge's subnet (the other namespaces and the host side)
//! is reachable, so nothing a part does can leave the machine. Postgres and the demo upstream
//! stay on the host side, reached at the bridge's address.
//!
//! Faults ([`LinkFault`], `fault.rs`) act inside one namespace, on the traffic between it and
//! given peers: nftables rules drop packets (a partition, or one direction only), and an
//! `htb` class squeezes them through a few hundred bytes a second (a slow link). This
//! kernel has no `tc netem` (checked: "Specified qdisc kind is unknown"), nor `fq`, so no
//! qdisc adds a fixed delay; of the qdiscs it has (`tbf`, `htb`, `pfifo`, `ingress`,
//! `clsact`) a rate limit is what makes latency: each packet waits behind those queued
//! before it, as on a congested narrow link.
//!
//! Everything a lab creates carries its slot in its name. The slot is held by a lock on
//! `/run/keyflight-net/slot-<n>.lock` for the lab's life (released by the kernel when the
//! process dies, however it dies), and whatever carries the name of a slot nobody holds is
//! a crashed run's leftover: [`NetLab::create`] removes it first. `Drop` removes the lab's
//! own namespaces and bridge.
//!
//! Needs root (`CAP_NET_ADMIN`), `ip` and `nft` (`make net-prereqs`); [`NetLab::create`]
//! says which is missing.

mod fault;

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub use fault::{LinkFault, Peer};

/// Where slot locks live (a tmpfs: cleared at boot, as the namespaces are).
const LOCK_DIR: &str = "/run/keyflight-net";

/// How many labs may run side by side on one machine.
const SLOTS: u8 = 64;

/// The first two octets of every lab's subnet (private, RFC 1918): `10.213.<slot>.0/24`.
const SUBNET_PREFIX: [u8; 2] = [10, 213];

/// The host octet of the first namespace.
const FIRST_HOST: u8 = 10;

/// One namespace of a lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsHost {
    /// The namespace's name (`ip netns exec <netns>`).
    pub netns: String,
    /// Its address on the lab's subnet.
    pub ip: Ipv4Addr,
    /// The veth end inside the namespace.
    inner_link: String,
    /// The veth end on the host side (a port of the bridge).
    outer_link: String,
}

/// A fault applied by [`NetLab::apply`], to heal with [`NetLab::heal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CutId(u32);

/// What [`NetLab::heal`] undoes.
#[derive(Debug)]
enum Applied {
    /// An nft table in a namespace.
    Table { netns: String, table: String },
    /// Root qdiscs: the one inside the namespace and the one on the host side.
    Shaped {
        netns: String,
        inner_link: String,
        outer_link: String,
    },
}

/// A bridge and the namespaces on it; removed when dropped.
#[derive(Debug)]
pub struct NetLab {
    slot: u8,
    bridge: String,
    hosts: Vec<NsHost>,
    applied: Mutex<Vec<(CutId, Applied)>>,
    /// Held for the lab's life: the slot is ours.
    _lock: File,
}

impl NetLab {
    /// Takes a free slot (removing what crashed runs left in any slot nobody holds), and
    /// creates its bridge. An error says what is missing (root, `ip`, `nft`).
    pub fn create() -> Result<NetLab, String> {
        preflight()?;
        std::fs::create_dir_all(LOCK_DIR).map_err(|e| format!("create {LOCK_DIR}: {e}"))?;
        let mut mine = None;
        for slot in 0..SLOTS {
            let Some(lock) = try_lock_slot(slot)? else {
                continue;
            };
            remove_slot_leftovers(slot);
            if mine.is_none() && subnet_unused(slot) {
                mine = Some((slot, lock));
            }
        }
        let (slot, lock) =
            mine.ok_or_else(|| format!("all {SLOTS} network lab slots are in use"))?;
        let lab = NetLab {
            slot,
            bridge: format!("kfn{slot}br"),
            hosts: Vec::new(),
            applied: Mutex::new(Vec::new()),
            _lock: lock,
        };
        let cidr = format!("{}/24", lab.host_side_ip());
        run(ip(&["link", "add", &lab.bridge, "type", "bridge"]))?;
        run(ip(&["addr", "add", &cidr, "dev", &lab.bridge]))?;
        run(ip(&["link", "set", &lab.bridge, "up"]))?;
        Ok(lab)
    }

    /// The host side's address on the lab's subnet (the bridge's): where the namespaces
    /// reach Postgres and the upstream.
    pub fn host_side_ip(&self) -> Ipv4Addr {
        let [a, b] = SUBNET_PREFIX;
        Ipv4Addr::new(a, b, self.slot, 1)
    }

    /// The lab's subnet in CIDR notation (`10.213.<slot>.0/24`).
    pub fn subnet(&self) -> String {
        let [a, b] = SUBNET_PREFIX;
        format!("{a}.{b}.{}.0/24", self.slot)
    }

    /// Creates namespace `name` (short: `e0`, `s1`) on the bridge; returns its index.
    pub fn add_host(&mut self, name: &str) -> Result<usize, String> {
        let index = self.hosts.len();
        let octet = u8::try_from(usize::from(FIRST_HOST) + index)
            .map_err(|_| "too many namespaces in one lab".to_owned())?;
        let [a, b] = SUBNET_PREFIX;
        let host = NsHost {
            netns: format!("kfn{}-{name}", self.slot),
            ip: Ipv4Addr::new(a, b, self.slot, octet),
            inner_link: format!("kfn{}{name}i", self.slot),
            outer_link: format!("kfn{}{name}", self.slot),
        };
        if host.inner_link.len() > 15 {
            return Err(format!(
                "namespace name `{name}` is too long for a link name"
            ));
        }
        run(ip(&["netns", "add", &host.netns]))?;
        // Pushed before the links exist, so a failure below is still cleaned up by Drop.
        self.hosts.push(host.clone());
        run(ip(&[
            "link",
            "add",
            &host.outer_link,
            "type",
            "veth",
            "peer",
            "name",
            &host.inner_link,
            "netns",
            &host.netns,
        ]))?;
        run(ip(&[
            "link",
            "set",
            &host.outer_link,
            "master",
            &self.bridge,
            "up",
        ]))?;
        let cidr = format!("{}/24", host.ip);
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", &cidr, "dev", &host.inner_link],
            vec!["link", "set", &host.inner_link, "up"],
        ] {
            run(in_netns(&host.netns, ip(&args)))?;
        }
        Ok(index)
    }

    /// Namespace `index`.
    pub fn host(&self, index: usize) -> &NsHost {
        &self.hosts[index]
    }

    /// `command`, run inside namespace `index` (`ip netns exec`, which execs the program:
    /// the child's pid is the program's, so signals reach it).
    pub fn command_in(&self, index: usize, command: Command) -> Command {
        in_netns(&self.hosts[index].netns, command)
    }

    /// Applies `fault` to the traffic between namespace `index` and the fault's peers.
    pub fn apply(&self, index: usize, fault: &LinkFault) -> Result<CutId, String> {
        let host = &self.hosts[index];
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let id = CutId(applied.last().map_or(0, |(CutId(last), _)| last + 1));
        let undo = match fault.nft_table(&table_name(id)) {
            Some(rules) => {
                run_with_input(in_netns(&host.netns, nft(&["-f", "-"])), &rules)?;
                Applied::Table {
                    netns: host.netns.clone(),
                    table: table_name(id),
                }
            }
            None => {
                let (inner, outer) = fault.tc_commands(&host.inner_link, &host.outer_link);
                for args in &inner {
                    run(in_netns(&host.netns, tc(args)))?;
                }
                for args in &outer {
                    run(tc(args))?;
                }
                Applied::Shaped {
                    netns: host.netns.clone(),
                    inner_link: host.inner_link.clone(),
                    outer_link: host.outer_link.clone(),
                }
            }
        };
        applied.push((id, undo));
        Ok(id)
    }

    /// Undoes a fault [`NetLab::apply`] applied (nothing when it was healed already).
    pub fn heal(&self, id: CutId) -> Result<(), String> {
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let Some(position) = applied.iter().position(|(cut, _)| *cut == id) else {
            return Ok(());
        };
        let (_, undo) = applied.remove(position);
        match undo {
            Applied::Table { netns, table } => {
                run(in_netns(&netns, nft(&["delete", "table", "ip", &table])))
            }
            Applied::Shaped {
                netns,
                inner_link,
                outer_link,
            } => {
                run(in_netns(
                    &netns,
                    tc(&["qdisc", "del", "dev", &inner_link, "root"]),
                ))?;
                run(tc(&["qdisc", "del", "dev", &outer_link, "root"]))
            }
        }
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // The host-side ends first: a namespace is torn down asynchronously, and its veth
        // pair would linger a moment after `netns del`.
        for host in &self.hosts {
            quiet(ip(&["link", "del", &host.outer_link]));
            quiet(ip(&["netns", "del", &host.netns]));
        }
        quiet(ip(&["link", "del", &self.bridge]));
    }
}

fn table_name(id: CutId) -> String {
    format!("keyflight_cut_{}", id.0)
}

/// Root, `ip` and `nft`: what a lab needs, with how to get it.
fn preflight() -> Result<(), String> {
    if !crate::os::current_uid_is_root() {
        return Err(
            "network namespaces need root (CAP_NET_ADMIN): run this test as root, as CI does"
                .to_owned(),
        );
    }
    for (program, how) in [
        ("ip", "apt-get install -y iproute2"),
        ("nft", "make net-prereqs (apt-get install -y nftables)"),
        ("tc", "apt-get install -y iproute2"),
    ] {
        let found = Command::new(program)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(format!("`{program}` not found: {how}"));
        }
    }
    Ok(())
}

/// Locks `slot`'s file; `None` when another live process holds it.
fn try_lock_slot(slot: u8) -> Result<Option<File>, String> {
    let path = Path::new(LOCK_DIR).join(format!("slot-{slot}.lock"));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("lock {}: {e}", path.display())),
    }
}

/// Removes what a crashed run left under `slot` (its namespaces and bridge).
fn remove_slot_leftovers(slot: u8) {
    let prefix = format!("kfn{slot}-");
    let listed = Command::new("ip").args(["netns", "list"]).output();
    let names = listed
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    for name in names
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        if name.starts_with(&prefix) {
            quiet(ip(&["netns", "del", name]));
        }
    }
    // The bridge `kfn<slot>br` and the host-side veth ends `kfn<slot><name>` (a name
    // starts with a letter, so slot 1 never takes slot 10's links).
    let links = std::fs::read_dir("/sys/class/net").into_iter().flatten();
    for link in links.filter_map(|entry| entry.ok()?.file_name().into_string().ok()) {
        let ours = link
            .strip_prefix(&format!("kfn{slot}"))
            .and_then(|rest| rest.chars().next())
            .is_some_and(|first| first.is_ascii_alphabetic());
        if ours {
            quiet(ip(&["link", "del", &link]));
        }
    }
}

/// Whether no interface of the host already has an address in `slot`'s subnet.
fn subnet_unused(slot: u8) -> bool {
    let [a, b] = SUBNET_PREFIX;
    let needle = format!("inet {a}.{b}.{slot}.");
    Command::new("ip")
        .args(["-4", "-o", "addr"])
        .output()
        .map(|out| !String::from_utf8_lossy(&out.stdout).contains(&needle))
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> Command {
    let mut command = Command::new("ip");
    command.args(args);
    command
}

fn nft(args: &[&str]) -> Command {
    let mut command = Command::new("nft");
    command.args(args);
    command
}

fn tc(args: &[impl AsRef<std::ffi::OsStr>]) -> Command {
    let mut command = Command::new("tc");
    command.args(args);
    command
}

/// `command` inside `netns`, with its environment and working directory.
fn in_netns(netns: &str, command: Command) -> Command {
    let mut wrapped = Command::new("ip");
    wrapped
        .args(["netns", "exec", netns])
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

fn run(command: Command) -> Result<(), String> {
    run_with_input(command, "")
}

/// Runs `command` with `input` on its stdin; an error with its output when it fails.
fn run_with_input(mut command: Command, input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {command:?}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("write to {command:?}: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("wait for {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Runs a clean-up command whose failure changes nothing (it was gone already).
fn quiet(mut command: Command) {
    let _ = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
