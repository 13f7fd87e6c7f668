//! The topology pictures of `fleet --format html --svg-dir DIR`: which file is a node's, and
//! whether it may be put in the page.

use crate::source::input::{open_regular, read_capped};
use std::path::Path;

/// The largest picture read from `--svg-dir`.
const SVG_MAX_BYTES: u64 = 4 << 20;

/// The file names a node's picture may have, in order: its fleet name, its hostname, its
/// report file's name without `.json` (`srun --output='svgs/%N.svg'` and
/// `--output='reports/%N.json'` give the same stem). Names that are not a plain file name
/// (a `/`, a leading `.`) are left out.
pub fn svg_names(name: &str, hostname: Option<&str>, input: &str) -> Vec<String> {
    let stem = Path::new(input)
        .file_name()
        .and_then(|f| f.to_str())
        .map(|f| f.strip_suffix(".json").unwrap_or(f));
    let mut out: Vec<String> = Vec::new();
    for c in [Some(name), hostname, stem].into_iter().flatten() {
        let plain = !c.is_empty() && !c.starts_with('.') && !c.contains(['/', '\\', '\0']);
        let file = format!("{c}.svg");
        if plain && !out.contains(&file) {
            out.push(file);
        }
    }
    out
}

pub enum SvgLookup {
    Found(String),
    Missing,
    /// A file exists but cannot be used, with the reason (names the path).
    Bad(String),
}

/// The first of `names` under `dir`, checked to be a gdrdoctor topology picture. The page
/// embeds it as an image (a `data:` URL), never as markup, so nothing in it runs whatever it
/// holds; the check only keeps out files that are not gdrdoctor's pictures.
pub fn find_svg(dir: &Path, names: &[String]) -> SvgLookup {
    for n in names {
        let p = dir.join(n);
        match std::fs::symlink_metadata(&p) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return SvgLookup::Bad(format!("{}: {e}", p.display())),
        }
        // The rule of every file `fleet` finds in a directory: a regular file (or a link to
        // one), never a FIFO or a device, and at most SVG_MAX_BYTES of it.
        let read = open_regular(&p)
            .and_then(|f| read_capped(f, SVG_MAX_BYTES, &p.display().to_string()))
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        return match read {
            Ok(t) => match check_svg(&t) {
                Ok(()) => SvgLookup::Found(t),
                Err(e) => SvgLookup::Bad(format!("{}: {e}", p.display())),
            },
            Err(e) => SvgLookup::Bad(e),
        };
    }
    SvgLookup::Missing
}

/// Whether a picture is used: it is `gdrdoctor topo --format svg` output and carries
/// nothing that would run in the page.
pub fn check_svg(t: &str) -> Result<(), String> {
    let Some(start) = t.find("<svg") else {
        return Err("not an svg picture (no <svg element)".into());
    };
    let root_end = t[start..].find('>').map(|i| start + i).unwrap_or(t.len());
    if !t[start..root_end].contains("data-generator=\"gdrdoctor topo\"") {
        return Err("not written by `gdrdoctor topo --format svg`".into());
    }
    let lower = t.to_ascii_lowercase();
    for bad in ["<script", "<foreignobject", "javascript:", "<iframe"] {
        if lower.contains(bad) {
            return Err(format!("contains `{bad}`: not used"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn picture_names_and_what_may_be_inlined() {
        assert_eq!(
            svg_names("gpu-001", Some("gpu-001"), "reports/gpu-001.json"),
            vec!["gpu-001.svg"]
        );
        assert_eq!(
            svg_names("h@reports/n1.json", Some("h"), "reports/n1.json"),
            vec!["h.svg", "n1.svg"],
            "a name with a path is not a file name"
        );
        assert_eq!(svg_names("..", Some(".x"), "stdin"), vec!["stdin.svg"]);
        let ok = "<svg xmlns=\"http://www.w3.org/2000/svg\" data-generator=\"gdrdoctor topo\"><title>t</title></svg>";
        assert!(check_svg(ok).is_ok());
        assert!(check_svg("<svg xmlns=\"x\"></svg>").is_err(), "not ours");
        let script = ok.replace("<title>t</title>", "<SCRIPT>alert(1)</SCRIPT>");
        assert!(check_svg(&script).unwrap_err().contains("<script"));
        assert!(check_svg("plain text").is_err());
    }

    #[test]
    fn a_fifo_or_a_device_is_never_read() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("f.svg");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", t.path().join("z.svg")).unwrap();
        for n in ["f", "z"] {
            let t0 = std::time::Instant::now();
            match find_svg(t.path(), &[format!("{n}.svg")]) {
                SvgLookup::Bad(e) => assert!(e.contains("not a regular file"), "{e}"),
                _ => panic!("{n}: a FIFO or a device is refused"),
            }
            assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        }
    }

    #[test]
    fn pictures_are_read_missing_or_refused_with_the_path() {
        let t = tempfile::tempdir().unwrap();
        let ok = "<?xml version=\"1.0\"?>\n<svg data-generator=\"gdrdoctor topo\"></svg>\n";
        std::fs::write(t.path().join("a.svg"), ok).unwrap();
        std::fs::write(t.path().join("b.svg"), "<html>").unwrap();
        let names = |n: &str| vec![format!("{n}.svg")];
        assert!(matches!(find_svg(t.path(), &names("a")), SvgLookup::Found(s) if s == ok));
        assert!(matches!(
            find_svg(t.path(), &names("zz")),
            SvgLookup::Missing
        ));
        match find_svg(t.path(), &names("b")) {
            SvgLookup::Bad(e) => assert!(e.contains("b.svg") && e.contains("no <svg"), "{e}"),
            _ => panic!("a damaged picture is named"),
        }
    }

    proptest! {
        #[test]
        fn names_never_panic(input in "\\PC{0,40}", name in "\\PC{0,20}") {
            for f in svg_names(&name, None, &input) {
                prop_assert!(!f.contains('/') && !f.starts_with('.'));
            }
            let _ = check_svg(&input);
        }
    }
}
