//! The record-area layout of `kernels/include/gdrdoctor/progress.cuh` (section 1), and its
//! validation: the header, the site and kernel tables, the records and a stable read of them.

use crate::progress_record as rec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `GDRDPRG1`, little-endian.
pub const MAGIC: u64 = 0x3147_5250_4452_4447;

pub const VERSION: u32 = 1;

pub const HEADER_SIZE: usize = 256;

pub const CONTROL_OFFSET: usize = 256;

pub const CONTROL_SIZE: usize = 64;

/// The abort word: the only bytes `watch --abort` writes.
pub const ABORT_OFFSET: usize = CONTROL_OFFSET;

pub const RECORD_SIZE: usize = rec::SIZE;

pub const SITE_SIZE: usize = 64;

pub const KERNEL_SIZE: usize = 64;

pub const LAUNCH_SIZE: usize = 56;

/// The largest area watch reads, and the largest counts it accepts (progress.cuh clamps to the
/// same).
pub const MAX_AREA: u64 = 1 << 30;

pub const MAX_RECORDS: u32 = 1 << 22;

pub const MAX_SITES: u32 = 65536;

pub const MAX_KERNELS: u32 = 255;

pub const MAX_WORDS: u32 = 1 << 20;

pub const PH_NOT_STARTED: u32 = 0;

pub const PH_STARTED: u32 = 1;

pub const PH_WAITING: u32 = 2;

pub const PH_PROGRESS: u32 = 3;

pub const PH_DONE: u32 = 4;

pub const PH_ABORTED: u32 = 5;

pub const CMP_WIDE: u32 = 0x10;

pub const CMP_SIGNED: u32 = 0x20;

pub const WRITER_UNKNOWN: u32 = 0;

pub const WRITER_SAME_GPU: u32 = 1;

pub const WRITER_PEER_GPU: u32 = 2;

pub const WRITER_HOST: u32 = 3;

pub const WRITER_NIC: u32 = 4;

pub const FLAG_CALIBRATED: u32 = 1;

pub const FLAG_CLOSED: u32 = 2;

pub const FLAG_NO_CUDA: u32 = 4;

