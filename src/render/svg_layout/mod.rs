//! Layout of the topology picture: a small scene (a tree of boxes per socket, the routes between
//! leaves, the NVLink fabric) in, positioned boxes, edges, routes and labels out. Pure geometry:
//! no SVG, no colours, no I/O; `svg/` builds the scene from a node and serialises the result.
//!
//! The tree is drawn like lstopo's I/O view, top down: socket, host bridge, bridges and switches,
//! and every endpoint (GPU, NIC, NVSwitch) on one row at the bottom, so that the routes between
//! endpoints have the space below that row to themselves. Every text is monospace with a fixed
//! advance ([`CHAR_W`]), so the boxes that hold it are sized here and text never leaves its box
//! (longer text is cut with `…`; the full text is in the element's `<title>`).
//!
//! Routes:
//! - **tree** routes (GDR pairs): the path through the PCI tree, shifted beside the tree's own
//!   edges, with one label per common ancestor (`PIX`, `PXB`, ...);
//! - **fabric** routes (PXN): from the GPU down to the NVLink bar, along it to the peer GPU, then
//!   the peer's own tree route to the NIC;
//! - **lane** routes (no GDR): a dashed U below the endpoint row, in its own lane so that labels
//!   never overlap.
//!
//! Routes that are not `shown` belong to a `group` (a GPU) and are revealed when that GPU is
//! hovered; each group gets its own lanes in a band of its own, so what is visible at one time
//! never overlaps.//!
//! [`layout`] runs the steps in order: the header; the tree of boxes ([`place`]: box sizes,
//! subtree widths, rows, and room right of the ancestors where routes meet); the routes
//! ([`routes`]: tree routes, the lanes of the static band, the NVLink fabric, the hover band);
//! the footer and the picture's size.

mod place;
mod routes;
#[cfg(test)]
mod tests;

use place::{Ancestors, Tree};
use routes::Geometry;

/// Font size of box text, px.
pub const FONT: f64 = 11.0;
/// Advance of one character at [`FONT`] (DejaVu Sans Mono and Liberation Mono: 0.6 em), rounded
/// up so that a browser's font never overflows the box.
pub const CHAR_W: f64 = 6.7;
/// Font size and advance of small labels (edges, routes).
pub const SMALL: f64 = 10.0;
pub const SMALL_W: f64 = 6.1;
pub const LINE_H: f64 = 14.0;
const PAD: f64 = 5.0;
const H_GAP: f64 = 14.0;
const V_GAP: f64 = 36.0;
const SOCKET_GAP: f64 = 24.0;
const CPAD: f64 = 10.0;
const MARGIN: f64 = 16.0;
const LEAF_W: f64 = 156.0;
const MIN_W: f64 = 84.0;
const MAX_W: f64 = 156.0;
const LANE_H: f64 = 18.0;
const HEADER_H: f64 = 16.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Socket,
    HostBridge,
    Bridge,
    Switch,
    Gpu,
    Nic,
    NvSwitch,
    Device,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Socket => "socket",
            Kind::HostBridge => "hostbridge",
            Kind::Bridge => "bridge",
            Kind::Switch => "switch",
            Kind::Gpu => "gpu",
            Kind::Nic => "nic",
            Kind::NvSwitch => "nvswitch",
            Kind::Device => "device",
        }
    }
}

/// One box of the tree and what hangs below it.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Unique in the scene: a PCI address, `hb:pci0000:15`, `socket:0`.
    pub id: String,
    pub kind: Kind,
    /// Text lines, first one bold-ish (the name users know).
    pub lines: Vec<String>,
    /// Label on the link from the parent (a degraded link: `x8 of x16`).
    pub edge_label: Option<String>,
    pub children: Vec<Item>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// Along the PCI tree (GDR with the GPU's own path).
    Tree,
    /// Through an NVLink peer: fabric, then the peer's tree route.
    Fabric,
    /// A dashed U below the endpoint row.
    Lane,
}

/// A line between two endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub id: String,
    pub from: String,
    pub to: String,
    /// The peer GPU of a fabric route.
    pub via: Option<String>,
    pub kind: RouteKind,
    pub label: String,
    /// Visible without hovering; otherwise revealed by hovering `group`.
    pub shown: bool,
    pub group: String,
}

/// The NVLink bar: its label and the GPUs on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fabric {
    pub label: String,
    pub members: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scene {
    /// Lines above the tree (title, verdict summary, findings about the whole node).
    pub header: Vec<String>,
    pub sockets: Vec<Item>,
    pub routes: Vec<Route>,
    pub fabric: Option<Fabric>,
    /// Lines below everything (legend, notes).
    pub footer: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Rect {
    pub fn right(&self) -> f64 {
        self.x + self.w
    }
    pub fn bottom(&self) -> f64 {
        self.y + self.h
    }
    pub fn cx(&self) -> f64 {
        self.x + self.w / 2.0
    }
    pub fn cy(&self) -> f64 {
        self.y + self.h / 2.0
    }
    /// Strict overlap (touching edges do not count).
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.right() && o.x < self.right() && self.y < o.bottom() && o.y < self.bottom()
    }
    pub fn contains(&self, o: &Rect) -> bool {
        o.x >= self.x && o.y >= self.y && o.right() <= self.right() && o.bottom() <= self.bottom()
    }
}

