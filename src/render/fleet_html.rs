//! `gdrdoctor fleet --format html`: one self-contained HTML page for many nodes: a heat map of
//! nodes x checks (status colours, sortable, filter by check or node), the drift table, and per
//! node its findings, a link to its report and its topology picture inline.
//!
//! A pure renderer: [`FleetPage`] in, HTML text out. The page has no external resource (inline
//! CSS and JS, no font, no CDN), so it works from `file://`, in a CI artifact and offline. The
//! `fleet` command fills [`FleetPage`] from its roll-up; the mapping is documented on each field.
//!
//! The page keeps working without JavaScript: the heat map, the drift table and the node
//! sections are plain HTML; the script only sorts and filters.
//!
//! The markup comes from maud templates: everything a report holds (node names, messages,
//! values) is escaped by the engine, text and attributes alike, with no escaper called by hand.

use gdrdoctor_checks::report::Status;
use maud::{html, Markup, PreEscaped, DOCTYPE};

/// Everything the fleet page shows, already decided by the caller.
///
/// From `gdrdoctor.fleet/v1` (`fleet` command): `nodes` from `Rollup::nodes` (one per readable
/// report, in the roll-up's order), `checks` from `Rollup::checks` (ids in registry order),
/// `cells[c][n]` the worst status of check `c` on node `n` (from the node's report; `None` when
/// its report has no finding of that check), `drift` from `Rollup::drift`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetPage {
    /// Page title and first heading, e.g. `gdrdoctor fleet: 128 nodes`.
    pub title: String,
    /// Lines under the title: the roll-up's summary (`3 failed, 1 incomplete`, the report time
    /// range, unreadable inputs), shown as given.
    pub summary: Vec<String>,
    pub nodes: Vec<FleetNode>,
    pub checks: Vec<FleetCheck>,
    /// Worst status per check and node: `cells[check][node]`. Missing rows or columns read as
    /// `None` (the check is not in that node's report), shown as an empty cell.
    pub cells: Vec<Vec<Option<Status>>>,
    /// Drift, grouped by cause ([`DriftGroup`]).
    pub drift: Vec<DriftGroup>,
}

/// The fields in which the same nodes differ from the majority: most often one cause (a port
/// down changes its state, its rate and every GPU's GDR pairs). A split (a field with no
/// majority) is a group of its own, with no nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriftGroup {
    /// The nodes that differ, in every row of the group; empty for a split.
    pub nodes: Vec<String>,
    pub rows: Vec<DriftRow>,
}

/// One node (one report).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetNode {
    /// How the fleet names the node (`Rollup::nodes[].name`: the hostname, or the file).
    pub name: String,
    /// The node report's exit code (0 ok, 1 failed, 3 incomplete, 2 could not run).
    pub exit_code: i32,
    /// Findings per status on the node.
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: usize,
    /// Its non-passing findings (warn, fail, error), as in its report.
    pub findings: Vec<FleetFinding>,
    /// A link to the node's own report (relative to where the page is written, e.g.
    /// `reports/node-a.json`), or `None`.
    pub report_href: Option<String>,
    /// Its topology picture (`gdrdoctor topo --format svg` text), or `None`. It is never put
    /// in the page as markup: it is embedded as an image (`<img>` with a `data:` URL of its
    /// bytes), in which browsers run no script and load nothing. Each is ~5-100 KB: a caller
    /// with hundreds of nodes may embed only the nodes with findings.
    pub topo_svg: Option<String>,
}

/// One finding of a node, as the report has it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetFinding {
    pub id: String,
    pub status: Status,
    pub subject: String,
    pub message: String,
    pub remediation: Option<String>,
}

/// One check (a column of the heat map).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetCheck {
    /// The check id (`pcie.link`).
    pub id: String,
    /// Its one-line title from `gdrdoctor list`, shown on hover; empty when unknown.
    pub title: String,
}

/// One drift field: a value most nodes share and the nodes that differ.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriftRow {
    /// The report field (`nics[mlx5_3].fw_ver`, `driver.nvidia_version`).
    pub field: String,
    /// The majority value, `None` for a split (no value held by more than half).
    pub majority: Option<String>,
    /// Nodes holding the majority value, and nodes the field applies to.
    pub majority_count: usize,
    pub nodes: usize,
    /// The other nodes and their values, most common value first.
    pub odd: Vec<(String, String)>,
}