/// Every field's byte offset, as `struct.field` (tests compare them with the header's
/// `offsetof`, compiled by gcc).
pub const FIELDS: &[(&str, usize)] = &[
    ("gdrdoctor_area_header.magic", 0),
    ("gdrdoctor_area_header.version", 8),
    ("gdrdoctor_area_header.header_size", 12),
    ("gdrdoctor_area_header.pid", 16),
    ("gdrdoctor_area_header.flags", 20),
    ("gdrdoctor_area_header.start_ticks", 24),
    ("gdrdoctor_area_header.created_ns", 32),
    ("gdrdoctor_area_header.gt_offset_ns", 40),
    ("gdrdoctor_area_header.gt_calib_err_ns", 48),
    ("gdrdoctor_area_header.area_size", 56),
    ("gdrdoctor_area_header.dev_base", 64),
    ("gdrdoctor_area_header.host_base", 72),
    ("gdrdoctor_area_header.control_offset", 80),
    ("gdrdoctor_area_header.site_offset", 84),
    ("gdrdoctor_area_header.site_count", 88),
    ("gdrdoctor_area_header.kernel_offset", 92),
    ("gdrdoctor_area_header.kernel_count", 96),
    ("gdrdoctor_area_header.words_offset", 100),
    ("gdrdoctor_area_header.words_count", 104),
    ("gdrdoctor_area_header.record_offset", 108),
    ("gdrdoctor_area_header.record_count", 112),
    ("gdrdoctor_area_header.records_used", 116),
    ("gdrdoctor_area_header.kernels_used", 120),
    ("gdrdoctor_area_header.dropped", 124),
    ("gdrdoctor_area_header.record_size", 128),
    ("gdrdoctor_area_header.site_size", 132),
    ("gdrdoctor_area_header.kernel_size", 136),
    ("gdrdoctor_area_header.device", 140),
    ("gdrdoctor_area_header.job", 144),
    ("gdrdoctor_control.abort", 0),
    ("gdrdoctor_control.hb_ns", 8),
    ("gdrdoctor_control.calib_gt", 16),
    ("gdrdoctor_site.name", 0),
    ("gdrdoctor_site.line", 40),
    ("gdrdoctor_site.writer_kind", 44),
    ("gdrdoctor_site.writer_device", 48),
    ("gdrdoctor_site.writer_kernel", 52),
    ("gdrdoctor_site.flags", 56),
    ("gdrdoctor_kernel.name", 0),
    ("gdrdoctor_kernel.rec_base", 32),
    ("gdrdoctor_kernel.max_blocks", 36),
    ("gdrdoctor_kernel.warps_per_block", 40),
    ("gdrdoctor_kernel.enqueued", 44),
    ("gdrdoctor_kernel.grid_blocks", 48),
    ("gdrdoctor_kernel.device", 52),
    ("gdrdoctor_kernel.flags", 56),
    ("gdrdoctor_record.seq", rec::SEQ),
    ("gdrdoctor_record.phase_site", rec::PHASE_SITE),
    ("gdrdoctor_record.block", rec::BLOCK),
    ("gdrdoctor_record.sm_warp", rec::SM_WARP),
    ("gdrdoctor_record.kernel_gen", rec::KERNEL_GEN),
    ("gdrdoctor_record.iter", rec::ITER),
    ("gdrdoctor_record.addr", rec::ADDR),
    ("gdrdoctor_record.expected", rec::EXPECTED),
    ("gdrdoctor_record.observed", rec::OBSERVED),
    ("gdrdoctor_record.wait_start_gt", rec::WAIT_START_GT),
    ("gdrdoctor_record.beat_gt", rec::BEAT_GT),
    ("gdrdoctor_launch_t.records", 0),
    ("gdrdoctor_launch_t.control", 8),
    ("gdrdoctor_launch_t.sites", 16),
    ("gdrdoctor_launch_t.kernel", 24),
    ("gdrdoctor_launch_t.hb_ns", 32),
    ("gdrdoctor_launch_t.max_blocks", 40),
    ("gdrdoctor_launch_t.warps_per_block", 44),
    ("gdrdoctor_launch_t.kernel_gen", 48),
    ("gdrdoctor_launch_t.nsites", 52),
];

/// Every struct's size.
pub const SIZES: &[(&str, usize)] = &[
    ("gdrdoctor_area_header", HEADER_SIZE),
    ("gdrdoctor_control", CONTROL_SIZE),
    ("gdrdoctor_site", SITE_SIZE),
    ("gdrdoctor_kernel", KERNEL_SIZE),
    ("gdrdoctor_record", RECORD_SIZE),
    ("gdrdoctor_launch_t", LAUNCH_SIZE),
];

pub(super) fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    u32_at(b, off) as i32
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

/// A NUL-terminated name of at most `cap` bytes; control characters become `?`.
fn name_at(b: &[u8], off: usize, cap: usize) -> String {
    let raw = b.get(off..off + cap).unwrap_or(&[]);
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub fn phase_name(p: u32) -> &'static str {
    match p {
        PH_NOT_STARTED => "NOT_STARTED",
        PH_STARTED => "STARTED",
        PH_WAITING => "WAITING",
        PH_PROGRESS => "PROGRESS",
        PH_DONE => "DONE",
        PH_ABORTED => "ABORTED",
        _ => "?",
    }
}

pub fn cmp_str(cmp: u32) -> &'static str {
    match cmp & 15 {
        0 => "==",
        1 => ">=",
        2 => "!=",
        3 => ">",
        4 => "<=",
        5 => "<",
        _ => "?",
    }
}

pub fn writer_name(kind: u32) -> &'static str {
    match kind {
        WRITER_SAME_GPU => "a kernel on the same gpu",
        WRITER_PEER_GPU => "a peer gpu",
        WRITER_HOST => "a host thread",
        WRITER_NIC => "a nic (rdma)",
        _ => "unknown",
    }
}

