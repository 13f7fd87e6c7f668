//! The routes between the endpoints of a placed tree: tree routes through the PCI tree (their
//! labels merged per common ancestor), lane routes in the static band below the endpoint row,
//! the NVLink fabric, and the hover band (each GPU's hidden routes in lanes of its own).

use super::place::{merged_label, Tree};
use super::{
    cut, Layout, PlacedFabric, PlacedItem, PlacedRoute, Rect, Route, RouteKind, Scene, Text, CPAD,
    H_GAP, LANE_H, SMALL, SMALL_W,
};
use std::collections::BTreeMap;

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

/// Where a leaf's NVLink stub leaves it: near its right edge.
fn stub_x(r: &Rect) -> f64 {
    r.right() - 12.0
}

/// The placed boxes by id, and where each lane route leaves its endpoints.
pub(super) struct Geometry {
    rect_of: BTreeMap<String, Rect>,
    attach: BTreeMap<(String, String), f64>,
}

impl Geometry {
    /// Attachment points on the bottom of each leaf: the fabric stub at the right, the lane
    /// routes spread over the rest, ordered by where their other end is.
    pub(super) fn new(scene: &Scene, items: &[PlacedItem]) -> Geometry {
        let rect_of: BTreeMap<String, Rect> =
            items.iter().map(|i| (i.id.clone(), i.rect)).collect();
        let mut attach: BTreeMap<(String, String), f64> = BTreeMap::new();
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
        Geometry { rect_of, attach }
    }