/// Sort rank of a status: worst first when sorting descending.
fn rank(s: Option<Status>) -> u8 {
    match s {
        Some(Status::Fail) => 5,
        Some(Status::Error) => 4,
        Some(Status::Warn) => 3,
        Some(Status::Skip) => 2,
        Some(Status::Pass) => 1,
        None => 0,
    }
}

fn letter(s: Option<Status>) -> &'static str {
    match s {
        Some(Status::Fail) => "F",
        Some(Status::Error) => "E",
        Some(Status::Warn) => "W",
        Some(Status::Skip) => "s",
        Some(Status::Pass) => "",
        None => "",
    }
}

fn status_class(s: Option<Status>) -> &'static str {
    match s {
        Some(Status::Fail) => "st-fail",
        Some(Status::Error) => "st-error",
        Some(Status::Warn) => "st-warn",
        Some(Status::Skip) => "st-skip",
        Some(Status::Pass) => "st-pass",
        None => "st-none",
    }
}

const CSS: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:16px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px}
.fl-summary{margin:0 0 12px;color:#3b4456}
.fl-controls{display:flex;gap:16px;align-items:center;flex-wrap:wrap;margin:8px 0}
.fl-controls input[type=search]{font:inherit;padding:3px 6px;width:16em}
.fl-legend span{display:inline-block;padding:0 6px;margin-right:4px;border-radius:3px}
.fl-wrap{overflow:auto;max-width:100%;border:1px solid #d5dae3}
table.fl-heat{border-collapse:separate;border-spacing:0}
table.fl-heat th,table.fl-heat td{border-bottom:1px solid #eef0f4;padding:0}
table.fl-heat thead th{position:sticky;top:0;background:#f6f7fa;z-index:1;cursor:pointer;user-select:none}
table.fl-heat th.fl-check{height:150px;width:22px;vertical-align:bottom}
table.fl-heat th.fl-check div{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;padding:4px 2px;font-weight:normal;font-size:12px}
table.fl-heat th.fl-node,table.fl-heat td.fl-node{position:sticky;left:0;background:#fff;text-align:left;padding:0 8px;white-space:nowrap;z-index:2}
table.fl-heat thead th.fl-node{z-index:3;background:#f6f7fa}
table.fl-heat td.fl-num,table.fl-heat th.fl-num{padding:0 6px;text-align:right;font-variant-numeric:tabular-nums}
td.fl-cell{width:22px;height:20px;text-align:center;font-size:11px;font-weight:bold}
td.fl-total{font-weight:normal;color:#3b4456}
table.fl-heat tfoot th,table.fl-heat tfoot td{border-top:2px solid #d5dae3;background:#f6f7fa}
td.fl-cell a{display:block;color:inherit;text-decoration:none;line-height:20px}
th[aria-sort=ascending]::after{content:" \25B2";font-size:10px}th[aria-sort=descending]::after{content:" \25BC";font-size:10px}
.st-pass{background:#cdeccf;color:#1d5e24}.st-warn{background:#ffd98a;color:#6b4300}.st-fail{background:#f28b82;color:#5c0a05}
.st-error{background:#c9a6ef;color:#3b0f6b}.st-skip{background:#e4e7ec;color:#525b6b}.st-none{background:#fff}
.fl-exit-0{color:#1d5e24}.fl-exit-1{color:#b42318;font-weight:bold}.fl-exit-3{color:#6b2fa3;font-weight:bold}
table.fl-drift{border-collapse:collapse}table.fl-drift th,table.fl-drift td{border:1px solid #d5dae3;padding:3px 8px;text-align:left;vertical-align:top}
ul.fl-fields{margin:4px 0;padding-left:18px}ul.fl-fields li{margin:2px 0}
table.fl-drift td,.fl-findings li,.fl-summary{overflow-wrap:anywhere}
table.fl-drift code,.fl-findings code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
details.fl-node{border:1px solid #d5dae3;border-radius:4px;margin:6px 0;padding:4px 10px}
details.fl-node>summary{cursor:pointer;font-weight:bold}
details.fl-node:target{outline:3px solid #0e7490}
.fl-findings{margin:6px 0;padding-left:18px}.fl-findings li{margin:3px 0}
.fl-findings .fl-fix{color:#3b4456;margin-left:1em}
.fl-topo{overflow:auto;max-width:100%;border-top:1px solid #eef0f4;margin-top:6px;padding-top:6px}
img.fl-picture{display:block;width:100%;height:auto}
.fl-hidden{display:none}
"#;

const JS: &str = r#"
(function(){
  var table=document.getElementById('fl-heat');
  if(!table)return;
  var tbody=table.tBodies[0];
  var heads=table.tHead.rows[0].cells;
  function key(row,col,type){
    var c=row.cells[col];
    var v=c.getAttribute('data-v');
    if(type==='text')return v===null?c.textContent:v;
    return Number(v===null?c.textContent:v);
  }
  function sortBy(col){
    var th=heads[col];
    var type=th.getAttribute('data-type')||'num';
    var cur=th.getAttribute('aria-sort');
    var dir=cur==='descending'?'ascending':(cur==='ascending'?'descending':(type==='text'?'ascending':'descending'));
    for(var i=0;i<heads.length;i++)heads[i].removeAttribute('aria-sort');
    th.setAttribute('aria-sort',dir);
    var rows=Array.prototype.slice.call(tbody.rows);
    rows.sort(function(a,b){
      var x=key(a,col,type),y=key(b,col,type),r;
      if(type==='text')r=x<y?-1:(x>y?1:0);else r=x-y;
      if(r===0)r=Number(a.getAttribute('data-i'))-Number(b.getAttribute('data-i'));
      else if(dir==='descending')r=-r;
      return r;
    });
    rows.forEach(function(r){tbody.appendChild(r);});
  }
  for(var i=0;i<heads.length;i++){
    (function(i){
      heads[i].addEventListener('click',function(){sortBy(i);});
      heads[i].addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();sortBy(i);}});
    })(i);
  }
  var fc=document.getElementById('fl-filter-check');
  var fn=document.getElementById('fl-filter-node');
  var bad=document.getElementById('fl-only-bad');
  function apply(){
    var qc=(fc.value||'').toLowerCase().trim(),qn=(fn.value||'').toLowerCase().trim();
    var cols=[];
    for(var i=0;i<heads.length;i++){
      var id=heads[i].getAttribute('data-check');
      if(id===null)continue;
      var show=qc===''||id.toLowerCase().indexOf(qc)>=0;
      if(show&&bad.checked)show=heads[i].getAttribute('data-bad')==='1';
      cols.push([i,show]);
    }
    cols.forEach(function(p){
      heads[p[0]].classList.toggle('fl-hidden',!p[1]);
      for(var r=0;r<tbody.rows.length;r++)tbody.rows[r].cells[p[0]].classList.toggle('fl-hidden',!p[1]);
      if(table.tFoot)for(var f=0;f<table.tFoot.rows.length;f++){var c=table.tFoot.rows[f].cells[p[0]];if(c)c.classList.toggle('fl-hidden',!p[1]);}
    });
    for(var r=0;r<tbody.rows.length;r++){
      var row=tbody.rows[r];
      var name=row.getAttribute('data-node').toLowerCase();
      var show=qn===''||name.indexOf(qn)>=0;
      if(show&&bad.checked)show=row.getAttribute('data-bad')==='1';
      row.classList.toggle('fl-hidden',!show);
    }
    var secs=document.querySelectorAll('details.fl-node');
    for(var s=0;s<secs.length;s++){
      var n=secs[s].getAttribute('data-node').toLowerCase();
      secs[s].classList.toggle('fl-hidden',!(qn===''||n.indexOf(qn)>=0));
    }
    var shown=tbody.querySelectorAll('tr:not(.fl-hidden)').length;
    document.getElementById('fl-count').textContent=shown+' of '+tbody.rows.length+' nodes';
  }
  fc.addEventListener('input',apply);fn.addEventListener('input',apply);bad.addEventListener('change',apply);
  apply();
})();
"#;

/// The page's Content-Security-Policy: nothing is loaded from anywhere (`default-src 'none'`),
/// images only from `data:` URLs (the topology pictures), styles inline, and the one script
/// allowed is the page's own, by its sha256: an inline event handler, a `javascript:` URL or a
/// script element that reached the page some other way does not run.
pub fn content_security_policy() -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(JS));
    format!(
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{hash}'; \
base-uri 'none'; form-action 'none'"
    )
}

/// A picture as an `<img>` source: `data:image/svg+xml;base64,...` of its bytes.
fn svg_data_url(svg: &str) -> String {
    use base64::Engine as _;
    format!(
        "data:image/svg+xml;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(svg.as_bytes())
    )
}

/// The page. Written with maud: every value from a report is escaped by the template engine
/// (text and attributes alike); the only markup not escaped is the page's own CSS and script.
pub fn render(p: &FleetPage) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(content_security_policy());
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content="gdrdoctor fleet";
                title { (p.title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                h1 { (p.title) }
                @for s in &p.summary {
                    p.fl-summary { (s) }
                }
                (heat_map(p))
                (drift_table(p))
                (node_sections(p))
                script { (PreEscaped(JS)) }
            }
        }
    }
    .into_string()
}

/// The worst status of check `c` on node `n` (`None`: not in its report).
fn cell(p: &FleetPage, c: usize, n: usize) -> Option<Status> {
    p.cells.get(c).and_then(|r| r.get(n)).copied().flatten()
}

/// The heat map: a row per node, a column per check, with the filters above it and the count
/// of nodes not passing below.
fn heat_map(p: &FleetPage) -> Markup {
    let n = p.nodes.len();
    html! {
        h2 #heat { "Checks on every node" }
        div.fl-controls {
            label { "check " input type="search" id="fl-filter-check" placeholder="e.g. pcie or rdma.ports"; }
            label { "node " input type="search" id="fl-filter-node" placeholder="part of a node name"; }
            label { input type="checkbox" id="fl-only-bad"; " only what does not pass" }
            " "
            span #fl-count { (n) " of " (n) " nodes" }
        }
        p.fl-legend {
            span.st-fail { "F fail" }
            span.st-error { "E error" }
            span.st-warn { "W warn" }
            span.st-skip { "s skip" }
            span.st-pass { "pass" }
            span.st-none style="border:1px solid #d5dae3" { "not in the report" }
            " Click a column to sort by it; a cell opens the node's findings."
        }
        div.fl-wrap {
            table.fl-heat #fl-heat {
                thead {
                    tr {
                        th.fl-node data-type="text" tabindex="0" scope="col" { "node" }
                        th.fl-num tabindex="0" scope="col" title="the node report's exit code" { "exit" }
                        th.fl-num tabindex="0" scope="col" { "fail" }
                        th.fl-num tabindex="0" scope="col" { "error" }
                        th.fl-num tabindex="0" scope="col" { "warn" }
                        @for (ci, c) in p.checks.iter().enumerate() {
                            @let bad = (0..n).any(|ni| rank(cell(p, ci, ni)) >= 3);
                            @let title = if c.title.is_empty() { c.id.clone() } else { format!("{}: {}", c.id, c.title) };
                            th.fl-check data-check=(c.id) data-bad=(u8::from(bad)) tabindex="0" scope="col" title=(title) {
                                div { (c.id) }
                            }
                        }
                    }
                }
                tbody {
                    @for (ni, node) in p.nodes.iter().enumerate() {
                        @let bad = node.fail + node.warn + node.error > 0 || node.exit_code != 0;
                        @let href = format!("#n{ni}");
                        tr data-i=(ni) data-node=(node.name) data-bad=(u8::from(bad)) {
                            td.fl-node { a href=(href) { (node.name) } }
                            td class={ "fl-num fl-exit-" (node.exit_code) } { (node.exit_code) }
                            td.fl-num { (node.fail) }
                            td.fl-num { (node.error) }
                            td.fl-num { (node.warn) }
                            @for (ci, c) in p.checks.iter().enumerate() {
                                @let s = cell(p, ci, ni);
                                td class={ "fl-cell " (status_class(s)) } data-v=(rank(s))
                                    title={ (c.id) " on " (node.name) ": " (s.map(|s| s.as_str()).unwrap_or("not in the report")) } {
                                    a href=(href) { (letter(s)) }
                                }
                            }
                        }
                    }
                }
                tfoot {
                    tr {
                        th.fl-node scope="row" title="nodes where the check warns, fails or errors" { "not passing" }
                        td {} td {} td {} td {}
                        @for ci in 0..p.checks.len() {
                            @let bad = (0..n).filter(|ni| rank(cell(p, ci, *ni)) >= 3).count();
                            td class="fl-cell fl-total" {
                                @if bad > 0 { (bad) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The area a field belongs to, for a group's summary: `nics[mlx5_3].ports[1].rate` ->
/// `nics[mlx5_3]`, `gdr[0000:18:00.0]` -> `gdr`, `driver.peermem` -> `driver`.
fn area(field: &str) -> &str {
    let end = field.find(['.', '[']).unwrap_or(field.len());
    match field[end..].strip_prefix('[') {
        // A list keyed by something other than a PCI address: its element is the area.
        Some(rest) if !field.starts_with("gdr[") && !field.starts_with("pci[") => {
            let close = rest.find(']').map(|c| end + 2 + c).unwrap_or(field.len());
            &field[..close]
        }
        _ => &field[..end],
    }
}

/// `nics[mlx5_3] (3), gdr (8)`: the areas of a group's fields, with their counts, in order.
fn areas(rows: &[DriftRow]) -> Markup {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        let a = area(&r.field);
        match out.iter_mut().find(|(x, _)| *x == a) {
            Some((_, n)) => *n += 1,
            None => out.push((a, 1)),
        }
    }
    html! {
        @for (i, (a, n)) in out.iter().enumerate() {
            @if i > 0 { ", " }
            code { (a) }
            @if *n > 1 { " (" (n) ")" }
        }
    }
}

/// A link to a node's section, or its name when it is not a node of the page.
fn node_link(p: &FleetPage, node: &str) -> Markup {
    html! {
        @match p.nodes.iter().position(|n| n.name == node) {
            Some(i) => a href={ "#n" (i) } { (node) },
            None => (node),
        }
    }
}

/// Drift from the majority: a row per cause (the nodes that differ, and every field in which
/// they do), not a row per field.
fn drift_table(p: &FleetPage) -> Markup {
    let fields: usize = p.drift.iter().map(|g| g.rows.len()).sum();
    html! {
        h2 #drift { "Drift from the majority" }
        @if p.drift.is_empty() {
            p { "No drift: every field compared has the same value on every node." }
        } @else {
            p.fl-summary {
                (fields) " field(s) differ, in " (p.drift.len())
                " group(s): the fields in which the same nodes differ are one group (most often one cause)."
            }
            table.fl-drift #fl-drift {
                thead { tr { th { "nodes that differ" } th { "what differs from the majority" } } }
                tbody {
                    @for g in &p.drift {
                        tr.fl-cause data-fields=(g.rows.len()) {
                            td {
                                @if g.nodes.is_empty() {
                                    "no majority"
                                }
                                @for (i, node) in g.nodes.iter().enumerate() {
                                    @if i > 0 { br; }
                                    (node_link(p, node))
                                }
                            }
                            td {
                                details open[g.rows.len() <= 3] {
                                    summary { (g.rows.len()) " field(s): " (areas(&g.rows)) }
                                    ul.fl-fields {
                                        @for d in &g.rows {
                                            li data-field=(d.field) {
                                                code { (d.field) } ": "
                                                @match &d.majority {
                                                    Some(v) => { code { (v) } " (" (d.majority_count) " of " (d.nodes) ")" },
                                                    None => { "no majority (" (d.nodes) " nodes)" },
                                                }
                                                " " (PreEscaped("&rarr;")) " "
                                                @if g.nodes.is_empty() {
                                                    @for (i, (node, v)) in d.odd.iter().enumerate() {
                                                        @if i > 0 { ", " }
                                                        (node_link(p, node)) ": " code { (v) }
                                                    }
                                                } @else if let Some((_, v)) = d.odd.first() {
                                                    // Every node of the group holds the same value.
                                                    code { (v) }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A section per node: its findings, its report, its topology picture.
fn node_sections(p: &FleetPage) -> Markup {
    html! {
        h2 #nodes { "Nodes" }
        @for (ni, n) in p.nodes.iter().enumerate() {
            details.fl-node id={ "n" (ni) } data-node=(n.name) open[n.exit_code != 0] {
                summary {
                    (n.name) " "
                    span class={ "fl-exit-" (n.exit_code) } { "exit " (n.exit_code) }
                    ": " (n.fail) " fail, " (n.error) " error, " (n.warn) " warn, " (n.pass) " pass, " (n.skip) " skip"
                }
                @if let Some(h) = &n.report_href {
                    p { a.fl-report href=(h) { "its report" } }
                }
                @if n.findings.is_empty() {
                    p { "Nothing fails, warns or errors on this node." }
                } @else {
                    ul.fl-findings {
                        @for f in &n.findings {
                            li {
                                span class=(status_class(Some(f.status))) { (PreEscaped("&nbsp;")) (f.status) (PreEscaped("&nbsp;")) }
                                " " code { (f.id) } " " code { (f.subject) } ": " (f.message)
                                @if let Some(r) = &f.remediation {
                                    div.fl-fix { "fix: " (r) }
                                }
                            }
                        }
                    }
                }
                @if let Some(svg) = &n.topo_svg {
                    // A file from --svg-dir is foreign markup: never inlined. As an image, its
                    // bytes can neither run a script nor break out of their element.
                    div.fl-topo {
                        img.fl-picture alt={ "topology of " (n.name) } src=(svg_data_url(svg));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> FleetPage {
        FleetPage {
            title: "gdrdoctor fleet: 2 nodes".into(),
            summary: vec!["1 failed".into()],
            nodes: vec![
                FleetNode {
                    name: "a<b>".into(),
                    exit_code: 1,
                    fail: 1,
                    findings: vec![FleetFinding {
                        id: "pcie.link".into(),
                        status: Status::Fail,
                        subject: "0000:18:00.0".into(),
                        message: "x8 of x16 & slow".into(),
                        remediation: Some("reseat".into()),
                    }],
                    ..Default::default()
                },
                FleetNode {
                    name: "b".into(),
                    ..Default::default()
                },
            ],
            checks: vec![FleetCheck {
                id: "pcie.link".into(),
                title: "links".into(),
            }],
            cells: vec![vec![Some(Status::Fail)]],
            drift: vec![DriftGroup {
                nodes: vec!["b".into()],
                rows: vec![DriftRow {
                    field: "driver.nvidia_version".into(),
                    majority: Some("580".into()),
                    majority_count: 1,
                    nodes: 2,
                    odd: vec![("b".into(), "535".into())],
                }],
            }],
        }
    }

    #[test]
    fn escapes_and_links() {
        let h = render(&page());
        assert!(h.contains("a&lt;b&gt;"), "node names are escaped");
        assert!(!h.contains("a<b>"));
        assert!(h.contains("x8 of x16 &amp; slow"));
        // The second node's cell is missing from `cells`: an empty cell, no panic.
        assert!(h.contains("st-none"));
        assert!(h.contains("<td><a href=\"#n1\">b</a></td>"));
        assert!(h.contains(
            "<code>driver.nvidia_version</code>: <code>580</code> (1 of 2) &rarr; <code>535</code>"
        ));
        assert!(
            !h.contains("http://") && !h.contains("https://"),
            "no network"
        );
    }

    /// A hostile node name, check id, value or message stays text in every place it is put:
    /// element text, attributes (`data-node`, `title`, `alt`), the drift list.
    #[test]
    fn hostile_text_stays_text_everywhere() {
        let evil = "x\" onmouseover=\"alert(1)\"><script>alert(2)</script>'&";
        let mut p = page();
        p.nodes[0].name = evil.into();
        p.nodes[0].findings[0].message = evil.into();
        p.nodes[0].topo_svg = Some("<svg data-generator=\"gdrdoctor topo\"></svg>".into());
        p.checks[0].title = evil.into();
        p.drift[0].nodes = vec![evil.into()];
        p.drift[0].rows[0].odd = vec![(evil.into(), evil.into())];
        p.drift[0].rows[0].field = evil.into();
        let h = render(&p);
        assert!(!h.contains("<script>alert"), "no element from a report");
        assert!(!h.contains("\" onmouseover"), "no attribute from a report");
        assert_eq!(
            h.matches("<script>").count(),
            1,
            "the page's own script only"
        );
        assert!(h.contains("x&quot; onmouseover=&quot;alert(1)&quot;&gt;&lt;script&gt;"));
    }

    #[test]
    fn empty_page_renders() {
        let h = render(&FleetPage::default());
        assert!(h.contains("<table class=\"fl-heat\""));
        assert!(h.contains("No drift"));
    }
}
