//! PCI: config-space decoding (pure functions of bytes).
pub mod attrs;
pub mod config;