    /// Tree routes: up from the source to the common ancestor, down to the target, shifted
    /// beside the tree's edges. Returns each route's points by (from, to).
    pub(super) fn tree_routes(
        &self,
        scene: &Scene,
        tree: &Tree,
        route_anc: &BTreeMap<String, String>,
        out: &mut Layout,
    ) -> BTreeMap<(String, String), Points> {
        let edge_pts: BTreeMap<(String, String), Vec<(f64, f64)>> = tree
            .edges
            .iter()
            .map(|e| ((e.parent.clone(), e.child.clone()), e.points.clone()))
            .collect();
        let mut offsets: BTreeMap<String, usize> = BTreeMap::new();
        let mut tree_points: BTreeMap<(String, String), Points> = BTreeMap::new();
        for r in scene.routes.iter().filter(|r| r.kind == RouteKind::Tree) {
            let (ca, cb) = (tree.chain(&r.from), tree.chain(&r.to));
            let Some(anc) = route_anc.get(&r.id).cloned() else {
                continue;
            };
            let k = offsets.entry(anc.clone()).or_insert(0);
            let d = 4.0 + 3.0 * (*k % 4) as f64;
            *k += 1;
            let mut pts: Vec<(f64, f64)> = Vec::new();
            let up: Vec<&String> = ca.iter().take_while(|x| **x != anc).collect();
            for c in &up {
                if let Some(p) = tree.parent.get(*c) {
                    if let Some(e) = edge_pts.get(&(p.clone(), (*c).clone())) {
                        pts.extend(e.iter().rev().map(|&(x, y)| (x + d, y + d)));
                    }
                }
            }
            let down: Vec<&String> = cb.iter().take_while(|x| **x != anc).collect();
            for c in down.iter().rev() {
                if let Some(p) = tree.parent.get(*c) {
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
        tree_points
    }

    /// The merged label of the tree routes that meet at each ancestor, right below its box.
    pub(super) fn ancestor_labels(&self, labels: &BTreeMap<String, Vec<String>>, out: &mut Layout) {
        for (anc, labels) in labels {
            let Some(rect) = self.rect_of.get(anc) else {
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
    }

    /// Where a lane route leaves its two ends.
    fn ends(&self, r: &Route, a: &Rect, b: &Rect) -> (f64, f64) {
        let xa = self
            .attach
            .get(&(r.from.clone(), r.id.clone()))
            .copied()
            .unwrap_or(a.cx());
        let xb = self
            .attach
            .get(&(r.to.clone(), r.id.clone()))
            .copied()
            .unwrap_or(b.cx());
        (xa, xb)
    }

    /// A lane route at `lane_y`: down from one end, along the lane, up to the other; its label.
    fn lane_route(&self, r: &Route, lane_y: f64) -> Option<(Points, Text)> {
        let (Some(a), Some(b)) = (self.rect_of.get(&r.from), self.rect_of.get(&r.to)) else {
            return None;
        };
        let (xa, xb) = self.ends(r, a, b);
        let pts = vec![
            (xa, a.bottom()),
            (xa, lane_y),
            (xb, lane_y),
            (xb, b.bottom()),
        ];
        let label = Text::centred((xa + xb) / 2.0, lane_y - 5.0, SMALL, &cut(&r.label, 30));
        Some((pts, label))
    }

    /// The horizontal extent of a lane route with its label.
    fn interval(&self, r: &Route) -> Option<(f64, f64)> {
        let (a, b) = (self.rect_of.get(&r.from)?, self.rect_of.get(&r.to)?);
        let (xa, xb) = self.ends(r, a, b);
        let lw = cut(&r.label, 30).chars().count() as f64 * SMALL_W;
        let mid = (xa + xb) / 2.0;
        Some((
            xa.min(xb).min(mid - lw / 2.0),
            xa.max(xb).max(mid + lw / 2.0),
        ))
    }

    /// The shown lane routes, shortest first, each in the first lane it fits below the
    /// endpoint row. Returns the bottom of the band.
    pub(super) fn static_lanes(&self, scene: &Scene, leaf_bottom: f64, out: &mut Layout) -> f64 {
        let mut by_len: Vec<&Route> = scene
            .routes
            .iter()
            .filter(|r| r.kind == RouteKind::Lane && r.shown)
            .collect();
        by_len.sort_by(|a, b| {
            let la = self.interval(a).map(|(x, y)| y - x).unwrap_or(0.0);
            let lb = self.interval(b).map(|(x, y)| y - x).unwrap_or(0.0);
            la.partial_cmp(&lb)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.id.cmp(&b.id))
        });
        let mut lanes: Vec<Vec<(f64, f64)>> = Vec::new();
        let band0 = leaf_bottom + CPAD + 16.0;
        for r in by_len {
            let Some(iv) = self.interval(r) else {
                continue;
            };
            let lane = take_lane(&mut lanes, iv);
            if let Some((pts, label)) = self.lane_route(r, band0 + lane as f64 * LANE_H) {
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
        if lanes.is_empty() {
            leaf_bottom + CPAD
        } else {
            band0 + lanes.len() as f64 * LANE_H
        }
    }

    /// The NVLink bar below `y`, with a stub up to each member. Returns the new bottom and
    /// the bar's height (`None` when nothing was drawn).
    pub(super) fn fabric(&self, scene: &Scene, y: f64, out: &mut Layout) -> (f64, Option<f64>) {
        let Some(f) = &scene.fabric else {
            return (y, None);
        };
        let members: Vec<Rect> = f
            .members
            .iter()
            .filter_map(|m| self.rect_of.get(m).copied())
            .collect();
        if members.is_empty() {
            return (y, None);
        }
        let by = y + 6.0;
        let xs: Vec<f64> = members.iter().map(stub_x).collect();
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
        (by + 24.0, Some(by))
    }

    /// The hover band below `y`: fabric routes (PXN) and the lane routes that are not shown,
    /// lanes per group. Returns the new bottom.
    pub(super) fn hover_band(
        &self,
        scene: &Scene,
        tree_points: &BTreeMap<(String, String), Points>,
        fabric_y: Option<f64>,
        y: f64,
        out: &mut Layout,
    ) -> f64 {
        let band1 = y + 14.0;
        let mut group_lanes: BTreeMap<String, Vec<Vec<(f64, f64)>>> = BTreeMap::new();
        let mut max_lanes = 0;
        for r in scene.routes.iter().filter(|r| !r.shown) {
            match r.kind {
                RouteKind::Lane => {
                    let Some(iv) = self.interval(r) else {
                        continue;
                    };
                    let lanes = group_lanes.entry(r.group.clone()).or_default();
                    let lane = take_lane(lanes, iv);
                    max_lanes = max_lanes.max(lanes.len());
                    if let Some((pts, label)) = self.lane_route(r, band1 + lane as f64 * LANE_H) {
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
                    if let Some(pts) = self.fabric_route(r, tree_points, fabric_y) {
                        out.routes.push(PlacedRoute {
                            id: r.id.clone(),
                            kind: r.kind,
                            points: pts,
                            label: None,
                            shown: false,
                            group: r.group.clone(),
                        });
                    }
                }
                RouteKind::Tree => {}
            }
        }
        if max_lanes == 0 {
            y + 6.0
        } else {
            band1 + max_lanes as f64 * LANE_H + 6.0
        }
    }

    /// A PXN route: down to the bar, along it to the peer, up beside the peer (in the gap
    /// between endpoints, never across its text), then the peer's own route.
    fn fabric_route(
        &self,
        r: &Route,
        tree_points: &BTreeMap<(String, String), Points>,
        fabric_y: Option<f64>,
    ) -> Option<Points> {
        let (Some(a), Some(via)) = (self.rect_of.get(&r.from), r.via.as_ref()) else {
            return None;
        };
        let p = self.rect_of.get(via)?;
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
                if let Some(n) = self.rect_of.get(&r.to) {
                    pts.push((n.cx(), above));
                    pts.push((n.cx(), n.y));
                }
            }
        }
        Some(pts)
    }
}
