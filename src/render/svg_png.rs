//! `gdrdoctor topo --format png`: the static SVG rasterised in-process by resvg (usvg parses,
//! tiny-skia draws); no external program.
//!
//! Text needs a font. None is bundled: fontdb scans the system's font directories
//! (`/usr/share/fonts`, `~/.local/share/fonts`, ...) and the picture uses the first monospace
//! face it finds, DejaVu Sans Mono or Liberation Mono preferred. A machine without any monospace
//! font gets an error that says what to install, never a picture without its labels. Glyph
//! shapes differ between font packages, so PNG bytes are only reproducible on one machine; the
//! SVG is the reproducible form.

//!
//! Built with the `png` cargo feature (default); without it, both functions return an error.

/// Monospace families the SVG names, in order of preference.
#[cfg(feature = "png")]
const PREFERRED: [&str; 3] = ["DejaVu Sans Mono", "Liberation Mono", "Noto Sans Mono"];

/// The font database of this machine and the monospace family the picture will use.
#[cfg(feature = "png")]
pub fn fonts() -> Result<(resvg::usvg::fontdb::Database, String), String> {
    let mut db = resvg::usvg::fontdb::Database::new();
    db.load_system_fonts();
    let mono: Vec<String> = db
        .faces()
        .filter(|f| f.monospaced)
        .filter_map(|f| f.families.first().map(|(n, _)| n.clone()))
        .collect();
    let family = PREFERRED
        .iter()
        .find(|p| mono.iter().any(|m| m == *p))
        .map(|s| s.to_string())
        .or_else(|| {
            let mut m = mono.clone();
            m.sort();
            m.into_iter().next()
        })
        .ok_or_else(|| {
            format!(
                "no monospace font found for the picture's text ({} font face(s) in the system font directories): install one (Debian/Ubuntu: apt-get install fonts-dejavu-core; RHEL: dnf install dejavu-sans-mono-fonts), or use --format svg",
                db.len()
            )
        })?;
    db.set_monospace_family(family.clone());
    Ok((db, family))
}

/// Rasterise `svg` at `scale` (1.0: one pixel per SVG unit) into PNG bytes.
#[cfg(feature = "png")]
pub fn png(svg: &str, scale: f32) -> Result<Vec<u8>, String> {
    let (db, family) = fonts()?;
    let mut opt = resvg::usvg::Options {
        font_family: family,
        ..Default::default()
    };
    opt.fontdb = std::sync::Arc::new(db);
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| format!("svg: {e}"))?;
    let size = tree.size().to_int_size().scale_by(scale).ok_or_else(|| {
        format!(
            "picture size {:?} x {scale} is not a valid image size",
            tree.size()
        )
    })?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot allocate a {}x{} image", size.width(), size.height()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("png encoding: {e}"))
}

#[cfg(not(feature = "png"))]
const NO_PNG: &str =
    "this gdrdoctor was built without the `png` feature: use --format svg (or rebuild with default features)";

/// Without the `png` feature: no rasteriser, no fonts.
#[cfg(not(feature = "png"))]
pub fn fonts() -> Result<((), String), String> {
    Err(NO_PNG.to_string())
}

/// Without the `png` feature: an error that points to `--format svg`.
#[cfg(not(feature = "png"))]
pub fn png(_svg: &str, _scale: f32) -> Result<Vec<u8>, String> {
    Err(NO_PNG.to_string())
}
