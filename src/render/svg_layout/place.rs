//! The tree of boxes: box sizes, subtree widths, one row per depth with every endpoint on the
//! row at the bottom, the edges between parent and child, and the room kept right of an
//! ancestor for the label of the routes that meet there.

use super::{
    cut, Item, Kind, PlacedEdge, PlacedItem, Rect, RouteKind, Scene, Text, CHAR_W, CPAD, FONT,
    H_GAP, LEAF_W, LINE_H, MARGIN, MAX_W, MIN_W, PAD, SMALL, SMALL_W, SOCKET_GAP, V_GAP,
};
use std::collections::BTreeMap;

/// Where the tree routes meet: the common ancestor of each, the labels per ancestor, and the
/// room right of each ancestor box for its merged label.
pub(super) struct Ancestors {
    pub(super) labels: BTreeMap<String, Vec<String>>,
    pub(super) route_anc: BTreeMap<String, String>,
    pub(super) room: BTreeMap<String, f64>,
}

impl Ancestors {
    pub(super) fn of(scene: &Scene) -> Ancestors {
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
        let room: BTreeMap<String, f64> = anc_text
            .iter()
            .map(|(a, l)| {
                (
                    a.clone(),
                    merged_label(l).chars().count() as f64 * SMALL_W + 8.0,
                )
            })
            .collect();
        Ancestors {
            labels: anc_text,
            route_anc,
            room,
        }
    }
}

/// The placed tree: its boxes in document order (sockets first, then by depth), the edges,
/// every box's parent, the bottom of the endpoint row and the tree's right edge.
pub(super) struct Tree {
    pub(super) items: Vec<PlacedItem>,
    pub(super) edges: Vec<PlacedEdge>,
    pub(super) parent: BTreeMap<String, String>,
    pub(super) leaf_bottom: f64,
    pub(super) right: f64,
}

impl Tree {
    /// Place the sockets side by side from `y` down; `extra`: room right of an ancestor.
    pub(super) fn place(scene: &Scene, extra: &BTreeMap<String, f64>, y: f64) -> Tree {
        // Rows: depth 0 is the socket label box.
        let mut rows = Vec::new();
        let mut leaf_h: f64 = 0.0;
        let mut widths_by = BTreeMap::new();
        for s in &scene.sockets {
            depth_heights(s, 0, &mut rows, &mut leaf_h);
            widths(s, extra, &mut widths_by);
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
            extra,
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
        Tree {
            items,
            edges,
            parent,
            leaf_bottom,
            right: tree_right,
        }
    }

    /// The ids from `id` up to its socket, in the placed tree.
    pub(super) fn chain(&self, id: &str) -> Vec<String> {
        let mut v = vec![id.to_string()];
        let mut cur = id.to_string();
        while let Some(p) = self.parent.get(&cur) {
            v.push(p.clone());
            cur = p.clone();
        }
        v
    }
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
pub(super) fn merged_label(labels: &[String]) -> String {
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
