//! The ground floor: what every layer above may use and what uses nothing of gdrdoctor's own:
//! the trace (`GDRDOCTOR_TRACE`), the terminal (width, pager), the clock, "did you mean".

pub mod clock;
pub mod escape;
pub mod random;
pub mod suggest;
pub mod term;
pub mod trace;
