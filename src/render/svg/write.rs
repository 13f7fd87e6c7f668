//! The last step: a laid-out picture as SVG text.

use super::{Picture, RouteStyle, Swatch};
use crate::render::svg_layout::{self, Kind, Layout, Text};
use crate::sys::escape::{xml_attr as attr, xml_text as text};
use gdrdoctor_checks::report::Status;
use std::fmt::Write;

pub(super) fn n(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

pub(super) fn path_d(pts: &[(f64, f64)]) -> String {
    let mut d = String::new();
    for (i, (x, y)) in pts.iter().enumerate() {
        let _ = write!(d, "{}{} {}", if i == 0 { "M" } else { " L" }, n(*x), n(*y));
    }
    d
}

pub(super) fn text_el(o: &mut String, t: &Text, class: &str) {
    // Labels on lines sit on a white ground, so that a line crossing them does not hide them.
    if matches!(class, "routelabel" | "anc" | "edgelabel" | "fabriclabel") {
        let _ = write!(
            o,
            "<rect class=\"labelbg\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" fill-opacity=\"0.9\"/>",
            n(t.rect.x - 1.0),
            n(t.rect.y + 1.0),
            n(t.rect.w + 2.0),
            n(t.rect.h - 1.0)
        );
    }
    let _ = write!(
        o,
        "<text class=\"{class}\" x=\"{}\" y=\"{}\"{} xml:space=\"preserve\">{}</text>",
        n(t.x),
        n(t.y),
        if t.size != svg_layout::FONT {
            format!(" font-size=\"{}\"", n(t.size))
        } else {
            String::new()
        },
        text(&t.text)
    );
}

pub(super) fn tone_class(s: Option<&Status>) -> &'static str {
    match s {
        Some(Status::Warn) => " warn",
        Some(Status::Fail) => " fail",
        Some(Status::Error) => " error",
        _ => "",
    }
}

const STYLE: &str = "\
.bg{fill:#ffffff}\
text{fill:#1d2330}\
.hdr{fill:#1d2330}.hdr.warn{fill:#9a5b00}.hdr.fail{fill:#b42318}.hdr.error{fill:#6b2fa3}\
.socket>rect.container{fill:#f3f5f9;stroke:#9aa5b8;stroke-width:1}\
.item>rect.box{fill:#ffffff;stroke:#6b7689;stroke-width:1}\
.socket>rect.box{fill:#dfe5ee}\
.hostbridge>rect.box{fill:#f7f7f7}\
.bridge>rect.box,.switch>rect.box{fill:#eef1f5}\
.gpu>rect.box{fill:#e6f2e4}\
.nic>rect.box{fill:#e3edf8}\
.nvswitch>rect.box{fill:#efe6f5}\
.item.warn>rect.box{fill:#fff1d6;stroke:#d98b00;stroke-width:3}\
.item.fail>rect.box{fill:#fde3e1;stroke:#d92d20;stroke-width:3}\
.item.error>rect.box{fill:#f1e6fa;stroke:#7f3fbf;stroke-width:3}\
.edge path{fill:none;stroke:#8a94a6;stroke-width:1.5}\
.edge.warn path{stroke:#d98b00;stroke-width:4}.edge.fail path{stroke:#d92d20;stroke-width:4}.edge.error path{stroke:#7f3fbf;stroke-width:4}\
.edge text{fill:#9a5b00}\
.route path{fill:none;stroke-linejoin:round}\
.route path.hit{stroke:transparent;stroke-width:9}\
.route.gdr path.line{stroke:#16a34a;stroke-width:2.5}\
.route.partial path.line{stroke:#16a34a;stroke-dasharray:8 3 2 3}\
.route.pxn path.line{stroke:#0e7490;stroke-width:2.5;stroke-dasharray:2 3}\
.route.nogdr path.line{stroke:#d92d20;stroke-width:1.6;stroke-dasharray:6 4}\
.route.undecided path.line{stroke:#7a8494;stroke-width:1.6;stroke-dasharray:6 4}\
.route.nogdr text{fill:#b42318}.route.undecided text{fill:#525b6b}\
.anc{fill:#15803d;font-weight:bold}\
.fabric path{fill:none;stroke:#0e7490;stroke-width:3}\
.fabric text{fill:#0e7490}\
.hover{visibility:hidden}.gpu:hover .hover{visibility:visible}\
.gpu:hover>rect.box{stroke:#0e7490;stroke-width:3}\
";

