//! `roce.*`: RoCE addressing as NCCL uses it. Per RDMA port with link layer Ethernet: the GID
//! NCCL picks and why a given one fails (`roce.gid`), the netdev behind the port (`roce.netdev`),
//! the RoCE MTU the netdev MTU allows (`roce.mtu`), and mlx5 ECN where sysfs exposes it
//! (`roce.qos`). Rules and sources: `crate::roce`.

use crate::model::{Fact, GidEntry, Netdev, Node, RocePort};
use crate::report::{Finding, Status};
use crate::roce::{self, Entry, Family, GidEnv, NcclVersion, TypeRead};
use std::collections::BTreeMap;

/// The NCCL version whose rules apply: `--nccl-version`, else the libnccl.so.2 found on the node
/// (`crate::nccl::config`); `None` when neither is known (the newest rules apply, and findings
/// say so).
pub fn nccl_version(node: &Node) -> Option<NcclVersion> {
    let chosen = crate::nccl::config(node).rules;
    (!chosen.assumed).then_some(chosen.version)
}

/// The Ethernet ports to judge and an `error` for each port of unknown link layer (RoCE or
/// not cannot be told, see [`undecided`]), or the node-level finding that replaces them.
#[allow(clippy::type_complexity)]
fn ports<'a>(id: &str, node: &'a Node) -> Result<(Vec<&'a RocePort>, Vec<Finding>), Vec<Finding>> {
    let undecided = undecided(id, node);
    let list = match &node.health.roce {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => {
            return Err(vec![Finding::new(
                id,
                Status::Error,
                "node",
                "cannot read the rdma ports",
            )
            .evidence(source.clone(), format!("unknown ({reason})"))])
        }
    };
    if list.is_empty() && !undecided.is_empty() {
        return Err(undecided);
    }
    if list.is_empty() {
        let msg = match node.rdma.get() {
            Some(d) if d.is_empty() => "no rdma device".to_string(),
            _ => {
                "no rdma port with link layer Ethernet: no RoCE here (InfiniBand only)".to_string()
            }
        };
        return Err(vec![Finding::new(id, Status::Skip, "node", msg)]);
    }
    Ok((list.iter().collect(), undecided))
}

/// Ports NCCL may use whose link layer is unreadable or damaged: whether they are RoCE, and
/// so whether this check applies, is unknown. An `error` each (never a silent skip: a damaged
/// `link_layer` must not hide a RoCE port's bad GID table); a port known to be down is
/// skipped, as the Ethernet ones are.
fn undecided(id: &str, node: &Node) -> Vec<Finding> {
    let Some(devs) = node.rdma.get() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for d in devs {
        let ports = match &d.ports {
            Fact::Known { value, .. } => value,
            // Its ports unreadable: RoCE or not is unknown for the whole device.
            Fact::Absent { source, reason } => {
                out.push(
                    Finding::new(
                        id,
                        Status::Error,
                        &d.name,
                        format!(
                            "cannot read the ports of {}: whether it has RoCE ports is unknown",
                            d.name
                        ),
                    )
                    .evidence(source.clone(), format!("unknown ({reason})")),
                );
                continue;
            }
        };
        for p in ports.iter().filter(|p| p.link_layer_name().is_none()) {
            let sub = format!("{}/{}", d.name, p.port);
            let src = format!(
                "/sys/class/infiniband/{}/ports/{}/link_layer",
                d.name, p.port
            );
            let seen = p.link_layer.describe(|s| s.clone());
            match p.state_name() {
                Some(s) if s != "ACTIVE" => out.push(
                    Finding::new(
                        id,
                        Status::Skip,
                        &sub,
                        format!("port is {s}: NCCL does not use it (see rdma.ports)"),
                    )
                    .evidence(src, seen),
                ),
                _ => out.push(
                    Finding::new(
                        id,
                        Status::Error,
                        &sub,
                        "cannot tell whether this port is RoCE: its link layer is unreadable or not one the kernel writes (InfiniBand, Ethernet)",
                    )
                    .expected(src, seen, "InfiniBand or Ethernet"),
                ),
            }
        }
    }
    out
}