/// The area's header, validated: every region lies inside the area and inside the limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub pid: u32,
    pub flags: u32,
    pub start_ticks: u64,
    pub created_ns: u64,
    pub gt_offset_ns: i64,
    pub gt_calib_err_ns: u64,
    pub area_size: u64,
    pub dev_base: u64,
    pub host_base: u64,
    pub site_offset: u32,
    pub site_count: u32,
    pub kernel_offset: u32,
    pub kernel_count: u32,
    pub words_offset: u32,
    pub words_count: u32,
    pub record_offset: u32,
    pub record_count: u32,
    pub records_used: u32,
    pub kernels_used: u32,
    pub dropped: u32,
    pub device: i32,
    pub job: String,
    pub abort: u32,
    pub hb_ns: u64,
}

impl Header {
    pub fn calibrated(&self) -> bool {
        self.flags & FLAG_CALIBRATED != 0
    }
    pub fn closed(&self) -> bool {
        self.flags & FLAG_CLOSED != 0
    }
    /// Byte range of the records in use (what a poll reads).
    pub fn records_range(&self) -> (u64, u64) {
        let start = u64::from(self.record_offset);
        (
            start,
            start + u64::from(self.records_used) * RECORD_SIZE as u64,
        )
    }
    pub fn words_range(&self) -> (u64, u64) {
        let start = u64::from(self.words_offset);
        (start, start + u64::from(self.words_count) * 8)
    }
    pub fn sites_range(&self) -> (u64, u64) {
        let start = u64::from(self.site_offset);
        (start, start + u64::from(self.site_count) * SITE_SIZE as u64)
    }
    pub fn kernels_range(&self) -> (u64, u64) {
        let start = u64::from(self.kernel_offset);
        (
            start,
            start + u64::from(self.kernel_count) * KERNEL_SIZE as u64,
        )
    }
}

