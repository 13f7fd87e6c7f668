//! `gdrdoctor watch`, the pure half: the record-area layout of
//! `kernels/include/gdrdoctor/progress.cuh`, its validation, the stall classification and the
//! findings. The binary (`src/watch/`) finds the areas in /dev/shm, reads their bytes, keeps the
//! clock and calls these functions; nothing here does I/O.
//!
//! The classes and their order are those of `probe --hang`: one classification for both
//! ([`crate::stall`], docs/checks/probe.hang-inject.md), with the evidence a user's job can give: the launch
//! generation instead of the probe's launch plan, the site table for who writes the awaited
//! word, the area's own words for the memory's value. See docs/guides/watch.md.
//!
//! The parts: [`layout`] (the area's bytes, validated), [`classify`] (a poll's waiters and
//! their stall class) and [`findings`] (an area's report into `watch.*` findings).

pub mod classify;
pub mod findings;
pub mod layout;

pub use classify::*;
pub use findings::*;
pub use layout::*;

#[cfg(test)]
mod tests;
