//! NVRTC, the run-time CUDA C++ compiler, when the node has it (most driver-only production
//! nodes do not: the probes then use the PTX the binary carries).

/// The virtual architecture NVRTC compiles for, by compute capability.
pub fn arch(cc: (i32, i32)) -> Option<&'static str> {
    Some(match cc {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => return None,
    })
}

/// Compile `src` (named `name` in diagnostics and line info) to PTX for `cc` with `-lineinfo`;
/// `Err` with the reason when NVRTC is absent, does not know the architecture, or fails.
pub fn compile(src: &str, name: &str, cc: (i32, i32)) -> Result<String, String> {
    if crate::live::stand_in::lib_dir().is_some() {
        return Err("libnvrtc not loaded: stand-in libraries (GDRDOCTOR_LIB_DIR)".into());
    }
    // SAFETY: only tries to dlopen the candidate library names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("libnvrtc not on this node".into());
    }
    let a = arch(cc).ok_or_else(|| {
        format!(
            "no NVRTC architecture for compute capability {}.{}",
            cc.0, cc.1
        )
    })?;
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(a),
        options: vec![
            "-lineinfo".into(),
            "--std=c++14".into(),
            "-default-device".into(),
        ],
        name: Some(name.to_string()),
        ..Default::default()
    };
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
        .map_err(|_| "NVRTC panicked (symbol missing?)".to_string())?
        .map(|p| p.to_src())
        .map_err(|e| format!("NVRTC: {e:?}"))
}
