//! The progress record: the 64 bytes one waiting agent publishes in host-mapped memory and the
//! host reads while the kernel runs. One layout for both writers, `gdrdoctor_record` of
//! `kernels/include/gdrdoctor/progress.cuh` (a warp of the user's kernel, read by
//! [`crate::watch`]) and `struct HangRecord` of `kernels/hang.cu` (a block of the hang probe,
//! read by the binary's `probe/hang/layout.rs`); tests/watch.rs compiles both structs with gcc
//! and compares every field's offset and width with [`FIELDS`].
//!
//! Single writer, seqlock: `seq` is odd while a multi-field update is in flight. The fields'
//! meaning is the same for both writers except where a field says otherwise.

/// Bytes per record.
pub const SIZE: usize = 64;

/// `u32` seqlock: odd while an update is in flight.
pub const SEQ: usize = 0;
/// `u32` phase:8 | cmp:8 | site:16.
pub const PHASE_SITE: usize = 4;
/// `u32` the writer's block (progress.cuh: linear block index).
pub const BLOCK: usize = 8;
/// `u32` where the writer runs: progress.cuh smid:16 | warp in block:16; hang.cu smid:24 |
/// hardware warp id:8.
pub const SM_WARP: usize = 12;
/// `u32` kernel slot:8 | launch generation:24 (hang.cu: always 0).
pub const KERNEL_GEN: usize = 16;
/// `u32` completed waits, mod 2^32 (the progress counter).
pub const ITER: usize = 20;
/// `u64` device address of the awaited word.
pub const ADDR: usize = 24;
/// `u64` the value the wait wants.
pub const EXPECTED: usize = 32;
/// `u64` the last value the waiter saw (heartbeat).
pub const OBSERVED: usize = 40;
/// `u64` `%globaltimer` when the wait was published.
pub const WAIT_START_GT: usize = 48;
/// `u64` `%globaltimer` of the last heartbeat.
pub const BEAT_GT: usize = 56;

/// Every field: its name in both C structs, its offset and its width in bytes, in order.
pub const FIELDS: &[(&str, usize, usize)] = &[
    ("seq", SEQ, 4),
    ("phase_site", PHASE_SITE, 4),
    ("block", BLOCK, 4),
    ("sm_warp", SM_WARP, 4),
    ("kernel_gen", KERNEL_GEN, 4),
    ("iter", ITER, 4),
    ("addr", ADDR, 8),
    ("expected", EXPECTED, 8),
    ("observed", OBSERVED, 8),
    ("wait_start_gt", WAIT_START_GT, 8),
    ("beat_gt", BEAT_GT, 8),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_tile_the_record_in_order() {
        let mut next = 0;
        for (name, off, width) in FIELDS {
            assert_eq!(*off, next, "{name}");
            assert_eq!(off % width, 0, "{name} is aligned");
            next = off + width;
        }
        assert_eq!(next, SIZE);
    }
}