/// Parse and validate the first `HEADER_SIZE + CONTROL_SIZE` bytes of an area whose file is
/// `file_len` bytes long. The error says what is wrong, for a finding that names the file.
pub fn parse_header(b: &[u8], file_len: u64) -> Result<Header, String> {
    let need = CONTROL_OFFSET + CONTROL_SIZE;
    if b.len() < need || file_len < need as u64 {
        return Err(format!(
            "too short for a progress area: {} bytes (the header and control block need {need})",
            file_len.min(b.len() as u64)
        ));
    }
    let magic = u64_at(b, 0);
    if magic == 0 {
        return Err("no magic: not initialised (gdrdoctor_progress_init writes it last) or not a gdrdoctor progress area".into());
    }
    if magic != MAGIC {
        return Err(format!(
            "bad magic 0x{magic:016x} (want 0x{MAGIC:016x}, \"GDRDPRG1\"): not a gdrdoctor progress area"
        ));
    }
    let version = u32_at(b, 8);
    if version != VERSION {
        return Err(format!(
            "layout version {version}: this gdrdoctor reads version {VERSION} (use the gdrdoctor that matches the job's progress.cuh)"
        ));
    }
    let sizes = [
        ("header_size", u32_at(b, 12), HEADER_SIZE),
        ("record_size", u32_at(b, 128), RECORD_SIZE),
        ("site_size", u32_at(b, 132), SITE_SIZE),
        ("kernel_size", u32_at(b, 136), KERNEL_SIZE),
        ("control_offset", u32_at(b, 80), CONTROL_OFFSET),
    ];
    for (name, got, want) in sizes {
        if got as usize != want {
            return Err(format!("{name} is {got}, want {want}"));
        }
    }
    let h = Header {
        pid: u32_at(b, 16),
        flags: u32_at(b, 20),
        start_ticks: u64_at(b, 24),
        created_ns: u64_at(b, 32),
        gt_offset_ns: u64_at(b, 40) as i64,
        gt_calib_err_ns: u64_at(b, 48),
        area_size: u64_at(b, 56),
        dev_base: u64_at(b, 64),
        host_base: u64_at(b, 72),
        site_offset: u32_at(b, 84),
        site_count: u32_at(b, 88),
        kernel_offset: u32_at(b, 92),
        kernel_count: u32_at(b, 96),
        words_offset: u32_at(b, 100),
        words_count: u32_at(b, 104),
        record_offset: u32_at(b, 108),
        record_count: u32_at(b, 112),
        records_used: u32_at(b, 116),
        kernels_used: u32_at(b, 120),
        dropped: u32_at(b, 124),
        device: i32_at(b, 140),
        job: name_at(b, 144, 64),
        abort: u32_at(b, CONTROL_OFFSET),
        hb_ns: u64_at(b, CONTROL_OFFSET + 8),
    };
    if h.pid == 0 || h.pid > (1 << 22) {
        return Err(format!("pid {} is not a process id", h.pid));
    }
    if h.area_size > MAX_AREA {
        return Err(format!(
            "area_size {} is larger than the {MAX_AREA} bytes watch reads",
            h.area_size
        ));
    }
    if h.area_size > file_len {
        return Err(format!(
            "truncated: the header says {} bytes, the file has {file_len}",
            h.area_size
        ));
    }
    let limits = [
        ("record_count", h.record_count, MAX_RECORDS),
        ("site_count", h.site_count, MAX_SITES),
        ("kernel_count", h.kernel_count, MAX_KERNELS),
        ("words_count", h.words_count, MAX_WORDS),
    ];
    for (name, got, max) in limits {
        if got > max {
            return Err(format!("{name} {got} exceeds {max}"));
        }
    }
    if h.records_used > h.record_count {
        return Err(format!(
            "records_used {} exceeds record_count {}",
            h.records_used, h.record_count
        ));
    }
    if h.kernels_used > h.kernel_count {
        return Err(format!(
            "kernels_used {} exceeds kernel_count {}",
            h.kernels_used, h.kernel_count
        ));
    }
    let mut regions = [
        (
            "header and control",
            0,
            (CONTROL_OFFSET + CONTROL_SIZE) as u64,
        ),
        ("sites", h.sites_range().0, h.sites_range().1),
        ("kernels", h.kernels_range().0, h.kernels_range().1),
        ("words", h.words_range().0, h.words_range().1),
        (
            "records",
            u64::from(h.record_offset),
            u64::from(h.record_offset) + u64::from(h.record_count) * RECORD_SIZE as u64,
        ),
    ];
    for (name, start, end) in regions {
        if end > h.area_size {
            return Err(format!(
                "the {name} region ({start}..{end}) runs past the area's {} bytes",
                h.area_size
            ));
        }
        if !start.is_multiple_of(8) {
            return Err(format!(
                "the {name} region starts at {start}, not 8-byte aligned"
            ));
        }
    }
    regions.sort_by_key(|r| r.1);
    for w in regions.windows(2) {
        if w[1].1 < w[0].2 && w[1].2 > w[1].1 && w[0].2 > w[0].1 {
            return Err(format!("the {} and {} regions overlap", w[0].0, w[1].0));
        }
    }
    Ok(h)
}

/// A named wait site (`gdrdoctor_progress_site`) and the line its first slow wait wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub id: u32,
    pub name: String,
    pub line: u32,
    pub writer_kind: u32,
    pub writer_device: i32,
    pub writer_kernel: i32,
}

/// The sites that say something (named by the host, or located by the device).
pub fn parse_sites(h: &Header, table: &[u8]) -> BTreeMap<u32, Site> {
    let mut out = BTreeMap::new();
    for id in 0..h.site_count {
        let off = id as usize * SITE_SIZE;
        let Some(b) = table.get(off..off + SITE_SIZE) else {
            break;
        };
        let named = u32_at(b, 56) & 1 != 0;
        let line = u32_at(b, 40);
        if !named && line == 0 {
            continue;
        }
        out.insert(
            id,
            Site {
                id,
                name: if named {
                    name_at(b, 0, 40)
                } else {
                    String::new()
                },
                line,
                writer_kind: if named { u32_at(b, 44) } else { 0 },
                writer_device: if named { i32_at(b, 48) } else { -1 },
                writer_kernel: if named { i32_at(b, 52) } else { -1 },
            },
        );
    }
    out
}

