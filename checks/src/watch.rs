//! `gdrdoctor watch`, the pure half: the record-area layout of
//! `kernels/include/gdrdoctor/progress.cuh`, its validation, the stall classification and the
//! findings. The binary (`src/watch/`) finds the areas in /dev/shm, reads their bytes, keeps the
//! clock and calls these functions; nothing here does I/O.
//!
//! The classes and their order are those of `probe --hang`: one classification for both
//! ([`crate::stall`], docs/checks/probe.hang-inject.md), with the evidence a user's job can give: the launch
//! generation instead of the probe's launch plan, the site table for who writes the awaited
//! word, the area's own words for the memory's value. See docs/guides/watch.md.

use crate::progress_record as rec;
use crate::report::{Finding, Status};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

// ---------------------------------------------------------------------------------------------
// Layout (progress.cuh, section 1)
// ---------------------------------------------------------------------------------------------

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

fn u32_at(b: &[u8], off: usize) -> u32 {
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

// ---------------------------------------------------------------------------------------------
// Classification (the classes of probe --hang)
// ---------------------------------------------------------------------------------------------

/// The classes and the rules are those of `probe --hang`: one classification for both.
pub use crate::stall::Class;

/// Watch's words for a class: what it means in a user's job.
pub fn explain(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "blocks of the launch never started while every started block waits: the grid exceeds what the gpu can keep resident and the awaited write comes from a block that cannot be scheduled",
            Class::Ordering => "the kernel that writes the awaited value was launched but never started: stream/event ordering (or the legacy default stream, CUDA_LAUNCH_BLOCKING, lazy loading) queues it behind the waiter",
            Class::StaleRead => "memory already holds the awaited value but the waiter keeps seeing the old one: its load is hoisted or cached (missing volatile / ld.acquire)",
            Class::Silent => "the waiter stopped sending heartbeats: it spins in a loop without instrumentation (GDRDOCTOR_MARK_WAITING), or the kernel was killed or preempted",
            Class::SpinStall => "the waiter is alive and re-reads memory, but nobody writes the awaited value",
            Class::RemoteWait => "the waiter is alive and re-reads memory for a value a peer gpu should write over peer access (nvlink or pcie p2p); the peer's write never arrived",
    }
}

/// Watch's fix for a class, in the terms of progress.cuh.
pub fn fix(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "launch inter-block waits cooperatively (cudaLaunchCooperativeKernel refuses grids that cannot be resident) or keep grid <= occupancy x SMs",
            Class::Ordering => "put producer and consumer on independent non-blocking streams with no event edge from consumer to producer; avoid the legacy default stream and CUDA_LAUNCH_BLOCKING=1; load every kernel before the first launch (CUDA_MODULE_LOADING=EAGER)",
            Class::StaleRead => "poll with volatile or ld.acquire loads (GDRDOCTOR_WAIT, cuda::atomic_ref load(acquire)) and publish with st.release / __threadfence_system() before the flag",
            Class::Silent => "replace the loop with GDRDOCTOR_WAIT (heartbeats and the abort check), or attach cuda-gdb to see where the warp spins (docs/guides/hangs.md)",
            Class::SpinStall => "find who should write the awaited address (the site names it): a peer that never posts, a lost RDMA write, a doorbell that never reached the NIC",
            Class::RemoteWait => "look at the peer gpu the site names: its kernel finished without writing this address (a wrong offset, or a pointer from the wrong device or context), never started, or cannot reach this gpu (peer access not enabled; `gdrdoctor check --only gpu.p2p`)",
    }
}

/// Per-record observations across polls (host monotonic nanoseconds).
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    obs: HashMap<u32, Obs>,
}

#[derive(Debug, Clone, Copy)]
struct Obs {
    /// phase, iter, wait start, generation: a change of any is progress.
    key: (u32, u32, u64, u32),
    since: u64,
    beat: u64,
    beat_since: u64,
}

impl Tracker {
    pub fn observe(&mut self, recs: &[Record], now: u64) {
        for r in recs {
            let key = (r.phase, r.iter, r.wait_start_gt, r.gen);
            let o = self.obs.entry(r.index).or_insert(Obs {
                key,
                since: now,
                beat: r.beat_gt,
                beat_since: now,
            });
            if o.key != key {
                o.key = key;
                o.since = now;
            }
            if o.beat != r.beat_gt {
                o.beat = r.beat_gt;
                o.beat_since = now;
            }
        }
    }
    /// Host time since the record last changed, and since its heartbeat last changed.
    fn ages(&self, index: u32, now: u64) -> (u64, u64) {
        self.obs
            .get(&index)
            .map(|o| {
                (
                    now.saturating_sub(o.since),
                    now.saturating_sub(o.beat_since),
                )
            })
            .unwrap_or((0, 0))
    }
}

/// How device time (%globaltimer) maps to host realtime for one area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clock {
    pub offset_ns: i64,
    pub calibrated: bool,
    pub err_ns: u64,
}

