#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use std::collections::BTreeMap;

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
