//! The pictures as a person sees them: `topo --format svg|png` on the fixtures (golden SVG
//! files, layout without overlaps, the PNG decodes to the picture's size) and, in a real
//! headless Chromium, the SVG and the fleet HTML page: element counts, no overlapping labels,
//! hover, sorting and filtering, no console errors, and screenshots.
//!
//! Goldens: `fixtures/golden/svg/<scenario>.svg` (`GDRDOCTOR_UPDATE_GOLDEN=1` rewrites them and
//! the screenshots under `docs/img/`; review the diff). The browser tests need Debian's
//! `chromium` package (`GDRDOCTOR_CHROMIUM` names another binary) and the PNG test a monospace
//! font (`fonts-dejavu-core`); without them they print a SKIP line, and
//! `GDRDOCTOR_TEST_REQUIRE_ALL=1` (set by `.ci/run`) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "pictures/browser.rs"]
mod browser;
mod common;

use common::*;
use gdrdoctor::collect;
#[cfg(feature = "png")]
use gdrdoctor::render::svg_png;
use gdrdoctor::render::{svg, svg_layout, topo};
use gdrdoctor::source::{meta, reader::Root};
use gdrdoctor_checks::checks::{self, Selection};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

/// The fixtures with a golden picture: the 8x8 HGX with its planted defects, Grace Hopper, and
/// the one-GPU VM.
const PICTURED: [&str; 6] = [
    "hgx-h200x8-cx7x8-healthy",
    "hgx-h200x8-cx7x8-nic-other-socket",
    "hgx-h200x8-cx7x8-acs-redirect",
    "hgx-h200x8-cx7x8-nic-x8",
    "gh200x2-cx7x2-c2c",
    "h200-vm-live",
];

const REQUIRE_ALL: &str = "GDRDOCTOR_TEST_REQUIRE_ALL";

/// A prerequisite is missing: print one SKIP line on stderr (visible even for a passing test),
/// or fail under `GDRDOCTOR_TEST_REQUIRE_ALL=1` (the convention of tests/common).
fn skip(group: &str, missing: &str, install: &str) {
    if std::env::var(REQUIRE_ALL).is_ok_and(|v| v.trim() == "1") {
        panic!("{group} cannot run: {missing}; install: {install} ({REQUIRE_ALL}=1 makes a missing prerequisite a failure)");
    }
    let mut e = std::io::stderr().lock();
    let _ = writeln!(
        e,
        "SKIP {group}: {missing}; to run these tests: {install} ({REQUIRE_ALL}=1 makes this a failure)"
    );
}

fn update() -> bool {
    std::env::var("GDRDOCTOR_UPDATE_GOLDEN").is_ok_and(|v| v == "1")
}

fn node_of(name: &str) -> Node {
    let dir = fixture(name);
    let mut root = Root::sysroot(&dir).unwrap();
    let m = meta::read(&root).unwrap();
    root.set_complete(m.is_some());
    let mut node = collect::collect(&root, m.as_ref());
    node.live = meta::read_live(&root);
    node
}

fn findings(node: &Node) -> Vec<Finding> {
    checks::run(node, &Selection::default())
}

fn picture(name: &str) -> (Node, svg::Picture, svg_layout::Layout) {
    let node = node_of(name);
    let f = findings(&node);
    let t = topo::build(&node);
    let pic = svg::scene(&node, &t, &f);
    let l = svg_layout::layout(&pic.scene);
    (node, pic, l)
}

fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pictures");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn svg_goldens() {
    let mut failures = Vec::new();
    for s in PICTURED {
        let node = node_of(s);
        let f = findings(&node);
        let text = svg::svg(&node, &f);
        assert_eq!(
            text,
            svg::svg(&node, &f),
            "{s}: output is not deterministic"
        );
        // It parses as SVG.
        #[cfg(feature = "png")]
        resvg::usvg::Tree::from_str(&text, &resvg::usvg::Options::default())
            .unwrap_or_else(|e| panic!("{s}: not valid svg: {e}"));
        let path = repo().join("fixtures/golden/svg").join(format!("{s}.svg"));
        if update() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with GDRDOCTOR_UPDATE_GOLDEN=1)",
                path.display()
            )
        });
        if want != text {
            std::fs::write(out_dir().join(format!("{s}.svg")), &text).unwrap();
            failures.push(s);
        }
    }
    assert!(
        failures.is_empty(),
        "pictures differ from fixtures/golden/svg for {failures:?} (new ones in {}); rerun with GDRDOCTOR_UPDATE_GOLDEN=1 and review",
        out_dir().display()
    );
}

/// No box overlaps another, text stays in its box, and no visible label overlaps another or a
/// box it does not belong to: on every fixture, with the layout's own geometry.
#[test]
fn layouts_of_every_fixture_are_clean() {
    for s in scenarios() {
        let (_, _, l) = picture(&s);
        for (i, a) in l.items.iter().enumerate() {
            for b in &l.items[i + 1..] {
                assert!(!a.rect.overlaps(&b.rect), "{s}: {} overlaps {}", a.id, b.id);
            }
        }
        let vis = l.visible_texts();
        for (i, a) in vis.iter().enumerate() {
            for b in &vis[i + 1..] {
                assert!(
                    !a.rect.overlaps(&b.rect),
                    "{s}: {:?} overlaps {:?}",
                    a.text,
                    b.text
                );
            }
        }
        assert!(l.width > 0.0 && l.height > 0.0);
    }
}