impl Clock {
    pub fn of(h: &Header) -> Clock {
        Clock {
            offset_ns: if h.calibrated() { h.gt_offset_ns } else { 0 },
            calibrated: h.calibrated(),
            err_ns: h.gt_calib_err_ns,
        }
    }
    /// Host realtime of a device time, when it is believable: within 10 s of the area's life
    /// (an uncalibrated clock on a driver whose %globaltimer is not the epoch is not).
    pub fn host(&self, gt: u64, created_ns: u64, now_rt: u64) -> Option<u64> {
        if gt == 0 {
            return None;
        }
        let t = (gt as i128 + self.offset_ns as i128).clamp(0, u64::MAX as i128) as u64;
        let slack = 10_000_000_000u64;
        (t + slack >= created_ns && t <= now_rt + slack).then_some(t)
    }
    pub fn describe(&self) -> String {
        if self.calibrated {
            format!(
                "%globaltimer calibrated at init: offset {} ns, +/- {:.1} us",
                self.offset_ns,
                self.err_ns as f64 / 1e3
            )
        } else {
            "%globaltimer not calibrated (taken as CLOCK_REALTIME when plausible, else host-observed ages only)".into()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub stall_ns: u64,
}

/// One waiter the analysis reports (stalled, or slow at half the threshold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub record: u32,
    pub kernel: String,
    pub kernel_slot: u32,
    pub gen: u32,
    pub block: u32,
    pub warp: u32,
    pub sm: u32,
    pub site: u32,
    pub site_name: String,
    pub site_line: u32,
    pub phase: String,
    pub addr: String,
    pub cmp: String,
    pub expected: String,
    pub observed: String,
    /// The awaited word's value, read by watch (only words inside the area).
    pub memory: Option<String>,
    pub waited_ms: f64,
    pub heartbeat_age_ms: f64,
    /// `wait_start_gt`: identifies one wait (with the record).
    pub wait_start_gt: u64,
    pub class: Option<Class>,
    /// What the class rests on, beyond the waiter itself.
    pub why: String,
}

impl Waiter {
    pub fn site_label(&self) -> String {
        let mut s = format!("site {}", self.site);
        match (self.site_name.is_empty(), self.site_line) {
            (false, 0) => s.push_str(&format!(" ({})", self.site_name)),
            (false, l) => s.push_str(&format!(" ({}, line {l})", self.site_name)),
            (true, 0) => {}
            (true, l) => s.push_str(&format!(" (line {l})")),
        }
        s
    }
    /// `spin-stall: kernel ring block 1 warp 0 (SM 3) waits at site 4 (...) for *0x.. >= 5,
    /// sees 4, memory holds 4, for 1203 ms`
    pub fn text(&self) -> String {
        let mem = self
            .memory
            .as_ref()
            .map(|m| format!(", memory holds {m}"))
            .unwrap_or_default();
        format!(
            "{}: kernel {} block {} warp {} (SM {}) waits at {} for *{} {} {}, sees {}{mem}, for {:.0} ms",
            self.class.map(Class::as_str).unwrap_or("slow"),
            self.kernel,
            self.block,
            self.warp,
            self.sm,
            self.site_label(),
            self.addr,
            self.cmp,
            self.expected,
            self.observed,
            self.waited_ms
        )
    }
    pub fn evidence_line(&self) -> String {
        format!(
            "kernel {} (slot {}, launch {}) block {} warp {} sm {} {} {} addr {} {} {} observed {} memory {} waited {:.0} ms heartbeat {:.0} ms ago",
            self.kernel,
            self.kernel_slot,
            self.gen,
            self.block,
            self.warp,
            self.sm,
            self.site_label(),
            self.phase,
            self.addr,
            self.cmp,
            self.expected,
            self.observed,
            self.memory.as_deref().unwrap_or("?"),
            self.waited_ms,
            self.heartbeat_age_ms
        )
    }
}

/// Phase counts of the records in use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub not_started: usize,
    pub started: usize,
    pub waiting: usize,
    pub progress: usize,
    pub done: usize,
    pub aborted: usize,
    /// Records whose two reads never agreed (bounded retries): skipped this poll.
    pub unstable: usize,
    /// Waiting records whose wait start the area's clock cannot date (it falls outside the
    /// area's life): only the time watch itself saw them waiting counts.
    #[serde(default)]
    pub undated: usize,
}

/// What one poll of one area shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub stalled: Vec<Waiter>,
    pub slow: Vec<Waiter>,
    pub counts: Counts,
    /// The longest current wait (ms), stalled or not.
    pub longest_wait_ms: f64,
}

/// An area as one poll read it: everything the classification needs.
pub struct View<'a> {
    pub header: &'a Header,
    pub sites: &'a BTreeMap<u32, Site>,
    pub kernels: &'a [Kernel],
    pub words: &'a [u8],
    /// Every record in use, indexed by record number (`None`: unstable this poll).
    pub records: &'a [Option<Record>],
}

impl View<'_> {
    fn kernel_records(&self, k: &Kernel) -> impl Iterator<Item = &Record> {
        let r = k.records();
        self.records
            .get(r.start.min(self.records.len())..r.end.min(self.records.len()))
            .unwrap_or(&[])
            .iter()
            .flatten()
    }

    /// Blocks of launch `gen` of kernel `k`: (grid, never started, every started block waits).
    pub fn launch_blocks(&self, k: &Kernel, gen: u32) -> (u32, usize, usize, bool) {
        let grid = if k.grid_blocks == 0 {
            k.max_blocks
        } else {
            k.grid_blocks.min(k.max_blocks)
        };
        let mut started: BTreeSet<u32> = BTreeSet::new();
        let mut waiting: BTreeSet<u32> = BTreeSet::new();
        for r in self.kernel_records(k) {
            if r.gen == gen && r.phase != PH_NOT_STARTED && r.block < grid {
                started.insert(r.block);
                if r.phase == PH_WAITING {
                    waiting.insert(r.block);
                }
            }
        }
        let never = (grid as usize).saturating_sub(started.len());
        (
            grid,
            never,
            started.len(),
            !started.is_empty() && started == waiting,
        )
    }

    /// The writer kernel of a site: (never started, description).
    pub fn writer_state(&self, k: &Kernel) -> (bool, String) {
        let Some(newest) = k.newest_gen() else {
            return (
                false,
                format!("kernel {} (slot {}): never launched", k.name, k.slot),
            );
        };
        let mut started = false;
        let mut waiting = false;
        let mut running = false;
        let mut done = false;
        for r in self.kernel_records(k) {
            if r.phase == PH_WAITING {
                waiting = true;
            }
            if r.gen == newest && r.phase != PH_NOT_STARTED {
                started = true;
                match r.phase {
                    PH_DONE | PH_ABORTED => done = true,
                    _ => running = true,
                }
            }
        }
        let state = if !started {
            "never started"
        } else if running {
            "running"
        } else if done {
            "finished"
        } else {
            "?"
        };
        (
            !started && !waiting,
            format!(
                "kernel {} (slot {}): {} launch(es) handed out, the newest (launch {newest}) {state}",
                k.name, k.slot, k.enqueued
            ),
        )
    }
}

