//! Fuzz targets for the pure core (issue 18): the config-space decoder (and the PCIe checks
//! that read it), the `lspci -x` parser, every text parser of `parse.rs`, NCCL's environment,
//! version and topology-dump parsers, the `nvidia-smi topo -m` parser, the kernel-log
//! classifier, GID parsing and the `watch` area parser. Nothing may panic, in a debug build
//! (arithmetic overflow included), and no check fed a fuzzed config space passes without
//! evidence. The harness and its knobs: `fuzz/harness.rs`. (The paste parsers of
//! `gdrdoctor diagnose` get their target when they land.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fuzz/harness.rs"]
mod harness;
#[path = "../../tests/common/nodes.rs"]
mod nodes;
#[path = "../../tests/common/require.rs"]
mod require;

use gdrdoctor_checks::model::{Fact, Node};
use gdrdoctor_checks::paste::{self, topo as smi};
use gdrdoctor_checks::report::{Finding, Status};
use gdrdoctor_checks::{checks, klog, nccl, parse, pci, roce, testing, watch};
use harness::{files, fuzz};
use nodes::fixture;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/realdata/<dir>` when the checkout has it (the corpus is richer then).
fn realdata(dir: &str) -> Option<PathBuf> {
    let p = require::realdata(&repo())?.join(dir);
    p.exists().then_some(p)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_passes_have_evidence(f: &[Finding]) {
    for x in f {
        assert!(
            x.status != Status::Pass || x.has_evidence(),
            "{} {} passes without evidence: {x:?}",
            x.id,
            x.subject
        );
    }
}

/// switch_pair with `cfg` as the config space of its downstream ports, its GPU and its NIC.
fn node_with_config(cfg: &[u8]) -> Node {
    let mut n = testing::switch_pair();
    if let Fact::Known { value: pci, .. } = &mut n.pci {
        for d in pci.iter_mut() {
            if d.bdf != "0000:15:01.0" {
                d.config = Fact::known(cfg.to_vec(), "fuzz");
            }
        }
    }
    n
}

#[test]
fn fuzz_config_space_decoder_and_the_checks_that_read_it() {
    let mut corpus = files(
        &fixture("hgx-h200x8-cx7x8-acs-redirect"),
        Some("config"),
        40,
    );
    corpus.extend(files(&fixture("h200-vm-live"), Some("config"), 10));
    for f in std::fs::read_dir(repo().join("fixtures/configspace")).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "hex") {
            let t = std::fs::read_to_string(&p).unwrap();
            corpus.extend(pci::config::parse_hex_dump(&t).into_iter().map(|(_, b)| b));
        }
    }
    fuzz("config-decode", corpus, 4, |b| {
        let cs = pci::config::decode(b);
        assert_eq!(cs.len, b.len());
        for br in &cs.chain_breaks {
            assert!(br.offset < 0x1000, "{br:?}");
        }
        let n = node_with_config(b);
        for run in [
            checks::pcie::acs_redirect,
            checks::pcie::mrrs,
            checks::pcie::ats,
            checks::pcie::bars,
            checks::pcie::link,
        ] {
            assert_passes_have_evidence(&run(&n));
        }
    });
}

#[test]
fn fuzz_lspci_hex_dump_parser() {
    let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(repo().join("fixtures/configspace"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    if let Some(d) = realdata("pciutils-haswell-cx3pro-configspace") {
        corpus.extend(files(&d, None, 10));
    }
    fuzz("config-hexdump", corpus, 1, |b| {
        for (header, bytes) in pci::config::parse_hex_dump(&text(b)) {
            assert!(bytes.len() <= 4096);
            let _ = pci::config::dump_bdf(&header);
            let _ = pci::config::decode(&bytes);
        }
    });
}

#[test]
fn fuzz_sysfs_and_procfs_text_parsers() {
    let mut corpus = Vec::new();
    for name in [
        "cmdline",
        "modules",
        "version",
        "params",
        "information",
        "resource",
        "current_link_speed",
        "max_link_width",
        "numa_node",
        "class",
        "vendor",
        "limits",
        "osrelease",
        "cpuinfo",
        "meminfo",
        "node_guid",
        "0",
    ] {
        corpus.extend(files(&fixture("hgx-h200x8-cx7x8-healthy"), Some(name), 6));
        corpus.extend(files(&fixture("h200-vm-live"), Some(name), 3));
    }
    fuzz("parse", corpus, 1, |b| {
        let s = text(b);
        let _ = parse::after_colon(&s);
        let _ = parse::hex_u64(&s);
        let _ = parse::hex_u16(&s);
        let _ = parse::hex_u32(&s);
        if let Some(g) = parse::link_speed_gts(&s) {
            let _ = parse::pcie_gen(g);
        }
        if let Ok(r) = parse::resource_file(&s) {
            assert!(r.len() >= parse::RESOURCE_MIN_LINES);
            for x in r {
                let _ = (x.size(), x.is_set(), x.mem64(), x.prefetchable());
            }
        }
        if let Some((v, _)) = parse::nvidia_version(&s) {
            let _ = parse::driver_major(&v);
        }
        let m = parse::colon_map(&s);
        for v in m.values() {
            let _ = parse::registry_number(v);
            let _ = parse::registry_dwords(v);
        }
        let args = parse::cmdline(&s);
        let _ = parse::cmdline_value(&args, "iommu");
        let _ = gdrdoctor_checks::derive::cmdline_iommu(&args, false);
        let _ = parse::kernel_version(&s);
        let _ = parse::memlock_from_limits(&s);
        let _ = parse::is_bdf(&s);
        let _ = parse::cpu_vendor(&s);
        let _ = parse::gid_is_set(&s);
        // A node GUID as the counter baseline records it: never 0 or 1 (1 means "none").
        if let Some(g) = gdrdoctor_checks::counters::guid_value(&s) {
            assert!(g > 1, "{s:?}");
        }
        if let Some(n) = parse::hex_u64(&s) {
            let _ = parse::human_bytes(n);
        }
    });
}

const TOPO_DUMP: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="0" affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:16:00.0" class="0x060400" vendor="0x1000" device="0xc030" subsystem_vendor="0x1000" subsystem_device="0xa064" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2335" subsystem_vendor="0x10de" subsystem_device="0x18bf" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:05:00.0" count="18" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:19:00.0" class="0x020700" vendor="0x15b3" device="0x1021" subsystem_vendor="0x15b3" subsystem_device="0x0041" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
"#;

/// Found by the fuzzer in CI (seed 0x3e5235f0b5bed3d1, input 854): an `sm` that parses to a
/// compute capability whose major version times ten overflows i32 panicked the read gate.
#[test]
fn a_topology_dump_with_an_absurd_sm_is_decided_without_a_panic() {
    let t = TOPO_DUMP.replace("sm=\"90\"", "sm=\"92147483648\"");
    assert_ne!(t, TOPO_DUMP);
    if let Some(d) = nccl::topo_dump::parse(&t) {
        let cfg = nccl::rule::Config {
            rules: nccl::choose(None, Some("fuzz")),
            env: nccl::env::NcclEnv::parse(None, "fuzz", nccl::version::NEWEST),
        };
        let _ = nccl::rule::decide(&d.system(), &cfg);
    }
}

#[test]
fn fuzz_nccl_topology_dump_parser() {
    assert!(nccl::topo_dump::parse(TOPO_DUMP).is_some_and(|d| d.gpus.len() == 1));
    let mut corpus = vec![TOPO_DUMP.as_bytes().to_vec()];
    if let Some(d) = realdata("hwloc-xml-topologies") {
        corpus.extend(
            files(&d, None, 3)
                .into_iter()
                .map(|b| b[..b.len().min(20_000)].to_vec()),
        );
    }
    fuzz("nccl-topo-dump", corpus, 3, |b| {
        let t = text(b);
        let _ = nccl::topo_dump::parse_xml(&t);
        if let Some(d) = nccl::topo_dump::parse(&t) {
            let sys = d.system();
            let cfg = nccl::rule::Config {
                rules: nccl::choose(None, Some("fuzz")),
                env: nccl::env::NcclEnv::parse(None, "fuzz", nccl::version::NEWEST),
            };
            let _ = nccl::rule::decide(&sys, &cfg);
        }
    });
}

#[test]
fn fuzz_nccl_environment_and_version_parsers() {
    let corpus: Vec<Vec<u8>> = [
        "NCCL_NET_GDR_LEVEL=PHB\nNCCL_IB_HCA=^=mlx5_0:1,mlx5_1\nNCCL_NET_GDR_READ=1\n",
        "NCCL_P2P_LEVEL=NVL\nNCCL_PXN_DISABLE=1\nNCCL_IB_DISABLE=0\nNCCL_NET_GDR_C2C=1\n",
        "NCCL_NET_GDR_LEVEL=3\nNCCL_IB_HCA==mlx5_2\nNCCL_P2P_DISABLE=1\nNCCL_P2P_PXN_LEVEL=0\n",
        "2.28.9\n",
        "v2.18.6-1\n",
        "NCCL_VERSION_CODE=22809\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz("nccl-env", corpus, 1, |b| {
        let t = text(b);
        let vars: std::collections::BTreeMap<String, String> = t
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for line in t.lines() {
            if let Some(v) = nccl::Version::parse(line) {
                let _ = v.to_string();
            }
            let _ = nccl::env::strtoll(line, 0);
            let _ = nccl::env::strtoll(line, 10);
            let _ = gdrdoctor_checks::topo::parse_level(line);
        }
        for v in [
            nccl::version::OLDEST,
            nccl::Version::new(2, 18, 6),
            nccl::version::NEWEST,
        ] {
            let _ = nccl::env::NcclEnv::parse(Some(&vars), "fuzz", v);
            for val in vars.values() {
                let _ = nccl::env::HcaFilter::parse(val, v);
                let _ = nccl::env::parse_level(val, v);
            }
        }
        if let Ok(code) = t.trim().parse::<i64>() {
            let _ = nccl::Version::from_code(code);
        }
    });
}

const SMI: &str = "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPIX\tSYS\t0-47\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tPIX\t48-95\t1\t\tN/A
NIC0\tPIX\tSYS\t X \tSYS
NIC1\tSYS\tPIX\tSYS\t X

Legend:

  X    = Self
NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
";

#[test]
fn fuzz_nvidia_smi_topo_parser() {
    assert!(
        smi::parse(SMI).is_some_and(|m| m.nics().len() == 2),
        "the corpus matrix parses"
    );
    let mut corpus = vec![SMI.as_bytes().to_vec()];
    for d in [
        "sglang-30401-hgx-h100",
        "llm-action-a800x8-4nic-topo",
        "oyanghd-a100x8-epyc7742-topo",
        "blog-8gpu-pcie-switch-cx6-topo",
    ] {
        if let Some(p) = realdata(d) {
            corpus.extend(files(&p, None, 4));
        }
    }
    fuzz("smi", corpus, 2, |b| {
        if let Some(m) = smi::parse(&text(b)) {
            let _ = m.pairs();
            for n in m.nics() {
                let _ = m.nic_name(n);
            }
            let _ = m.unknown_cells();
        }
    });
}

/// `gdrdoctor diagnose` end to end on pasted text: the cleaner, the splitter, every block
/// parser (matrix, NCCL log, lspci, ibv_devinfo/ibstat, lsmod, nvidia-smi -q, cmdline, dmesg,
/// uname, ulimit, env), the node built from them, the NCCL rule and the checks. No panic, and
/// no pass without evidence.
#[test]
fn fuzz_paste_diagnose() {
    let corpus = files(&repo().join("fixtures/pastes"), None, 64);
    assert!(corpus.len() > 10, "the paste corpus is there");
    fuzz("paste", corpus, 40, |b| {
        let inputs = [paste::Input {
            name: "fuzz.txt".into(),
            text: text(b),
        }];
        let r = paste::report::diagnose(&inputs, &Default::default());
        assert_passes_have_evidence(&r.as_report().findings);
    });
}

#[test]
fn fuzz_kernel_log_classifier_and_gids() {
    let mut corpus = Vec::new();
    for s in [
        "hgx-h200x8-cx7x8-xid-79",
        "hgx-h200x8-cx7x8-iommu-fault-nic",
        "hgx-h200x8-cx7x8-nic-fw-fatal",
    ] {
        corpus.extend(files(&fixture(s), Some("kernel-log.txt"), 2));
    }
    corpus.extend(files(&fixture("hgx-h200x8-cx7x8-roce"), Some("0"), 4));
    for d in [
        "cuda-samples-48-amd-vi-io-page-fault",
        "nv_peer_memory-84-unknown-symbol-dmesg",
    ] {
        if let Some(p) = realdata(d) {
            corpus.extend(files(&p, None, 4));
        }
    }
    fuzz("klog", corpus, 1, |b| {
        let t = text(b);
        for (line, _) in klog::events(&t) {
            let _ = klog::message(line);
            let _ = klog::timestamp(line);
        }
        for line in t.lines() {
            let _ = klog::parse_line(line);
            let _ = klog::normalize_bdf(line);
            if let Some(g) = roce::parse_gid(line) {
                let _ = (roce::family(&g), roce::configured(&g), roce::valid(&g));
            }
        }
        if let Ok(x) = t.trim().parse::<u32>() {
            let _ = klog::xid_info(x);
            let _ = klog::action(x, &t);
        }
    });
}

/// A progress area as progress.cuh lays it out (checks/src/watch.rs), with one kernel of one
/// block and one warp, and one site.
fn area() -> Vec<u8> {
    let mut b = vec![0u8; 5 * 4096];
    let u32_at = |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_le_bytes());
    let u64_at = |b: &mut Vec<u8>, o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_le_bytes());
    u64_at(&mut b, 0, watch::MAGIC);
    u32_at(&mut b, 8, watch::VERSION);
    u32_at(&mut b, 12, 256);
    u32_at(&mut b, 16, 4242);
    u64_at(&mut b, 32, 1_000);
    u64_at(&mut b, 56, 5 * 4096);
    u64_at(&mut b, 64, 0x7000_0000_0000);
    u64_at(&mut b, 72, 0x7000_0000_0000);
    u32_at(&mut b, 80, 256);
    u32_at(&mut b, 84, 4096);
    u32_at(&mut b, 88, 1);
    u32_at(&mut b, 92, 8192);
    u32_at(&mut b, 96, 1);
    u32_at(&mut b, 100, 12288);
    u32_at(&mut b, 104, 4);
    u32_at(&mut b, 108, 16384);
    u32_at(&mut b, 112, 4);
    u32_at(&mut b, 116, 1);
    u32_at(&mut b, 120, 1);
    u32_at(&mut b, 128, 64);
    u32_at(&mut b, 132, 64);
    u32_at(&mut b, 136, 64);
    b[144..147].copy_from_slice(b"job");
    u64_at(&mut b, 264, 1_000_000);
    b[8192..8198].copy_from_slice(b"kernel");
    u32_at(&mut b, 8192 + 36, 1);
    u32_at(&mut b, 8192 + 40, 1);
    u32_at(&mut b, 8192 + 56, 1);
    b[4096..4100].copy_from_slice(b"site");
    b
}

#[test]
fn fuzz_watch_area_parser() {
    let a = area();
    let h = watch::parse_header(&a, a.len() as u64).expect("the corpus area is valid");
    assert_eq!(h.kernels_used, 1);
    fuzz("watch-area", vec![a], 2, |b| {
        let need = watch::CONTROL_OFFSET + watch::CONTROL_SIZE;
        let Ok(h) = watch::parse_header(&b[..need.min(b.len())], b.len() as u64) else {
            return;
        };
        // What `gdrdoctor watch` reads (src/watch/mod.rs read_area), a failed read skipped.
        let slice = |(a, z): (u64, u64)| b.get(a as usize..z as usize);
        if let Some(s) = slice(h.sites_range()) {
            let _ = watch::parse_sites(&h, s);
        }
        let kernels = slice(h.kernels_range())
            .and_then(|k| watch::parse_kernels(&h, k).ok())
            .unwrap_or_default();
        let words = slice(h.words_range()).unwrap_or_default();
        if let Some(r) = slice(h.records_range()) {
            for (i, c) in r.chunks(watch::RECORD_SIZE).enumerate() {
                let rec = watch::decode_record(i as u32, c);
                let _ = watch::record_problem(&rec, &kernels);
                let _ = watch::memory_at(&h, words, &rec);
                let _ = watch::stable(c, c);
            }
        }
    });
}
