//! Layout of the topology picture: a small scene (a tree of boxes per socket, the routes between
//! leaves, the NVLink fabric) in, positioned boxes, edges, routes and labels out. Pure geometry:
//! no SVG, no colours, no I/O; `svg.rs` builds the scene from a node and serialises the result.
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
//! never overlaps.

use std::collections::BTreeMap;

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

fn box_w(it: &Item) -> f64 {
    if it.children.is_empty() {
        return LEAF_W;
    }
    let chars = it
        .lines
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    (chars as f64 * CHAR_W + 2.0 * PAD).clamp(MIN_W, MAX_W)
}

fn box_h(it: &Item) -> f64 {
    it.lines.len().max(1) as f64 * LINE_H + 2.0 * PAD
}

fn chars_fit(w: f64) -> usize {
    ((w - 2.0 * PAD) / CHAR_W).floor().max(1.0) as usize
}

/// Parent of every item, by id.
fn tree_parents(it: &Item, out: &mut BTreeMap<String, String>) {
    for c in &it.children {
        out.insert(c.id.clone(), it.id.clone());
        tree_parents(c, out);
    }
}

/// The ids from `id` up to its socket.
fn chain_of(parents: &BTreeMap<String, String>, id: &str) -> Vec<String> {
    let mut v = vec![id.to_string()];
    let mut cur = id.to_string();
    while let Some(p) = parents.get(&cur) {
        if v.len() > 256 {
            break;
        }
        v.push(p.clone());
        cur = p.clone();
    }
    v
}

/// The labels of the routes meeting at one ancestor, merged: `PIX x2, PXB`.
fn merged_label(labels: &[String]) -> String {
    let mut uniq: Vec<(&String, usize)> = Vec::new();
    for l in labels {
        match uniq.iter_mut().find(|(x, _)| *x == l) {
            Some((_, n)) => *n += 1,
            None => uniq.push((l, 1)),
        }
    }
    let text = uniq
        .iter()
        .map(|(l, n)| {
            if *n > 1 {
                format!("{l} x{n}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    cut(&text, 24)
}

/// Subtree widths, by id; `extra` is room to keep right of a box (its ancestor label).
fn widths(it: &Item, extra: &BTreeMap<String, f64>, out: &mut BTreeMap<String, f64>) -> f64 {
    let own = box_w(it) + extra.get(&it.id).copied().unwrap_or(0.0);
    let kids: f64 = it
        .children
        .iter()
        .map(|c| widths(c, extra, out))
        .sum::<f64>()
        + H_GAP * it.children.len().saturating_sub(1) as f64;
    let mut w = own.max(kids);
    if it.kind == Kind::Socket {
        w += 2.0 * CPAD;
    }
    out.insert(it.id.clone(), w);
    w
}

fn depth_heights(it: &Item, d: usize, rows: &mut Vec<f64>, leaf_h: &mut f64) {
    if it.children.is_empty() {
        *leaf_h = leaf_h.max(box_h(it));
        return;
    }
    if rows.len() <= d {
        rows.resize(d + 1, 0.0);
    }
    rows[d] = rows[d].max(box_h(it));
    for c in &it.children {
        depth_heights(c, d + 1, rows, leaf_h);
    }
}

struct Placer<'a> {
    widths: &'a BTreeMap<String, f64>,
    extra: &'a BTreeMap<String, f64>,
    row_y: &'a [f64],
    leaf_y: f64,
    items: Vec<PlacedItem>,
    edges: Vec<PlacedEdge>,
    parent: BTreeMap<String, String>,
}

impl Placer<'_> {
    fn place(&mut self, it: &Item, left: f64, depth: usize) -> Rect {
        let sw = self.widths.get(&it.id).copied().unwrap_or(LEAF_W);
        let bw = box_w(it);
        let bh = box_h(it);
        let leaf = it.children.is_empty();
        let y = if leaf {
            self.leaf_y
        } else {
            self.row_y.get(depth).copied().unwrap_or(self.leaf_y)
        };
        let inner_left = if it.kind == Kind::Socket {
            left + CPAD
        } else {
            left
        };
        let inner_w = if it.kind == Kind::Socket {
            sw - 2.0 * CPAD
        } else {
            sw
        };
        let room = self.extra.get(&it.id).copied().unwrap_or(0.0);
        let mut x = inner_left + (inner_w - bw - room) / 2.0;
        let mut child_rects = Vec::new();
        if !leaf {
            let total: f64 = it
                .children
                .iter()
                .map(|c| self.widths.get(&c.id).copied().unwrap_or(LEAF_W))
                .sum::<f64>()
                + H_GAP * it.children.len().saturating_sub(1) as f64;
            let mut cl = inner_left + (inner_w - total) / 2.0;
            for c in &it.children {
                self.parent.insert(c.id.clone(), it.id.clone());
                let r = self.place(c, cl, depth + 1);
                child_rects.push((c, r));
                cl += self.widths.get(&c.id).copied().unwrap_or(LEAF_W) + H_GAP;
            }
            if let (Some((_, a)), Some((_, b))) = (child_rects.first(), child_rects.last()) {
                let cx = (a.cx() + b.cx()) / 2.0;
                x = (cx - bw / 2.0).clamp(inner_left, inner_left + inner_w - bw - room);
            }
        }
        let rect = Rect { x, y, w: bw, h: bh };
        let n = chars_fit(bw);
        let lines = it
            .lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                Text::new(
                    x + PAD,
                    y + PAD + LINE_H * (i as f64 + 1.0) - 3.0,
                    FONT,
                    &cut(l, n),
                )
            })
            .collect();
        for (c, r) in &child_rects {
            let my = rect.bottom() + V_GAP / 2.0;
            let points = vec![
                (rect.cx(), rect.bottom()),
                (rect.cx(), my),
                (r.cx(), my),
                (r.cx(), r.y),
            ];
            let label = c
                .edge_label
                .as_ref()
                .map(|l| Text::new(r.cx() + 4.0, r.y - 4.0, SMALL, &cut(l, 22)));
            self.edges.push(PlacedEdge {
                parent: it.id.clone(),
                child: c.id.clone(),
                points,
                label,
            });
        }
        self.items.push(PlacedItem {
            id: it.id.clone(),
            kind: it.kind,
            rect,
            lines,
            container: None,
            leaf,
        });
        rect
    }
}

