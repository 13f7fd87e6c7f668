//! Rank 0's coordinator: gather every rank's join and `check` report until the deadline, roll
//! the reports up as `fleet` does (the odd node out), run NCCL across the nodes twice (as NCCL
//! chooses, then network-only with the pairs' rounds) by asking each node's process to run its
//! worker, collect what each node's NCCL did, judge it all (the pure crate) and tell every
//! rank the exit code. It starts no process itself: rank 0's own node is a member like the
//! others, joined through the same socket.

use super::engine::Identity;
use super::server::{self, Event, Server, Writer};
use super::wire::Message;
use crate::collect::fleet;
use gdrdoctor_checks::preflight::judge;
use gdrdoctor_checks::preflight::model::*;
use gdrdoctor_checks::preflight::schedule;
use gdrdoctor_checks::report::{FailOn, Report};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long rank 0 waits for a node's result after that node's worker deadline: the node
/// reads NCCL's log and sends it.
const GRACE: Duration = Duration::from_secs(15);

/// What rank 0 was asked to do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub identity: Identity,
    /// Every rank joins and reports within this.
    pub timeout: Duration,
    /// Stage 2 (NCCL across the nodes) and stage 3 (pairs).
    pub nccl: bool,
    pub pairs: bool,
    /// Each node's NCCL worker's deadline.
    pub nccl_timeout: Duration,
    pub count: u64,
    pub iterations: u32,
    pub pair_bytes: u64,
    pub thresholds: Thresholds,
    pub fail_on: FailOn,
    pub allow_incomplete: bool,
    pub ignore_drift: Vec<String>,
}

/// The NCCL settings of the second run: neither P2P nor shared memory, so every GPU goes
/// through its NIC.
pub const NET_ONLY_ENV: &[(&str, &str)] = &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")];

pub struct Coordinator {
    server: Server,
    plan: Plan,
    t0: Instant,
    members: Vec<Member>,
    writers: BTreeMap<u32, Writer>,
    refused: Vec<Refusal>,
    raw: BTreeMap<u32, String>,
    gathering: bool,
}

