//! PCI: config-space decoding (pure functions of bytes).
pub mod config;