/// The port's state name (`ACTIVE`), from `rdma.*`'s facts.
fn state<'a>(node: &'a Node, dev: &str, port: u32) -> Option<&'a str> {
    node.rdma
        .get()?
        .iter()
        .find(|d| d.name == dev)?
        .ports
        .get()?
        .iter()
        .find(|p| p.port == port)?
        .state_name()
}

/// A skip for ports NCCL does not use.
fn inactive(id: &str, node: &Node, p: &RocePort) -> Option<Finding> {
    match state(node, &p.device, p.port) {
        Some("ACTIVE") => None,
        s => Some(Finding::new(
            id,
            Status::Skip,
            subject(p),
            format!(
                "port is {}: NCCL does not use it (see rdma.ports)",
                s.unwrap_or("in an unknown state")
            ),
        )),
    }
}

fn not_captured(reason: &str) -> bool {
    reason.starts_with("not in this capture")
}

/// A skip for a port whose tables the capture does not hold.
fn uncaptured(id: &str, p: &RocePort) -> Option<Finding> {
    let reason = p.gids.reason().filter(|r| not_captured(r))?;
    Some(
        Finding::new(
            id,
            Status::Skip,
            subject(p),
            format!("the gid table is {reason}"),
        )
        .evidence(p.gids.source(), format!("unknown ({reason})")),
    )
}

/// The port's netdevs, or the finding that replaces the per-netdev ones.
fn netdev_list<'a>(id: &str, p: &'a RocePort) -> Result<&'a [Netdev], Box<Finding>> {
    match &p.netdevs {
        Fact::Known { value, .. } if !value.is_empty() => Ok(value),
        Fact::Known { source, .. } => Err(Box::new(
            Finding::new(
                id,
                Status::Skip,
                subject(p),
                "no netdev behind this port (see roce.netdev)",
            )
            .evidence(source.clone(), "none"),
        )),
        Fact::Absent { source, reason } => Err(Box::new(
            Finding::new(
                id,
                Status::Skip,
                subject(p),
                format!("the port's netdev is {reason}"),
            )
            .evidence(source.clone(), format!("unknown ({reason})")),
        )),
    }
}

fn subject(p: &RocePort) -> String {
    format!("{}/{}", p.device, p.port)
}

fn port_dir(p: &RocePort) -> String {
    format!("/sys/class/infiniband/{}/ports/{}", p.device, p.port)
}

/// The environment NCCL runs with (the snapshot's, overlaid by the current one).
fn env(node: &Node) -> (GidEnv, Option<String>) {
    match node.env.get() {
        Some(m) => (roce::gid_env(m), None),
        None => (
            roce::gid_env(&BTreeMap::new()),
            Some(format!(
                "environment unknown ({}): NCCL defaults assumed",
                node.env.reason().unwrap_or("absent")
            )),
        ),
    }
}

fn entries(gids: &[GidEntry]) -> Vec<Entry> {
    gids.iter()
        .filter_map(|g| {
            Some(Entry {
                index: g.index,
                gid: roce::parse_gid(&g.gid)?,
                kind: match &g.kind {
                    Fact::Known { value, .. } => TypeRead::Text(value.clone()),
                    Fact::Absent { reason, .. } if reason == "EINVAL" => TypeRead::Einval,
                    Fact::Absent { reason, .. } => TypeRead::Error(reason.clone()),
                },
            })
        })
        .collect()
}

fn type_text(e: &Entry) -> String {
    match &e.kind {
        TypeRead::Text(t) => t.clone(),
        TypeRead::Einval => "type unreadable (EINVAL)".into(),
        TypeRead::Error(r) => format!("type unreadable ({r})"),
    }
}