#[test]
fn what_the_pictures_say() {
    // 8x8: two sockets, 8 GPUs, 8 NICs, 16 switch ports, 8 switches; a GDR line per GPU; the
    // PXN routes are there for hovering; the NVLink bar.
    let (_, pic, l) = picture("hgx-h200x8-cx7x8-healthy");
    let count = |k: svg_layout::Kind| l.items.iter().filter(|i| i.kind == k).count();
    assert_eq!(count(svg_layout::Kind::Socket), 2);
    assert_eq!(count(svg_layout::Kind::Gpu), 8);
    assert_eq!(count(svg_layout::Kind::Nic), 8);
    assert_eq!(count(svg_layout::Kind::Switch), 8);
    let shown: Vec<_> = l.routes.iter().filter(|r| r.shown).collect();
    assert_eq!(shown.len(), 8, "one direct GDR line per GPU");
    assert_eq!(
        l.routes.iter().filter(|r| !r.shown).count(),
        56,
        "PXN routes"
    );
    assert!(l.fabric.is_some());
    assert!(pic.tones.is_empty(), "healthy: no coloured box");
    let gpu0 = l.item("0000:18:00.0").unwrap();
    assert_eq!(gpu0.lines[0].text, "GPU0 18:00.0");
    assert_eq!(gpu0.lines[1].text, "H200 SXM 141GB");
    assert_eq!(gpu0.lines[3].text, "GDR mlx5_0 PIX +7 PXN");
    assert_eq!(
        l.item("0000:19:00.0").unwrap().lines[0].text,
        "mlx5_0 19:00.0"
    );
    assert_eq!(l.item("0000:19:00.0").unwrap().lines[1].text, "ConnectX-7");

    // ACS redirect: the downstream port above GPU 2 is red, with its finding on hover.
    let (_, pic, _) = picture("hgx-h200x8-cx7x8-acs-redirect");
    assert_eq!(pic.tones.get("0000:37:00.0"), Some(&Status::Fail));
    assert!(pic.titles["0000:37:00.0"].contains("pcie.acs-redirect"));
    assert!(pic.titles["0000:37:00.0"].contains("fix: "));

    // x8 NIC: its box and its link are amber, and the link says so.
    let (_, pic, l) = picture("hgx-h200x8-cx7x8-nic-x8");
    assert_eq!(pic.tones.get("0000:a9:00.0"), Some(&Status::Warn));
    assert_eq!(pic.edge_tones.get("0000:a9:00.0"), Some(&Status::Warn));
    let e = l.edges.iter().find(|e| e.child == "0000:a9:00.0").unwrap();
    assert_eq!(e.label.as_ref().unwrap().text, "x8 of x16");

    // NIC on the other socket: GPU 3 warns (no close NIC), the NIC sits in socket 1's box,
    // the node-level findings are in the header in their colour.
    let (_, pic, l) = picture("hgx-h200x8-cx7x8-nic-other-socket");
    assert_eq!(pic.tones.get("0000:48:00.0"), Some(&Status::Warn));
    let s1 = l.item("socket:1").unwrap().container.unwrap();
    assert!(s1.contains(&l.item("0000:d6:00.0").unwrap().rect));
    assert!(pic
        .header_titles
        .iter()
        .zip(&pic.header_tones)
        .any(|(t, s)| t.contains("topo.nic-numa") && *s == Some(Status::Warn)));

    // No peer memory: every GPU gets a dashed why-not line with the reason.
    let (_, pic, l) = picture("hgx-h200x8-cx7x8-no-peermem");
    let why: Vec<_> = l.routes.iter().filter(|r| r.shown).collect();
    assert_eq!(why.len(), 8);
    for r in &why {
        assert_eq!(pic.route_styles[&r.id], svg::RouteStyle::NoGdr);
        assert!(
            pic.titles[&r.id].contains("no GDR"),
            "{}",
            pic.titles[&r.id]
        );
    }

    // One GPU, no NIC: a small picture that says why there is no line.
    let (_, _, l) = picture("h200-vm-live");
    assert_eq!(l.items.iter().filter(|i| i.leaf).count(), 1);
    assert!(l.width < 1000.0, "{}", l.width);
    assert!(l
        .footer
        .iter()
        .any(|t| t.text.contains("no gpu-nic pair to draw")));

    // Grace Hopper: P2C through the Grace CPU, drawn through the socket.
    let (_, _, l) = picture("gh200x2-cx7x2-c2c");
    assert!(l
        .ancestor_labels
        .iter()
        .any(|(a, t)| a.starts_with("socket:") && t.text.contains("P2C")));
}

/// A node with nothing readable (no PCI list, no RDMA devices) still gets a picture that says
/// so, without a panic.
#[test]
fn empty_node_draws_a_note() {
    let node = gdrdoctor_checks::testing::empty_node();
    let text = svg::svg(&node, &findings(&node));
    assert!(text.starts_with("<svg "));
    assert!(text.contains("0 gpu(s), 0 rdma device(s): no gpu-nic pair to draw"));
    #[cfg(feature = "png")]
    resvg::usvg::Tree::from_str(&text, &resvg::usvg::Options::default()).unwrap();
}

#[cfg(feature = "png")]
fn mono_font() -> bool {
    match svg_png::fonts() {
        Ok(_) => true,
        Err(e) => {
            skip("png", &e, "apt-get install fonts-dejavu-core");
            false
        }
    }
}

/// PNG bytes differ with the machine's fonts: decode and check the size and that text was drawn.
#[cfg(feature = "png")]
#[test]
fn png_decodes_to_the_picture() {
    if !mono_font() {
        return;
    }
    for s in ["hgx-h200x8-cx7x8-healthy", "h200-vm-live"] {
        let (_, pic, l) = picture(s);
        let png = svg_png::png(&svg::render(&pic, &l, false), 1.0).unwrap();
        let img = resvg::tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!(
            (img.width(), img.height()),
            (l.width as u32, l.height as u32),
            "{s}"
        );
        // Dark pixels (text) in the header band, where there is nothing but text.
        let dark = img
            .pixels()
            .iter()
            .take((img.width() * 30) as usize)
            .filter(|p| p.red() < 100 && p.green() < 100 && p.blue() < 100)
            .count();
        assert!(
            dark > 200,
            "{s}: only {dark} dark pixels in the header: text not drawn?"
        );
    }
}