/// Classify the waiters of one poll. `now_rt`: host realtime; `now_mono`: the tracker's clock.
pub fn analyse(
    v: &View,
    tracker: &Tracker,
    clock: &Clock,
    now_rt: u64,
    now_mono: u64,
    t: Thresholds,
) -> Analysis {
    let mut a = Analysis::default();
    for slot in v.records {
        let Some(r) = slot else {
            a.counts.unstable += 1;
            continue;
        };
        match r.phase {
            PH_NOT_STARTED => a.counts.not_started += 1,
            PH_STARTED => a.counts.started += 1,
            PH_WAITING => a.counts.waiting += 1,
            PH_PROGRESS => a.counts.progress += 1,
            PH_DONE => a.counts.done += 1,
            _ => a.counts.aborted += 1,
        }
        if r.phase != PH_WAITING || record_problem(r, v.kernels).is_some() {
            continue;
        }
        let (host_age, host_beat_age) = tracker.ages(r.index, now_mono);
        let dated = clock.host(r.wait_start_gt, v.header.created_ns, now_rt);
        if dated.is_none() {
            a.counts.undated += 1;
        }
        let dev_age = dated.map(|s| now_rt.saturating_sub(s)).unwrap_or(0);
        let dev_beat_age = clock
            .host(r.beat_gt, v.header.created_ns, now_rt)
            .map(|s| now_rt.saturating_sub(s))
            .unwrap_or(0);
        let waited = host_age.max(dev_age);
        let beat_age = host_beat_age.max(dev_beat_age);
        a.longest_wait_ms = a.longest_wait_ms.max(waited as f64 / 1e6);
        if waited < t.stall_ns / 2 {
            continue;
        }
        let Some(k) = v.kernels.get(r.kernel as usize) else {
            continue;
        };
        let site = v.sites.get(&r.site);
        let memory = memory_at(v.header, v.words, r);
        let mut w = Waiter {
            record: r.index,
            kernel: k.name.clone(),
            kernel_slot: k.slot,
            gen: r.gen,
            block: r.block,
            warp: r.warp,
            sm: r.sm,
            site: r.site,
            site_name: site.map(|s| s.name.clone()).unwrap_or_default(),
            site_line: site.map(|s| s.line).unwrap_or(0),
            phase: phase_name(r.phase).into(),
            addr: format!("0x{:x}", r.addr),
            cmp: cmp_str(r.cmp).into(),
            expected: r.show(r.expected),
            observed: r.show(r.observed),
            memory: memory.map(|m| r.show(m)),
            waited_ms: waited as f64 / 1e6,
            heartbeat_age_ms: beat_age as f64 / 1e6,
            wait_start_gt: r.wait_start_gt,
            class: None,
            why: String::new(),
        };
        if waited < t.stall_ns {
            a.slow.push(w);
            continue;
        }
        let (class, why) = classify(v, k, r, site, memory, beat_age, t);
        w.class = Some(class);
        w.why = why;
        a.stalled.push(w);
    }
    a
}

/// The signs of one stalled waiter, from what the area shows, and its class
/// ([`crate::stall::classify`], the rules of probe --hang) with what it rests on.
fn classify(
    v: &View,
    k: &Kernel,
    r: &Record,
    site: Option<&Site>,
    memory: Option<u64>,
    beat_age: u64,
    t: Thresholds,
) -> (Class, String) {
    let (grid, never, started, all_wait) = v.launch_blocks(k, r.gen);
    let peer = site.filter(|s| s.writer_kind == WRITER_PEER_GPU);
    let writer = site
        .filter(|s| s.writer_kernel >= 0)
        .and_then(|s| v.kernels.get(s.writer_kernel as usize))
        .map(|wk| v.writer_state(wk));
    let stale = memory.filter(|m| r.satisfied_by(*m) && !r.satisfied_by(r.observed));
    let signs = crate::stall::Signs {
        never_started: never,
        all_started_wait: all_wait,
        writer_on_peer: peer.is_some(),
        writer_never_started: writer.as_ref().is_some_and(|w| w.0),
        memory_satisfies: stale.is_some(),
        heartbeat_stale: beat_age >= t.stall_ns,
    };
    let class = crate::stall::classify(&signs);
    let why = match class {
        Class::ForwardProgress => format!("launch {} of kernel {}: {never} of {grid} blocks never started, every one of the {started} started blocks waits", r.gen, k.name),
        Class::RemoteWait => {
            let s = peer.map(|s| (s.id, s.writer_device)).unwrap_or((r.site, -1));
            let dev = if s.1 >= 0 {
                format!("gpu {}", s.1)
            } else {
                "a peer gpu".into()
            };
            format!("site {} is written by {dev} over peer access", s.0)
        }
        Class::Ordering => format!(
            "writer {}",
            writer.map(|w| w.1).unwrap_or_default()
        ),
        Class::StaleRead => format!(
            "memory holds {} (satisfies {} {}), the waiter last saw {}",
            r.show(stale.unwrap_or_default()),
            cmp_str(r.cmp),
            r.show(r.expected),
            r.show(r.observed)
        ),
        Class::Silent => format!("no heartbeat for {:.0} ms", beat_age as f64 / 1e6),
        Class::SpinStall => writer
            .map(|w| format!("writer {}", w.1))
            .or_else(|| {
                site.filter(|s| s.writer_kind != WRITER_UNKNOWN)
                    .map(|s| format!("writer: {}", writer_name(s.writer_kind)))
            })
            .unwrap_or_else(|| "heartbeats arrive, the value does not".into()),
    };
    (class, why)
}

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

/// Every watch finding id, with its one-line title (docs/checks/<id>.md).
pub const IDS: &[(&str, &str)] = &[
    ("watch.area", "a progress area in /dev/shm is readable, valid and belongs to a running job"),
    ("watch.stall", "no instrumented wait of the job stalls past the threshold; a stall says who waits on what, and why"),
    ("watch.abort", "with --abort: every stalled waiter left its wait after the cooperative abort flag was set"),
];

/// One stall as watch followed it: detected once, then resolved or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub waiter: Waiter,
    /// Host realtime (ns) of the detection.
    pub detected_ns: u64,
    /// The wait's age at detection (ms): detection latency = this minus the threshold.
    pub detected_after_ms: f64,
    /// `stalled` (still at the end), `resumed` (the wait ended), `aborted` (ABORTED after
    /// --abort), `job-ended` (the process exited while it waited).
    pub outcome: String,
    /// The longest the wait was seen to last (ms).
    pub waited_ms: f64,
}

