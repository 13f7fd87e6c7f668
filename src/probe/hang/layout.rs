//! The memory the hang kernels share with the host (kernels/hang.cu): the control block, the
//! launch records, the flags and one 64-byte record per waiting agent, in host-mapped memory
//! that the host reads only through atomics ([`Region`]). Record layouts mirror the `struct`s
//! of kernels/hang.cu field by field; the waiter's record is the progress record of
//! `gdrdoctor_checks::progress_record`, the one layout `gdrdoctor watch` reads too.

use crate::live::shared::Region;
use gdrdoctor_checks::progress_record as rec;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub const PH_NOT_STARTED: u32 = 0;
pub const PH_STARTED: u32 = 1;
pub const PH_WAITING: u32 = 2;
pub const PH_PROGRESS: u32 = 3;
pub const PH_DONE: u32 = 4;
pub const PH_ABORTED: u32 = 5;

pub(super) const L_ENQUEUED: u32 = 1;
pub(super) const L_STARTED: u32 = 2;
pub(super) const L_DONE: u32 = 3;

/// One waiting agent's record (64 bytes, device-written, host-read): `struct HangRecord` of
/// kernels/hang.cu (the progress record, [`rec`]), seen through the shared region's atomics.
/// Its `kernel_gen` is always 0 here: the probe knows its launches.
#[derive(Clone, Copy)]
pub struct HangRecord<'a> {
    pub seq: &'a AtomicU32,
    /// phase:8 | cmp:8 | site:16
    pub phase_site: &'a AtomicU32,
    pub block: &'a AtomicU32,
    /// smid << 8 | warpid
    pub smid_warp: &'a AtomicU32,
    /// Completed waits, mod 2^32.
    pub iter: &'a AtomicU32,
    pub addr: &'a AtomicU64,
    pub expected: &'a AtomicU64,
    pub observed: &'a AtomicU64,
    pub wait_start_gt: &'a AtomicU64,
    pub beat_gt: &'a AtomicU64,
}

/// `struct Control` of kernels/hang.cu (64 bytes).
#[derive(Clone, Copy)]
pub struct Control<'a> {
    pub abort: &'a AtomicU32,
    pub generation: &'a AtomicU32,
    pub hb_ns: &'a AtomicU64,
    pub print_ns: &'a AtomicU64,
    pub slow_ns: &'a AtomicU64,
}

/// `struct LaunchRecord` of kernels/hang.cu (64 bytes).
#[derive(Clone, Copy)]
pub struct LaunchRecord<'a> {
    pub state: &'a AtomicU32,
    pub launch_id: &'a AtomicU32,
    pub blocks_started: &'a AtomicU32,
    pub blocks_done: &'a AtomicU32,
    pub start_gt: &'a AtomicU64,
    pub end_gt: &'a AtomicU64,
    pub value: &'a AtomicU64,
}

impl<'a> HangRecord<'a> {
    pub(super) fn at(m: Region<'a>, o: usize) -> HangRecord<'a> {
        HangRecord {
            seq: m.u32_at(o + rec::SEQ),
            phase_site: m.u32_at(o + rec::PHASE_SITE),
            block: m.u32_at(o + rec::BLOCK),
            smid_warp: m.u32_at(o + rec::SM_WARP),
            iter: m.u32_at(o + rec::ITER),
            addr: m.u64_at(o + rec::ADDR),
            expected: m.u64_at(o + rec::EXPECTED),
            observed: m.u64_at(o + rec::OBSERVED),
            wait_start_gt: m.u64_at(o + rec::WAIT_START_GT),
            beat_gt: m.u64_at(o + rec::BEAT_GT),
        }
    }
}

impl<'a> Control<'a> {
    pub(super) fn at(m: Region<'a>, o: usize) -> Control<'a> {
        Control {
            abort: m.u32_at(o),
            generation: m.u32_at(o + 4),
            hb_ns: m.u64_at(o + 8),
            print_ns: m.u64_at(o + 16),
            slow_ns: m.u64_at(o + 24),
        }
    }
}

impl<'a> LaunchRecord<'a> {
    pub(super) fn at(m: Region<'a>, o: usize) -> LaunchRecord<'a> {
        LaunchRecord {
            state: m.u32_at(o),
            launch_id: m.u32_at(o + 4),
            blocks_started: m.u32_at(o + 8),
            blocks_done: m.u32_at(o + 12),
            start_gt: m.u64_at(o + 16),
            end_gt: m.u64_at(o + 24),
            value: m.u64_at(o + 32),
        }
    }
}

pub(super) const MAX_LAUNCHES: usize = 8;
pub(super) const MAX_FLAGS: usize = 8;
pub const MAX_REC: usize = 4096;
pub(super) const OFF_CTRL: usize = 0;
pub(super) const OFF_LAUNCH: usize = 64;
pub(super) const OFF_FLAGS: usize = OFF_LAUNCH + 64 * MAX_LAUNCHES;
pub(super) const OFF_CALIB: usize = OFF_FLAGS + 64 * MAX_FLAGS;
pub(super) const OFF_RECS: usize = 4096;
pub(super) const MAPPED_SIZE: usize = OFF_RECS + rec::SIZE * MAX_REC;

/// A consistent copy of a record (seqlock read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snap {
    pub phase: u32,
    pub cmp: u32,
    pub site: u32,
    pub block: u32,
    pub smid: u32,
    pub warp: u32,
    pub iter: u64,
    pub addr: u64,
    pub expected: u64,
    pub observed: u64,
    pub wait_start_gt: u64,
    pub beat_gt: u64,
}

impl HangRecord<'_> {
    pub fn snapshot(&self) -> Snap {
        for _ in 0..64 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ps = self.phase_site.load(Ordering::Relaxed);
            let sw = self.smid_warp.load(Ordering::Relaxed);
            let snap = Snap {
                phase: ps >> 24,
                cmp: (ps >> 16) & 0xff,
                site: ps & 0xffff,
                block: self.block.load(Ordering::Relaxed),
                smid: sw >> 8,
                warp: sw & 0xff,
                iter: u64::from(self.iter.load(Ordering::Relaxed)),
                addr: self.addr.load(Ordering::Relaxed),
                expected: self.expected.load(Ordering::Relaxed),
                observed: self.observed.load(Ordering::Relaxed),
                wait_start_gt: self.wait_start_gt.load(Ordering::Relaxed),
                beat_gt: self.beat_gt.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return snap;
            }
        }
        // A writer that never finishes its update: report what is there.
        let ps = self.phase_site.load(Ordering::Relaxed);
        Snap {
            phase: ps >> 24,
            site: ps & 0xffff,
            iter: u64::from(self.iter.load(Ordering::Relaxed)),
            ..Default::default()
        }
    }
}

pub(super) fn phase_name(p: u32) -> &'static str {
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

pub(super) fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
