//! gdrdoctor: the binary's library half. Collectors (all I/O, through [`reader::Root`]),
//! renderers, snapshot and the CLI glue. The checks themselves live in `gdrdoctor-checks`.

pub mod app;
pub mod cli;
pub mod collect;
pub mod diagnose;
pub mod docs;
pub mod fleet;
pub mod health;
pub mod live;
pub mod policy;
pub mod probe;
pub mod render;
pub mod source;
pub mod sys;
pub mod watch;
pub mod worker;