enum Got {
    Msg(u32, Message),
    Lost(u32, String),
    Nothing,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Coordinator {
    /// Listen on `bind` and be ready for the ranks (rank 0's own node joins like the others).
    pub fn start(
        plan: Plan,
        secret: Vec<u8>,
        bind: &str,
        until: Instant,
    ) -> Result<Coordinator, String> {
        let server = server::serve(bind, secret, plan.identity.world, until)?;
        let members = (0..plan.identity.world)
            .map(|r| Member {
                rank: r,
                node: plan.identity.expected_nodes.get(r as usize).cloned(),
                ..Default::default()
            })
            .collect();
        Ok(Coordinator {
            server,
            plan,
            t0: Instant::now(),
            members,
            writers: BTreeMap::new(),
            refused: Vec::new(),
            raw: BTreeMap::new(),
            gathering: true,
        })
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    fn send(&mut self, rank: u32, m: &Message) -> Result<(), String> {
        let Some(w) = self.writers.get(&rank) else {
            return Err(format!("rank {rank} is not connected"));
        };
        let r = {
            let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
            w.send(m, Instant::now() + Duration::from_secs(10))
        };
        r.map_err(|e| {
            let why = e.to_string();
            self.writers.remove(&rank);
            why
        })
    }

    fn member(&mut self, rank: u32) -> Option<&mut Member> {
        self.members.get_mut(rank as usize)
    }

    fn absorb(&mut self, at: Instant, ev: Event) -> Got {
        match ev {
            Event::Joined {
                rank, node, writer, ..
            } => {
                if !self.gathering {
                    // Too late: the rendezvous is closed. Tell it so it exits now.
                    let line = "rank 0 closed the rendezvous before this rank joined".to_string();
                    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = w.send(
                        &Message::Done { exit_code: 2, line },
                        Instant::now() + Duration::from_secs(2),
                    );
                    return Got::Nothing;
                }
                let t = ms(at.saturating_duration_since(self.t0));
                self.writers.insert(rank, writer);
                if let Some(m) = self.member(rank) {
                    m.joined_ms = Some(t);
                    m.node = Some(node);
                }
                Got::Nothing
            }
            Event::Message { rank, msg } => match *msg {
                Message::Report {
                    report,
                    error,
                    gpus,
                    check_ms,
                } if self.gathering => {
                    let parsed = report
                        .as_deref()
                        .map(|t| serde_json::from_str::<Report>(t).map(|r| (r, t.to_string())));
                    let m_raw = match parsed {
                        Some(Ok((r, t))) => {
                            if let Some(m) = self.member(rank) {
                                m.report = Some(r);
                                m.gpus = gpus;
                                m.check_ms = Some(check_ms);
                            }
                            Some(t)
                        }
                        Some(Err(e)) => {
                            if let Some(m) = self.member(rank) {
                                m.report_error = Some(format!("a malformed report ({e})"));
                            }
                            None
                        }
                        None => {
                            if let Some(m) = self.member(rank) {
                                m.report_error =
                                    Some(error.unwrap_or_else(|| "the node sent no report".into()));
                            }
                            None
                        }
                    };
                    if let Some(t) = m_raw {
                        self.raw.insert(rank, t);
                    }
                    Got::Nothing
                }
                other => Got::Msg(rank, other),
            },
            Event::FrameRefused { rank, why } => {
                self.writers.remove(&rank);
                if let Some(m) = self.member(rank) {
                    if m.report.is_none() && m.report_error.is_none() {
                        m.report_error = Some(format!("refused: {why}"));
                    } else {
                        m.lost = Some(format!("a frame was refused: {why}"));
                    }
                }
                Got::Lost(rank, format!("a frame was refused: {why}"))
            }
            Event::Lost { rank, why } => {
                self.writers.remove(&rank);
                if let Some(m) = self.member(rank) {
                    if m.joined_ms.is_some() {
                        m.lost = Some(why.clone());
                    }
                }
                Got::Lost(rank, why)
            }
            Event::Refused(r) => {
                self.refused.push(r);
                Got::Nothing
            }
        }
    }

    fn next(&mut self, until: Instant) -> Option<Got> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match self.server.events.recv_timeout(left) {
            Ok((at, ev)) => Some(self.absorb(at, ev)),
            Err(_) => None,
        }
    }

    fn reported(&self) -> bool {
        self.members
            .iter()
            .all(|m| m.report.is_some() || m.report_error.is_some() || m.lost.is_some())
    }

    /// Everything: gather, run NCCL, judge, hand the answer to `deliver` (which writes it
    /// out and says the exit code), then tell every rank. Returns the answer. The answer is
    /// written before any rank is told: an engine that ends the job when its first rank
    /// exits (mpirun) must not cut rank 0's output short.
    pub fn run(mut self, deliver: impl FnOnce(&Answer) -> i32) -> Answer {
        let mut stages = Vec::new();
        let until = self.t0 + self.plan.timeout;
        while !self.reported() {
            if self.next(until).is_none() && Instant::now() >= until {
                break;
            }
        }
        self.gathering = false;
        stages.push(Stage {
            name: "rendezvous and check".into(),
            ms: ms(self.t0.elapsed()),
        });
        let t = Instant::now();
        let drift = self.drift();
        stages.push(Stage {
            name: "roll-up".into(),
            ms: ms(t.elapsed()),
        });
        let mut runs = Vec::new();
        if self.plan.nccl {
            let t = Instant::now();
            let default = self.nccl_run("default", &[], false, &BTreeSet::new());
            stages.push(Stage {
                name: "nccl (default)".into(),
                ms: ms(t.elapsed()),
            });
            // Nodes that broke the first run sit the second one out, so that the rest of the
            // allocation is still measured; when every node hung alike, or every node where
            // NCCL ran failed alike (a cause they share), there is nothing to learn from a
            // second run. A root that failed before NCCL's id is one node: the second run
            // (without it) tells its own failure from the allocation's.
            let (culprits, all_stuck) = judge::culprits(&default);
            let shared = judge::shared_failure(std::slice::from_ref(&default)).is_some();
            runs.push(default);
            let t = Instant::now();
            let net = if all_stuck || shared {
                RunInput {
                    label: "net-only".into(),
                    not_run: Some(
                        if all_stuck {
                            "the default run hung on every node alike"
                        } else {
                            "the default run failed alike on every node where it ran (a cause they share)"
                        }
                        .into(),
                    ),
                    ..Default::default()
                }
            } else {
                self.nccl_run("net-only", NET_ONLY_ENV, self.plan.pairs, &culprits)
            };
            runs.push(net);
            stages.push(Stage {
                name: "nccl (net-only) and pairs".into(),
                ms: ms(t.elapsed()),
            });
        }
        // Connections that ended while NCCL ran are in by now.
        while let Some(Got::Lost(..) | Got::Msg(..) | Got::Nothing) =
            self.next(Instant::now() + Duration::from_millis(1))
        {}
        let t = Instant::now();
        let inputs = Inputs {
            allocation: Allocation {
                engine: self.plan.identity.engine.clone(),
                job: self.plan.identity.job.clone(),
                world: self.plan.identity.world,
                rendezvous: self.plan.identity.rendezvous.clone(),
                timeout_s: self.plan.timeout.as_secs_f64(),
            },
            members: self.members.clone(),
            refused: self.refused.clone(),
            drift,
            runs,
            thresholds: self.plan.thresholds,
            stages: Vec::new(),
            fail_on: self.plan.fail_on,
            allow_incomplete: self.plan.allow_incomplete,
        };
        let mut answer = judge::answer(&inputs);
        stages.push(Stage {
            name: "judgement".into(),
            ms: ms(t.elapsed()),
        });
        stages.push(Stage {
            name: "total".into(),
            ms: ms(self.t0.elapsed()),
        });
        answer.stages = stages;
        answer.timestamp = Some(crate::sys::clock::now_rfc3339());
        let line = summary_line(&answer);
        let code = deliver(&answer);
        let ranks: Vec<u32> = self.writers.keys().copied().collect();
        for r in ranks {
            let _ = self.send(
                r,
                &Message::Done {
                    exit_code: code,
                    line: line.clone(),
                },
            );
        }
        answer
    }

    /// The fleet roll-up of the reports: who differs from the majority.
    fn drift(&self) -> Vec<OddField> {
        if self.raw.len() < 3 {
            // With one or two nodes there is no majority to differ from.
            return Vec::new();
        }
        let inputs: Vec<fleet::input::Input> = self
            .raw
            .iter()
            .map(|(r, t)| fleet::input::Input {
                name: format!("rank {r}"),
                source: fleet::input::Source::Text(t.clone()),
            })
            .collect();
        let parts = fleet::digest_all(
            &inputs,
            &self.plan.ignore_drift,
            false,
            gdrdoctor_checks::cpus(),
        );
        let roll = fleet::rollup::build(
            parts,
            Vec::new(),
            inputs.len(),
            &fleet::rollup::Options {
                allow_drift: true,
                allow_incomplete: true,
            },
        );
        let rank_of: BTreeMap<String, u32> = roll
            .nodes
            .iter()
            .filter_map(|n| {
                let r = n.input.strip_prefix("rank ")?.parse().ok()?;
                Some((n.name.clone(), r))
            })
            .collect();
        let mut out = Vec::new();
        for o in &roll.odd_nodes {
            let Some(&member) = rank_of.get(&o.node) else {
                continue;
            };
            for f in &o.fields {
                out.push(OddField {
                    member,
                    field: f.field.clone(),
                    value: f.value.clone(),
                    majority: f.majority.clone(),
                });
            }
        }
        out
    }

    /// One NCCL run over the nodes that joined with GPUs (less `skip`).
    fn nccl_run(
        &mut self,
        label: &str,
        env: &[(&str, &str)],
        pairs: bool,
        skip: &BTreeSet<u32>,
    ) -> RunInput {
        let t0 = Instant::now();
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let parts: Vec<(u32, u32)> = self
            .members
            .iter()
            .filter(|m| {
                m.report.is_some()
                    && m.gpus > 0
                    && m.lost.is_none()
                    && self.writers.contains_key(&m.rank)
                    && !skip.contains(&m.rank)
            })
            .map(|m| (m.rank, m.gpus))
            .collect();
        let mut run = RunInput {
            label: label.into(),
            env: env.clone(),
            deadline_ms: Some(ms(self.plan.nccl_timeout)),
            ..Default::default()
        };
        if parts.is_empty() {
            run.not_run = Some(if skip.is_empty() {
                "no node with a GPU joined".into()
            } else {
                "no node with a GPU is left after the default run's failures".into()
            });
            return run;
        }
        let mut first = Vec::new();
        let mut nranks = 0u32;
        for (_, g) in &parts {
            first.push(nranks);
            nranks += g;
        }
        run.nranks = nranks;
        let rounds = if pairs && parts.len() >= 2 {
            schedule::rounds(parts.len())
        } else {
            Vec::new()
        };
        let (count, iterations, pair_bytes) =
            (self.plan.count, self.plan.iterations, self.plan.pair_bytes);
        let spec = |i: usize, id: Option<String>| -> RunSpec {
            let steps = rounds
                .iter()
                .enumerate()
                .map(|(ri, round)| {
                    let peer = round.iter().find_map(|&(a, b)| {
                        let p = if a == i {
                            b
                        } else if b == i {
                            a
                        } else {
                            return None;
                        };
                        Some(PeerNode {
                            member: parts[p].0,
                            first_rank: first[p],
                            gpus: parts[p].1,
                        })
                    });
                    PairStep {
                        round: ri as u32,
                        peer,
                    }
                })
                .collect();
            RunSpec {
                label: label.into(),
                env: env.clone(),
                nranks,
                first_rank: first[i],
                gpus: parts[i].1,
                id,
                count,
                iterations,
                pairs: steps,
                pair_bytes,
            }
        };
        let deadline_ms = u64::try_from(self.plan.nccl_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut done: BTreeMap<u32, NodeRun> = BTreeMap::new();
        let blank = |member: u32, i: usize, problem: String, timed_out: bool| NodeRun {
            member,
            first_rank: first[i],
            gpus: parts[i].1,
            problem: Some(problem),
            timed_out,
            ..Default::default()
        };
        // The first node makes NCCL's id; the others start when it is known.
        let root = parts[0].0;
        if let Err(e) = self.send(
            root,
            &Message::Nccl {
                spec: spec(0, None),
                deadline_ms,
            },
        ) {
            done.insert(
                root,
                blank(root, 0, format!("could not be asked to run: {e}"), false),
            );
        }
        let mut started = false;
        let until = t0 + self.plan.nccl_timeout + GRACE;
        while done.len() < parts.len() {
            let Some(got) = self.next(until) else {
                if Instant::now() >= until {
                    break;
                }
                continue;
            };
            match got {
                Got::Msg(rank, Message::NcclId { label: l, id })
                    if l == label && rank == root && !started =>
                {
                    started = true;
                    for (i, (r, _)) in parts.iter().enumerate().skip(1) {
                        if let Err(e) = self.send(
                            *r,
                            &Message::Nccl {
                                spec: spec(i, Some(id.clone())),
                                deadline_ms,
                            },
                        ) {
                            done.insert(
                                *r,
                                blank(*r, i, format!("could not be asked to run: {e}"), false),
                            );
                        }
                    }
                }
                Got::Msg(rank, Message::NcclDone { label: l, run: r }) if l == label => {
                    if let Some(i) = parts.iter().position(|(p, _)| *p == rank) {
                        let mut r = *r;
                        r.member = rank;
                        r.first_rank = first[i];
                        r.gpus = parts[i].1;
                        r.arrival_ms = Some(ms(t0.elapsed()));
                        done.insert(rank, r);
                    }
                    if rank == root && !started {
                        // The root ended before it made the id: the others never start.
                        started = true;
                        let why = done
                            .get(&root)
                            .and_then(|r| {
                                r.output
                                    .as_ref()
                                    .and_then(|o| o.error.clone())
                                    .or_else(|| r.problem.clone())
                            })
                            .unwrap_or_else(|| "no id".into());
                        let root_name = self
                            .members
                            .get(root as usize)
                            .map(judge::who)
                            .unwrap_or_default();
                        for (i, (r, _)) in parts.iter().enumerate().skip(1) {
                            done.entry(*r).or_insert_with(|| NodeRun {
                                not_started: true,
                                ..blank(
                                    *r,
                                    i,
                                    format!("not started: {root_name} made no NCCL id ({why})"),
                                    false,
                                )
                            });
                        }
                    }
                }
                Got::Lost(rank, why) => {
                    if let Some(i) = parts.iter().position(|(p, _)| *p == rank) {
                        done.entry(rank).or_insert_with(|| {
                            blank(
                                rank,
                                i,
                                format!("its connection to rank 0 was lost: {why}"),
                                false,
                            )
                        });
                    }
                }
                _ => {}
            }
        }
        for (i, (r, _)) in parts.iter().enumerate() {
            done.entry(*r).or_insert_with(|| {
                blank(
                    *r,
                    i,
                    format!(
                        "no result within its deadline ({} s) and {} s more",
                        self.plan.nccl_timeout.as_secs(),
                        GRACE.as_secs()
                    ),
                    true,
                )
            });
        }
        run.nodes = done.into_values().collect();
        run.ms = Some(ms(t0.elapsed()));
        run
    }
}

/// One line for every rank's stderr and for a log.
pub fn summary_line(a: &Answer) -> String {
    let what = if a.take_out.is_empty() {
        format!(
            "{} of {} node(s) joined, none to take out",
            a.summary.joined, a.summary.nodes
        )
    } else {
        format!(
            "take out {}: {}",
            a.take_out.len(),
            a.take_out
                .iter()
                .map(|t| t.node.clone().unwrap_or_else(|| format!("rank {}", t.rank)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let first = a
        .findings
        .iter()
        .find(|f| {
            matches!(
                f.status,
                gdrdoctor_checks::report::Status::Fail | gdrdoctor_checks::report::Status::Error
            )
        })
        .map(|f| format!("; {} {}: {}", f.status, f.id, f.message))
        .unwrap_or_default();
    let mut line = format!("{what} (exit {}){first}", a.summary.exit_code);
    if line.chars().count() > 300 {
        line = format!("{}...", line.chars().take(297).collect::<String>());
    }
    line
}