/// A declared kernel: its records, and how many launches the host handed out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    pub slot: u32,
    pub name: String,
    pub rec_base: u32,
    pub max_blocks: u32,
    pub warps_per_block: u32,
    pub enqueued: u32,
    pub grid_blocks: u32,
    pub device: i32,
}

impl Kernel {
    pub fn records(&self) -> std::ops::Range<usize> {
        let start = self.rec_base as usize;
        start..start + self.max_blocks as usize * self.warps_per_block as usize
    }
    /// The generation of the newest launch (the 24 bits a record carries; 0 is skipped).
    pub fn newest_gen(&self) -> Option<u32> {
        let g = match self.enqueued & 0xff_ffff {
            0 => 1,
            g => g,
        };
        (self.enqueued > 0).then_some(g)
    }
}

/// The declared kernels, validated against the records in use.
pub fn parse_kernels(h: &Header, table: &[u8]) -> Result<Vec<Kernel>, String> {
    let mut out = Vec::new();
    for slot in 0..h.kernels_used {
        let off = slot as usize * KERNEL_SIZE;
        let b = table
            .get(off..off + KERNEL_SIZE)
            .ok_or_else(|| format!("kernel slot {slot} lies outside the kernel table"))?;
        let k = Kernel {
            slot,
            name: name_at(b, 0, 32),
            rec_base: u32_at(b, 32),
            max_blocks: u32_at(b, 36),
            warps_per_block: u32_at(b, 40),
            enqueued: u32_at(b, 44),
            grid_blocks: u32_at(b, 48),
            device: i32_at(b, 52),
        };
        if u32_at(b, 56) & 1 == 0 {
            return Err(format!(
                "kernel slot {slot} is counted in kernels_used but not declared"
            ));
        }
        if k.warps_per_block == 0 || k.warps_per_block > 32 || k.max_blocks == 0 {
            return Err(format!(
                "kernel slot {slot} ({}) has {} blocks of {} warps (1 to 32 warps, at least 1 block)",
                k.name, k.max_blocks, k.warps_per_block
            ));
        }
        let end = u64::from(k.rec_base) + u64::from(k.max_blocks) * u64::from(k.warps_per_block);
        if end > u64::from(h.records_used) {
            return Err(format!(
                "kernel slot {slot} ({}) claims records {}..{end}, beyond the {} in use",
                k.name, k.rec_base, h.records_used
            ));
        }
        out.push(k);
    }
    Ok(out)
}

/// One warp's record, decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub index: u32,
    pub seq: u32,
    pub phase: u32,
    pub cmp: u32,
    pub site: u32,
    pub block: u32,
    pub sm: u32,
    pub warp: u32,
    pub kernel: u32,
    pub gen: u32,
    pub iter: u32,
    pub addr: u64,
    pub expected: u64,
    pub observed: u64,
    pub wait_start_gt: u64,
    pub beat_gt: u64,
}

impl Record {
    pub fn signed(&self) -> bool {
        self.cmp & CMP_SIGNED != 0
    }
    pub fn wide(&self) -> bool {
        self.cmp & CMP_WIDE != 0
    }
    /// A value of the awaited word as the job's type shows it.
    pub fn show(&self, v: u64) -> String {
        match (self.wide(), self.signed()) {
            (true, true) => (v as i64).to_string(),
            (false, true) => (v as u32 as i32).to_string(),
            (false, false) => (v as u32).to_string(),
            (true, false) => v.to_string(),
        }
    }
    /// Would the wait end on `v`?
    pub fn satisfied_by(&self, v: u64) -> bool {
        let ord = match (self.wide(), self.signed()) {
            (true, true) => (v as i64).cmp(&(self.expected as i64)),
            (false, true) => (v as u32 as i32).cmp(&(self.expected as u32 as i32)),
            (false, false) => (v as u32).cmp(&(self.expected as u32)),
            (true, false) => v.cmp(&self.expected),
        };
        use std::cmp::Ordering::*;
        match self.cmp & 15 {
            1 => ord != Less,
            2 => ord != Equal,
            3 => ord == Greater,
            4 => ord != Greater,
            5 => ord == Less,
            _ => ord == Equal,
        }
    }
}

