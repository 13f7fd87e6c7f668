//! `gdrdoctor topo --format svg|png`: the node's PCIe tree with its verdicts, drawn like
//! lstopo's I/O view (socket, host bridge, bridges and switches, GPUs, RDMA NICs, NVSwitches).
//!
//! Three steps: [`scene`] turns the node, its topology verdicts and the findings of the check
//! registry into a small [`Picture`] (labels, tones and hover texts per element); the pure
//! [`layout`](super::svg_layout::layout) places it; [`render`] writes SVG text. Nothing here
//! reads the system. The texts of the boxes, links and routes are made in [`labels`].
//!
//! What is drawn, and from what:
//! - every GPU, RDMA NIC and NVSwitch with the bridges above them (other PCI functions are
//!   counted, not drawn), grouped by host bridge and by NUMA node (the socket);
//! - a box's colour is the worst non-passing finding whose subject is that element (its PCI
//!   address, or its RDMA device name); hovering the box lists its findings. Findings about the
//!   whole node are listed in the header in their colour;
//! - a link's colour is that of the `pcie.link` finding of the device below it, and a link that
//!   runs below its capability (sysfs `current_link_*` < `max_link_*`) says so on the line;
//! - every GPU-NIC pair with GPUDirect RDMA on its own PCIe path is a solid line through the
//!   tree, labelled at the common ancestor with NCCL's path type; a pair NCCL serves through an
//!   NVLink peer (PXN) runs down to the NVLink bar, over to the peer and up its path (shown
//!   when the GPU is hovered); a GPU without any GDR gets a dashed line to its nearest NIC with
//!   the reason on hover, and hovering a GPU shows every other pair without GDR the same way.

mod labels;
mod scene;
#[cfg(test)]
mod tests;
mod write;

pub use scene::scene;
pub use write::render;

use super::svg_layout::{self, Scene};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use std::collections::BTreeMap;

/// The scene and what the serialiser needs besides geometry.
#[derive(Debug, Clone, Default)]
pub struct Picture {
    pub scene: Scene,
    /// Worst non-passing status per element id.
    pub tones: BTreeMap<String, Status>,
    /// Hover text per element id (boxes) and per route id.
    pub titles: BTreeMap<String, String>,
    /// Tone of the link above an element (its `pcie.link` finding), by the element's id.
    pub edge_tones: BTreeMap<String, Status>,
    /// Hover text of the link above an element.
    pub edge_titles: BTreeMap<String, String>,
    /// Tone per header line (findings about the whole node), by index.
    pub header_tones: Vec<Option<Status>>,
    /// Full text of header lines that were cut.
    pub header_titles: Vec<String>,
    /// A legend swatch per footer line, by index.
    pub footer_swatches: Vec<Option<Swatch>>,
    /// Route style per route id.
    pub route_styles: BTreeMap<String, RouteStyle>,
    /// Host name, for the document title.
    pub host: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteStyle {
    /// GDR on the GPU's own path.
    Gdr,
    /// GDR for one direction only, or undecided in one.
    Partial,
    /// GDR through an NVLink peer (PXN).
    Pxn,
    NoGdr,
    Undecided,
}

impl RouteStyle {
    fn class(self) -> &'static str {
        match self {
            RouteStyle::Gdr => "gdr",
            RouteStyle::Partial => "gdr partial",
            RouteStyle::Pxn => "pxn",
            RouteStyle::NoGdr => "nogdr",
            RouteStyle::Undecided => "undecided",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    Route(RouteStyle),
    Tone(Status),
}

const HEADER_CHARS: usize = 130;

/// The node's picture as SVG (interactive: hover a GPU for its PXN and no-GDR routes).
pub fn svg(node: &Node, findings: &[Finding]) -> String {
    let t = super::topo::build(node);
    let pic = scene(node, &t, findings);
    let l = svg_layout::layout(&pic.scene);
    render(&pic, &l, true)
}

/// The static SVG the PNG is rasterised from: without the routes revealed by hovering, and
/// without the room they take.
pub fn svg_static(node: &Node, findings: &[Finding]) -> String {
    let t = super::topo::build(node);
    let mut pic = scene(node, &t, findings);
    pic.scene.routes.retain(|r| r.shown);
    let l = svg_layout::layout(&pic.scene);
    render(&pic, &l, false)
}
