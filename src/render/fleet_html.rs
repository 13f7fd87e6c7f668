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

use crate::sys::escape::html as esc;
use gdrdoctor_checks::report::Status;
use std::fmt::Write;

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

/// The page.
pub fn render(p: &FleetPage) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<meta name=\"generator\" content=\"gdrdoctor fleet\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&content_security_policy()),
        esc(&p.title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", esc(&p.title));
    for s in &p.summary {
        let _ = writeln!(o, "<p class=\"fl-summary\">{}</p>", esc(s));
    }
    heat_map(p, &mut o);
    drift_table(p, &mut o);
    node_sections(p, &mut o);
    let _ = writeln!(o, "<script>{JS}</script>\n</body>\n</html>");
    o
}

/// The worst status of check `c` on node `n` (`None`: not in its report).
fn cell(p: &FleetPage, c: usize, n: usize) -> Option<Status> {
    p.cells.get(c).and_then(|r| r.get(n)).copied().flatten()
}

/// The heat map: a row per node, a column per check, with the filters above it and the count
/// of nodes not passing below.
fn heat_map(p: &FleetPage, o: &mut String) {
    let _ = writeln!(o, "<h2 id=\"heat\">Checks on every node</h2>");
    let _ = writeln!(
        o,
        "<div class=\"fl-controls\"><label>check <input type=\"search\" id=\"fl-filter-check\" placeholder=\"e.g. pcie or rdma.ports\"></label>\
<label>node <input type=\"search\" id=\"fl-filter-node\" placeholder=\"part of a node name\"></label>\
<label><input type=\"checkbox\" id=\"fl-only-bad\"> only what does not pass</label> <span id=\"fl-count\">{n} of {n} nodes</span></div>",
        n = p.nodes.len()
    );
    let _ = writeln!(
        o,
        "<p class=\"fl-legend\"><span class=\"st-fail\">F fail</span><span class=\"st-error\">E error</span><span class=\"st-warn\">W warn</span>\
<span class=\"st-skip\">s skip</span><span class=\"st-pass\">pass</span><span class=\"st-none\" style=\"border:1px solid #d5dae3\">not in the report</span> \
Click a column to sort by it; a cell opens the node's findings.</p>"
    );
    let _ = writeln!(
        o,
        "<div class=\"fl-wrap\"><table class=\"fl-heat\" id=\"fl-heat\">"
    );
    let _ = write!(
        o,
        "<thead><tr><th class=\"fl-node\" data-type=\"text\" tabindex=\"0\" scope=\"col\">node</th>\
<th class=\"fl-num\" tabindex=\"0\" scope=\"col\" title=\"the node report's exit code\">exit</th>\
<th class=\"fl-num\" tabindex=\"0\" scope=\"col\">fail</th><th class=\"fl-num\" tabindex=\"0\" scope=\"col\">error</th>\
<th class=\"fl-num\" tabindex=\"0\" scope=\"col\">warn</th>"
    );
    for (ci, c) in p.checks.iter().enumerate() {
        let bad = (0..p.nodes.len()).any(|n| rank(cell(p, ci, n)) >= 3);
        let _ = write!(
            o,
            "<th class=\"fl-check\" data-check=\"{}\" data-bad=\"{}\" tabindex=\"0\" scope=\"col\" title=\"{}\"><div>{}</div></th>",
            esc(&c.id),
            u8::from(bad),
            esc(&if c.title.is_empty() {
                c.id.clone()
            } else {
                format!("{}: {}", c.id, c.title)
            }),
            esc(&c.id)
        );
    }
    let _ = writeln!(o, "</tr></thead>\n<tbody>");
    for (ni, n) in p.nodes.iter().enumerate() {
        let bad = n.fail + n.warn + n.error > 0 || n.exit_code != 0;
        let _ = write!(
            o,
            "<tr data-i=\"{ni}\" data-node=\"{}\" data-bad=\"{}\"><td class=\"fl-node\"><a href=\"#n{ni}\">{}</a></td>\
<td class=\"fl-num fl-exit-{}\">{}</td><td class=\"fl-num\">{}</td><td class=\"fl-num\">{}</td><td class=\"fl-num\">{}</td>",
            esc(&n.name),
            u8::from(bad),
            esc(&n.name),
            n.exit_code,
            n.exit_code,
            n.fail,
            n.error,
            n.warn
        );
        for (ci, c) in p.checks.iter().enumerate() {
            let s = cell(p, ci, ni);
            let _ = write!(
                o,
                "<td class=\"fl-cell {}\" data-v=\"{}\" title=\"{} on {}: {}\"><a href=\"#n{ni}\">{}</a></td>",
                status_class(s),
                rank(s),
                esc(&c.id),
                esc(&n.name),
                s.map(|s| s.as_str()).unwrap_or("not in the report"),
                letter(s)
            );
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = write!(
        o,
        "</tbody>\n<tfoot><tr><th class=\"fl-node\" scope=\"row\" title=\"nodes where the check warns, fails or errors\">not passing</th><td></td><td></td><td></td><td></td>"
    );
    for ci in 0..p.checks.len() {
        let bad = (0..p.nodes.len())
            .filter(|n| rank(cell(p, ci, *n)) >= 3)
            .count();
        let _ = write!(
            o,
            "<td class=\"fl-cell fl-total\">{}</td>",
            if bad > 0 {
                bad.to_string()
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(o, "</tr></tfoot></table></div>");
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
fn areas(rows: &[DriftRow]) -> String {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        let a = area(&r.field);
        match out.iter_mut().find(|(x, _)| *x == a) {
            Some((_, n)) => *n += 1,
            None => out.push((a, 1)),
        }
    }
    out.iter()
        .map(|(a, n)| {
            if *n == 1 {
                format!("<code>{}</code>", esc(a))
            } else {
                format!("<code>{}</code> ({n})", esc(a))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Drift from the majority: a row per cause (the nodes that differ, and every field in which
/// they do), not a row per field.
fn drift_table(p: &FleetPage, o: &mut String) {
    let _ = writeln!(o, "<h2 id=\"drift\">Drift from the majority</h2>");
    if p.drift.is_empty() {
        let _ = writeln!(
            o,
            "<p>No drift: every field compared has the same value on every node.</p>"
        );
        return;
    }
    let fields: usize = p.drift.iter().map(|g| g.rows.len()).sum();
    let _ = writeln!(
        o,
        "<p class=\"fl-summary\">{fields} field(s) differ, in {} group(s): the fields in which the same nodes differ are one group (most often one cause).</p>",
        p.drift.len()
    );
    let _ = writeln!(
        o,
        "<table class=\"fl-drift\" id=\"fl-drift\"><thead><tr><th>nodes that differ</th><th>what differs from the majority</th></tr></thead><tbody>"
    );
    let link = |node: &str| match p.nodes.iter().position(|n| n.name == node) {
        Some(i) => format!("<a href=\"#n{i}\">{}</a>", esc(node)),
        None => esc(node),
    };
    for g in &p.drift {
        let who = if g.nodes.is_empty() {
            "no majority".to_string()
        } else {
            g.nodes
                .iter()
                .map(|n| link(n))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let mut items = String::new();
        for d in &g.rows {
            let maj = match &d.majority {
                Some(v) => format!(
                    "<code>{}</code> ({} of {})",
                    esc(v),
                    d.majority_count,
                    d.nodes
                ),
                None => format!("no majority ({} nodes)", d.nodes),
            };
            let odd: Vec<String> = if g.nodes.is_empty() {
                d.odd
                    .iter()
                    .map(|(node, v)| format!("{}: <code>{}</code>", link(node), esc(v)))
                    .collect()
            } else {
                // Every node of the group holds the same value (a node has one value).
                d.odd
                    .first()
                    .map(|(_, v)| format!("<code>{}</code>", esc(v)))
                    .into_iter()
                    .collect()
            };
            let _ = write!(
                items,
                "<li data-field=\"{}\"><code>{}</code>: {maj} &rarr; {}</li>",
                esc(&d.field),
                esc(&d.field),
                odd.join(", ")
            );
        }
        let open = if g.rows.len() <= 3 { " open" } else { "" };
        let _ = writeln!(
            o,
            "<tr class=\"fl-cause\" data-fields=\"{}\"><td>{who}</td><td><details{open}><summary>{} field(s): {}</summary><ul class=\"fl-fields\">{items}</ul></details></td></tr>",
            g.rows.len(),
            g.rows.len(),
            areas(&g.rows)
        );
    }
    let _ = writeln!(o, "</tbody></table>");
}

/// A section per node: its findings, its report, its topology picture.
fn node_sections(p: &FleetPage, o: &mut String) {
    let _ = writeln!(o, "<h2 id=\"nodes\">Nodes</h2>");
    for (ni, n) in p.nodes.iter().enumerate() {
        let open = if n.exit_code != 0 { " open" } else { "" };
        let _ = writeln!(
            o,
            "<details class=\"fl-node\" id=\"n{ni}\" data-node=\"{}\"{open}><summary>{} <span class=\"fl-exit-{}\">exit {}</span>: {} fail, {} error, {} warn, {} pass, {} skip</summary>",
            esc(&n.name),
            esc(&n.name),
            n.exit_code,
            n.exit_code,
            n.fail,
            n.error,
            n.warn,
            n.pass,
            n.skip
        );
        if let Some(h) = &n.report_href {
            let _ = writeln!(
                o,
                "<p><a class=\"fl-report\" href=\"{}\">its report</a></p>",
                esc(h)
            );
        }
        if n.findings.is_empty() {
            let _ = writeln!(o, "<p>Nothing fails, warns or errors on this node.</p>");
        } else {
            let _ = writeln!(o, "<ul class=\"fl-findings\">");
            for f in &n.findings {
                let _ = write!(
                    o,
                    "<li><span class=\"{}\">&nbsp;{}&nbsp;</span> <code>{}</code> <code>{}</code>: {}",
                    status_class(Some(f.status)),
                    f.status,
                    esc(&f.id),
                    esc(&f.subject),
                    esc(&f.message)
                );
                if let Some(r) = &f.remediation {
                    let _ = write!(o, "<div class=\"fl-fix\">fix: {}</div>", esc(r));
                }
                let _ = writeln!(o, "</li>");
            }
            let _ = writeln!(o, "</ul>");
        }
        if let Some(svg) = &n.topo_svg {
            // A file from --svg-dir is foreign markup: never inlined. As an image, its bytes
            // can neither run a script nor break out of their element.
            let _ = writeln!(
                o,
                "<div class=\"fl-topo\"><img class=\"fl-picture\" alt=\"topology of {}\" src=\"{}\"></div>",
                esc(&n.name),
                svg_data_url(svg)
            );
        }
        let _ = writeln!(o, "</details>");
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

    #[test]
    fn empty_page_renders() {
        let h = render(&FleetPage::default());
        assert!(h.contains("<table class=\"fl-heat\""));
        assert!(h.contains("No drift"));
    }
}