pub fn decode_record(index: u32, b: &[u8]) -> Record {
    let ps = u32_at(b, rec::PHASE_SITE);
    let sw = u32_at(b, rec::SM_WARP);
    let kg = u32_at(b, rec::KERNEL_GEN);
    Record {
        index,
        seq: u32_at(b, rec::SEQ),
        phase: ps >> 24,
        cmp: (ps >> 16) & 0xff,
        site: ps & 0xffff,
        block: u32_at(b, rec::BLOCK),
        sm: sw >> 16,
        warp: sw & 0xffff,
        kernel: kg >> 24,
        gen: kg & 0xff_ffff,
        iter: u32_at(b, rec::ITER),
        addr: u64_at(b, rec::ADDR),
        expected: u64_at(b, rec::EXPECTED),
        observed: u64_at(b, rec::OBSERVED),
        wait_start_gt: u64_at(b, rec::WAIT_START_GT),
        beat_gt: u64_at(b, rec::BEAT_GT),
    }
}

/// Two reads of one record agree and its seqlock is even: a consistent copy (the seqlock of
/// progress.cuh: seq odd while an update is in flight, a fence after the odd store).
pub fn stable(first: &[u8], second: &[u8]) -> bool {
    first.len() == RECORD_SIZE && first == second && u32_at(first, rec::SEQ) & 1 == 0
}

/// A record that cannot come from progress.cuh: a phase past ABORTED, a kernel slot nobody
/// declared, a block or warp outside its kernel's records.
pub fn record_problem(r: &Record, kernels: &[Kernel]) -> Option<String> {
    if r.phase == PH_NOT_STARTED {
        return None;
    }
    if r.phase > PH_ABORTED {
        return Some(format!("record {} has phase {}", r.index, r.phase));
    }
    let Some(k) = kernels.get(r.kernel as usize) else {
        return Some(format!(
            "record {} names kernel slot {}, which is not declared",
            r.index, r.kernel
        ));
    };
    if !k.records().contains(&(r.index as usize)) {
        return Some(format!(
            "record {} names kernel slot {} ({}), whose records are {}..{}",
            r.index,
            r.kernel,
            k.name,
            k.records().start,
            k.records().end
        ));
    }
    let want =
        k.rec_base as usize + r.block as usize * k.warps_per_block as usize + r.warp as usize;
    if r.warp >= k.warps_per_block || want != r.index as usize {
        return Some(format!(
            "record {} says block {} warp {}, which is record {want} of kernel {}",
            r.index, r.block, r.warp, k.name
        ));
    }
    None
}

/// The value of the awaited word when it lies in the area's words (the only memory of the job
/// watch can read), at the device or the job's host address.
pub fn memory_at(h: &Header, words: &[u8], r: &Record) -> Option<u64> {
    let len = u64::from(h.words_count) * 8;
    let width = if r.wide() { 8 } else { 4 };
    let bases = [
        h.dev_base.checked_add(u64::from(h.words_offset)),
        h.host_base.checked_add(u64::from(h.words_offset)),
    ];
    for base in bases.into_iter().flatten() {
        if base == 0 || r.addr < base {
            continue;
        }
        let off = r.addr - base;
        if off + width > len || !off.is_multiple_of(width) {
            continue;
        }
        let off = off as usize;
        return Some(if width == 8 {
            u64_at(words, off)
        } else {
            u64::from(u32_at(words, off))
        });
    }
    None
}
