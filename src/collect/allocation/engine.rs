//! Who this process is in the allocation, from the engine that started it (never a launcher of
//! our own): its rank, the world size, its node's name, rank 0's address and the job.
//!
//! | engine | rank | world | node | rank 0 |
//! |---|---|---|---|---|
//! | Slurm (`srun`, a job step, a prolog) | `SLURM_PROCID` | `SLURM_NTASKS` (`SLURM_NPROCS`) | `SLURMD_NODENAME` | the first node of `SLURM_STEP_NODELIST` (`SLURM_JOB_NODELIST`), port from the job and step ids |
//! | Open MPI (`mpirun -N 1`) | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | host name | `--rendezvous` |
//! | PMI (MPICH's Hydra) | `PMI_RANK` | `PMI_SIZE` | host name | `--rendezvous` |
//! | torchrun (`--nproc-per-node 1`) | `RANK` | `WORLD_SIZE` | host name | `MASTER_ADDR`, port `MASTER_PORT` + 1 (torchrun's agent holds `MASTER_PORT`) |
//! | Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` | `--world` | `NODE_NAME` (the downward API), else host name | `--rendezvous` (rank 0's pod through the headless service) |
//!
//! The flags `--rank`, `--world`, `--rendezvous`, `--node-name` win over any engine.

use std::collections::BTreeMap;

/// Who this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `slurm`, `openmpi`, `pmi`, `torchrun`, `kubernetes`, `flags`.
    pub engine: String,
    pub rank: u32,
    pub world: u32,
    pub node: String,
    /// `HOST:PORT` of rank 0.
    pub rendezvous: String,
    pub job: Option<String>,
    /// The nodes in rank order, when the engine says which rank runs where (so that a rank
    /// that never joins can be named by its node).
    pub expected_nodes: Vec<String>,
}

/// What the command line says (each wins over the engine).
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub rank: Option<u32>,
    pub world: Option<u32>,
    pub rendezvous: Option<String>,
    pub node: Option<String>,
    pub nodes: Vec<String>,
    /// The port when the engine gives rank 0's host only.
    pub port: Option<u16>,
}

/// The default port for an engine that gives no port: 29400 (torchrun's c10d default plus
/// one hundred), or for Slurm one derived from the job and step, so that two preflights on
/// one node do not collide.
pub const DEFAULT_PORT: u16 = 29400;

fn num(env: &BTreeMap<String, String>, k: &str) -> Result<Option<u32>, String> {
    match env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("{k}={v:?} is not a number")),
    }
}

/// Expand a Slurm host list (`gpu-[01-04,07],login1`, `rack[1-2]-n[1-2]`) into names, at most
/// `cap` of them.
pub fn expand_hostlist(list: &str, cap: usize) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0usize;
    let bytes: Vec<char> = list.chars().collect();
    let mut items = Vec::new();
    for (i, c) in bytes.iter().enumerate() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(bytes[start..i].iter().collect::<String>());
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("unbalanced `]` in host list {list:?}"));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced `[` in host list {list:?}"));
    }
    items.push(bytes[start..].iter().collect::<String>());
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        expand_one(item, cap, &mut out)?;
    }
    Ok(out)
}

fn expand_one(item: &str, cap: usize, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        if out.len() >= cap {
            return Err(format!("host list longer than {cap} names"));
        }
        out.push(item.to_string());
        return Ok(());
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("unbalanced `[` in {item:?}"))?;
    let (pre, ranges, post) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    for r in ranges.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let width = a.len();
        let (x, y) = (
            a.parse::<u64>()
                .map_err(|_| format!("bad range {r:?} in {item:?}"))?,
            b.parse::<u64>()
                .map_err(|_| format!("bad range {r:?} in {item:?}"))?,
        );
        if y < x || y - x > cap as u64 {
            return Err(format!("bad range {r:?} in {item:?}"));
        }
        for n in x..=y {
            expand_one(&format!("{pre}{n:0width$}{post}"), cap, out)?;
        }
    }
    Ok(())
}