#[test]
fn cli_writes_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture("hgx-h200x8-cx7x8-acs-redirect");
    let fx = fx.to_str().unwrap();
    let (code, out, err) = run(&["topo", "--sysroot", fx, "--format", "svg"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("<svg "), "{}", &out[..out.len().min(80)]);
    assert!(
        out.contains("class=\"item bridge fail\""),
        "the acs bridge is red"
    );
    let png = dir.path().join("t.png");
    #[cfg(not(feature = "png"))]
    {
        let (code, _, err) = run(&[
            "topo",
            "--sysroot",
            fx,
            "--format",
            "png",
            "-o",
            png.to_str().unwrap(),
        ]);
        assert_eq!(code, 2);
        assert!(err.contains("--format svg"), "{err}");
    }
    #[cfg(feature = "png")]
    if mono_font() {
        let (code, _, err) = run(&[
            "topo",
            "--sysroot",
            fx,
            "--format",
            "png",
            "-o",
            png.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let b = std::fs::read(&png).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
    }
    // A pasted matrix has no tree to draw.
    let smi = dir.path().join("smi.txt");
    std::fs::write(&smi, "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X\n").unwrap();
    let (code, _, err) = run(&[
        "topo",
        "--nvidia-smi",
        smi.to_str().unwrap(),
        "--format",
        "svg",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--sysroot"), "{err}");
    // An unwritable output is an error naming the path.
    let (code, _, err) = run(&[
        "topo",
        "--sysroot",
        fx,
        "--format",
        "svg",
        "-o",
        "/nonexistent-dir/t.svg",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent-dir"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// In a browser.

fn browser(w: u32, h: u32) -> Option<browser::Browser> {
    match browser::chromium() {
        Some(exe) => Some(browser::Browser::start(&exe, w, h)),
        None => {
            skip(
                "browser",
                "no chromium at /usr/bin/chromium (or GDRDOCTOR_CHROMIUM)",
                "apt-get install chromium",
            );
            None
        }
    }
}

/// Keep a screenshot: under docs/img/ when updating goldens, else in the target directory.
fn keep(name: &str, png: &[u8]) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a png");
    let dir = if update() {
        repo().join("docs/img")
    } else {
        out_dir()
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

/// Texts the browser shows (visible, non-empty) whose boxes overlap: `[a, b]` pairs.
const OVERLAPS_JS: &str = r#"(() => {
  const ts = [...document.querySelectorAll('svg text')].filter(t => {
    const s = getComputedStyle(t);
    return s.visibility !== 'hidden' && s.display !== 'none' && t.textContent.trim() !== '';
  });
  const rs = ts.map(t => t.getBoundingClientRect());
  const bad = [];
  for (let i = 0; i < rs.length; i++) for (let j = i + 1; j < rs.length; j++) {
    const a = rs[i], b = rs[j], e = 0.5;
    if (a.left < b.right - e && b.left < a.right - e && a.top < b.bottom - e && b.top < a.bottom - e)
      bad.push([ts[i].textContent, ts[j].textContent]);
  }
  const boxes = [...document.querySelectorAll('svg g.item')].filter(g => !g.classList.contains('legend'));
  const leaving = [];
  for (const g of boxes) {
    const r = g.querySelector('rect.box').getBoundingClientRect();
    for (const t of g.querySelectorAll(':scope > text')) {
      const q = t.getBoundingClientRect();
      if (q.left < r.left - 0.5 || q.right > r.right + 0.5 || q.top < r.top - 0.5 || q.bottom > r.bottom + 0.5)
        leaving.push(t.textContent);
    }
  }
  return {texts: ts.length, overlaps: bad.slice(0, 10), overlap_count: bad.length, leaving};
})()"#;

#[test]
fn svg_in_a_browser() {
    let Some(mut b) = browser(1600, 900) else {
        return;
    };
    let dir = out_dir();
    for s in PICTURED {
        let node = node_of(s);
        let text = svg::svg(&node, &findings(&node));
        let file = dir.join(format!("{s}.svg"));
        std::fs::write(&file, &text).unwrap();
        b.open(&file);
        let v = b.eval(OVERLAPS_JS);
        assert_eq!(
            v["overlap_count"], 0,
            "{s}: overlapping labels: {}",
            v["overlaps"]
        );
        assert_eq!(
            v["leaving"],
            Value::Array(vec![]),
            "{s}: text leaves its box"
        );
        assert!(v["texts"].as_u64().unwrap() > 5, "{s}: {v}");
        let counts = b.eval(
            "({gpus: document.querySelectorAll('g.item.gpu').length, \
               nics: document.querySelectorAll('g.item.nic').length, \
               sockets: document.querySelectorAll('g.socket-area').length, \
               titles: document.querySelectorAll('g.item > title').length, \
               items: document.querySelectorAll('g.item:not(.legend)').length, \
               w: document.documentElement.getBoundingClientRect().width})",
        );
        let (gpus, nics) = match s {
            "h200-vm-live" => (1, 0),
            "gh200x2-cx7x2-c2c" => (2, 2),
            _ => (8, 8),
        };
        assert_eq!(counts["gpus"], gpus, "{s}: {counts}");
        assert_eq!(counts["nics"], nics, "{s}: {counts}");
        assert_eq!(
            counts["titles"], counts["items"],
            "{s}: every box has a hover text"
        );
        let shot = b.screenshot(true);
        keep(&format!("topo-{s}.png"), &shot);
    }
    // Hovering GPU 3 on the nic-other-socket node reveals its PXN routes (and nothing else's).
    let s = "hgx-h200x8-cx7x8-nic-other-socket";
    b.open(&dir.join(format!("{s}.svg")));
    let visible = "[...document.querySelectorAll('g.route.hover')].filter(g => getComputedStyle(g).visibility === 'visible').map(g => g.getAttribute('data-id'))";
    assert_eq!(
        b.eval(visible),
        Value::Array(vec![]),
        "nothing before hovering"
    );
    let r = b.eval("(() => { const r = document.querySelector('g.item.gpu[data-id=\"0000:48:00.0\"] rect.box').getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()");
    b.hover(r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
    let shown = b.eval(visible);
    let ids: Vec<&str> = shown
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(!ids.is_empty(), "hovering GPU3 shows its routes");
    assert!(
        ids.iter().all(|i| i.starts_with("pair:0000:48:00.0:")),
        "{ids:?}"
    );
    assert!(ids.contains(&"pair:0000:48:00.0:mlx5_0"), "{ids:?}");
    keep("topo-hover-pxn.png", &b.screenshot(false));
    assert!(b.errors.is_empty(), "console errors: {:?}", b.errors);
}

/// The fixtures of the fleet page: a healthy node and seven with a planted defect.
const FLEET: [&str; 8] = [
    "hgx-h200x8-cx7x8-healthy",
    "hgx-h200x8-cx7x8-acs-redirect",
    "hgx-h200x8-cx7x8-nic-x8",
    "hgx-h200x8-cx7x8-port-down",
    "hgx-h200x8-cx7x8-mixed-fw",
    "hgx-h200x8-cx7x8-memlock-limited",
    "hgx-h200x8-cx7x8-nic-other-socket",
    "hgx-h200x8-cx7x8-no-peermem",
];

/// The fleet page as a user makes it: one `check -f json` report per fixture (hostname = the
/// fixture's name) under `reports/`, its `topo --format svg` picture under `svgs/`, then
/// `gdrdoctor fleet reports/ -f html --svg-dir svgs/ -o fleet.html`. Returns the page's path,
/// the roll-up (`-f json` of the same reports), and each node's failure count.
fn fleet_page() -> (PathBuf, Value, Vec<(String, usize)>) {
    fleet_page_in("fleet")
}

/// [`fleet_page`] under `target/tmp/pictures/<name>` (each test its own directory).
fn fleet_page_in(name: &str) -> (PathBuf, Value, Vec<(String, usize)>) {
    let dir = out_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let (reports, svgs) = (dir.join("reports"), dir.join("svgs"));
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&svgs).unwrap();
    let mut fails = Vec::new();
    for n in FLEET {
        let node = node_of(n);
        let mut r = report_for(&fixture(n));
        r.host.hostname = Some(n.to_string());
        r.timestamp = Some("2026-11-30T12:00:00Z".into());
        fails.push((n.to_string(), r.summary.fail));
        std::fs::write(
            reports.join(format!("{n}.json")),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        std::fs::write(
            svgs.join(format!("{n}.svg")),
            svg::svg(&node, &findings(&node)),
        )
        .unwrap();
    }
    // Relative paths, from the directory that holds them, as a user types them.
    let fleet = |args: &[&str]| {
        let o = std::process::Command::new(bin())
            .current_dir(&dir)
            .arg("fleet")
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (o.status.code(), text(&o.stdout), text(&o.stderr))
    };
    let (code, out, err) = fleet(&[
        "reports",
        "-f",
        "html",
        "--svg-dir",
        "svgs",
        "-o",
        "fleet.html",
    ]);
    assert_eq!(code, Some(1), "drift makes the fleet exit 1: {out}{err}");
    assert!(out.is_empty() && err.is_empty(), "{out}{err}");
    let (code, json, err) = fleet(&["reports", "-f", "json"]);
    assert_eq!(code, Some(1), "{err}");
    let page = dir.join("fleet.html");
    (page, serde_json::from_str(&json).unwrap(), fails)
}

fn visible_rows(b: &mut browser::Browser) -> Vec<String> {
    let v = b.eval("[...document.querySelectorAll('#fl-heat tbody tr')].filter(r => getComputedStyle(r).display !== 'none').map(r => r.getAttribute('data-node'))");
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn set_input(b: &mut browser::Browser, id: &str, value: &str) {
    b.eval(&format!(
        "(() => {{ const e = document.getElementById('{id}'); e.value = {}; e.dispatchEvent(new Event('input')); }})()",
        serde_json::to_string(value).unwrap()
    ));
}

fn click_header(b: &mut browser::Browser, selector: &str) {
    let r = b.eval(&format!(
        "(() => {{ const e = document.querySelector({}); e.scrollIntoView(); const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
        serde_json::to_string(selector).unwrap()
    ));
    b.click(r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
}

#[test]
fn fleet_page_in_a_browser() {
    let (file, rollup, fails) = fleet_page();
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no network"
    );
    let Some(mut b) = browser(1400, 900) else {
        return;
    };
    b.open(&file);
    let n = FLEET.len();
    let n_checks = rollup["checks"].as_array().unwrap().len();
    let n_drift = rollup["drift"].as_array().unwrap().len();
    let counts = b.eval(
        "({rows: document.querySelectorAll('#fl-heat tbody tr').length, \
           checks: document.querySelectorAll('#fl-heat th.fl-check').length, \
           cells: document.querySelectorAll('#fl-heat tbody td.fl-cell').length, \
           fails: document.querySelectorAll('#fl-heat td.st-fail').length, \
           drift: document.querySelectorAll('#fl-drift > tbody > tr').length, \
           drift_fields: document.querySelectorAll('#fl-drift li[data-field]').length, \
           svgs: [...document.querySelectorAll('details.fl-node img.fl-picture')].filter(i => i.complete && i.naturalWidth > 0).length, \
           inline_svgs: document.querySelectorAll('svg').length, \
           count: document.getElementById('fl-count').textContent})",
    );
    assert_eq!(counts["rows"], n);
    assert_eq!(counts["checks"], n_checks);
    assert_eq!(counts["cells"], n * n_checks);
    assert!(counts["fails"].as_u64().unwrap() >= 3, "{counts}");
    assert!(n_drift >= 2, "{rollup}");
    // One row per cause: per odd node here (each fixture has its own defect), each field of
    // the roll-up listed in the row of the nodes that differ in it.
    let n_odd = rollup["odd_nodes"].as_array().unwrap().len();
    assert_eq!(counts["drift"], n_odd, "one drift row per cause: {counts}");
    let n_values: usize = rollup["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["values"].as_array().unwrap().len() - usize::from(d["majority"].is_null()))
        .sum();
    assert!(n_drift >= n_odd);
    assert_eq!(counts["drift_fields"], n_values, "{counts}");
    // The port that is down: one row, not one per field it changed.
    let down = b.eval(
        "(() => { const r = [...document.querySelectorAll('#fl-drift > tbody > tr')].filter(r => r.cells[0].textContent === 'hgx-h200x8-cx7x8-port-down'); \
           return r.map(r => r.querySelectorAll('li[data-field]').length); })()",
    );
    let down = down.as_array().unwrap();
    assert_eq!(
        down.len(),
        1,
        "the port-down node is one drift row: {down:?}"
    );
    assert!(down[0].as_u64().unwrap() >= 3, "{down:?}");
    assert_eq!(
        counts["svgs"], n,
        "every node's topology, shown as an image: {counts}"
    );
    assert_eq!(counts["inline_svgs"], 0, "no picture is inlined as markup");
    assert_eq!(counts["count"], format!("{n} of {n} nodes"));
    // The footer counts the nodes where a check does not pass.
    let total = b.eval("document.querySelector('#fl-heat tfoot td.fl-total:nth-of-type(' + (1 + [...document.querySelectorAll('#fl-heat th.fl-check')].findIndex(t => t.getAttribute('data-check') === 'gdr.gpu') + 4) + ')').textContent");
    assert_eq!(total, "1", "gdr.gpu fails on no-peermem only");
    keep("fleet.png", &b.screenshot(false));

    // The odd node out: the drift row of the one odd firmware names mixed-fw with its value,
    // on screen, and its link opens that node's section.
    let odd = b.eval(
        "(() => { const li = document.querySelector('#fl-drift li[data-field=\"nics[mlx5_5].fw_ver\"]'); \
           if (!li) return null; const r = li.closest('tr'); r.scrollIntoView({block: 'center'}); const q = li.getBoundingClientRect(); \
           return {field: li.textContent, odd: r.cells[0].textContent, \
                   visible: q.height > 0 && q.top >= 0 && q.bottom <= innerHeight, \
                   link: r.cells[0].querySelector('a').getAttribute('href')}; })()",
    );
    assert_eq!(
        odd["field"], "nics[mlx5_5].fw_ver: 28.43.1014 (7 of 8) \u{2192} 28.39.1002",
        "{odd}"
    );
    assert_eq!(odd["odd"], "hgx-h200x8-cx7x8-mixed-fw", "{odd}");
    assert_eq!(odd["visible"], true, "{odd}");
    let link = odd["link"].as_str().unwrap().to_string();
    b.eval(&format!(
        "document.querySelector('#fl-drift > tbody > tr > td > a[href=\"{link}\"]').click()"
    ));
    let opened = b.eval(&format!(
        "(() => {{ const d = document.querySelector('{link}'); return [d.getAttribute('data-node'), d.open, [...d.querySelectorAll('img.fl-picture')].filter(i => i.naturalWidth > 0).length, d.querySelector('a.fl-report').getAttribute('href')]; }})()"
    ));
    assert_eq!(opened[0], "hgx-h200x8-cx7x8-mixed-fw", "{opened}");
    assert_eq!(
        opened[2], 1,
        "its topology picture, from --svg-dir: {opened}"
    );
    let report = file.parent().unwrap().join(opened[3].as_str().unwrap());
    assert!(
        report.is_file(),
        "its report link resolves: {}",
        report.display()
    );

    // Sort by failures: the worst node first; again: healthy first.
    click_header(&mut b, "#fl-heat thead th:nth-child(3)");
    let rows = visible_rows(&mut b);
    let fails = |name: &str| fails.iter().find(|x| x.0 == name).unwrap().1;
    assert!(
        rows.windows(2).all(|w| fails(&w[0]) >= fails(&w[1])),
        "{rows:?}"
    );
    assert!(fails(&rows[0]) > 0);
    // Sort by one check: the node whose pcie.acs-redirect fails comes first.
    click_header(
        &mut b,
        "#fl-heat thead th[data-check=\"pcie.acs-redirect\"]",
    );
    assert_eq!(visible_rows(&mut b)[0], "hgx-h200x8-cx7x8-acs-redirect");
    // Sort by name.
    click_header(&mut b, "#fl-heat thead th.fl-node");
    let rows = visible_rows(&mut b);
    let mut sorted = rows.clone();
    sorted.sort();
    assert_eq!(rows, sorted);

    // Filter by node, then by check.
    set_input(&mut b, "fl-filter-node", "nic-");
    assert_eq!(
        visible_rows(&mut b),
        vec![
            "hgx-h200x8-cx7x8-nic-other-socket",
            "hgx-h200x8-cx7x8-nic-x8"
        ]
    );
    let secs = b.eval("[...document.querySelectorAll('details.fl-node')].filter(d => getComputedStyle(d).display !== 'none').length");
    assert_eq!(secs, 2, "node sections follow the filter");
    set_input(&mut b, "fl-filter-node", "");
    set_input(&mut b, "fl-filter-check", "pcie.");
    let cols = b.eval("[...document.querySelectorAll('#fl-heat th.fl-check')].filter(t => getComputedStyle(t).display !== 'none').map(t => t.getAttribute('data-check'))");
    let cols: Vec<&str> = cols
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        !cols.is_empty() && cols.iter().all(|c| c.starts_with("pcie.")),
        "{cols:?}"
    );
    let hidden_cells = b.eval("[...document.querySelectorAll('#fl-heat tbody tr:first-child td.fl-cell')].filter(t => getComputedStyle(t).display === 'none').length");
    assert_eq!(
        hidden_cells.as_u64().unwrap() as usize,
        n_checks - cols.len()
    );
    // Only what does not pass: the healthy node and the passing columns go.
    set_input(&mut b, "fl-filter-check", "");
    b.eval("(() => { const c = document.getElementById('fl-only-bad'); c.checked = true; c.dispatchEvent(new Event('change')); })()");
    let rows = visible_rows(&mut b);
    assert!(
        !rows.contains(&"hgx-h200x8-cx7x8-healthy".to_string()),
        "{rows:?}"
    );
    assert_eq!(rows.len(), n - 1);
    b.eval("window.scrollTo(0, 0)");
    keep("fleet-filtered.png", &b.screenshot(false));

    // A cell links to the node's section, which opens.
    b.eval("document.getElementById('fl-only-bad').click()");
    b.eval("document.querySelector('#fl-heat td.st-fail a').click()");
    let target = b.eval("location.hash");
    assert!(target.as_str().unwrap().starts_with("#n"), "{target}");
    assert!(b.errors.is_empty(), "console errors: {:?}", b.errors);
}

/// The pictures scale to the window: at 1280 and 1920 px wide, the topology SVG on its own and
/// the fleet page with every node's picture fit the width (no horizontal scrolling), each
/// picture shown whole in the width it is given. Screenshots: docs/img/topo-<w>.png and
/// docs/img/fleet-<w>.png. (The SVG was 2,788 px wide at any window size.)
#[test]
fn pictures_scale_to_the_window() {
    let (page, _, _) = fleet_page_in("fleet-widths");
    let dir = out_dir();
    let s = "hgx-h200x8-cx7x8-acs-redirect";
    let node = node_of(s);
    let svg_file = dir.join(format!("scale-{s}.svg"));
    std::fs::write(&svg_file, svg::svg(&node, &findings(&node))).unwrap();
    for w in [1280u32, 1920] {
        let Some(mut b) = browser(w, 900) else {
            return;
        };
        b.open(&svg_file);
        let v = b.eval(
            "(() => { const r = document.documentElement.getBoundingClientRect(); \
               const g = document.querySelector('g.item.gpu').getBoundingClientRect(); \
               return {w: r.width, h: r.height, iw: innerWidth, ih: innerHeight, \
                       sw: document.documentElement.scrollWidth, gpu: g.width}; })()",
        );
        let f = |k: &str| v[k].as_f64().unwrap();
        assert!(f("w") <= f("iw") + 0.5 && f("sw") <= f("iw"), "{w}: {v}");
        assert!(
            f("h") <= f("ih") + 0.5,
            "{w}: the whole picture in view: {v}"
        );
        assert!(f("gpu") > 20.0, "{w}: the boxes are still drawn: {v}");
        keep(&format!("topo-{w}.png"), &b.screenshot(false));

        b.open(&page);
        b.eval("document.querySelectorAll('details').forEach(d => d.open = true)");
        b.eval("Promise.all([...document.images].map(i => i.decode().catch(() => null)))");
        let v = b.eval(
            "(() => { const imgs = [...document.querySelectorAll('img.fl-picture')]; \
               return {iw: innerWidth, sw: document.documentElement.scrollWidth, n: imgs.length, \
                       pics: imgs.map(i => { const r = i.getBoundingClientRect(), c = i.parentElement.getBoundingClientRect(); \
                         return [r.width, c.width, i.naturalWidth > 0 ? r.height / r.width : 0, i.naturalHeight / Math.max(1, i.naturalWidth)]; })}; })()",
        );
        assert!(
            v["sw"].as_f64().unwrap() <= v["iw"].as_f64().unwrap(),
            "{w}: the page scrolls sideways: {v}"
        );
        assert_eq!(v["n"], FLEET.len(), "{w}: {v}");
        for p in v["pics"].as_array().unwrap() {
            let (pw, cw, ratio) = (
                p[0].as_f64().unwrap(),
                p[1].as_f64().unwrap(),
                p[2].as_f64().unwrap(),
            );
            assert!(
                pw > 0.5 * cw && pw <= cw + 0.5,
                "{w}: a picture fits its box: {v}"
            );
            assert!(ratio > 0.1, "{w}: drawn with its proportions: {v}");
        }
        b.eval("window.scrollTo(0, 0)");
        keep(&format!("fleet-{w}.png"), &b.screenshot(false));
        // And a node's picture, scrolled into view.
        b.eval("document.querySelector('img.fl-picture').scrollIntoView({block: 'start'})");
        keep(&format!("fleet-node-{w}.png"), &b.screenshot(false));
        assert!(b.errors.is_empty(), "console errors: {:?}", b.errors);
    }
}

/// Pictures planted in `--svg-dir` that would run a script if inlined (an `onload` handler, an
/// `<image onerror>`, a `javascript:` link written with an entity, a `</svg><img onerror>`
/// break-out; tests/common/hostile_svg.rs): in Chromium, none of them runs. Each would change
/// the page's title or set `data-pwned` on its body; after the pictures have loaded and the
/// link has been clicked, both are as the page wrote them, while the page's own script (allowed
/// by its hash in the Content-Security-Policy) still sorts. Before, the pictures were inlined as
/// markup and the handlers ran.
#[test]
fn hostile_pictures_run_nothing_in_a_browser() {
    let dir = out_dir().join("fleet-hostile");
    let _ = std::fs::remove_dir_all(&dir);
    let (reports, svgs) = (dir.join("reports"), dir.join("svgs"));
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&svgs).unwrap();
    let hostile = common::hostile_svg::hostile_svgs();
    let base = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    for (i, (_, svg)) in hostile.iter().enumerate() {
        let mut r = base.clone();
        r.host.hostname = Some(format!("node{i}"));
        std::fs::write(
            reports.join(format!("node{i}.json")),
            serde_json::to_string(&r).unwrap(),
        )
        .unwrap();
        std::fs::write(svgs.join(format!("node{i}.svg")), svg).unwrap();
    }
    let page = dir.join("fleet.html");
    let (_, out, err) = run(&[
        "fleet",
        reports.to_str().unwrap(),
        "-f",
        "html",
        "--svg-dir",
        svgs.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(out.is_empty(), "{out}{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(&format!("{} embedded as images", hostile.len())),
        "every hostile picture passed the picture check and was used: {err}"
    );
    let Some(mut b) = browser(1280, 900) else {
        return;
    };
    b.open(&page);
    let title = format!("gdrdoctor fleet: {} nodes", hostile.len());
    let state = "(() => ({title: document.title, pwned: document.body.getAttribute('data-pwned'), \
        imgs: document.querySelectorAll('img').length, \
        inline: document.querySelectorAll('svg, script:not(:last-of-type), [onload], [onerror]').length}))()";
    // Every picture opened, every handler had its chance.
    b.eval("Promise.all([...document.images].map(i => i.decode().catch(() => null))).then(() => new Promise(r => setTimeout(r, 300)))");
    let v = b.eval(state);
    assert_eq!(v["title"], title.as_str(), "a handler ran: {v}");
    assert_eq!(v["pwned"], Value::Null, "a handler ran: {v}");
    assert_eq!(
        v["imgs"],
        hostile.len(),
        "one image per picture, no more: {v}"
    );
    assert_eq!(v["inline"], 0, "no markup of a picture in the page: {v}");
    // Click the picture that holds the javascript: link.
    let r = b.eval("(() => { const i = document.querySelectorAll('img.fl-picture')[2]; i.closest('details').open = true; i.scrollIntoView({block: 'center'}); const r = i.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()");
    b.click(r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
    b.eval("new Promise(r => setTimeout(r, 300))");
    let v = b.eval(state);
    assert_eq!(v["title"], title.as_str(), "the link ran: {v}");
    assert_eq!(v["pwned"], Value::Null, "{v}");
    // The page's own script is allowed: sorting still works.
    b.eval("window.scrollTo(0, 0)");
    click_header(&mut b, "#fl-heat thead th.fl-node");
    assert_eq!(
        b.eval("document.querySelector('#fl-heat thead th.fl-node').getAttribute('aria-sort')"),
        "ascending",
        "the page's own script runs under its Content-Security-Policy"
    );
    assert!(b.errors.is_empty(), "console errors: {:?}", b.errors);

    // The Content-Security-Policy on its own: the same page with every hostile picture
    // spliced in as markup (as the old page inlined them) still runs none of them.
    let spliced = html.replacen(
        "<h2 id=\"nodes\">",
        &format!(
            "{}<script>document.title = 'pwned script';</script><h2 id=\"nodes\">",
            hostile.iter().map(|(_, s)| s.as_str()).collect::<String>()
        ),
        1,
    );
    let spliced_page = dir.join("spliced.html");
    std::fs::write(&spliced_page, spliced).unwrap();
    b.open(&spliced_page);
    b.eval("new Promise(r => setTimeout(r, 300))");
    let v = b.eval(state);
    assert!(
        v["inline"].as_u64().unwrap() > 0,
        "the markup is in the page: {v}"
    );
    assert_eq!(
        v["title"],
        title.as_str(),
        "the policy let a script run: {v}"
    );
    assert_eq!(v["pwned"], Value::Null, "the policy let a handler run: {v}");
    click_header(&mut b, "#fl-heat thead th.fl-node");
    assert_eq!(
        b.eval("document.querySelector('#fl-heat thead th.fl-node').getAttribute('aria-sort')"),
        "ascending"
    );
}

/// Copy a capture from ../shared/realdata, turning the files that hold a relative path (how
/// the captures flattened symlinks) back into symlinks (as tests/realdata.rs does).
fn rehydrate(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            rehydrate(&e.path(), &to);
        } else if t.is_file() {
            let b = std::fs::read(e.path()).unwrap_or_default();
            let s = String::from_utf8_lossy(&b);
            if b.len() < 512 && s.starts_with("../") && !s.contains('\n') && !s.contains(' ') {
                std::os::unix::fs::symlink(s.as_ref(), &to).unwrap();
            } else {
                std::fs::write(&to, &b).unwrap();
            }
        }
    }
}

/// Real sysfs captures (hwloc's, in ../shared/realdata; skipped when absent): a picture without
/// overlaps that parses, and the devices the capture holds are on it.
#[test]
fn real_captures_draw_cleanly() {
    let Some(rd) = require::realdata(&repo()) else {
        return;
    };
    for name in [
        "hwloc-sysfs-xeon4108-cx4-plx",
        "hwloc-sysfs-xeon-e5-2680-cx3-mlx4-mic",
        "hwloc-sysfs-power9-v100-procdrivernvidia",
        "hwloc-nvidia-dgx-gb10-proc-dmi",
    ] {
        let t = tempfile::tempdir().unwrap();
        rehydrate(&rd.join(name), t.path());
        let mut root = Root::sysroot(t.path()).unwrap();
        let m = meta::read(&root).unwrap();
        root.set_complete(m.is_some());
        let mut node = collect::collect(&root, m.as_ref());
        node.live = meta::read_live(&root);
        let f = findings(&node);
        let tp = topo::build(&node);
        let pic = svg::scene(&node, &tp, &f);
        let l = svg_layout::layout(&pic.scene);
        let vis = l.visible_texts();
        for (i, a) in vis.iter().enumerate() {
            for b in &vis[i + 1..] {
                assert!(
                    !a.rect.overlaps(&b.rect),
                    "{name}: {:?} overlaps {:?}",
                    a.text,
                    b.text
                );
            }
        }
        let gpus = l
            .items
            .iter()
            .filter(|i| i.kind == svg_layout::Kind::Gpu)
            .count();
        let nics = l
            .items
            .iter()
            .filter(|i| i.kind == svg_layout::Kind::Nic)
            .count();
        assert_eq!(gpus, tp.gpus.len(), "{name}: every gpu is drawn");
        // Every placed RDMA function is a box; Mellanox functions without an RDMA device too.
        let placed: std::collections::BTreeSet<&str> =
            tp.nics.iter().filter_map(|n| n.bdf.as_deref()).collect();
        assert!(
            nics >= placed.len(),
            "{name}: {nics} nic boxes for {placed:?}"
        );
        if name == "hwloc-sysfs-xeon4108-cx4-plx" {
            // Two ConnectX-4 functions under PLX switches; the capture has no
            // /sys/class/infiniband, so they are drawn as NICs without an RDMA device.
            assert_eq!(nics, 2, "{name}");
            assert!(pic
                .titles
                .values()
                .any(|t| t.contains("no RDMA device points at this function")));
        }
        let text = svg::render(&pic, &l, true);
        #[cfg(feature = "png")]
        resvg::usvg::Tree::from_str(&text, &resvg::usvg::Options::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.starts_with("<svg "));
        std::fs::write(out_dir().join(format!("real-{name}.svg")), &text).unwrap();
    }
}

/// An HGX-like board built in the test: NVSwitches on the PCI bus are drawn, the NVLink bar is
/// assumed from them (NVML not queried), and a GPU whose only NIC is on the other socket gets
/// PXN through the NIC's local GPU.
#[test]
fn nvswitches_and_an_assumed_fabric() {
    use gdrdoctor_checks::testing::{bridge, gpu, nic, pci, rdma, with};
    let rp = |b: &str| format!("/sys/devices/pci0000:{b}/0000:{b}:01.0");
    let node = with(
        gdrdoctor_checks::testing::empty_node(),
        vec![
            bridge(&rp("15"), 0),
            gpu(&format!("{}/0000:16:00.0", rp("15")), 0),
            bridge(&rp("25"), 0),
            nic(&format!("{}/0000:26:00.0", rp("25")), 0),
            bridge(&rp("95"), 1),
            gpu(&format!("{}/0000:96:00.0", rp("95")), 1),
            bridge(&rp("05"), 0),
            pci(
                &format!("{}/0000:06:00.0", rp("05")),
                0x068000,
                0x10de,
                0x22a3,
                0,
            ),
            pci(
                &format!("{}/0000:07:00.0", rp("05")),
                0x068000,
                0x10de,
                0x22a3,
                0,
            ),
        ],
        vec![rdma("mlx5_0", "0000:26:00.0", "4: ACTIVE")],
    );
    let t = topo::build(&node);
    let pic = svg::scene(&node, &t, &findings(&node));
    let l = svg_layout::layout(&pic.scene);
    let nvs: Vec<_> = l
        .items
        .iter()
        .filter(|i| i.kind == svg_layout::Kind::NvSwitch)
        .collect();
    assert_eq!(nvs.len(), 2);
    assert!(nvs[0].lines[0].text.starts_with("NVSwitch 06:00.0"));
    let fabric = pic
        .scene
        .fabric
        .as_ref()
        .expect("NVLink bar from the NVSwitches");
    assert!(fabric.label.contains("2 NVSwitch(es)"), "{}", fabric.label);
    assert!(fabric.label.contains("assumed"), "{}", fabric.label);
    // Both GPUs are on the bar, and both GPU-NIC pairs have a line with a hover text.
    assert_eq!(fabric.members, vec!["0000:16:00.0", "0000:96:00.0"]);
    for g in ["0000:16:00.0", "0000:96:00.0"] {
        let r = pic
            .scene
            .routes
            .iter()
            .find(|r| r.from == g && r.to == "0000:26:00.0")
            .unwrap_or_else(|| panic!("{g}: no route to mlx5_0: {:?}", pic.scene.routes));
        assert!(
            pic.titles[&r.id].contains("-> mlx5_0"),
            "{}",
            pic.titles[&r.id]
        );
    }
    assert!(l.fabric.is_some());
}
