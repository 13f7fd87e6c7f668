//! Bounds-checked little-endian reads of config space bytes.

/// Bounds-checked little-endian reader; with `touched`, it also notes every byte it reads
/// (for [`touched`]).
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) touched: Option<&'a std::cell::RefCell<Vec<bool>>>,
}

impl<'a> Reader<'a> {
    pub(super) fn get(self, off: usize, n: usize) -> Option<&'a [u8]> {
        let end = off.checked_add(n)?;
        let b = self.bytes.get(off..end)?;
        if let Some(t) = self.touched {
            if let Ok(mut t) = t.try_borrow_mut() {
                for x in t.get_mut(off..end).into_iter().flatten() {
                    *x = true;
                }
            }
        }
        Some(b)
    }

    pub(super) fn len(self) -> usize {
        self.bytes.len()
    }

    pub(super) fn u8(self, off: usize) -> Option<u8> {
        self.get(off, 1).and_then(|b| b.first().copied())
    }

    pub(super) fn u16(self, off: usize) -> Option<u16> {
        let b: [u8; 2] = self.get(off, 2)?.try_into().ok()?;
        Some(u16::from_le_bytes(b))
    }

    pub(super) fn u32(self, off: usize) -> Option<u32> {
        let b: [u8; 4] = self.get(off, 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    }
}