/// This process' identity from the environment and the flags.
pub fn detect(
    env: &BTreeMap<String, String>,
    given: &Given,
    hostname: &str,
) -> Result<Identity, String> {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    let port = |dflt: u16| given.port.unwrap_or(dflt);
    let mut id = if let (Some(rank), Some(world)) = (
        num(env, "SLURM_PROCID")?,
        num(env, "SLURM_NTASKS")?.or(num(env, "SLURM_NPROCS")?),
    ) {
        let nodelist = get("SLURM_STEP_NODELIST").or_else(|| get("SLURM_JOB_NODELIST"));
        let nodes = match &nodelist {
            Some(l) => expand_hostlist(l, 1 << 16)?,
            None => Vec::new(),
        };
        let job = get("SLURM_JOB_ID");
        let step = num(env, "SLURM_STEP_ID")?.unwrap_or(0);
        let jobn: u64 = job.as_deref().and_then(|j| j.parse().ok()).unwrap_or(0);
        // 29400 + 100 * (job % 300) + step % 100: 29400..59399.
        let derived = DEFAULT_PORT as u64 + 100 * (jobn % 300) + u64::from(step % 100);
        let host = nodes.first().cloned().unwrap_or_else(|| "localhost".into());
        Identity {
            engine: "slurm".into(),
            rank,
            world,
            node: get("SLURMD_NODENAME").unwrap_or_else(|| short(hostname)),
            rendezvous: format!(
                "{host}:{}",
                port(u16::try_from(derived).unwrap_or(DEFAULT_PORT))
            ),
            job: job.map(|j| format!("{j}.{step}")),
            // Rank i on node i when there is one task per node (block distribution).
            expected_nodes: if nodes.len() == world as usize {
                nodes
            } else {
                Vec::new()
            },
        }
    } else if let (Some(rank), Some(world)) = (
        num(env, "OMPI_COMM_WORLD_RANK")?,
        num(env, "OMPI_COMM_WORLD_SIZE")?,
    ) {
        Identity {
            engine: "openmpi".into(),
            rank,
            world,
            node: short(hostname),
            rendezvous: String::new(),
            job: get("OMPI_MCA_ess_base_jobid").or_else(|| get("PMIX_NAMESPACE")),
            expected_nodes: Vec::new(),
        }
    } else if let (Some(rank), Some(world)) = (num(env, "PMI_RANK")?, num(env, "PMI_SIZE")?) {
        Identity {
            engine: "pmi".into(),
            rank,
            world,
            node: short(hostname),
            rendezvous: String::new(),
            job: get("PMI_JOBID"),
            expected_nodes: Vec::new(),
        }
    } else if let (Some(rank), Some(world)) = (num(env, "RANK")?, num(env, "WORLD_SIZE")?) {
        // torchrun's agent holds MASTER_PORT (its c10d store): the next port is ours.
        let master = get("MASTER_ADDR").unwrap_or_else(|| "localhost".into());
        let mp = num(env, "MASTER_PORT")?.unwrap_or(u32::from(DEFAULT_PORT) - 1);
        Identity {
            engine: "torchrun".into(),
            rank,
            world,
            node: short(hostname),
            rendezvous: format!(
                "{master}:{}",
                port(u16::try_from(mp.saturating_add(1)).unwrap_or(DEFAULT_PORT))
            ),
            job: get("TORCHELASTIC_RUN_ID"),
            expected_nodes: Vec::new(),
        }
    } else if let Some(rank) = num(env, "JOB_COMPLETION_INDEX")? {
        Identity {
            engine: "kubernetes".into(),
            rank,
            world: given.world.unwrap_or(0),
            node: get("NODE_NAME").unwrap_or_else(|| short(hostname)),
            rendezvous: String::new(),
            job: get("JOB_NAME"),
            expected_nodes: Vec::new(),
        }
    } else {
        match (given.rank, given.world) {
            (Some(rank), Some(world)) => Identity {
                engine: "flags".into(),
                rank,
                world,
                node: short(hostname),
                rendezvous: String::new(),
                job: None,
                expected_nodes: Vec::new(),
            },
            _ => {
                return Err("no engine found (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, RANK and WORLD_SIZE, JOB_COMPLETION_INDEX) and no --rank and --world: start one gdrdoctor preflight per node with srun, mpirun, torchrun or a Kubernetes Indexed Job, or give --rank R --world N --rendezvous HOST:PORT".into())
            }
        }
    };
    if let Some(r) = given.rank {
        id.rank = r;
    }
    if let Some(w) = given.world {
        id.world = w;
    }
    if let Some(r) = &given.rendezvous {
        id.rendezvous = r.clone();
    }
    if let Some(n) = &given.node {
        id.node = n.clone();
    }
    if !given.nodes.is_empty() {
        id.expected_nodes = given.nodes.clone();
    }
    if id.world == 0 {
        return Err(format!(
            "the world size is unknown under {}: give --world N (the Indexed Job's completions)",
            id.engine
        ));
    }
    if id.rank >= id.world {
        return Err(format!(
            "rank {} is outside a world of {}",
            id.rank, id.world
        ));
    }
    if id.world > 65536 {
        return Err(format!(
            "a world of {} ranks is more than preflight takes (65536)",
            id.world
        ));
    }
    if id.rendezvous.is_empty() {
        return Err(format!(
            "{} does not say where rank 0 is: give --rendezvous HOST:PORT (rank 0's node and a free port; rank 0 listens there)",
            id.engine
        ));
    }
    if !id.expected_nodes.is_empty() && id.expected_nodes.len() != id.world as usize {
        return Err(format!(
            "--nodes names {} node(s) for a world of {}",
            id.expected_nodes.len(),
            id.world
        ));
    }
    split_addr(&id.rendezvous)?;
    Ok(id)
}