/// A polyline.
type Points = Vec<(f64, f64)>;

/// Greedy interval lanes: the first lane whose intervals do not touch `iv`.
fn take_lane(lanes: &mut Vec<Vec<(f64, f64)>>, iv: (f64, f64)) -> usize {
    for (i, l) in lanes.iter_mut().enumerate() {
        if l.iter().all(|&(a, b)| iv.1 + 6.0 < a || b + 6.0 < iv.0) {
            l.push(iv);
            return i;
        }
    }
    lanes.push(vec![iv]);
    lanes.len() - 1
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
    // Rows: depth 0 is the socket label box.
    let mut rows = Vec::new();
    let mut leaf_h: f64 = 0.0;
    // Room right of each ancestor box for the label of the routes that meet there.
    let mut parents_pre = BTreeMap::new();
    for s in &scene.sockets {
        tree_parents(s, &mut parents_pre);
    }
    let mut anc_text: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut route_anc: BTreeMap<String, String> = BTreeMap::new();
    for r in scene.routes.iter().filter(|r| r.kind == RouteKind::Tree) {
        let (ca, cb) = (
            chain_of(&parents_pre, &r.from),
            chain_of(&parents_pre, &r.to),
        );
        if let Some(anc) = ca.iter().find(|x| cb.contains(x)) {
            anc_text
                .entry(anc.clone())
                .or_default()
                .push(r.label.clone());
            route_anc.insert(r.id.clone(), anc.clone());
        }
    }
    let extra: BTreeMap<String, f64> = anc_text
        .iter()
        .map(|(a, l)| {
            (
                a.clone(),
                merged_label(l).chars().count() as f64 * SMALL_W + 8.0,
            )
        })
        .collect();
    let mut widths_by = BTreeMap::new();
    for s in &scene.sockets {
        depth_heights(s, 0, &mut rows, &mut leaf_h);
        widths(s, &extra, &mut widths_by);
    }
    let tree_top = y + CPAD;
    let mut row_y = Vec::new();
    let mut ry = tree_top;
    for h in &rows {
        row_y.push(ry);
        ry += h + V_GAP;
    }
    let leaf_y = ry;
    let leaf_bottom = leaf_y + leaf_h;
    let mut placer = Placer {
        widths: &widths_by,
        extra: &extra,
        row_y: &row_y,
        leaf_y,
        items: Vec::new(),
        edges: Vec::new(),
        parent: BTreeMap::new(),
    };
    let mut x = MARGIN;
    let mut containers = Vec::new();
    for s in &scene.sockets {
        let sw = widths_by.get(&s.id).copied().unwrap_or(LEAF_W);
        placer.place(s, x, 0);
        containers.push((
            s.id.clone(),
            Rect {
                x,
                y: tree_top - CPAD,
                w: sw,
                h: leaf_bottom + CPAD - (tree_top - CPAD),
            },
        ));
        x += sw + SOCKET_GAP;
    }
    let tree_right = x - SOCKET_GAP + MARGIN;
    let Placer {
        mut items,
        edges,
        parent,
        ..
    } = placer;
    for (id, c) in containers {
        if let Some(it) = items.iter_mut().find(|i| i.id == id) {
            it.container = Some(c);
        }
    }
    // Items in document order: sockets first, then by depth (parents before children).
    items.sort_by(|a, b| {
        (a.kind != Kind::Socket, a.rect.y, a.rect.x)
            .partial_cmp(&(b.kind != Kind::Socket, b.rect.y, b.rect.x))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let rect_of: BTreeMap<String, Rect> = items.iter().map(|i| (i.id.clone(), i.rect)).collect();
    let chain = |id: &str| -> Vec<String> {
        let mut v = vec![id.to_string()];
        let mut cur = id.to_string();
        while let Some(p) = parent.get(&cur) {
            v.push(p.clone());
            cur = p.clone();
        }
        v
    };
    let edge_pts: BTreeMap<(String, String), Vec<(f64, f64)>> = edges
        .iter()
        .map(|e| ((e.parent.clone(), e.child.clone()), e.points.clone()))
        .collect();

    // Attachment points on the bottom of each leaf: the fabric stub at the right, the lane
    // routes spread over the rest, ordered by where their other end is.
    let stub_x = |r: &Rect| r.right() - 12.0;
    let mut attach: BTreeMap<(String, String), f64> = BTreeMap::new();
    {
        let mut per_leaf: BTreeMap<String, Vec<(f64, String)>> = BTreeMap::new();
        for r in scene.routes.iter().filter(|r| r.kind == RouteKind::Lane) {
            for (me, other) in [(&r.from, &r.to), (&r.to, &r.from)] {
                let ox = rect_of.get(other).map(|o| o.cx()).unwrap_or(0.0);
                per_leaf
                    .entry(me.clone())
                    .or_default()
                    .push((ox, r.id.clone()));
            }
        }
        for (leaf, mut v) in per_leaf {
            let Some(rect) = rect_of.get(&leaf) else {
                continue;
            };
            v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            let (lo, hi) = (rect.x + 10.0, rect.right() - 28.0);
            let n = v.len();
            for (i, (_, id)) in v.into_iter().enumerate() {
                let x = if n == 1 {
                    rect.cx() - 8.0
                } else {
                    lo + (hi - lo) * i as f64 / (n - 1) as f64
                };
                attach.insert((leaf.clone(), id), x);
            }
        }
    }

    // Tree routes: up from the source to the common ancestor, down to the target, shifted
    // beside the tree's edges; labels merged per ancestor.
    let mut offsets: BTreeMap<String, usize> = BTreeMap::new();
    let mut tree_points: BTreeMap<(String, String), Points> = BTreeMap::new();
    for r in scene.routes.iter().filter(|r| r.kind == RouteKind::Tree) {
        let (ca, cb) = (chain(&r.from), chain(&r.to));
        let Some(anc) = route_anc.get(&r.id).cloned() else {
            continue;
        };
        let k = offsets.entry(anc.clone()).or_insert(0);
        let d = 4.0 + 3.0 * (*k % 4) as f64;
        *k += 1;
        let mut pts: Vec<(f64, f64)> = Vec::new();
        let up: Vec<&String> = ca.iter().take_while(|x| **x != anc).collect();
        for c in &up {
            if let Some(p) = parent.get(*c) {
                if let Some(e) = edge_pts.get(&(p.clone(), (*c).clone())) {
                    pts.extend(e.iter().rev().map(|&(x, y)| (x + d, y + d)));
                }
            }
        }
        let down: Vec<&String> = cb.iter().take_while(|x| **x != anc).collect();
        for c in down.iter().rev() {
            if let Some(p) = parent.get(*c) {
                if let Some(e) = edge_pts.get(&(p.clone(), (*c).clone())) {
                    pts.extend(e.iter().map(|&(x, y)| (x + d, y + d)));
                }
            }
        }
        pts.dedup();
        tree_points.insert((r.from.clone(), r.to.clone()), pts.clone());
        out.routes.push(PlacedRoute {
            id: r.id.clone(),
            kind: r.kind,
            points: pts,
            label: None,
            shown: r.shown,
            group: r.group.clone(),
        });
    }
    for (anc, labels) in &anc_text {
        let Some(rect) = rect_of.get(anc) else {
            continue;
        };
        out.ancestor_labels.push((
            anc.clone(),
            Text::new(
                rect.right() + 4.0,
                rect.bottom() + 12.0,
                SMALL,
                &merged_label(labels),
            ),
        ));
    }

    // Static lanes (shown lane routes), then the fabric, then the hover band.
    let lane_route = |r: &Route, lane_y: f64, attach: &BTreeMap<(String, String), f64>| {
        let (Some(a), Some(b)) = (rect_of.get(&r.from), rect_of.get(&r.to)) else {
            return None;
        };
        let xa = attach
            .get(&(r.from.clone(), r.id.clone()))
            .copied()
            .unwrap_or(a.cx());
        let xb = attach
            .get(&(r.to.clone(), r.id.clone()))
            .copied()
            .unwrap_or(b.cx());
        let pts = vec![
            (xa, a.bottom()),
            (xa, lane_y),
            (xb, lane_y),
            (xb, b.bottom()),
        ];
        let label = Text::centred((xa + xb) / 2.0, lane_y - 5.0, SMALL, &cut(&r.label, 30));
        Some((pts, label))
    };
    let interval = |r: &Route, attach: &BTreeMap<(String, String), f64>| -> Option<(f64, f64)> {
        let (a, b) = (rect_of.get(&r.from)?, rect_of.get(&r.to)?);
        let xa = attach
            .get(&(r.from.clone(), r.id.clone()))
            .copied()
            .unwrap_or(a.cx());
        let xb = attach
            .get(&(r.to.clone(), r.id.clone()))
            .copied()
            .unwrap_or(b.cx());
        let lw = cut(&r.label, 30).chars().count() as f64 * SMALL_W;
        let mid = (xa + xb) / 2.0;
        Some((
            xa.min(xb).min(mid - lw / 2.0),
            xa.max(xb).max(mid + lw / 2.0),
        ))
    };
    let mut by_len: Vec<&Route> = scene
        .routes
        .iter()
        .filter(|r| r.kind == RouteKind::Lane && r.shown)
        .collect();
    by_len.sort_by(|a, b| {
        let la = interval(a, &attach).map(|(x, y)| y - x).unwrap_or(0.0);
        let lb = interval(b, &attach).map(|(x, y)| y - x).unwrap_or(0.0);
        la.partial_cmp(&lb)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.id.cmp(&b.id))
    });
    let mut lanes: Vec<Vec<(f64, f64)>> = Vec::new();
    let band0 = leaf_bottom + CPAD + 16.0;
    for r in by_len {
        let Some(iv) = interval(r, &attach) else {
            continue;
        };
        let lane = take_lane(&mut lanes, iv);
        if let Some((pts, label)) = lane_route(r, band0 + lane as f64 * LANE_H, &attach) {
            out.routes.push(PlacedRoute {
                id: r.id.clone(),
                kind: r.kind,
                points: pts,
                label: Some(label),
                shown: true,
                group: r.group.clone(),
            });
        }
    }
    let mut y = if lanes.is_empty() {
        leaf_bottom + CPAD
    } else {
        band0 + lanes.len() as f64 * LANE_H
    };

    // The NVLink fabric.
    let mut fabric_y = None;
    if let Some(f) = &scene.fabric {
        let members: Vec<Rect> = f
            .members
            .iter()
            .filter_map(|m| rect_of.get(m).copied())
            .collect();
        if !members.is_empty() {
            let by = y + 6.0;
            let xs: Vec<f64> = members.iter().map(&stub_x).collect();
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let (lo, hi) = if hi - lo < 40.0 {
                (lo - 20.0, hi + 20.0)
            } else {
                (lo, hi)
            };
            let stubs = members
                .iter()
                .map(|r| vec![(stub_x(r), r.bottom()), (stub_x(r), by)])
                .collect();
            let label = Text::new(lo, by + 15.0, SMALL, &f.label);
            out.fabric = Some(PlacedFabric {
                bar: vec![(lo, by), (hi, by)],
                stubs,
                label,
            });
            fabric_y = Some(by);
            y = by + 24.0;
        }
    }

    // Hover band: fabric routes (PXN) and the lane routes that are not shown, lanes per group.
    let band1 = y + 14.0;
    let mut group_lanes: BTreeMap<String, Vec<Vec<(f64, f64)>>> = BTreeMap::new();
    let mut max_lanes = 0;
    for r in scene.routes.iter().filter(|r| !r.shown) {
        match r.kind {
            RouteKind::Lane => {
                let Some(iv) = interval(r, &attach) else {
                    continue;
                };
                let lanes = group_lanes.entry(r.group.clone()).or_default();
                let lane = take_lane(lanes, iv);
                max_lanes = max_lanes.max(lanes.len());
                if let Some((pts, label)) = lane_route(r, band1 + lane as f64 * LANE_H, &attach) {
                    out.routes.push(PlacedRoute {
                        id: r.id.clone(),
                        kind: r.kind,
                        points: pts,
                        label: Some(label),
                        shown: false,
                        group: r.group.clone(),
                    });
                }
            }
            RouteKind::Fabric => {
                let (Some(a), Some(via)) = (rect_of.get(&r.from), r.via.as_ref()) else {
                    continue;
                };
                let Some(p) = rect_of.get(via) else { continue };
                // Down to the bar, along it to the peer, up beside the peer (in the gap
                // between endpoints, never across its text), then the peer's own route.
                let mut pts = vec![(stub_x(a), a.bottom())];
                let side = p.right() + H_GAP / 2.0;
                let above = p.y - 8.0;
                if let Some(fy) = fabric_y {
                    pts.push((stub_x(a), fy));
                    pts.push((side, fy));
                } else {
                    pts.push((stub_x(a), a.bottom() + 8.0));
                    pts.push((side, a.bottom() + 8.0));
                }
                pts.push((side, above));
                match tree_points.get(&(via.clone(), r.to.clone())) {
                    Some(tp) => {
                        if let Some(&(x0, _)) = tp.first() {
                            pts.push((x0, above));
                        }
                        pts.extend(tp.iter().skip(1).copied());
                    }
                    None => {
                        if let Some(n) = rect_of.get(&r.to) {
                            pts.push((n.cx(), above));
                            pts.push((n.cx(), n.y));
                        }
                    }
                }
                out.routes.push(PlacedRoute {
                    id: r.id.clone(),
                    kind: r.kind,
                    points: pts,
                    label: None,
                    shown: false,
                    group: r.group.clone(),
                });
            }
            RouteKind::Tree => {}
        }
    }
    let mut y = if max_lanes == 0 {
        y + 6.0
    } else {
        band1 + max_lanes as f64 * LANE_H + 6.0
    };
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
            edges
                .iter()
                .filter_map(|e| e.label.as_ref())
                .map(|t| t.rect.right() + MARGIN),
        )
        .fold(0.0, f64::max);
    out.width = tree_right
        .max(text_right)
        .max(fabric_right)
        .max(label_right)
        .max(320.0)
        .ceil();
    out.height = (y + MARGIN).ceil();
    out.items = items;
    out.edges = edges;
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn leaf(id: &str, kind: Kind) -> Item {
        Item {
            id: id.into(),
            kind,
            lines: vec![
                format!("{id} name"),
                "H200 SXM 141GB".into(),
                "x16 32 GT/s".into(),
            ],
            edge_label: None,
            children: vec![],
        }
    }
    fn node(id: &str, kind: Kind, children: Vec<Item>) -> Item {
        Item {
            id: id.into(),
            kind,
            lines: vec![
                format!("{id} switch"),
                "Broadcom PEX890xx PCIe Gen 5 Switch".into(),
            ],
            edge_label: None,
            children,
        }
    }

    /// Two sockets of `per` switches, each with a GPU and a NIC.
    fn hgx(per: usize) -> Scene {
        let mut sockets = Vec::new();
        let mut routes = Vec::new();
        let mut gpus = Vec::new();
        for s in 0..2 {
            let mut hbs = Vec::new();
            for i in 0..per {
                let g = format!("g{s}{i}");
                let n = format!("n{s}{i}");
                let mut nl = leaf(&n, Kind::Nic);
                nl.edge_label = Some("x8 of x16".into());
                hbs.push(node(
                    &format!("hb{s}{i}"),
                    Kind::HostBridge,
                    vec![node(
                        &format!("sw{s}{i}"),
                        Kind::Switch,
                        vec![
                            node(
                                &format!("dg{s}{i}"),
                                Kind::Bridge,
                                vec![leaf(&g, Kind::Gpu)],
                            ),
                            node(&format!("dn{s}{i}"), Kind::Bridge, vec![nl]),
                        ],
                    )],
                ));
                routes.push(Route {
                    id: format!("{g}-{n}"),
                    from: g.clone(),
                    to: n.clone(),
                    via: None,
                    kind: RouteKind::Tree,
                    label: "PIX".into(),
                    shown: true,
                    group: g.clone(),
                });
                gpus.push((g, n));
            }
            sockets.push(node(&format!("s{s}"), Kind::Socket, hbs));
        }
        for (g, _) in &gpus {
            for (p, n) in &gpus {
                if p == g {
                    continue;
                }
                routes.push(Route {
                    id: format!("{g}-{n}-pxn"),
                    from: g.clone(),
                    to: n.clone(),
                    via: Some(p.clone()),
                    kind: RouteKind::Fabric,
                    label: "PXN".into(),
                    shown: false,
                    group: g.clone(),
                });
                routes.push(Route {
                    id: format!("{g}-{n}-no"),
                    from: g.clone(),
                    to: n.clone(),
                    via: None,
                    kind: RouteKind::Lane,
                    label: "no GDR: SYS".into(),
                    shown: false,
                    group: g.clone(),
                });
            }
        }
        // Two static why-not lines that cross each other.
        routes.push(Route {
            id: "why0".into(),
            from: gpus[0].0.clone(),
            to: gpus[per + 1].1.clone(),
            via: None,
            kind: RouteKind::Lane,
            label: "no GDR: SYS beyond PXB".into(),
            shown: true,
            group: gpus[0].0.clone(),
        });
        routes.push(Route {
            id: "why1".into(),
            from: gpus[1].0.clone(),
            to: gpus[per].1.clone(),
            via: None,
            kind: RouteKind::Lane,
            label: "no GDR: SYS beyond PXB".into(),
            shown: true,
            group: gpus[1].0.clone(),
        });
        Scene {
            header: vec!["title".into(), "GDR on 8 of 64 pairs".into()],
            sockets,
            routes,
            fabric: Some(Fabric {
                label: "NVLink (NVSwitch)".into(),
                members: gpus.iter().map(|(g, _)| g.clone()).collect(),
            }),
            footer: vec!["legend".into()],
        }
    }

    fn assert_clean(l: &Layout) {
        let canvas = Rect {
            x: 0.0,
            y: 0.0,
            w: l.width,
            h: l.height,
        };
        // No two boxes overlap; every box and text is on the canvas.
        for (i, a) in l.items.iter().enumerate() {
            assert!(
                canvas.contains(&a.rect),
                "{} off canvas: {:?}",
                a.id,
                a.rect
            );
            for b in &l.items[i + 1..] {
                assert!(!a.rect.overlaps(&b.rect), "{} overlaps {}", a.id, b.id);
            }
            // Text stays inside its box.
            for t in &a.lines {
                assert!(
                    a.rect.contains(&Rect {
                        h: t.rect.h - 3.0,
                        ..t.rect
                    }),
                    "{} text {:?} leaves its box",
                    a.id,
                    t.text
                );
            }
        }
        // Visible labels overlap neither each other nor boxes they do not belong to.
        let vis = l.visible_texts();
        for (i, a) in vis.iter().enumerate() {
            assert!(canvas.contains(&a.rect), "{:?} off canvas", a.text);
            for b in &vis[i + 1..] {
                assert!(
                    !a.rect.overlaps(&b.rect),
                    "{:?} overlaps {:?}",
                    a.text,
                    b.text
                );
            }
        }
        let box_texts: Vec<&Text> = l.items.iter().flat_map(|i| i.lines.iter()).collect();
        for t in vis.iter().filter(|t| !box_texts.contains(t)) {
            for it in &l.items {
                assert!(
                    !t.rect.overlaps(&it.rect),
                    "{:?} overlaps box {}",
                    t.text,
                    it.id
                );
            }
        }
        // Per hover group: its labels overlap neither each other nor what is always visible.
        let mut groups: BTreeMap<&str, Vec<&Text>> = BTreeMap::new();
        for r in l.routes.iter().filter(|r| !r.shown) {
            if let Some(t) = &r.label {
                groups.entry(&r.group).or_default().push(t);
            }
        }
        for ts in groups.values() {
            for (i, a) in ts.iter().enumerate() {
                for b in ts[i + 1..].iter().chain(vis.iter()) {
                    assert!(
                        !a.rect.overlaps(&b.rect),
                        "{:?} overlaps {:?}",
                        a.text,
                        b.text
                    );
                }
            }
        }
    }

    #[test]
    fn eight_by_eight_two_sockets_has_no_overlap() {
        let s = hgx(4);
        let l = layout(&s);
        assert_clean(&l);
        assert_eq!(l.items.iter().filter(|i| i.leaf).count(), 16);
        // Every endpoint is on one row.
        let ys: Vec<f64> = l
            .items
            .iter()
            .filter(|i| i.leaf)
            .map(|i| i.rect.y)
            .collect();
        assert!(ys.iter().all(|y| *y == ys[0]));
        // Sockets are containers that hold their subtree.
        let c0 = l.item("s0").unwrap().container.unwrap();
        assert!(c0.contains(&l.item("g00").unwrap().rect));
        assert!(!c0.contains(&l.item("g10").unwrap().rect));
        // One merged label per switch, tree routes go up to it and down.
        assert_eq!(l.ancestor_labels.len(), 8);
        let r = l.routes.iter().find(|r| r.id == "g00-n00").unwrap();
        let sw = l.item("sw00").unwrap().rect;
        let top = r.points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        assert!(top > sw.y && top <= sw.bottom() + 20.0, "{top} vs {sw:?}");
        // PXN routes run along the fabric bar.
        let f = l.fabric.as_ref().unwrap();
        let fy = f.bar[0].1;
        let pxn = l.routes.iter().find(|r| r.id == "g00-n01-pxn").unwrap();
        assert!(pxn.points.iter().any(|p| p.1 == fy));
        assert!(!pxn.shown);
    }

    #[test]
    fn one_gpu_alone() {
        let s = Scene {
            header: vec!["h200-vm".into()],
            sockets: vec![node(
                "s",
                Kind::Socket,
                vec![node("hb", Kind::HostBridge, vec![leaf("g", Kind::Gpu)])],
            )],
            routes: vec![],
            fabric: None,
            footer: vec!["1 gpu(s), 0 rdma device(s): no gpu-nic pair to draw".into()],
        };
        let l = layout(&s);
        assert_clean(&l);
        assert_eq!(l.items.len(), 3);
        assert!(l.width < 700.0, "{}", l.width);
    }

    #[test]
    fn deterministic_and_scaled() {
        let a = layout(&hgx(4));
        let b = layout(&hgx(4));
        assert_eq!(a, b);
        let small = layout(&hgx(2));
        assert!(small.width < a.width);
        assert_clean(&small);
        assert_clean(&layout(&hgx(3)));
    }

    /// A random tree: `shape` says how many children each level has.
    fn random_tree(
        prefix: &str,
        depth: usize,
        shape: &[usize],
        lines: usize,
        kinds: &mut Vec<String>,
    ) -> Item {
        let n = shape.get(depth).copied().unwrap_or(0);
        if n == 0 || depth >= shape.len() {
            kinds.push(prefix.to_string());
            let mut l = leaf(prefix, Kind::Gpu);
            l.lines.truncate(lines.max(1));
            l.edge_label = prefix
                .len()
                .is_multiple_of(3)
                .then(|| "x8/16 GT of x16/32".to_string());
            return l;
        }
        let children = (0..n)
            .map(|i| random_tree(&format!("{prefix}{i}"), depth + 1, shape, lines, kinds))
            .collect();
        let mut it = node(
            prefix,
            if depth == 0 {
                Kind::Socket
            } else {
                Kind::Bridge
            },
            children,
        );
        it.edge_label = depth.is_multiple_of(2).then(|| "x4 of x16".to_string());
        it
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Any forest and any routes between its leaves: no overlap among boxes and visible
        /// labels, and every hover group's labels clear of each other and of what is visible.
        #[test]
        fn any_tree_lays_out_cleanly(
            sockets in 1usize..4,
            shape in proptest::collection::vec(1usize..4, 1..4),
            lines in 1usize..4,
            pairs in proptest::collection::vec((0usize..64, 0usize..64, 0u8..3, proptest::bool::ANY), 0..24),
        ) {
            let mut leaves = Vec::new();
            let socks: Vec<Item> = (0..sockets)
                .map(|s| random_tree(&format!("s{s}-"), 0, &shape, lines, &mut leaves))
                .collect();
            let routes = pairs
                .iter()
                .enumerate()
                .filter_map(|(i, (a, b, k, shown))| {
                    let (a, b) = (&leaves[a % leaves.len()], &leaves[b % leaves.len()]);
                    (a != b).then(|| Route {
                        id: format!("r{i}"),
                        from: a.clone(),
                        to: b.clone(),
                        via: (*k == 1).then(|| leaves[0].clone()),
                        kind: [RouteKind::Tree, RouteKind::Fabric, RouteKind::Lane][*k as usize],
                        label: ["PIX", "PXN", "no GDR: SYS"][*k as usize].into(),
                        shown: *k == 0 || *shown,
                        group: a.clone(),
                    })
                })
                .collect();
            let s = Scene {
                header: vec!["h".into()],
                sockets: socks,
                routes,
                fabric: Some(Fabric { label: "NVLink".into(), members: leaves.clone() }),
                footer: vec!["f".into()],
            };
            let l = layout(&s);
            assert_clean(&l);
            proptest::prop_assert_eq!(l.items.iter().filter(|i| i.leaf).count(), leaves.len());
        }
    }

    #[test]
    fn cut_marks_what_it_drops() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(cut("", 0), "");
    }
}
