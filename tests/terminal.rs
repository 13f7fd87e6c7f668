//! The binary in a real terminal: `check`'s table and `explain`'s page inside tmux panes of 80
//! and 200 columns (tmux gives the process a pty of that size, so the width comes from
//! `ioctl(TIOCGWINSZ)`), and the width rules for pipes. Without tmux the terminal tests skip
//! with one printed line (`apt-get install tmux`); GDRDOCTOR_TEST_REQUIRE_ALL=1 makes that a
//! failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What one command left in a tmux pane.
struct Pane {
    /// The screen lines as the terminal shows them.
    visual: Vec<String>,
    /// The same with lines the terminal wrapped joined back (`capture-pane -J`).
    joined: Vec<String>,
    status: String,
    /// Whether the pane holds colour (`capture-pane -e` keeps the escape sequences).
    colored: bool,
}

fn tmux_available() -> bool {
    match require::runs("tmux", &["-V"]) {
        Ok(()) => true,
        Err(e) => {
            require::skip(
                "terminal width under tmux",
                &e,
                "apt-get install tmux (dnf install tmux)",
            );
            false
        }
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Run `sh -c script` in a fresh tmux server with one `cols` x 50 pane; wait for it to exit and
/// return the whole pane history.
fn in_tmux(cols: u16, script: &str) -> Pane {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = tempfile::tempdir().unwrap();
    let socket = format!(
        "gdrdoctor-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let conf = dir.path().join("tmux.conf");
    std::fs::write(
        &conf,
        "set -g status off\nset -g remain-on-exit on\nset -g history-limit 100000\n",
    )
    .unwrap();
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-L")
            .arg(&socket)
            .arg("-f")
            .arg(&conf)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap()
    };
    let cols_s = cols.to_string();
    // The exit status goes to a file (tmux's own #{pane_dead_status} is sometimes never
    // filled in); the pause lets tmux read the last output before the pane dies.
    let status_file = dir.path().join("status");
    let cmd = format!(
        "sh -c {}",
        sh_quote(&format!(
            "{script}; echo $? > {}; sleep 0.3",
            sh_quote(&status_file.display().to_string())
        ))
    );
    let out = tmux(&[
        "new-session",
        "-d",
        "-x",
        &cols_s,
        "-y",
        "50",
        "-s",
        "t",
        &cmd,
    ]);
    assert!(out.status.success(), "tmux new-session: {out:?}");
    // Dead: the shell exited and tmux read its output to the end.
    let start = Instant::now();
    loop {
        let o = tmux(&["display-message", "-p", "-t", "t", "#{pane_dead}"]);
        let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if state == "1" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the command in tmux did not finish ({state:?}): {script}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(&status_file)
        .unwrap_or_default()
        .trim()
        .to_string();
    let capture = |join: bool| {
        let mut a = vec!["capture-pane", "-p", "-t", "t", "-S", "-", "-E", "-"];
        if join {
            a.push("-J");
        }
        let o = tmux(&a);
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| match l.find("Pane is dead (") {
                Some(i) => l[..i].trim_end().to_string(),
                None => l.trim_end().to_string(),
            })
            .collect();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        lines
    };
    let colored = String::from_utf8_lossy(
        &tmux(&["capture-pane", "-p", "-e", "-t", "t", "-S", "-", "-E", "-"]).stdout,
    )
    .contains("\x1b[");
    let pane = Pane {
        visual: capture(false),
        joined: capture(true),
        status,
        colored,
    };
    tmux(&["kill-server"]);
    pane
}

fn cols(s: &str) -> usize {
    s.chars().count()
}

/// The words of a text, in order.
fn tokens<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    lines
        .iter()
        .flat_map(|l| {
            l.as_ref()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The table piped with room for every line: what gdrdoctor says, unwrapped.
fn unwrapped(fixture_name: &str) -> Vec<String> {
    let out = Command::new(bin())
        .args(["check", "--sysroot"])
        .arg(fixture(fixture_name))
        .args(["--color", "never"])
        .env("COLUMNS", "2000")
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn check_cmd(fixture_name: &str, extra: &str) -> String {
    format!(
        "env -u COLUMNS {} check --sysroot {} {extra}",
        sh_quote(bin()),
        sh_quote(&fixture(fixture_name).display().to_string())
    )
}

/// The findings table's rows, reassembled from its lines: the columns are cut where the header
/// puts STATUS, CHECK, SUBJECT and MESSAGE; a line with a status starts a row, the others
/// continue it. Every cell without its whitespace, so a row wrapped over several lines (and a
/// word cut at the column's edge) reads the same as the row on one line.
fn table_rows<S: AsRef<str>>(lines: &[S]) -> Vec<[String; 4]> {
    let lines: Vec<&str> = lines.iter().map(|l| l.as_ref()).collect();
    let start = lines
        .iter()
        .position(|l| l.contains(" STATUS  CHECK"))
        .expect("a header");
    let header = lines[start];
    let at = |h: &str| header.find(h).unwrap();
    let cuts = [0, at("CHECK"), at("SUBJECT"), at("MESSAGE")];
    let mut rows: Vec<[String; 4]> = Vec::new();
    for l in &lines[start + 1..] {
        if l.trim().is_empty() || l.starts_with("summary:") {
            break;
        }
        let chars: Vec<char> = l.chars().collect();
        let cell = |i: usize| -> String {
            let from = cuts[i].min(chars.len());
            let to = cuts
                .get(i + 1)
                .copied()
                .unwrap_or(usize::MAX)
                .min(chars.len());
            chars[from..to]
                .iter()
                .filter(|c| !c.is_whitespace())
                .collect()
        };
        let cells = [cell(0), cell(1), cell(2), cell(3)];
        if !cells[0].is_empty() || rows.is_empty() {
            rows.push(cells);
        } else {
            let last = rows.last_mut().unwrap();
            for (i, c) in cells.into_iter().enumerate() {
                last[i].push_str(&c);
            }
        }
    }
    rows
}

#[test]
fn table_fits_80_columns_and_keeps_its_columns() {
    if !tmux_available() {
        return;
    }
    for name in [
        "hgx-h200x8-cx7x8-port-down",
        "hgx-h200x8-cx7x8-nic-other-socket",
        "h200-vm-live",
    ] {
        let p = in_tmux(80, &check_cmd(name, "--color never"));
        assert!(p.visual.len() > 20, "{name}: {:?}", p.visual);
        // The terminal wrapped nothing itself: every line break is one gdrdoctor chose.
        assert_eq!(p.visual, p.joined, "{name}: tmux wrapped a line");
        for l in &p.visual {
            assert!(cols(l) < 80, "{name}: {} columns: {l:?}", cols(l));
        }
        // gdrdoctor wrapped the message column (continuation lines start under MESSAGE).
        let header = p
            .visual
            .iter()
            .find(|l| l.contains(" STATUS  CHECK"))
            .unwrap();
        let msg_col = header.find("MESSAGE").unwrap();
        assert!(
            p.visual
                .iter()
                .any(|l| cols(l) > msg_col && l.chars().take(msg_col).all(|c| c == ' ')),
            "{name}: no wrapped message at 80 columns"
        );
        // Every row holds what the unwrapped row holds, each cell in its own column: nothing
        // wrapped into another column, nothing lost.
        let wide = unwrapped(name);
        assert!(wide.iter().any(|l| cols(l) > 80), "{name}: nothing to wrap");
        let rows = table_rows(&p.visual);
        assert!(rows.len() > 5, "{name}: {rows:?}");
        assert_eq!(rows, table_rows(&wide), "{name}");
        // The prose under the table (gdr lines, evidence, help) is wrapped at spaces: the
        // same words in the same order.
        let after = |lines: &[String]| -> Vec<String> {
            let from = lines
                .iter()
                .position(|l| l.starts_with("gpudirect rdma:") || l.starts_with("summary:"))
                .unwrap();
            tokens(&lines[from..])
        };
        assert_eq!(after(&p.visual), after(&wide), "{name}");
        let (code, _, _) = run(&["check", "--sysroot", &fixture(name).display().to_string()]);
        assert_eq!(
            p.status,
            code.to_string(),
            "{name}: exit code in the terminal"
        );
    }
}

/// What each command prints, as a shell command for tmux and as arguments for a pipe.
fn every_command(t: &std::path::Path) -> Vec<(&'static str, Vec<String>)> {
    let down = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    let socket = fixture("hgx-h200x8-cx7x8-nic-other-socket")
        .display()
        .to_string();
    // Three reports for fleet: two nodes that differ from a third.
    let reports = t.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    for (n, root) in [("a", &down), ("b", &socket), ("c", &down)] {
        let out = Command::new(bin())
            .args(["check", "--sysroot", root, "-f", "json", "-o"])
            .arg(reports.join(format!("{n}.json")))
            .output()
            .unwrap();
        assert!(out.status.code().is_some(), "{out:?}");
    }
    let shm = t.join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let paste = repo()
        .join("fixtures/pastes/nccl-1435-topo-pxb-numa.txt")
        .display()
        .to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (
            "check",
            s(&["check", "--sysroot", &down, "--color", "never"]),
        ),
        // No GPU library can be loaded: the probe reports why, in the same table.
        ("probe", s(&["probe", "--registration", "--color", "never"])),
        (
            "watch",
            s(&[
                "watch",
                "--once",
                "--shm-dir",
                &shm.display().to_string(),
                "--color",
                "never",
            ]),
        ),
        ("fleet", s(&["fleet", &reports.display().to_string()])),
        ("diagnose", s(&["diagnose", &paste, "--color", "never"])),
        ("topo", s(&["topo", "--sysroot", &down])),
    ]
}

#[test]
fn every_command_fits_80_and_200_columns() {
    if !tmux_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let empty = t.path().join("no-libs");
    std::fs::create_dir_all(&empty).unwrap();
    for (name, args) in every_command(t.path()) {
        for width in [80u16, 200] {
            let env = format!(
                "env -u COLUMNS GDRDOCTOR_LIB_DIR={} GDRDOCTOR_STATE_DIR={}",
                sh_quote(&empty.display().to_string()),
                sh_quote(&t.path().join("state").display().to_string())
            );
            let script = format!(
                "{env} {} {}",
                sh_quote(bin()),
                args.iter()
                    .map(|a| sh_quote(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            let p = in_tmux(width, &script);
            assert!(!p.visual.is_empty(), "{name} at {width}: no output");
            assert_eq!(
                p.visual, p.joined,
                "{name} at {width}: the terminal wrapped a line"
            );
            for l in &p.visual {
                assert!(
                    cols(l) < width as usize,
                    "{name} at {width}: {} columns: {l:?}",
                    cols(l)
                );
            }
            // The terminal's width is the one a pipe gets from COLUMNS: the same layout, byte
            // for byte (so the width came from the terminal, and a script that sets COLUMNS
            // reads what a person sees).
            let piped = Command::new(bin())
                .args(&args)
                .env("COLUMNS", width.to_string())
                .env("GDRDOCTOR_LIB_DIR", &empty)
                .env("GDRDOCTOR_STATE_DIR", t.path().join("state"))
                .output()
                .unwrap();
            let piped: Vec<String> = String::from_utf8(piped.stdout)
                .unwrap()
                .lines()
                .map(|l| l.trim_end().to_string())
                .collect();
            let mut piped = piped;
            while piped.last().is_some_and(|l| l.is_empty()) {
                piped.pop();
            }
            assert_eq!(p.visual, piped, "{name} at {width}");
            if width == 200 && !matches!(name, "probe" | "watch") {
                let widest = p.visual.iter().map(|l| cols(l)).max().unwrap();
                assert!(
                    widest > 120,
                    "{name}: widest line {widest} at 200 columns: the width was not used"
                );
            }
        }
    }
}

#[test]
fn list_fits_80_columns() {
    if !tmux_available() {
        return;
    }
    let p = in_tmux(80, &format!("{} list", sh_quote(bin())));
    assert_eq!(p.status, "0");
    assert_eq!(p.visual, p.joined, "tmux wrapped a line of `list`");
    assert!(p.visual.iter().all(|l| cols(l) < 80));
    let out = Command::new(bin())
        .arg("list")
        .env("COLUMNS", "2000")
        .output()
        .unwrap();
    let wide: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(wide.iter().any(|l| cols(l) > 80), "nothing to wrap");
    assert_eq!(tokens(&p.visual), tokens(&wide));
}

#[test]
fn table_uses_the_whole_200_columns() {
    if !tmux_available() {
        return;
    }
    let p = in_tmux(
        200,
        &check_cmd("hgx-h200x8-cx7x8-port-down", "--color never"),
    );
    assert_eq!(p.visual, p.joined);
    let widest = p.visual.iter().map(|l| cols(l)).max().unwrap();
    assert!(
        widest > 120 && widest <= 200,
        "widest line {widest}: the terminal's width was not used"
    );
    // The peermem message (143 characters) fits on its row at 200 columns.
    assert!(
        p.visual
            .iter()
            .any(|l| l.contains("nvidia_peermem loaded") && l.ends_with("memory_peers/nv_mem")),
        "{:#?}",
        p.visual
    );
}

#[test]
fn terminal_size_wins_over_columns_and_color_does_not_change_the_layout() {
    if !tmux_available() {
        return;
    }
    let plain = in_tmux(
        80,
        &check_cmd("hgx-h200x8-cx7x8-port-down", "--color never"),
    );
    let script = check_cmd("hgx-h200x8-cx7x8-port-down", "--color always")
        .replace("env -u COLUMNS", "env COLUMNS=200");
    let colored = in_tmux(80, &script);
    // capture-pane drops the color codes: the text must be the same, line for line.
    assert_eq!(plain.visual, colored.visual);
}

/// On a terminal, `--color auto` colours check, diagnose and explain, and the conventions turn
/// it off or on in each: NO_COLOR, CLICOLOR=0 and TERM=dumb off, CLICOLOR_FORCE on (piped;
/// explain piped is the page's Markdown source).
#[test]
fn color_conventions_hold_in_every_command_on_a_terminal() {
    if !tmux_available() {
        return;
    }
    let down = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    let paste = repo()
        .join("fixtures/pastes/nccl-1435-topo-pxb-numa.txt")
        .display()
        .to_string();
    for args in [
        vec!["check", "--sysroot", down.as_str()],
        vec!["diagnose", paste.as_str()],
        vec!["explain", "iommu.mode", "--no-pager"],
    ] {
        let cmd = |env: &str| {
            format!(
                "env -u NO_COLOR -u CLICOLOR -u CLICOLOR_FORCE TERM=xterm-256color {env} {} {}",
                sh_quote(bin()),
                args.iter()
                    .map(|a| sh_quote(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        assert!(
            in_tmux(80, &cmd("")).colored,
            "{args:?}: no colour on a terminal"
        );
        for off in ["NO_COLOR=1", "CLICOLOR=0", "TERM=dumb"] {
            assert!(
                !in_tmux(80, &cmd(off)).colored,
                "{args:?} with {off}: coloured"
            );
        }
        if args[0] == "explain" {
            // Piped, explain prints the page's Markdown source: nothing to colour.
            continue;
        }
        let piped = Command::new(bin())
            .args(&args)
            .env("CLICOLOR_FORCE", "1")
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&piped.stdout).contains("\x1b["),
            "{args:?}: CLICOLOR_FORCE=1 does not colour a pipe"
        );
    }
}

#[test]
fn explain_on_a_terminal_is_laid_out_to_its_width() {
    if !tmux_available() {
        return;
    }
    for (id, width) in [
        ("gpu.p2p", 80u16),
        ("pcie.acs-redirect", 80),
        ("gpu.p2p", 200),
    ] {
        let script = format!("env PAGER=cat NO_COLOR=1 {} explain {id}", sh_quote(bin()));
        let p = in_tmux(width, &script);
        assert_eq!(p.status, "0");
        assert_eq!(
            p.visual, p.joined,
            "{id} at {width}: the terminal wrapped a line"
        );
        for l in &p.visual {
            assert!(cols(l) <= width as usize, "{id} at {width}: {l:?}");
        }
        // Rendered, not raw Markdown: no `#` headings, no `**`; headings underlined.
        assert!(!p.visual.iter().any(|l| l.starts_with('#')), "{id}");
        assert!(!p.visual.iter().any(|l| l.contains("**")), "{id}");
        assert!(p.visual.iter().any(|l| l.starts_with("===")), "{id}");
        assert!(p.visual.iter().any(|l| l == "How to fix"), "{id}");
    }
}

#[test]
fn explain_pages_through_pager_only_on_a_terminal() {
    if !tmux_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let paged = t.path().join("paged.txt");
    let pager = format!("cat > {}", sh_quote(&paged.display().to_string()));
    let script = format!(
        "env PAGER={} NO_COLOR=1 {} explain iommu.mode",
        sh_quote(&pager),
        sh_quote(bin())
    );
    let p = in_tmux(80, &script);
    assert_eq!(p.status, "0");
    let text = std::fs::read_to_string(&paged).expect("the pager got the page");
    assert!(text.starts_with("iommu.mode"), "{text}");
    assert!(!text.contains("\n## "), "the pager got raw Markdown");
    assert!(
        !p.visual.iter().any(|l| l.contains("How to fix")),
        "the page went to the terminal too"
    );

    // --no-pager: straight to the terminal, the pager is not started.
    let again = t.path().join("again.txt");
    let pager = format!("cat > {}", sh_quote(&again.display().to_string()));
    let script = format!(
        "env PAGER={} NO_COLOR=1 {} explain iommu.mode --no-pager",
        sh_quote(&pager),
        sh_quote(bin())
    );
    let p = in_tmux(80, &script);
    assert!(!again.exists());
    assert!(p.visual.iter().any(|l| l == "How to fix"));

    // A pager that does not exist: the page is printed instead.
    let script = format!(
        "env PAGER=gdrdoctor-no-such-pager NO_COLOR=1 {} explain iommu.mode",
        sh_quote(bin())
    );
    let p = in_tmux(80, &script);
    assert_eq!(p.status, "0");
    assert!(
        p.visual.iter().any(|l| l == "How to fix"),
        "{:#?}",
        p.visual
    );
}

#[test]
fn explain_piped_is_plain_markdown() {
    let (code, page, _) = run(&["explain", "iommu.mode"]);
    assert_eq!(code, 0);
    assert!(page.starts_with("# iommu.mode"), "{page}");
    assert!(page.contains("\n## How to fix\n"));
    assert_eq!(
        page,
        std::fs::read_to_string(repo().join("docs/checks/iommu.mode.md")).unwrap()
    );
}

#[test]
fn a_pipe_uses_columns_else_120() {
    let down = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    let (_, default, _) = run(&["check", "--sysroot", &down, "--color", "never"]);
    let widest = default.lines().map(cols).max().unwrap();
    assert!(
        widest > 80 && widest < 120,
        "default width: widest {widest}"
    );
    let out = Command::new(bin())
        .args(["check", "--sysroot", &down, "--color", "never"])
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for l in text.lines() {
        assert!(cols(l) < 80, "COLUMNS=80: {l:?}");
    }
    // Too narrow for the columns side by side: each row stacked, its message under it.
    let out = Command::new(bin())
        .args(["check", "--sysroot", &down, "--color", "never"])
        .env("COLUMNS", "40")
        .output()
        .unwrap();
    let narrow: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        narrow.contains(&" FAIL    rdma.ports  mlx5_3/1".to_string()),
        "{narrow:#?}"
    );
    for l in &narrow {
        // In the prose under the table a word longer than the line may stick out, alone
        // after its indentation (a path is not cut there); table cells always fit.
        assert!(cols(l) < 40 || !l.trim().contains(' '), "COLUMNS=40: {l:?}");
    }
    // Everything is there, in order: stacked rows read status, check, subject, message, as
    // the unwrapped rows do (a word wider than 40 columns is cut at the edge, not lost).
    let chars = |lines: &[String]| -> String {
        lines
            .iter()
            .filter(|l| !l.contains("STATUS"))
            .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
            .collect()
    };
    assert_eq!(
        chars(&narrow),
        chars(&unwrapped("hgx-h200x8-cx7x8-port-down"))
    );
    // A file never takes the terminal's width: the fixed default.
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("r.txt");
    let out = Command::new(bin())
        .args(["check", "--sysroot", &down, "-o"])
        .arg(&f)
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), default);
}
