//! Config space read partially: only the dwords the decoder looks at, with `pread`, in a
//! buffer of the file's readable length.

use super::at::open_nofollow;
use super::{ErrorKind, ReadError, Root, MAX_FILE};

impl Root {
    /// A device's PCI config space (`.../config`) as the checks need it. On the live node
    /// (not recording) only the bytes the decoder reads are fetched
    /// ([`Root::read_partial`] driven by `gdrdoctor_checks::pci::config::touched`): in a VM
    /// every config dword read traps to the hypervisor. Elsewhere (a sysroot's plain files, a
    /// snapshot being recorded, which keeps the whole space) the whole file.
    pub fn read_config(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        use std::sync::atomic::Ordering::Relaxed;
        let t0 = crate::sys::trace::now_ns();
        let r = if self.partial && self.recorder.is_none() {
            self.read_partial(path, &gdrdoctor_checks::pci::config::touched)
                .map(|p| {
                    self.config_stats[1].fetch_add(p.fetched as u64, Relaxed);
                    self.config_stats[2].fetch_add(p.reads as u64, Relaxed);
                    p.bytes
                })
        } else {
            self.read(path).inspect(|b| {
                self.config_stats[1].fetch_add(b.len() as u64, Relaxed);
                self.config_stats[2].fetch_add(1, Relaxed);
            })
        };
        self.config_stats[0].fetch_add(1, Relaxed);
        self.config_stats[3].fetch_add(crate::sys::trace::now_ns().saturating_sub(t0), Relaxed);
        r
    }

    /// Config-space reads so far: (files, bytes fetched, reads, nanoseconds summed over
    /// threads), for the trace.
    pub fn config_stats(&self) -> (u64, u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let [a, b, c, d] = &self.config_stats;
        (
            a.load(Relaxed),
            b.load(Relaxed),
            c.load(Relaxed),
            d.load(Relaxed),
        )
    }

    /// Read config space partially even on a sysroot (tests of the partial reader).
    pub fn with_partial_reads(mut self, on: bool) -> Root {
        self.partial = on;
        self
    }

    /// Read only the parts of a file that `need` asks for. The buffer has the file's readable
    /// length (what a whole read would return: a non-root reader of sysfs `config` gets 64
    /// bytes of a 4096-byte file) and holds zeros where nothing was fetched. `need` sees the
    /// buffer so far and names the byte ranges it reads; they are fetched (whole dwords, with
    /// `pread`) and `need` asked again, until it asks for nothing new. The caller's decoder
    /// then sees exactly the bytes it would see in the whole file wherever it looks.
    pub fn read_partial(
        &self,
        path: &str,
        need: &dyn Fn(&[u8]) -> Vec<std::ops::Range<usize>>,
    ) -> Result<Partial, ReadError> {
        let t0 = crate::sys::trace::now_ns();
        if self.mem.is_some() {
            // In memory: the whole file costs nothing more than its parts.
            let bytes = self.read(path)?;
            return Ok(Partial {
                len: bytes.len(),
                fetched: bytes.len(),
                reads: 1,
                bytes,
            });
        }
        let comps = self.resolve_comps(path, true)?;
        let host = self.host_path(&comps);
        let file = open_nofollow(&host).map_err(|e| ReadError::io(path, &e))?;
        let md = file.metadata().map_err(|e| ReadError::io(path, &e))?;
        if md.is_dir() {
            return Err(ReadError::new(path, ErrorKind::Io("is a directory".into())));
        }
        if md.len() > MAX_FILE {
            return Err(ReadError::new(path, ErrorKind::TooLarge));
        }
        let size = md.len() as usize;
        let mut p = Partial::default();
        // The first 64 bytes (the standard header) in one read.
        let mut head = vec![0u8; size.min(64)];
        let n = pread_full(&file, &mut head, 0, &mut p).map_err(|e| ReadError::io(path, &e))?;
        let len = if n < head.len() || n == size {
            n
        } else {
            readable_len(&file, n, size, &mut p).map_err(|e| ReadError::io(path, &e))?
        };
        let mut buf = vec![0u8; len];
        let mut have = vec![false; len];
        let k = n.min(len);
        buf[..k].copy_from_slice(&head[..k]);
        have[..k].iter_mut().for_each(|h| *h = true);
        // Each round follows one more link of a capability chain; a chain is at most
        // 48 + 480 links (config.rs), and each round fetches something new.
        for _ in 0..1024 {
            let mut todo: Vec<std::ops::Range<usize>> = Vec::new();
            for r in need(&buf) {
                let (s, e) = (r.start.min(len), r.end.min(len));
                if (s..e).all(|i| have[i]) {
                    continue;
                }
                // Whole dwords, as the hardware reads them.
                let (s, e) = (s & !3, ((e + 3) & !3).min(len));
                match todo.last_mut() {
                    Some(l) if l.end >= s => l.end = l.end.max(e),
                    _ => todo.push(s..e),
                }
            }
            if todo.is_empty() {
                break;
            }
            for r in todo {
                let got = pread_full(&file, &mut buf[r.clone()], r.start as u64, &mut p)
                    .map_err(|e| ReadError::io(path, &e))?;
                // A short read (the file shrank) leaves zeros: still marked, so that the
                // loop ends.
                let _ = got;
                have[r].iter_mut().for_each(|h| *h = true);
            }
        }
        p.len = len;
        p.bytes = buf;
        crate::sys::trace::record_read("read-partial", t0, path, || {
            format!("{} of {} bytes in {} reads", p.fetched, p.len, p.reads)
        });
        Ok(p)
    }
}

/// What [`Root::read_partial`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    /// The file's readable length, with zeros where nothing was fetched.
    pub bytes: Vec<u8>,
    pub len: usize,
    /// Bytes fetched, and `pread` calls made (the length probes included).
    pub fetched: usize,
    pub reads: usize,
}

/// `pread` until `buf` is full or the file ends; the bytes read.
fn pread_full(
    f: &std::fs::File,
    buf: &mut [u8],
    off: u64,
    p: &mut Partial,
) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        p.reads += 1;
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    p.fetched += done;
    Ok(done)
}

/// How many bytes of a file a whole read would return, knowing the first `known` are there
/// and the file claims `size`: sysfs `config` holds 4096 bytes but gives a non-root reader
/// 64 (128 for CardBus). One-byte probes; past the limit the kernel answers without touching
/// the device.
fn readable_len(
    f: &std::fs::File,
    known: usize,
    size: usize,
    p: &mut Partial,
) -> std::io::Result<usize> {
    let mut one = [0u8; 1];
    let mut probe = |off: usize, p: &mut Partial| -> std::io::Result<bool> {
        Ok(pread_full(f, &mut one, off as u64, p)? == 1)
    };
    if probe(size - 1, p)? {
        return Ok(size);
    }
    // Readable below `lo`, not at `hi`.
    let (mut lo, mut hi) = (known, size - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if probe(mid, p)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}