/// `HOST:PORT` (or `[v6]:PORT`) -> (host, port).
pub fn split_addr(a: &str) -> Result<(String, u16), String> {
    let (h, p) = a
        .rsplit_once(':')
        .ok_or_else(|| format!("rendezvous {a:?} is not HOST:PORT"))?;
    let port: u16 = p
        .parse()
        .map_err(|_| format!("rendezvous {a:?}: {p:?} is not a port"))?;
    let host = h.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(format!("rendezvous {a:?} is not HOST:PORT"));
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn slurm_host_lists_expand() {
        assert_eq!(
            expand_hostlist("gpu-[01-03,07],login1", 100).unwrap(),
            ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1"]
        );
        assert_eq!(
            expand_hostlist("r[1-2]-n[8-9]", 100).unwrap(),
            ["r1-n8", "r1-n9", "r2-n8", "r2-n9"]
        );
        assert!(expand_hostlist("gpu-[01-03", 100).is_err());
        assert!(expand_hostlist("gpu-[9-1]", 100).is_err());
        assert!(expand_hostlist("gpu-[0-99999999]", 100).is_err());
    }

    #[test]
    fn each_engine_is_read() {
        let s = detect(
            &env(&[
                ("SLURM_PROCID", "2"),
                ("SLURM_NTASKS", "4"),
                ("SLURMD_NODENAME", "gpu-03"),
                ("SLURM_STEP_NODELIST", "gpu-[01-04]"),
                ("SLURM_JOB_ID", "1234"),
                ("SLURM_STEP_ID", "0"),
            ]),
            &Given::default(),
            "x",
        )
        .unwrap();
        assert_eq!((s.engine.as_str(), s.rank, s.world), ("slurm", 2, 4));
        assert_eq!(s.node, "gpu-03");
        assert!(s.rendezvous.starts_with("gpu-01:"), "{}", s.rendezvous);
        assert_eq!(s.expected_nodes[3], "gpu-04");
        let t = detect(
            &env(&[
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "n0"),
                ("MASTER_PORT", "29500"),
            ]),
            &Given::default(),
            "n1.example",
        )
        .unwrap();
        assert_eq!(
            (t.engine.as_str(), t.rendezvous.as_str(), t.node.as_str()),
            ("torchrun", "n0:29501", "n1")
        );
        let o = detect(
            &env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "3")]),
            &Given::default(),
            "h",
        );
        assert!(o.unwrap_err().contains("--rendezvous"));
        let k = detect(
            &env(&[("JOB_COMPLETION_INDEX", "3"), ("NODE_NAME", "gpu-9")]),
            &Given {
                world: Some(4),
                rendezvous: Some("pf-0.pf:29400".into()),
                ..Default::default()
            },
            "pod",
        )
        .unwrap();
        assert_eq!(
            (k.engine.as_str(), k.rank, k.node.as_str()),
            ("kubernetes", 3, "gpu-9")
        );
        assert!(detect(&env(&[]), &Given::default(), "h")
            .unwrap_err()
            .contains("no engine"));
        assert!(detect(
            &env(&[("RANK", "x"), ("WORLD_SIZE", "2")]),
            &Given::default(),
            "h"
        )
        .is_err());
        let f = detect(
            &env(&[]),
            &Given {
                rank: Some(5),
                world: Some(4),
                rendezvous: Some("h:1".into()),
                ..Default::default()
            },
            "h",
        );
        assert!(f.unwrap_err().contains("outside"));
    }

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(
            split_addr("gpu-01:29400").unwrap(),
            ("gpu-01".into(), 29400)
        );
        assert_eq!(split_addr("[::1]:5").unwrap(), ("::1".into(), 5));
        assert!(split_addr("gpu-01").is_err());
        assert!(split_addr(":5").is_err());
        assert!(split_addr("h:0").is_err());
    }
}
