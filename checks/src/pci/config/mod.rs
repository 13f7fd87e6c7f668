//! PCI configuration-space decoder: a pure, defensive function of bytes.
//!
//! [`decode`] takes the raw bytes of one function's config space (as read from
//! `/sys/bus/pci/devices/*/config`, or pasted from `lspci -xxxx` and parsed by
//! [`parse_hex_dump`]) and returns a [`ConfigSpace`]. It never panics: every
//! read is bounds-checked, capability chains are walked with a visited set and
//! an entry limit, and anything odd (truncation, loops, broken pointers) is
//! recorded in [`ConfigSpace::notes`] instead.
//!
//! Lengths seen in practice:
//! * 64 bytes: a non-root reader of the sysfs `config` file (or `lspci -x`);
//!   only the standard header is there, capabilities cannot be read.
//! * 256 bytes: `lspci -xxx`, or a kernel/platform without extended config
//!   access; standard capabilities only.
//! * 4096 bytes: root reader on a PCIe system (`lspci -xxxx`); extended
//!   capabilities (ACS, ATS, AER, ...) too.
//!
//! Register layouts follow the PCI Express Base Specification; field positions
//! were cross-checked against pciutils' `lib/header.h` (no code taken from it).
//!
//! The parts: [`regs`] (register offsets, ids and names), [`space`] (the decoded result),
//! [`reader`] (bounds-checked reads), [`decode`] (the header, the BARs and the walk of the
//! capability lists), [`caps`] (one decoder per capability) and [`hex`] (lspci's hex dumps).

pub mod caps;
pub mod decode;
pub mod hex;
pub mod reader;
pub mod regs;
pub mod space;

pub use decode::{decode, touched};
pub use hex::{dump_bdf, parse_hex_dump};
pub use regs::*;
pub use space::*;
