//! Memory shared with a GPU (or, in tests, with another thread standing in for one): a byte
//! range that Rust code touches only through atomics, because the other side writes it at any
//! time. The one `unsafe` conversion from raw memory to atomics is here.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A view of shared memory: 8-byte aligned, a whole number of 8-byte words, accessed by byte
/// offset as 32- or 64-bit atomics. Offsets outside the region or misaligned for the access
/// size are programming errors of the caller's layout (constants), and panic.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    words: &'a [AtomicU64],
}

impl std::fmt::Debug for Region<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} bytes)", self.len())
    }
}

impl<'a> Region<'a> {
    /// # Safety
    /// `ptr` must be 8-byte aligned, `len` bytes must stay allocated for `'a`, and every other
    /// user of the memory (the GPU) must access it atomically or not at all while Rust holds it.
    pub(crate) unsafe fn from_raw(ptr: *const u8, len: usize) -> Region<'a> {
        // SAFETY: guaranteed by the caller; AtomicU64 has the size and alignment of u64 and
        // every bit pattern is valid.
        let words = unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicU64>(), len / 8) };
        Region { words }
    }

    /// A region over memory Rust owns (tests: a heap buffer standing in for mapped memory).
    pub fn from_words(words: &'a [AtomicU64]) -> Region<'a> {
        Region { words }
    }

    pub fn len(&self) -> usize {
        self.words.len() * 8
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The 64-bit word at byte offset `off` (8-aligned).
    pub fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        assert!(off.is_multiple_of(8), "misaligned 64-bit access at {off}");
        &self.words[off / 8]
    }

    /// The 64-bit word at `off`, or `None` outside the region or misaligned.
    pub fn get_u64(&self, off: usize) -> Option<&'a AtomicU64> {
        if !off.is_multiple_of(8) {
            return None;
        }
        self.words.get(off / 8)
    }

    /// The 32-bit word at byte offset `off` (4-aligned).
    pub fn u32_at(&self, off: usize) -> &'a AtomicU32 {
        assert!(off.is_multiple_of(4), "misaligned 32-bit access at {off}");
        let w: &'a AtomicU64 = &self.words[off / 8];
        let base = (w as *const AtomicU64).cast::<AtomicU32>();
        // SAFETY: the word is 8 bytes of shared memory accessed only atomically; its two
        // 4-byte halves are valid, aligned AtomicU32s for as long as the word is borrowed.
        unsafe { &*base.add((off % 8) / 4) }
    }

    /// Zero every word (nothing else may be running on the memory).
    pub fn zero(&self) {
        for w in self.words {
            w.store(0, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Heap memory with the shape of a mapped region, for tests of code that reads GPU records.
pub struct HeapRegion {
    words: Vec<AtomicU64>,
}

impl HeapRegion {
    pub fn new(bytes: usize) -> HeapRegion {
        HeapRegion {
            words: (0..bytes.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn region(&self) -> Region<'_> {
        Region::from_words(&self.words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_and_words_address_the_same_bytes() {
        let h = HeapRegion::new(64);
        let r = h.region();
        r.u32_at(8).store(0x1111_2222, Ordering::Relaxed);
        r.u32_at(12).store(0x3333_4444, Ordering::Relaxed);
        let w = r.u64_at(8).load(Ordering::Relaxed);
        assert_eq!(w.to_ne_bytes()[..4], 0x1111_2222u32.to_ne_bytes());
        assert_eq!(w.to_ne_bytes()[4..], 0x3333_4444u32.to_ne_bytes());
        assert!(r.get_u64(64).is_none() && r.get_u64(4).is_none());
        r.zero();
        assert_eq!(r.u64_at(8).load(Ordering::Relaxed), 0);
        assert_eq!(r.len(), 64);
    }
}