/// SVG text of a laid-out picture. `interactive`: include the routes revealed by hovering a
/// GPU (the PNG, a static image, leaves them out).
pub fn render(pic: &Picture, l: &Layout, interactive: bool) -> String {
    let mut o = String::new();
    let (w, h) = (n(l.width), n(l.height));
    // In a browser the picture scales to the window (or to the element it is shown in), the
    // whole of it in view; a PNG is drawn at its own size.
    let (sw, sh) = if interactive {
        ("100%".to_string(), "100%".to_string())
    } else {
        (w.clone(), h.clone())
    };
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{sw}\" height=\"{sh}\" viewBox=\"0 0 {w} {h}\" \
font-family=\"DejaVu Sans Mono, Liberation Mono, Menlo, Consolas, monospace\" font-size=\"{}\" \
data-generator=\"gdrdoctor topo\">",
        n(svg_layout::FONT)
    );
    let _ = writeln!(o, "<title>gdrdoctor topo: {}</title>", text(&pic.host));
    let _ = writeln!(o, "<style>{STYLE}</style>");
    let _ = writeln!(
        o,
        "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\"/>"
    );
    // Header.
    let _ = writeln!(o, "<g class=\"header\">");
    for (i, t) in l.header.iter().enumerate() {
        let tone = tone_class(pic.header_tones.get(i).and_then(|x| x.as_ref()));
        let full = pic.header_titles.get(i).map(String::as_str).unwrap_or("");
        let _ = write!(
            o,
            "<g class=\"hdrline{tone}\"><title>{}</title>",
            text(full)
        );
        text_el(&mut o, t, &format!("hdr{tone}"));
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Socket containers.
    let _ = writeln!(o, "<g class=\"containers\">");
    for it in l.items.iter().filter(|i| i.container.is_some()) {
        if let Some(c) = it.container {
            let _ = writeln!(
                o,
                "<g class=\"socket-area\" data-id=\"{}\"><rect class=\"container\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"8\" fill=\"#f3f5f9\" stroke=\"#9aa5b8\"/></g>",
                attr(&it.id),
                n(c.x),
                n(c.y),
                n(c.w),
                n(c.h)
            );
        }
    }
    let _ = writeln!(o, "</g>");
    // Edges.
    let _ = writeln!(o, "<g class=\"edges\">");
    for e in &l.edges {
        let tone = tone_class(pic.edge_tones.get(&e.child));
        let _ = write!(
            o,
            "<g class=\"edge{tone}\" data-child=\"{}\">",
            attr(&e.child)
        );
        if let Some(t) = pic.edge_titles.get(&e.child) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let _ = write!(o, "<path d=\"{}\"/>", path_d(&e.points));
        if let Some(t) = &e.label {
            text_el(&mut o, t, "edgelabel");
        }
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Static routes and labels.
    let route_el = |o: &mut String, r: &svg_layout::PlacedRoute, hover: bool| {
        let style = pic
            .route_styles
            .get(&r.id)
            .copied()
            .unwrap_or(RouteStyle::Gdr);
        let _ = write!(
            o,
            "<g class=\"route {}{}\" data-id=\"{}\">",
            style.class(),
            if hover { " hover" } else { "" },
            attr(&r.id)
        );
        if let Some(t) = pic.titles.get(&r.id) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let d = path_d(&r.points);
        if interactive {
            // A wide invisible stroke, so that the hover text is easy to reach.
            let _ = write!(o, "<path class=\"hit\" d=\"{d}\"/>");
        }
        let _ = write!(o, "<path class=\"line\" d=\"{d}\"/>");
        if let Some(t) = &r.label {
            text_el(o, t, "routelabel");
        }
        let _ = writeln!(o, "</g>");
    };
    // Fabric.
    if let Some(f) = &l.fabric {
        let _ = write!(
            o,
            "<g class=\"fabric\"><title>{}</title>",
            text(&f.label.text)
        );
        let _ = write!(o, "<path d=\"{}\"/>", path_d(&f.bar));
        for s in &f.stubs {
            let _ = write!(o, "<path d=\"{}\"/>", path_d(s));
        }
        text_el(&mut o, &f.label, "fabriclabel");
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "<g class=\"routes\">");
    for r in l.routes.iter().filter(|r| r.shown) {
        route_el(&mut o, r, false);
    }
    for (anc, t) in &l.ancestor_labels {
        let _ = write!(o, "<g class=\"anclabel\" data-id=\"{}\">", attr(anc));
        text_el(&mut o, t, "anc");
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Boxes (GPUs last, so that their hover routes are drawn on top of everything).
    let _ = writeln!(o, "<g class=\"items\">");
    let mut order: Vec<&svg_layout::PlacedItem> = l.items.iter().collect();
    order.sort_by_key(|i| i.kind == Kind::Gpu);
    for it in order {
        let tone = tone_class(pic.tones.get(&it.id));
        let _ = write!(
            o,
            "<g class=\"item {}{tone}\" data-id=\"{}\">",
            it.kind.as_str(),
            attr(&it.id)
        );
        if let Some(t) = pic.titles.get(&it.id) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let r = it.rect;
        let _ = write!(
            o,
            "<rect class=\"box\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>",
            n(r.x),
            n(r.y),
            n(r.w),
            n(r.h)
        );
        for (i, t) in it.lines.iter().enumerate() {
            text_el(&mut o, t, if i == 0 { "name" } else { "line" });
        }
        if interactive && it.kind == Kind::Gpu {
            for hr in l.routes.iter().filter(|x| !x.shown && x.group == it.id) {
                route_el(&mut o, hr, true);
            }
        }
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Footer with legend swatches.
    let _ = writeln!(o, "<g class=\"footer\">");
    for (i, t) in l.footer.iter().enumerate() {
        match pic.footer_swatches.get(i).copied().flatten() {
            Some(Swatch::Route(s)) => {
                let y = t.y - 4.0;
                let _ = write!(
                    o,
                    "<g class=\"route {} legend\"><path class=\"line\" d=\"M{} {} L{} {}\"/></g>",
                    s.class(),
                    n(t.x + 2.0),
                    n(y),
                    n(t.x + 28.0),
                    n(y)
                );
            }
            Some(Swatch::Tone(s)) => {
                let _ = write!(
                    o,
                    "<g class=\"item legend{}\"><rect class=\"box\" x=\"{}\" y=\"{}\" width=\"24\" height=\"10\"/></g>",
                    tone_class(Some(&s)),
                    n(t.x + 3.0),
                    n(t.y - 10.0)
                );
            }
            None => {}
        }
        text_el(&mut o, t, "foot");
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "</g>");
    let _ = writeln!(o, "</svg>");
    o
}