/// A text run: baseline start, size, and its bounding box.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    pub x: f64,
    pub y: f64,
    pub size: f64,
    pub text: String,
    pub rect: Rect,
}

impl Text {
    fn new(x: f64, y: f64, size: f64, text: &str) -> Text {
        let adv = if size == SMALL { SMALL_W } else { CHAR_W };
        let w = text.chars().count() as f64 * adv;
        Text {
            x,
            y,
            size,
            text: text.to_string(),
            rect: Rect {
                x,
                y: y - size,
                w,
                h: size + 3.0,
            },
        }
    }
    /// Centred on `cx`.
    fn centred(cx: f64, y: f64, size: f64, text: &str) -> Text {
        let mut t = Text::new(0.0, y, size, text);
        t.x = cx - t.rect.w / 2.0;
        t.rect.x = t.x;
        t
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlacedItem {
    pub id: String,
    pub kind: Kind,
    pub rect: Rect,
    /// Lines as drawn (cut to the box), with their positions.
    pub lines: Vec<Text>,
    /// A socket's container (the tinted area around its subtree).
    pub container: Option<Rect>,
    pub leaf: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlacedEdge {
    pub parent: String,
    pub child: String,
    pub points: Vec<(f64, f64)>,
    pub label: Option<Text>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlacedRoute {
    pub id: String,
    pub kind: RouteKind,
    pub points: Vec<(f64, f64)>,
    pub label: Option<Text>,
    pub shown: bool,
    pub group: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlacedFabric {
    pub bar: Vec<(f64, f64)>,
    pub stubs: Vec<Vec<(f64, f64)>>,
    pub label: Text,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    pub width: f64,
    pub height: f64,
    pub header: Vec<Text>,
    pub items: Vec<PlacedItem>,
    pub edges: Vec<PlacedEdge>,
    /// Route labels at a common ancestor, merged (`PIX x2`): one text per ancestor.
    pub ancestor_labels: Vec<(String, Text)>,
    pub routes: Vec<PlacedRoute>,
    pub fabric: Option<PlacedFabric>,
    pub footer: Vec<Text>,
}

impl Layout {
    pub fn item(&self, id: &str) -> Option<&PlacedItem> {
        self.items.iter().find(|i| i.id == id)
    }
    /// Every text that is visible without hovering.
    pub fn visible_texts(&self) -> Vec<&Text> {
        let mut v: Vec<&Text> = self.header.iter().collect();
        v.extend(self.items.iter().flat_map(|i| i.lines.iter()));
        v.extend(self.edges.iter().filter_map(|e| e.label.as_ref()));
        v.extend(self.ancestor_labels.iter().map(|(_, t)| t));
        v.extend(
            self.routes
                .iter()
                .filter(|r| r.shown)
                .filter_map(|r| r.label.as_ref()),
        );
        v.extend(self.fabric.iter().map(|f| &f.label));
        v.extend(self.footer.iter());
        v
    }
}

/// Cut `s` to `n` characters, with `…` when cut.
pub fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut o: String = s.chars().take(n.saturating_sub(1)).collect();
    o.push('…');
    o
}

/// Lay the scene out. Deterministic: the same scene gives the same layout.
pub fn layout(scene: &Scene) -> Layout {
    let mut out = Layout::default();
    let mut y = MARGIN;
    for h in &scene.header {
        y += HEADER_H;
        out.header.push(Text::new(MARGIN, y - 3.0, FONT, h));
    }
    y += 10.0;
    let anc = Ancestors::of(scene);
    let tree = Tree::place(scene, &anc.room, y);
    let geo = Geometry::new(scene, &tree.items);
    let tree_points = geo.tree_routes(scene, &tree, &anc.route_anc, &mut out);
    geo.ancestor_labels(&anc.labels, &mut out);
    let y = geo.static_lanes(scene, tree.leaf_bottom, &mut out);
    let (y, fabric_y) = geo.fabric(scene, y, &mut out);
    let y = geo.hover_band(scene, &tree_points, fabric_y, y, &mut out);
    finish(scene, y, tree, &mut out);
    out
}

/// The footer below `y`, the picture's size, and the placed tree.
fn finish(scene: &Scene, mut y: f64, tree: Tree, out: &mut Layout) {
    for f in &scene.footer {
        y += HEADER_H;
        out.footer.push(Text::new(MARGIN, y - 3.0, FONT, f));
    }
    let text_right = out
        .header
        .iter()
        .chain(out.footer.iter())
        .map(|t| t.rect.right() + MARGIN)
        .fold(0.0, f64::max);
    let fabric_right = out
        .fabric
        .as_ref()
        .map(|f| f.label.rect.right() + MARGIN)
        .unwrap_or(0.0);
    let label_right = out
        .ancestor_labels
        .iter()
        .map(|(_, t)| t.rect.right() + MARGIN)
        .chain(
            tree.edges
                .iter()
                .filter_map(|e| e.label.as_ref())
                .map(|t| t.rect.right() + MARGIN),
        )
        .fold(0.0, f64::max);
    out.width = tree
        .right
        .max(text_right)
        .max(fabric_right)
        .max(label_right)
        .max(320.0)
        .ceil();
    out.height = (y + MARGIN).ceil();
    out.items = tree.items;
    out.edges = tree.edges;
}