/// What watch learned about one area, for its findings and the raw JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AreaReport {
    pub path: String,
    pub pid: Option<u32>,
    pub job: String,
    /// `running`, `exited` (seen running, then gone), `gone` (not running when first seen),
    /// `reused` (the pid runs another process), `closed` (cleanup ran).
    pub process: String,
    /// Why the area could not be read, when it could not.
    pub error: Option<String>,
    pub header: Option<Header>,
    pub kernels: Vec<Kernel>,
    pub sites: Vec<Site>,
    pub clock: Option<Clock>,
    pub polls: u64,
    pub watched_ms: f64,
    pub threshold_ms: f64,
    pub poll_ms: f64,
    pub counts: Counts,
    pub longest_wait_ms: f64,
    pub episodes: Vec<Episode>,
    pub slow: Vec<Waiter>,
    /// With --abort: `not-needed`, `set`, or the error of setting it.
    pub abort: Option<String>,
    /// With --abort: waiters still WAITING after the grace.
    pub abort_still_waiting: Vec<Waiter>,
    pub abort_ms: Option<f64>,
    pub warnings: Vec<String>,
}

fn group_key(e: &Episode) -> (String, u32, Option<Class>) {
    (e.waiter.kernel.clone(), e.waiter.site, e.waiter.class)
}

/// The findings of one area.
pub fn findings(a: &AreaReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let subject = match a.pid {
        Some(p) if !a.job.is_empty() => format!("pid {p} ({})", a.job),
        Some(p) => format!("pid {p}"),
        None => a.path.clone(),
    };
    let Some(h) = &a.header else {
        let err = a.error.clone().unwrap_or_else(|| "unreadable".into());
        out.push(
            Finding::new(
                "watch.area",
                Status::Error,
                &a.path,
                format!("{}: damaged or foreign progress area: {err}", a.path),
            )
            .evidence(&a.path, err)
            .fix(format!("if no job of yours uses {} (its name says which pid made it), remove it; if one does, the job and this gdrdoctor disagree on the layout of kernels/include/gdrdoctor/progress.cuh: build both from the same checkout", a.path)),
        );
        return out;
    };
    let layout = format!(
        "magic GDRDPRG1 version {VERSION}, {} bytes, {} of {} records in use, {} kernel(s), {} site(s) named, {} words",
        h.area_size,
        h.records_used,
        h.record_count,
        h.kernels_used,
        a.sites.iter().filter(|s| !s.name.is_empty()).count(),
        h.words_count
    );
    let alive = a.process == "running" || a.process == "exited";
    let mut area = match a.process.as_str() {
        "running" | "exited" => Finding::new(
            "watch.area",
            Status::Pass,
            &subject,
            format!(
                "job {:?} (pid {}): {} kernel(s), {} records in use; {}",
                h.job,
                h.pid,
                h.kernels_used,
                h.records_used,
                if a.process == "exited" {
                    "the job exited while watched"
                } else {
                    "running"
                }
            ),
        ),
        "closed" => Finding::new(
            "watch.area",
            Status::Warn,
            &subject,
            format!("area of job {:?} (pid {}) is closed (gdrdoctor_progress_cleanup ran) but still in /dev/shm", h.job, h.pid),
        )
        .fix(format!("remove it: rm {}", a.path)),
        "reused" => Finding::new(
            "watch.area",
            Status::Warn,
            &subject,
            format!("leftover area of job {:?}: pid {} now runs another process (its start time differs)", h.job, h.pid),
        )
        .fix(format!("the job ended without gdrdoctor_progress_cleanup (crash or kill): remove it: rm {}", a.path)),
        _ => Finding::new(
            "watch.area",
            Status::Warn,
            &subject,
            format!("leftover area of job {:?}: pid {} is not running", h.job, h.pid),
        )
        .fix(format!("the job ended without gdrdoctor_progress_cleanup (crash or kill); its records are its last state (below); remove it when done: rm {}", a.path)),
    }
    .evidence(&a.path, layout);
    if let Some(c) = &a.clock {
        area = area.evidence("clock", c.describe());
    }
    if h.dropped > 0 {
        area.status = area.status.max(Status::Warn);
        area.message.push_str(&format!(
            "; {} kernel declaration(s) got no records (area full): their waits are bare spins watch cannot see",
            h.dropped
        ));
        area = area
            .expected(
                format!("{} dropped", a.path),
                h.dropped.to_string(),
                "0".to_string(),
            )
            .fix("give gdrdoctor_progress_init more records (gdrdoctor_progress_options_t.records) or declare fewer blocks per kernel");
    }
    for w in &a.warnings {
        area = area.evidence("warning", w.clone());
    }
    out.push(area);

    // Stalls: one finding per (kernel, site, class).
    let mut groups: BTreeMap<(String, u32, Option<Class>), Vec<&Episode>> = BTreeMap::new();
    for e in &a.episodes {
        groups.entry(group_key(e)).or_default().push(e);
    }
    let watch_line = format!(
        "threshold {:.0} ms, poll {:.0} ms, {} poll(s) over {:.0} ms",
        a.threshold_ms, a.poll_ms, a.polls, a.watched_ms
    );
    if groups.is_empty() && alive {
        let f = if a.counts.undated > 0 && a.watched_ms < a.threshold_ms {
            // Their waits began at a time the clock cannot place, and watch itself saw them
            // for less than the threshold: a stall among them would look like this too.
            Finding::new(
                "watch.stall",
                Status::Error,
                &subject,
                format!(
                    "no stall seen, but {} waiting record(s) cannot be dated (the area's clock puts their wait start outside the area's life) and watch saw them for only {:.0} ms, less than the {:.0} ms threshold: they may be stalled",
                    a.counts.undated, a.watched_ms, a.threshold_ms
                ),
            )
            .evidence("clock", a.clock.map(|c| c.describe()).unwrap_or_else(|| "unknown".into()))
            .fix(format!("watch for longer than the threshold (`gdrdoctor watch --pid <pid> --duration {:.0}`, without --once): the time watch sees a waiter waiting needs no clock; a wrong offset in the area header means the job's gdrdoctor_progress_init calibration failed or the area was written by something else", (a.threshold_ms / 1000.0).ceil() + 1.0))
        } else if a.counts.unstable > 0 {
            // A record that never reads consistently hides whatever it holds: not healthy.
            Finding::new(
                "watch.stall",
                Status::Error,
                &subject,
                format!(
                    "no stall among the records read, but {} record(s) never read consistently (seqlock odd or changing on every retry): their waits are unknown",
                    a.counts.unstable
                ),
            )
            .fix("a warp stopped in the middle of an update (its kernel was killed) or something else writes the area; watch again, and if it persists treat the job as hung (gdrdoctor watch --abort, cuda-gdb)")
        } else {
            Finding::new(
                "watch.stall",
                Status::Pass,
                &subject,
                format!(
                    "no waiter stalled for {:.0} ms or more ({} waiting now, longest wait {:.0} ms)",
                    a.threshold_ms, a.counts.waiting, a.longest_wait_ms
                ),
            )
        };
        out.push(
            f.evidence(&a.path, counts_text(&a.counts))
                .evidence("watch", watch_line.clone()),
        );
    }
    for ((_, _, class), eps) in groups {
        let first = eps[0];
        let w = &first.waiter;
        let still: Vec<&&Episode> = eps
            .iter()
            .filter(|e| e.outcome == "stalled" || e.outcome == "job-ended")
            .collect();
        let resumed = eps.iter().all(|e| e.outcome == "resumed");
        let status = if !alive || resumed {
            Status::Warn
        } else {
            Status::Fail
        };
        let more = if eps.len() > 1 {
            format!(" (+{} more waiters)", eps.len() - 1)
        } else {
            String::new()
        };
        let tail = if !alive {
            "; the job is not running: these are its last records".to_string()
        } else if resumed {
            format!(
                "; then resumed (longest {:.0} ms)",
                eps.iter().map(|e| e.waited_ms).fold(0.0, f64::max)
            )
        } else if eps.iter().any(|e| e.outcome == "aborted") && still.is_empty() {
            "; aborted (--abort)".to_string()
        } else {
            String::new()
        };
        let mut f = Finding::new(
            "watch.stall",
            status,
            format!("{subject}/{}/site {}", w.kernel, w.site),
            format!("{}{more}{tail}", w.text()),
        );
        if let Some(c) = class {
            f = f
                .evidence("class", format!("{}: {}", c.as_str(), explain(c)))
                .fix(fix(c));
        }
        if !w.why.is_empty() {
            f = f.evidence("verdict", w.why.clone());
        }
        f = f.evidence(
            "watch",
            format!(
                "{watch_line}; detected {:.0} ms after the wait began",
                first.detected_after_ms
            ),
        );
        for e in eps.iter().take(8) {
            f = f.evidence(
                "waiter",
                format!("{} [{}]", e.waiter.evidence_line(), e.outcome),
            );
        }
        f = f.evidence(&a.path, counts_text(&a.counts));
        out.push(f);
    }

    if let Some(ab) = &a.abort {
        let f = match ab.as_str() {
            "not-needed" => Finding::new(
                "watch.abort",
                Status::Skip,
                &subject,
                "abort flag not set: no waiter stalled",
            ),
            "set" if a.abort_still_waiting.is_empty() => Finding::new(
                "watch.abort",
                Status::Pass,
                &subject,
                format!(
                    "abort flag set: every stalled waiter left its wait{}",
                    a.abort_ms
                        .map(|m| format!(" within {m:.0} ms"))
                        .unwrap_or_default()
                ),
            )
            .evidence(format!("{} abort", a.path), "1"),
            "set" => {
                let mut f = Finding::new(
                    "watch.abort",
                    Status::Fail,
                    &subject,
                    format!(
                        "abort flag set, but {} waiter(s) still wait after the grace: {}",
                        a.abort_still_waiting.len(),
                        a.abort_still_waiting[0].text()
                    ),
                )
                .fix("the waits that ignore the flag are loops of your own (GDRDOCTOR_MARK_WAITING) that do not check GDRDOCTOR_ABORTED(): make them check it, or end the job (kill it; the gpu is usable by a new process after that)");
                for w in a.abort_still_waiting.iter().take(8) {
                    f = f.evidence("waiter", w.evidence_line());
                }
                f
            }
            err => Finding::new(
                "watch.abort",
                Status::Error,
                &subject,
                format!("could not set the abort flag: {err}"),
            )
            .fix("the area belongs to the job's user: run watch --abort as that user or as root"),
        };
        out.push(f);
    }
    out
}

