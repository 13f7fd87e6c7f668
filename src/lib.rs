//! gdrdoctor: the binary's library half. Collectors (all I/O, through [`reader::Root`]),
//! renderers, snapshot and the CLI glue. The checks themselves live in `gdrdoctor-checks`.

pub mod app;
pub mod cli;
pub mod clock;
pub mod collect;
pub mod diagnose;
pub mod docs;
pub mod fleet;
pub mod health;
pub mod live;
pub mod meta;
pub mod policy;
pub mod probe;
pub mod reader;
pub mod render;
pub mod snapshot;
pub mod source;
pub mod suggest;
pub mod term;
pub mod watch;
