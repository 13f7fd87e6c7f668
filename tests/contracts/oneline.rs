//! `--format oneline`: one short line whose word follows the exit code.

use super::*;

#[test]
fn oneline_is_one_short_line_whose_word_follows_the_exit_code() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p.toml");
    std::fs::write(
        &p,
        "[gpu]\ncount = 16\nmodel = \"B200\"\n[rdma]\ncount = 9\n",
    )
    .unwrap();
    for sc in scenarios() {
        for extra in [
            vec![],
            vec!["--policy", p.to_str().unwrap()],
            vec!["--fail-on", "warn"],
        ] {
            let mut args = vec!["check", "--sysroot"];
            let f = fixture(&sc).display().to_string();
            args.push(&f);
            args.extend_from_slice(&["-f", "oneline"]);
            args.extend(extra.iter());
            let (code, out, _) = run(&args);
            assert!(
                out.ends_with('\n') && out.lines().count() == 1,
                "{sc}: {out:?}"
            );
            let line = out.trim_end_matches('\n');
            assert!(line.len() < 80, "{sc}: {} bytes: {line}", line.len());
            let word = line.split(' ').next().unwrap();
            match code {
                0 => assert_eq!(word, "OK", "{sc}: {line}"),
                1 => assert!(word == "FAIL" || word == "WARN", "{sc}: {line}"),
                3 => assert_eq!(word, "ERROR", "{sc}: {line}"),
                other => panic!("{sc}: exit {other}: {line}"),
            }
            if code == 1 {
                let ids = line[word.len() + 1..].split(':').next().unwrap();
                assert!(
                    ids.split(',')
                        .all(|i| i.contains('.') || i.starts_with('+')),
                    "{sc}: {line}"
                );
            }
        }
    }
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-port-down").display().to_string(),
        "-f",
        "oneline",
    ]);
    assert!(out.starts_with("FAIL rdma.ports: mlx5_3/1: "), "{out}");
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "-f",
        "oneline",
    ]);
    assert!(out.starts_with("OK ") && out.contains(" pass"), "{out}");
}
