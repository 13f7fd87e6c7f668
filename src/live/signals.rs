//! Termination signals: on SIGINT, SIGTERM or SIGHUP, kill every worker process group this
//! process started, reap them, and remove the temporary trees it registered, then exit with
//! 128 + the signal, with async-signal-safe calls only. Workers die with their parent this way
//! (the worker has its own process group, so a Ctrl-C on the terminal reaches only the parent:
//! without the forwarding a worker would outlive it under PID 1).
//!
//! Workers are reaped by gdrdoctor itself, never left to PID 1: in a container whose PID 1 is
//! a plain program that never calls `wait`, an orphaned worker would stay `<defunct>` for the
//! container's life (a periodic `check` in a DaemonSet would pile them up). A worker whose
//! answer is in but whose exit (the driver's teardown) is still running is recorded as left
//! ([`leave`]) and reaped before gdrdoctor exits ([`reap_left`]), after its output is out.

use super::os;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::Once;

/// Process groups of the running workers (0: free slot). Read by the signal handler, so plain
/// atomics, no lock.
static WORKERS: [AtomicI32; 16] = [const { AtomicI32::new(0) }; 16];
static HANDLERS: Once = Once::new();

/// Workers whose answer is in and whose exit gdrdoctor does not wait for now (0: free slot);
/// reaped by [`reap_left`] before the process exits, or by the termination handler.
static LEFT: [AtomicI32; 16] = [const { AtomicI32::new(0) }; 16];

/// How long the termination handler waits for the killed workers to be reaped: as long as
/// the reap at a normal exit (`worker::runner::REAP_BOUND`). 500 ms was seen too short twice in whole CI runs on a
/// loaded 2-core machine (the SIGKILLed worker still exiting, then left to PID 1); a worker
/// that dies at once costs nothing of it.
const REAP_ON_SIGNAL_MS: u32 = 2000;

/// Temporary trees (an unpacked `--sysroot x.tar.gz`, the staging directory of a `.tar.gz`
/// snapshot) that a termination signal removes before the process exits: NUL-terminated paths,
/// leaked when registered so that the handler never reads freed memory (a few per process).
static TEMP_TREES: [AtomicPtr<std::ffi::c_char>; 8] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 8];

extern "C" fn on_termination(sig: i32) {
    for w in &WORKERS {
        os::kill_group(w.load(Ordering::SeqCst));
    }
    // Reap what was killed (and what was left), within a bound: SIGKILLed workers die at once
    // unless the driver holds them.
    for _ in 0..REAP_ON_SIGNAL_MS {
        let mut pending = false;
        for w in WORKERS.iter().chain(LEFT.iter()) {
            let pid = w.load(Ordering::SeqCst);
            if pid > 0 {
                if os::reap_nohang(pid) {
                    w.store(0, Ordering::SeqCst);
                } else {
                    pending = true;
                }
            }
        }
        if !pending {
            break;
        }
        os::sleep_ms_signal_safe(1);
    }
    for t in &TEMP_TREES {
        // SAFETY: a non-null slot holds a leaked, never freed, NUL-terminated path.
        unsafe { os::remove_tree_signal_safe(t.load(Ordering::SeqCst)) };
    }
    os::exit_now(128 + sig);
}

/// Forward termination signals to the workers from now on (before the first spawn, so that no
/// signal finds the parent with a worker and without the handler).
pub fn forward_signals() {
    HANDLERS.call_once(|| os::on_termination_signals(on_termination));
}

/// Remove the tree at `dir` if SIGINT, SIGTERM or SIGHUP ends the process (the same handlers
/// that kill the workers; installed now if they were not). Returns the slot to give to
/// [`forget_on_termination`] once the owner removed the tree itself; `None` when every slot is
/// taken (the owner's drop still removes it on a normal exit).
pub fn remove_on_termination(dir: &std::path::Path) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    forward_signals();
    let ptr = c.into_raw();
    for (i, t) in TEMP_TREES.iter().enumerate() {
        if t.compare_exchange(
            std::ptr::null_mut(),
            ptr,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
        {
            return Some(i);
        }
    }
    // Every slot taken: the path stays leaked (a few bytes), the owner removes the tree.
    None
}

/// The tree of `slot` is gone (or kept on purpose): a signal no longer removes it. The path
/// stays allocated: a handler running now may still be reading it.
pub fn forget_on_termination(slot: usize) {
    if let Some(t) = TEMP_TREES.get(slot) {
        t.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
}

pub fn track(pgid: i32) {
    for w in &WORKERS {
        if w.compare_exchange(0, pgid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
    // More than 16 workers at once (gdrdoctor runs one): the parent-death signal still
    // kills the others.
}

pub fn untrack(pgid: i32) {
    for w in &WORKERS {
        let _ = w.compare_exchange(pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// A worker whose answer is in and whose exit is not waited for now: reaped before gdrdoctor
/// exits ([`reap_left`]). A full table (more than 16 at once) falls back to waiting for it.
pub fn leave(pid: i32) -> bool {
    LEFT.iter().any(|w| {
        w.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })
}

/// Reap every left worker, waiting at most `bound` for those still exiting; the number still
/// running when the bound passed (left to PID 1).
pub fn reap_left(bound: std::time::Duration) -> usize {
    let start = std::time::Instant::now();
    loop {
        let mut pending = 0;
        for w in &LEFT {
            let pid = w.load(Ordering::SeqCst);
            if pid > 0 {
                if os::reap_nohang(pid) {
                    w.store(0, Ordering::SeqCst);
                } else {
                    pending += 1;
                }
            }
        }
        if pending == 0 || start.elapsed() >= bound {
            return pending;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether a worker was left exiting ([`leave`]) and not reaped yet.
pub fn any_left() -> bool {
    LEFT.iter().any(|w| w.load(Ordering::SeqCst) > 0)
}