/// `3 ::ffff:10.0.0.1 RoCE v2 ens1f0np0` per populated entry.
fn table(gids: &[GidEntry], es: &[Entry]) -> String {
    es.iter()
        .map(|e| {
            let nd = gids
                .iter()
                .find(|g| g.index == e.index)
                .and_then(|g| g.ndev.clone())
                .unwrap_or_else(|| "-".into());
            format!(
                "{} {} {} {nd}",
                e.index,
                roce::display(&e.gid),
                type_text(e)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn ndev_of(gids: &[GidEntry], index: u32) -> Option<&str> {
    gids.iter()
        .find(|g| g.index == index)
        .and_then(|g| g.ndev.as_deref())
}

fn wanted(env: &GidEnv) -> String {
    let mut s = format!("{} with RoCE v{}", env.family.short(), env.roce_version);
    if let Some((p, l)) = &env.range {
        let addr = if p.len() == 4 {
            format!("{}.{}.{}.{}", p[0], p[1], p[2], p[3])
        } else {
            let mut b = [0u8; 16];
            b.copy_from_slice(&p[..16.min(p.len())]);
            std::net::Ipv6Addr::from(b).to_string()
        };
        s.push_str(&format!(" in {addr}/{l}"));
    }
    s
}

pub fn gid(node: &Node) -> Vec<Finding> {
    const ID: &str = "roce.gid";
    let (ports, mut out) = match ports(ID, node) {
        Ok(p) => p,
        Err(v) => return v,
    };
    let (env, env_note) = env(node);
    let version = nccl_version(node);
    for p in ports {
        if let Some(f) = inactive(ID, node, p).or_else(|| uncaptured(ID, p)) {
            out.push(f);
            continue;
        }
        let sub = subject(p);
        let gids = match &p.gids {
            Fact::Known { value, .. } => value,
            Fact::Absent { source, reason } => {
                out.push(
                    Finding::new(ID, Status::Error, &sub, "cannot read the gid table")
                        .evidence(source.clone(), format!("unknown ({reason})")),
                );
                continue;
            }
        };
        let es = entries(gids);
        let choice = roce::nccl_gid_index(p.gid_tbl_len, &es, &env, version);
        let best = roce::best_index(&es, &env);
        let mut f = judge_gid(ID, &sub, p, gids, &es, &env, &choice, best);
        f = f.evidence(
            format!("{}/gids, gid_attrs/{{types,ndevs}}", port_dir(p)),
            format!("{} entries; {}", p.gid_tbl_len, table(gids, &es)),
        );
        f = f.evidence(
            "NCCL ncclIbGetGidIndex() (src/transport/net_ib/connect.cc)",
            format!("{}; {}", choice.rules, choice.how),
        );
        if !env.set.is_empty() || !env.notes.is_empty() {
            let mut o = env.set.join(" ");
            for n in &env.notes {
                o.push_str(&format!("; {n}"));
            }
            f = f.evidence("environment", o);
        }
        if let Some(n) = &env_note {
            f = f.evidence("environment", n.clone());
        }
        out.push(f);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn judge_gid(
    id: &str,
    sub: &str,
    p: &RocePort,
    gids: &[GidEntry],
    es: &[Entry],
    env: &GidEnv,
    choice: &roce::Choice,
    best: Option<u32>,
) -> Finding {
    let explicit = env.gid_index.is_some_and(|i| i >= 0);
    let fix_index = |why: &str| -> String {
        match (explicit, best) {
            (true, Some(b)) => format!("{why}: unset NCCL_IB_GID_INDEX (NCCL >= 2.21 then picks GID {b}) or set NCCL_IB_GID_INDEX={b}"),
            (true, None) => format!("{why}; and no GID of this port fits ({}): see the fix below", wanted(env)),
            (false, Some(b)) => format!("{why}: set NCCL_IB_GID_INDEX={b} (NCCL before 2.21 always needs it on RoCE)"),
            (false, None) => why.to_string(),
        }
    };
    let Some(i) = choice.index else {
        let why = choice.failure.clone().unwrap_or_default();
        return Finding::new(id, Status::Fail, sub, format!("NCCL cannot choose a GID: {why}"))
            .fix(fix_index("set NCCL_IB_GID_INDEX to skip the automatic selection, or fix the unreadable gid_attrs entries (inside a container: expose the host's /sys/class/infiniband)"));
    };
    let e = es.iter().find(|e| e.index == i);
    let nd = ndev_of(gids, i)
        .map(|n| format!(", {n}"))
        .unwrap_or_default();
    let Some(e) = e else {
        return Finding::new(
            id,
            Status::Fail,
            sub,
            format!(
                "NCCL uses GID {i} ({}), which is empty: connections from this port fail",
                choice.how
            ),
        )
        .fix(fix_index("point NCCL at a populated GID"));
    };
    let shown = format!("GID {i} ({}, {}{nd})", roce::display(&e.gid), type_text(e));
    let netdevs: Vec<&str> = p
        .netdevs
        .get()
        .map(|l| l.iter().map(|n| n.name.as_str()).collect())
        .unwrap_or_default();
    let nd_list = if netdevs.is_empty() {
        "the port's netdev".to_string()
    } else {
        netdevs.join(", ")
    };
    let has_family = es
        .iter()
        .any(|x| roce::family(&x.gid) == env.family && roce::valid(&x.gid));
    let addr_fix = |fam: Family| {
        format!(
            "give {nd_list} an {} address (`ip addr add <addr>/<len> dev {}`): the kernel then adds its RoCE v1 and v2 GIDs, and NCCL >= 2.21 picks the v2 one",
            fam.short(),
            netdevs.first().copied().unwrap_or("<netdev>")
        )
    };
    if !roce::valid(&e.gid) || roce::family(&e.gid) != env.family {
        let why = if env.range.is_some() && has_family {
            format!(
                "no {} GID of this port lies in NCCL_IB_ADDR_RANGE",
                env.family.short()
            )
        } else if !has_family {
            format!(
                "{nd_list} carries no {} address, so the port has no {} GID",
                env.family.short(),
                env.family.short()
            )
        } else {
            format!("it is not an {} GID", env.family.short())
        };
        let msg = format!(
            "NCCL uses {shown}, a {} GID: {why}; link-local and wrong-family GIDs do not route, so connections to other nodes fail or hang",
            if roce::link_local(&e.gid) { "link-local" } else { "non-routable" }
        );
        let fix = if explicit {
            fix_index("NCCL_IB_GID_INDEX points at this GID")
        } else if env.range.is_some() && has_family {
            "fix NCCL_IB_ADDR_RANGE to the subnet of this port's addresses (or unset it)"
                .to_string()
        } else {
            addr_fix(env.family)
        };
        return Finding::new(id, Status::Fail, sub, msg)
            .expected("selected GID", shown.clone(), wanted(env))
            .fix(fix);
    }
    let ver = match &e.kind {
        TypeRead::Text(t) => roce::roce_version(t),
        _ => None,
    };
    match ver {
        Some(v) if v == env.roce_version => Finding::new(
            id,
            Status::Pass,
            sub,
            format!("NCCL uses {shown}"),
        ),
        // Unknown is not good news: a lost or emptied gid_attrs/types/<n> of a RoCE v1 GID
        // made a failing port a warning and the node exit 0 (the mutation sweep).
        None => Finding::new(
            id,
            Status::Error,
            sub,
            format!("NCCL uses {shown}, whose RoCE type cannot be read: it may not be RoCE v{}", env.roce_version),
        )
        .expected("selected GID", shown.clone(), wanted(env))
        .fix("read `ibv_devinfo -v -d <dev>` GID lines; inside a container expose the host's /sys/class/infiniband/<dev>/ports/<p>/gid_attrs"),
        Some(v) => {
            let v2_any = es.iter().any(|x| matches!(&x.kind, TypeRead::Text(t) if roce::roce_version(t) == Some(env.roce_version)));
            let why = if v2_any {
                format!("the RoCE v{} GIDs of this port do not fit ({})", env.roce_version, wanted(env))
            } else {
                format!("the GID table has no RoCE v{} entry at all", env.roce_version)
            };
            Finding::new(
                id,
                Status::Fail,
                sub,
                format!(
                    "NCCL uses {shown}, RoCE v{v} where v{} is asked for: {why}; RoCE v1 is not routable, and a node on v1 cannot talk to peers on v2",
                    env.roce_version
                ),
            )
            .expected("selected GID", shown.clone(), wanted(env))
            .fix(if explicit {
                fix_index("NCCL_IB_GID_INDEX points at a RoCE v1 GID")
            } else {
                "enable RoCE v2 on this NIC (ConnectX-4 and later support it; check the firmware and driver, and that `ibv_devinfo -v` lists `RoCE v2` GIDs), then restart the jobs; only if every node of the fabric runs RoCE v1 on one L2 domain, set NCCL_IB_ROCE_VERSION_NUM=1 everywhere".to_string()
            })
        }
    }
}

pub fn netdev(node: &Node) -> Vec<Finding> {
    const ID: &str = "roce.netdev";
    let (ports, mut out) = match ports(ID, node) {
        Ok(p) => p,
        Err(v) => return v,
    };
    let (env, _) = env(node);
    for p in ports {
        if let Some(f) = inactive(ID, node, p) {
            out.push(f);
            continue;
        }
        if let Some(f) = uncaptured(ID, p) {
            out.push(f);
            continue;
        }
        let sub = subject(p);
        let list = match &p.netdevs {
            Fact::Known { value, .. } => value,
            Fact::Absent { source, reason } => {
                out.push(
                    Finding::new(
                        ID,
                        Status::Skip,
                        &sub,
                        format!("the port's netdev is {reason}"),
                    )
                    .evidence(source.clone(), format!("unknown ({reason})")),
                );
                continue;
            }
        };
        if list.is_empty() {
            out.push(
                Finding::new(ID, Status::Fail, &sub, "no netdev behind this RoCE port: no GID names one and the PCI function has none")
                    .expected(format!("{}/gid_attrs/ndevs, /sys/class/infiniband/{}/device/net", port_dir(p), p.device), "none", "the Ethernet interface of the port")
                    .fix("load the Ethernet driver of the NIC (mlx5_core provides both), and check `rdma link show` / `ibdev2netdev`"),
            );
            continue;
        }
        let gids = p.gids.get().map(Vec::as_slice).unwrap_or(&[]);
        for nd in list {
            out.push(netdev_finding(ID, &sub, nd, gids, &env, &p.gids));
        }
    }
    out
}

fn netdev_finding(
    id: &str,
    sub: &str,
    nd: &Netdev,
    gids: &[GidEntry],
    env: &GidEnv,
    gid_fact: &Fact<Vec<GidEntry>>,
) -> Finding {
    let op_src = nd.operstate.source().to_string();
    let state = match &nd.operstate {
        Fact::Known { value, .. } => value.as_str(),
        Fact::Absent { reason, .. } => {
            return Finding::new(
                id,
                Status::Error,
                sub,
                format!("cannot read the state of {}", nd.name),
            )
            .evidence(op_src, format!("unknown ({reason})"));
        }
    };
    let addrs: Vec<String> = gids
        .iter()
        .filter(|g| g.ndev.as_deref() == Some(nd.name.as_str()))
        .filter_map(|g| roce::parse_gid(&g.gid))
        .filter(|g| roce::family(g) == env.family && roce::valid(g))
        .map(|g| roce::display(&g))
        .fold(Vec::new(), |mut v, a| {
            if !v.contains(&a) {
                v.push(a);
            }
            v
        });
    let observed = format!("{} {state}", nd.name);
    if state != "up" {
        let status = if state == "unknown" {
            Status::Warn
        } else {
            Status::Fail
        };
        return Finding::new(
            id,
            status,
            sub,
            format!("netdev {} is {state}: the RoCE port has no usable link", nd.name),
        )
        .expected(op_src, observed, "up")
        .fix(format!(
            "`ip link set {} up`; `ip -br link show {}` must show LOWER_UP (no carrier: cable, transceiver or switch port); for a bond, check its members",
            nd.name, nd.name
        ));
    }
    if gid_fact.get().is_none() {
        return Finding::new(
            id,
            Status::Error,
            sub,
            format!(
                "{} is up, but its addresses cannot be read from the gid table",
                nd.name
            ),
        )
        .evidence(gid_fact.source(), gid_fact.describe(|_| String::new()));
    }
    if addrs.is_empty() {
        return Finding::new(
            id,
            Status::Fail,
            sub,
            format!(
                "netdev {} is up but carries no {} address: the port has no routable {} GID for NCCL",
                nd.name,
                env.family.short(),
                env.family.short()
            ),
        )
        .expected(
            format!("{} (GIDs whose gid_attrs/ndevs is {})", gid_fact.source(), nd.name),
            "none",
            format!("an {} address", env.family.short()),
        )
        .fix(format!(
            "add the node's RDMA address: `ip addr add <addr>/<len> dev {}` (persist it in netplan / NetworkManager / ifcfg); on a bond, on the bond, not its members",
            nd.name
        ));
    }
    Finding::new(
        id,
        Status::Pass,
        sub,
        format!("{} up, {} {}", nd.name, env.family.short(), addrs.join(" ")),
    )
    .evidence(op_src, observed)
    .evidence(gid_fact.source(), addrs.join(" "))
}

pub fn mtu(node: &Node) -> Vec<Finding> {
    const ID: &str = "roce.mtu";
    let (ports, mut out) = match ports(ID, node) {
        Ok(p) => p,
        Err(v) => return v,
    };
    for p in ports {
        if let Some(f) = inactive(ID, node, p).or_else(|| uncaptured(ID, p)) {
            out.push(f);
            continue;
        }
        let sub = subject(p);
        let list = match netdev_list(ID, p) {
            Ok(l) => l,
            Err(f) => {
                out.push(*f);
                continue;
            }
        };
        for nd in list {
            let m = match &nd.mtu {
                Fact::Known { value, .. } => *value,
                Fact::Absent { source, reason } => {
                    out.push(
                        Finding::new(
                            ID,
                            Status::Error,
                            &sub,
                            format!("cannot read the mtu of {}", nd.name),
                        )
                        .evidence(source.clone(), format!("unknown ({reason})")),
                    );
                    continue;
                }
            };
            let active = roce::roce_active_mtu(m);
            let observed = format!("{} mtu {m}: RoCE active MTU {active}", nd.name);
            if active >= 4096 {
                out.push(
                    Finding::new(
                        ID,
                        Status::Pass,
                        &sub,
                        format!("{} mtu {m}: RoCE MTU 4096", nd.name),
                    )
                    .evidence(nd.mtu.source(), observed),
                );
            } else {
                out.push(
                    Finding::new(
                        ID,
                        Status::Warn,
                        &sub,
                        format!(
                            "{} mtu {m} caps the RoCE MTU at {active} bytes: NCCL uses the smaller active MTU of the two ends, so every connection of this port carries {}x the packets of a 4096-byte MTU",
                            nd.name,
                            4096u32.checked_div(active).unwrap_or(0)
                        ),
                    )
                    .expected(nd.mtu.source(), observed, format!("netdev mtu >= {} (RoCE MTU 4096)", roce::NETDEV_MTU_FOR_4096))
                    .fix(format!(
                        "`ip link set dev {} mtu 9000` (at least {} for RoCE 4096; the kernel reserves 96 bytes of RoCE headers, so mtu 4096 gives only 2048), on every node and on the switch ports; persist it in netplan / NetworkManager",
                        nd.name,
                        roce::NETDEV_MTU_FOR_4096
                    )),
                );
            }
        }
    }
    out
}

pub fn qos(node: &Node) -> Vec<Finding> {
    const ID: &str = "roce.qos";
    let (ports, mut out) = match ports(ID, node) {
        Ok(p) => p,
        Err(v) => return v,
    };
    for p in ports {
        if let Some(f) = inactive(ID, node, p).or_else(|| uncaptured(ID, p)) {
            out.push(f);
            continue;
        }
        let sub = subject(p);
        let list = match netdev_list(ID, p) {
            Ok(l) => l,
            Err(f) => {
                out.push(*f);
                continue;
            }
        };
        let cnp = cnp_counters(node, p);
        for nd in list {
            let (np, rp) = match (&nd.ecn_np, &nd.ecn_rp) {
                (
                    Fact::Known {
                        value: Some(np), ..
                    },
                    Fact::Known {
                        value: Some(rp), ..
                    },
                ) => (np, rp),
                (Fact::Known { value: None, .. }, _) | (_, Fact::Known { value: None, .. }) => {
                    out.push(Finding::new(
                        ID,
                        Status::Skip,
                        &sub,
                        format!("{}: the driver exposes no ECN settings in sysfs (MOFED / DOCA-OFED mlx5 has /sys/class/net/<if>/ecn; upstream drivers keep ECN and PFC behind netlink: `mlnx_qos -i {}` or `dcb pfc show dev {}`)", nd.name, nd.name, nd.name),
                    ));
                    continue;
                }
                (a, b) => {
                    let f = if a.get().is_none() { a } else { b };
                    let reason = f.reason().unwrap_or_default();
                    let status = if reason.starts_with("not in this capture") {
                        Status::Skip
                    } else {
                        Status::Error
                    };
                    out.push(
                        Finding::new(
                            ID,
                            status,
                            &sub,
                            format!("cannot read the ECN settings of {}", nd.name),
                        )
                        .evidence(f.source(), format!("unknown ({reason})")),
                    );
                    continue;
                }
            };
            let on = |m: &BTreeMap<u8, bool>| -> Vec<u8> {
                m.iter().filter(|(_, v)| **v).map(|(k, _)| *k).collect()
            };
            let both: Vec<u8> = on(np)
                .into_iter()
                .filter(|k| rp.get(k) == Some(&true))
                .collect();
            let observed = format!(
                "roce_np enabled on priorities [{}], roce_rp on [{}]",
                prios(&on(np)),
                prios(&on(rp))
            );
            let src = nd
                .ecn_np
                .source()
                .trim_end_matches("/roce_np/enable")
                .to_string();
            let mut f = if both.is_empty() {
                Finding::new(
                    ID,
                    Status::Warn,
                    &sub,
                    format!("ECN congestion control (DCQCN) is off on every priority of {}: congestion turns into drops and PFC pauses instead of rate reduction", nd.name),
                )
                .expected(src, observed, "notification and reaction points enabled on the RoCE priority (MOFED default: all)")
                .fix(format!(
                    "enable it on the RoCE priority (usually 3): `echo 1 > /sys/class/net/{n}/ecn/roce_np/enable/3; echo 1 > /sys/class/net/{n}/ecn/roce_rp/enable/3` (or all 0-7), on every node, and mark ECN on the switches; check PFC with `mlnx_qos -i {n}`",
                    n = nd.name
                ))
            } else {
                Finding::new(
                    ID,
                    Status::Pass,
                    &sub,
                    format!(
                        "{}: ECN (DCQCN) enabled on priorities {}",
                        nd.name,
                        prios(&both)
                    ),
                )
                .evidence(src, observed)
            };
            if let Some(c) = &cnp {
                f = f.evidence(format!("{}/hw_counters", port_dir(p)), c.clone());
            }
            out.push(f);
        }
    }
    out
}

fn prios(v: &[u8]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// CNP activity from hw_counters, for evidence (`np_cnp_sent 12, rp_cnp_handled 3`).
fn cnp_counters(node: &Node, p: &RocePort) -> Option<String> {
    let pc = node
        .health
        .port_counters
        .get()?
        .iter()
        .find(|c| c.device == p.device && c.port == p.port)?;
    let hw = pc.hw_counters.get()?;
    let v: Vec<String> = crate::counters::CNP
        .iter()
        .filter_map(|k| hw.get(*k).map(|n| format!("{k} {n}")))
        .collect();
    (!v.is_empty()).then(|| v.join(", "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::{empty_node, rdma, with};

    fn entry(i: u32, g: &str, t: &str, nd: &str) -> GidEntry {
        GidEntry {
            index: i,
            gid: g.into(),
            kind: Fact::known(t.to_string(), "test"),
            ndev: Some(nd.into()),
        }
    }

    fn nd(state: &str, mtu: u32, ecn: Option<bool>) -> Netdev {
        let e = |v: Option<bool>| {
            Fact::known(
                v.map(|on| (0u8..8).map(|p| (p, on)).collect::<BTreeMap<u8, bool>>()),
                "/sys/class/net/eth0/ecn/roce_np/enable",
            )
        };
        Netdev {
            name: "eth0".into(),
            operstate: Fact::known(state.to_string(), "/sys/class/net/eth0/operstate"),
            mtu: Fact::known(mtu, "/sys/class/net/eth0/mtu"),
            ecn_np: e(ecn),
            ecn_rp: e(ecn),
        }
    }

    /// One ACTIVE RoCE port with this GID table and netdev.
    fn node(gids: Vec<GidEntry>, nd: Netdev) -> Node {
        let mut n = with(
            empty_node(),
            vec![],
            vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE")],
        );
        n.health.roce = Fact::known(
            vec![RocePort {
                device: "mlx5_0".into(),
                port: 1,
                gid_tbl_len: 4,
                gids: Fact::known(gids, "/sys/class/infiniband/mlx5_0/ports/1/gids"),
                netdevs: Fact::known(vec![nd], "test"),
            }],
            "test",
        );
        n
    }

    fn healthy_gids() -> Vec<GidEntry> {
        vec![
            entry(
                0,
                "fe80:0000:0000:0000:0ac0:ebff:fef0:28b2",
                "IB/RoCE v1",
                "eth0",
            ),
            entry(
                1,
                "fe80:0000:0000:0000:0ac0:ebff:fef0:28b2",
                "RoCE v2",
                "eth0",
            ),
            entry(
                2,
                "0000:0000:0000:0000:0000:ffff:0a00:0001",
                "IB/RoCE v1",
                "eth0",
            ),
            entry(
                3,
                "0000:0000:0000:0000:0000:ffff:0a00:0001",
                "RoCE v2",
                "eth0",
            ),
        ]
    }

    #[test]
    fn a_netdev_without_an_address_fails_gid_and_netdev() {
        let n = node(healthy_gids()[..2].to_vec(), nd("up", 9000, Some(true)));
        let g = gid_check(&n);
        assert_eq!(g.status, Status::Fail);
        assert!(
            g.message
                .contains("a link-local GID: eth0 carries no IPv4 address"),
            "{}",
            g.message
        );
        assert!(g.remediation.as_deref().unwrap().contains("ip addr add"));
        let f = netdev_check(&n);
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("carries no IPv4 address"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_selected_gid_whose_type_cannot_be_read_is_an_error() {
        assert_eq!(
            gid_check(&node(healthy_gids(), nd("up", 9000, Some(true)))).status,
            Status::Pass
        );
        // Only v1 entries around the one whose type is lost: NCCL may pick it, and it may be v1.
        let mut g: Vec<GidEntry> = healthy_gids().into_iter().step_by(2).collect();
        g[1].kind = Fact::absent(
            "/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/2",
            "not found",
        );
        let f = gid_check(&node(g, nd("up", 9000, Some(true))));
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert!(f.message.contains("cannot be read"), "{}", f.message);
    }

    #[test]
    fn a_down_netdev_fails() {
        let n = node(healthy_gids(), nd("down", 9000, Some(true)));
        let f = netdev_check(&n);
        assert_eq!(f.status, Status::Fail);
        assert!(f
            .remediation
            .as_deref()
            .unwrap()
            .contains("ip link set eth0 up"));
        let n = node(healthy_gids(), nd("unknown", 9000, Some(true)));
        assert_eq!(netdev_check(&n).status, Status::Warn);
    }

    #[test]
    fn mtu_1500_and_4096_warn_9000_passes() {
        for (m, status, active) in [
            (1500, Status::Warn, "1024"),
            (4096, Status::Warn, "2048"),
            (9000, Status::Pass, "4096"),
        ] {
            let f = &mtu(&node(healthy_gids(), nd("up", m, Some(true))))[0];
            assert_eq!(f.status, status, "{m}");
            assert!(
                f.evidence[0]
                    .observed
                    .ends_with(&format!("RoCE active MTU {active}")),
                "{m}: {:?}",
                f.evidence
            );
        }
    }

    #[test]
    fn ecn_off_warns_and_no_ecn_directory_skips() {
        assert_eq!(
            qos(&node(healthy_gids(), nd("up", 9000, Some(false))))[0].status,
            Status::Warn
        );
        assert_eq!(
            qos(&node(healthy_gids(), nd("up", 9000, None)))[0].status,
            Status::Skip
        );
        assert_eq!(
            qos(&node(healthy_gids(), nd("up", 9000, Some(true))))[0].status,
            Status::Pass
        );
    }

    #[test]
    fn inactive_ports_and_ib_only_nodes_skip() {
        let mut n = node(healthy_gids(), nd("up", 9000, Some(true)));
        n.rdma = Fact::known(vec![rdma("mlx5_0", "0000:19:00.0", "1: DOWN")], "test");
        assert_eq!(super::gid(&n)[0].status, Status::Skip);
        let mut n = with(
            empty_node(),
            vec![],
            vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE")],
        );
        n.health.roce = Fact::known(vec![], "test");
        let f = super::netdev(&n);
        assert_eq!(f[0].status, Status::Skip);
        assert!(f[0].message.contains("InfiniBand only"));
    }

    fn gid_check(n: &Node) -> Finding {
        super::gid(n).remove(0)
    }
    fn netdev_check(n: &Node) -> Finding {
        super::netdev(n).remove(0)
    }
}