fn counts_text(c: &Counts) -> String {
    format!(
        "records: {} waiting, {} started, {} progress, {} done, {} aborted, {} not started{}",
        c.waiting,
        c.started,
        c.progress,
        c.done,
        c.aborted,
        c.not_started,
        if c.unstable > 0 {
            format!(", {} unstable (skipped)", c.unstable)
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// An area image built field by field, as progress.cuh lays it out.
    pub struct Img {
        pub b: Vec<u8>,
    }

    impl Img {
        pub fn new(records: u32, sites: u32, kernels: u32, words: u32) -> Img {
            let off_sites = 4096u64;
            let round = |x: u64| x.div_ceil(4096) * 4096;
            let off_k = round(off_sites + 64 * u64::from(sites));
            let off_w = round(off_k + 64 * u64::from(kernels));
            let off_r = round(off_w + 8 * u64::from(words));
            let size = round(off_r + 64 * u64::from(records));
            let mut i = Img {
                b: vec![0; size as usize],
            };
            i.u64(0, MAGIC);
            i.u32(8, VERSION);
            i.u32(12, 256);
            i.u32(16, 4242);
            i.u64(32, 1_000);
            i.u64(56, size);
            i.u64(64, 0x7000_0000_0000);
            i.u64(72, 0x7000_0000_0000);
            i.u32(80, 256);
            i.u32(84, off_sites as u32);
            i.u32(88, sites);
            i.u32(92, off_k as u32);
            i.u32(96, kernels);
            i.u32(100, off_w as u32);
            i.u32(104, words);
            i.u32(108, off_r as u32);
            i.u32(112, records);
            i.u32(128, 64);
            i.u32(132, 64);
            i.u32(136, 64);
            i.b[144..147].copy_from_slice(b"job");
            i.u64(264, 1_000_000);
            i
        }
        pub fn u32(&mut self, off: usize, v: u32) {
            self.b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        pub fn u64(&mut self, off: usize, v: u64) {
            self.b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        pub fn header(&self) -> Header {
            parse_header(&self.b, self.b.len() as u64).unwrap()
        }
        pub fn kernel(&mut self, name: &str, blocks: u32, warps: u32) -> u32 {
            let h = self.header();
            let slot = h.kernels_used;
            let off = h.kernel_offset as usize + 64 * slot as usize;
            self.b[off..off + name.len()].copy_from_slice(name.as_bytes());
            self.u32(off + 32, h.records_used);
            self.u32(off + 36, blocks);
            self.u32(off + 40, warps);
            self.u32(off + 56, 1);
            self.u32(116, h.records_used + blocks * warps);
            self.u32(120, slot + 1);
            slot
        }
        pub fn launch(&mut self, slot: u32) -> u32 {
            let h = self.header();
            let off = h.kernel_offset as usize + 64 * slot as usize + 44;
            let n = u32_at(&self.b, off) + 1;
            self.u32(off, n);
            n
        }
        #[allow(clippy::too_many_arguments)]
        pub fn record(
            &mut self,
            slot: u32,
            gen: u32,
            block: u32,
            warp: u32,
            phase: u32,
            site: u32,
            addr: u64,
            expected: u64,
            observed: u64,
            start: u64,
            beat: u64,
        ) {
            let h = self.header();
            let k = parse_kernels(&h, &self.b[h.kernel_offset as usize..]).unwrap();
            let k = &k[slot as usize];
            let idx = k.rec_base + block * k.warps_per_block + warp;
            let off = h.record_offset as usize + 64 * idx as usize;
            self.u32(off, 2);
            self.u32(off + 4, (phase << 24) | (CMP_WIDE << 16) | site);
            self.u32(off + 8, block);
            self.u32(off + 12, (7 << 16) | warp);
            self.u32(off + 16, (slot << 24) | gen);
            self.u64(off + 24, addr);
            self.u64(off + 32, expected);
            self.u64(off + 40, observed);
            self.u64(off + 48, start);
            self.u64(off + 56, beat);
        }
        pub fn site(&mut self, id: u32, name: &str, kind: u32, dev: i32, writer: i32) {
            let h = self.header();
            let off = h.site_offset as usize + 64 * id as usize;
            self.b[off..off + name.len()].copy_from_slice(name.as_bytes());
            self.u32(off + 44, kind);
            self.u32(off + 48, dev as u32);
            self.u32(off + 52, writer as u32);
            self.u32(off + 56, 1);
        }
        pub fn word(&mut self, i: u32, v: u64) -> u64 {
            let h = self.header();
            self.u64(h.words_offset as usize + 8 * i as usize, v);
            h.dev_base + u64::from(h.words_offset) + 8 * u64::from(i)
        }
        /// Analyse as a poll `now_rt` would (one tracker observation).
        pub fn analyse(&self, now_rt: u64, stall_ms: u64) -> Analysis {
            let h = self.header();
            let sites = parse_sites(&h, &self.b[h.site_offset as usize..]);
            let kernels = parse_kernels(&h, &self.b[h.kernel_offset as usize..]).unwrap();
            let (w0, w1) = h.words_range();
            let (r0, r1) = h.records_range();
            let records: Vec<Option<Record>> = self.b[r0 as usize..r1 as usize]
                .chunks(64)
                .enumerate()
                .map(|(i, c)| Some(decode_record(i as u32, c)))
                .collect();
            let mut tr = Tracker::default();
            let live: Vec<Record> = records.iter().flatten().copied().collect();
            tr.observe(&live, 0);
            let v = View {
                header: &h,
                sites: &sites,
                kernels: &kernels,
                words: &self.b[w0 as usize..w1 as usize],
                records: &records,
            };
            analyse(
                &v,
                &tr,
                &Clock::of(&h),
                now_rt,
                0,
                Thresholds {
                    stall_ns: stall_ms * 1_000_000,
                },
            )
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_fresh_area_parses() {
        let i = Img::new(64, 16, 4, 8);
        let h = i.header();
        assert_eq!(h.pid, 4242);
        assert_eq!(h.job, "job");
        assert_eq!(h.hb_ns, 1_000_000);
        assert_eq!(h.records_used, 0);
    }

    #[test]
    fn damaged_headers_are_errors_naming_the_problem() {
        let base = Img::new(64, 16, 4, 8);
        type Damage = Box<dyn Fn(&mut Img)>;
        let cases: Vec<(Damage, &str)> = vec![
            (Box::new(|i: &mut Img| i.u64(0, 0)), "no magic"),
            (Box::new(|i: &mut Img| i.u64(0, 0x1234)), "bad magic"),
            (Box::new(|i: &mut Img| i.u32(8, 2)), "layout version 2"),
            (Box::new(|i: &mut Img| i.u32(128, 32)), "record_size is 32"),
            (Box::new(|i: &mut Img| i.u32(16, 0)), "pid 0"),
            (Box::new(|i: &mut Img| i.u32(112, u32::MAX)), "record_count"),
            (Box::new(|i: &mut Img| i.u32(116, 65)), "records_used 65"),
            (Box::new(|i: &mut Img| i.u32(120, 5)), "kernels_used 5"),
            (Box::new(|i: &mut Img| i.u64(56, 1 << 40)), "larger than"),
            (Box::new(|i: &mut Img| i.u32(108, 4096)), "overlap"),
            (Box::new(|i: &mut Img| i.u32(100, 4097)), "aligned"),
        ];
        for (damage, want) in cases {
            let mut i = Img { b: base.b.clone() };
            damage(&mut i);
            let e = parse_header(&i.b, i.b.len() as u64).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        // Truncated file, and too short for a header at all.
        let e = parse_header(&base.b, 4096).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let e = parse_header(&base.b[..100], 100).unwrap_err();
        assert!(e.contains("too short"), "{e}");
    }

    #[test]
    fn kernel_tables_are_validated() {
        let mut i = Img::new(64, 16, 4, 8);
        i.kernel("k", 2, 2);
        let h = i.header();
        assert_eq!(
            parse_kernels(&h, &i.b[h.kernel_offset as usize..]).unwrap()[0].records(),
            0..4
        );
        // Claims more records than are in use.
        let off = h.kernel_offset as usize;
        i.u32(off + 36, 40);
        let e = parse_kernels(&h, &i.b[off..]).unwrap_err();
        assert!(e.contains("beyond"), "{e}");
        i.u32(off + 36, 2);
        i.u32(off + 40, 33);
        assert!(parse_kernels(&h, &i.b[off..]).is_err());
        i.u32(off + 40, 2);
        i.u32(off + 56, 0);
        assert!(parse_kernels(&h, &i.b[off..])
            .unwrap_err()
            .contains("not declared"));
    }

    #[test]
    fn a_healthy_waiter_is_not_stalled() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("ring", 2, 1);
        i.launch(k);
        i.record(
            k,
            1,
            0,
            0,
            PH_WAITING,
            3,
            0x10,
            5,
            4,
            10 * S - 1_000,
            10 * S,
        );
        i.record(
            k,
            1,
            1,
            0,
            PH_PROGRESS,
            4,
            0x18,
            5,
            5,
            10 * S - 1_000,
            10 * S,
        );
        let a = i.analyse(10 * S + 1_000_000, 1000);
        assert!(a.stalled.is_empty() && a.slow.is_empty(), "{a:?}");
        assert_eq!((a.counts.waiting, a.counts.progress), (1, 1));
    }

    #[test]
    fn a_waiter_with_heartbeats_on_a_value_nobody_writes_is_a_spin_stall() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("ring", 2, 1);
        i.launch(k);
        i.site(4, "consumer waits head", WRITER_SAME_GPU, -1, -1);
        i.record(k, 1, 0, 0, PH_STARTED, 0, 0, 0, 0, 0, 0);
        i.record(
            k,
            1,
            1,
            0,
            PH_WAITING,
            4,
            0xdead0,
            1001,
            1000,
            10 * S,
            12 * S,
        );
        let a = i.analyse(12 * S + 1_000_000, 1000);
        assert_eq!(a.stalled.len(), 1, "{a:?}");
        let w = &a.stalled[0];
        assert_eq!(w.class, Some(Class::SpinStall));
        assert_eq!((w.block, w.warp, w.sm), (1, 0, 7));
        assert_eq!((w.expected.as_str(), w.observed.as_str()), ("1001", "1000"));
        assert_eq!(w.addr, "0xdead0");
        assert!((w.waited_ms - 2001.0).abs() < 1.0, "{}", w.waited_ms);
        assert!(
            w.text().contains("site 4 (consumer waits head)"),
            "{}",
            w.text()
        );
        assert!(w.why.contains("same gpu"), "{}", w.why);
    }

    #[test]
    fn half_the_threshold_is_slow_not_stalled() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("ring", 1, 1);
        i.launch(k);
        i.record(
            k,
            1,
            0,
            0,
            PH_WAITING,
            1,
            0x10,
            1,
            0,
            10 * S,
            10 * S + 600_000_000,
        );
        let a = i.analyse(10 * S + 600_000_000, 1000);
        assert!(a.stalled.is_empty());
        assert_eq!(a.slow.len(), 1);
    }

    #[test]
    fn blocks_that_never_started_while_all_started_wait_is_forward_progress() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("barrier", 4, 1);
        i.launch(k);
        let h = i.header();
        i.u32(h.kernel_offset as usize + 48, 4);
        for b in 0..3 {
            i.record(k, 1, b, 0, PH_WAITING, 5, 0x10, 1, 0, 10 * S, 12 * S);
        }
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled.len(), 3);
        assert!(a
            .stalled
            .iter()
            .all(|w| w.class == Some(Class::ForwardProgress)));
        assert!(
            a.stalled[0].why.contains("1 of 4 blocks never started"),
            "{}",
            a.stalled[0].why
        );
        // Records of an older launch in the missing block do not count as started.
        i.record(k, 0, 3, 0, PH_DONE, 5, 0x10, 1, 1, S, S);
        assert_eq!(
            i.analyse(12 * S, 1000).stalled[0].class,
            Some(Class::ForwardProgress)
        );
        // The fourth block of this launch started and finished: not forward progress.
        i.record(k, 1, 3, 0, PH_DONE, 5, 0x10, 1, 1, S, S);
        assert_eq!(
            i.analyse(12 * S, 1000).stalled[0].class,
            Some(Class::SpinStall)
        );
    }

    #[test]
    fn a_writer_kernel_launched_but_never_started_is_ordering() {
        let mut i = Img::new(64, 16, 4, 8);
        let cons = i.kernel("consumer", 1, 1);
        let prod = i.kernel("producer", 1, 1);
        i.launch(cons);
        i.launch(prod);
        i.site(1, "flag from producer", WRITER_SAME_GPU, -1, prod as i32);
        i.record(cons, 1, 0, 0, PH_WAITING, 1, 0x10, 1, 0, 10 * S, 12 * S);
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled[0].class, Some(Class::Ordering));
        assert!(
            a.stalled[0].why.contains("never started"),
            "{}",
            a.stalled[0].why
        );
        // Once the producer's newest launch started, it is not ordering.
        i.record(prod, 1, 0, 0, PH_DONE, 0, 0, 0, 0, 0, 0);
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled[0].class, Some(Class::SpinStall));
        assert!(
            a.stalled[0].why.contains("finished"),
            "{}",
            a.stalled[0].why
        );
        // A second launch handed out and not started: ordering again.
        i.launch(prod);
        assert_eq!(
            i.analyse(12 * S, 1000).stalled[0].class,
            Some(Class::Ordering)
        );
    }

    #[test]
    fn memory_that_satisfies_the_wait_is_a_stale_read() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("k", 1, 1);
        i.launch(k);
        let addr = i.word(3, 1);
        i.record(k, 1, 0, 0, PH_WAITING, 2, addr, 1, 0, 10 * S, 12 * S);
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled[0].class, Some(Class::StaleRead));
        assert_eq!(a.stalled[0].memory.as_deref(), Some("1"));
        // Memory still 0: spin-stall, with the memory shown.
        i.word(3, 0);
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled[0].class, Some(Class::SpinStall));
        assert_eq!(a.stalled[0].memory.as_deref(), Some("0"));
    }

    #[test]
    fn no_heartbeat_for_the_threshold_is_silent() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("k", 1, 1);
        i.launch(k);
        i.record(k, 1, 0, 0, PH_WAITING, 2, 0x10, 1, 0, 10 * S, 10 * S);
        assert_eq!(
            i.analyse(12 * S, 1000).stalled[0].class,
            Some(Class::Silent)
        );
    }

    #[test]
    fn a_site_written_by_a_peer_gpu_is_remote_wait() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("k", 1, 1);
        i.launch(k);
        i.site(7, "flag from gpu 1", WRITER_PEER_GPU, 1, -1);
        i.record(k, 1, 0, 0, PH_WAITING, 7, 0x10, 1, 0, 10 * S, 12 * S);
        let a = i.analyse(12 * S, 1000);
        assert_eq!(a.stalled[0].class, Some(Class::RemoteWait));
        assert!(a.stalled[0].why.contains("gpu 1"));
    }

    #[test]
    fn comparisons_follow_the_words_type() {
        let mut r = Record {
            cmp: 1,
            expected: 5,
            ..Default::default()
        };
        assert!(r.satisfied_by(5) && r.satisfied_by(6) && !r.satisfied_by(4));
        r.cmp = CMP_SIGNED | 1; // 4-byte signed >=
        r.expected = (-1i32) as u32 as u64;
        assert!(r.satisfied_by(0) && !r.satisfied_by((-2i32) as u32 as u64));
        assert_eq!(r.show((-2i32) as u32 as u64), "-2");
        r.cmp = 5; // 4-byte unsigned <
        r.expected = 3;
        assert!(r.satisfied_by(2) && !r.satisfied_by(3));
        r.cmp = 2 | CMP_WIDE;
        assert!(r.satisfied_by(4) && !r.satisfied_by(3));
    }

    #[test]
    fn records_that_cannot_come_from_the_header_are_problems() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("k", 2, 2);
        let h = i.header();
        let kernels = parse_kernels(&h, &i.b[h.kernel_offset as usize..]).unwrap();
        let mut r = Record {
            index: 3,
            phase: PH_WAITING,
            kernel: k,
            block: 1,
            warp: 1,
            ..Default::default()
        };
        assert_eq!(record_problem(&r, &kernels), None);
        r.warp = 0;
        assert!(record_problem(&r, &kernels).is_some());
        r.kernel = 9;
        assert!(record_problem(&r, &kernels)
            .unwrap()
            .contains("not declared"));
        r.phase = 9;
        assert!(record_problem(&r, &kernels).is_some());
    }

    #[test]
    fn a_stable_read_needs_two_equal_copies_and_an_even_seq() {
        let mut a = [0u8; 64];
        a[0] = 2;
        assert!(stable(&a, &a));
        let mut b = a;
        b[40] = 1;
        assert!(!stable(&a, &b));
        a[0] = 3;
        assert!(!stable(&a, &a));
    }

    #[test]
    fn findings_group_waiters_and_carry_evidence() {
        let mut i = Img::new(64, 16, 4, 8);
        let k = i.kernel("barrier", 4, 1);
        i.launch(k);
        for b in 0..3 {
            i.record(k, 1, b, 0, PH_WAITING, 5, 0x10, 1, 0, 10 * S, 12 * S);
        }
        let a = i.analyse(12 * S, 1000);
        let rep = AreaReport {
            path: "/dev/shm/gdrdoctor-4242-0".into(),
            pid: Some(4242),
            job: "job".into(),
            process: "running".into(),
            header: Some(i.header()),
            threshold_ms: 1000.0,
            poll_ms: 10.0,
            counts: a.counts.clone(),
            episodes: a
                .stalled
                .iter()
                .map(|w| Episode {
                    waiter: w.clone(),
                    detected_ns: 12 * S,
                    detected_after_ms: w.waited_ms,
                    outcome: "stalled".into(),
                    waited_ms: w.waited_ms,
                })
                .collect(),
            ..Default::default()
        };
        let f = findings(&rep);
        assert_eq!(f[0].id, "watch.area");
        assert_eq!(f[0].status, Status::Pass);
        let stall: Vec<_> = f.iter().filter(|f| f.id == "watch.stall").collect();
        assert_eq!(stall.len(), 1, "{f:#?}");
        assert_eq!(stall[0].status, Status::Fail);
        assert!(
            stall[0]
                .message
                .starts_with("forward-progress: kernel barrier block 0"),
            "{}",
            stall[0].message
        );
        assert!(stall[0].message.contains("(+2 more waiters)"));
        assert_eq!(
            stall[0]
                .evidence
                .iter()
                .filter(|e| e.source == "waiter")
                .count(),
            3
        );
        assert!(stall[0].remediation.is_some());
        // A damaged area is one error naming the file.
        let bad = AreaReport {
            path: "/dev/shm/gdrdoctor-1-0".into(),
            error: Some("bad magic".into()),
            ..Default::default()
        };
        let f = findings(&bad);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0].message.contains("/dev/shm/gdrdoctor-1-0"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        proptest! {
            /// Whatever the bytes, parsing never panics, and an accepted header keeps every
            /// region inside the area.
            #[test]
            fn any_header_bytes_parse_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..400), len in 0u64..(1 << 31)) {
                if let Ok(h) = parse_header(&bytes, len) {
                    prop_assert!(h.area_size <= len);
                    prop_assert!(h.records_range().1 <= h.area_size);
                    prop_assert!(h.sites_range().1 <= h.area_size);
                    prop_assert!(h.words_range().1 <= h.area_size);
                }
            }

            /// A valid header with random tables and records: parsing and analysis never panic.
            #[test]
            fn any_tables_and_records_analyse(kt in proptest::collection::vec(any::<u8>(), 256), rt in proptest::collection::vec(any::<u8>(), 64 * 8), st in proptest::collection::vec(any::<u8>(), 64 * 4), now in any::<u64>()) {
                let mut i = Img::new(8, 4, 4, 8);
                i.u32(116, 8);
                i.u32(120, 4);
                let h = i.header();
                let sites = parse_sites(&h, &st);
                let kernels = parse_kernels(&h, &kt).unwrap_or_default();
                let records: Vec<Option<Record>> = rt.chunks(64).enumerate().map(|(n, c)| Some(decode_record(n as u32, c))).collect();
                let mut tr = Tracker::default();
                tr.observe(&records.iter().flatten().copied().collect::<Vec<_>>(), now / 2);
                let v = View { header: &h, sites: &sites, kernels: &kernels, words: &[0u8; 64], records: &records };
                let a = analyse(&v, &tr, &Clock::of(&h), now, now, Thresholds { stall_ns: 1 });
                for w in &a.stalled {
                    prop_assert!(w.class.is_some());
                }
            }
        }
    }
}
