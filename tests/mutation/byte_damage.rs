//! Byte damage: the seeded sample over every fixture, and the sweep of every file and link of
//! a fixture, each damage in turn.

use super::*;

#[test]
fn damaged_evidence_is_never_good_news() {
    let runs = env_num("GDRDOCTOR_MUTATION_RUNS", 150) as usize;
    let seed = env_num("GDRDOCTOR_MUTATION_SEED", 0x18_0018);
    let mut rng = Rng(seed | 1);
    let scenarios = scenarios();
    let per = runs.div_ceil(scenarios.len()).max(1);
    let mut problems: Vec<String> = Vec::new();
    let mut done = 0usize;
    let t0 = std::time::Instant::now();
    for s in &scenarios {
        let b = base(s);
        let root = b.dir.path();
        let mut all = Vec::new();
        files(root, &mut all);
        all.sort();
        let (hot, cold): (Vec<PathBuf>, Vec<PathBuf>) = all.iter().cloned().partition(|p| {
            p.file_name()
                .is_some_and(|n| EVIDENCE.contains(&n.to_string_lossy().as_ref()))
        });
        for _ in 0..per {
            // Mostly the files the checks judge; now and then any other.
            let pool = if rng.below(5) < 4 && !hot.is_empty() {
                &hot
            } else {
                &cold
            };
            let Some(file) = pool.get(rng.below(pool.len())).cloned() else {
                continue;
            };
            let damage = DAMAGES[rng.below(DAMAGES.len())];
            let original = std::fs::read(&file).unwrap();
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            let mut partner: Option<(PathBuf, Vec<u8>)> = None;
            match damage {
                Damage::Truncate => std::fs::write(&file, &original[..original.len() / 2]).unwrap(),
                Damage::Empty => std::fs::write(&file, b"").unwrap(),
                Damage::Garbage => {
                    let n = original.len().clamp(1, 8192);
                    let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                    std::fs::write(&file, junk).unwrap();
                }
                Damage::Remove => std::fs::remove_file(&file).unwrap(),
                Damage::Swap => {
                    let same: Vec<&PathBuf> = all
                        .iter()
                        .filter(|p| *p != &file && p.file_name() == file.file_name())
                        .collect();
                    let other = if same.is_empty() {
                        all[rng.below(all.len())].clone()
                    } else {
                        same[rng.below(same.len())].clone()
                    };
                    let theirs = std::fs::read(&other).unwrap();
                    std::fs::write(&file, &theirs).unwrap();
                    std::fs::write(&other, &original).unwrap();
                    partner = Some((other, theirs));
                }
            }
            let what = format!(
                "{s}: {damage:?} {rel}{}",
                partner
                    .as_ref()
                    .map(|(p, _)| format!(" with {}", p.strip_prefix(root).unwrap().display()))
                    .unwrap_or_default()
            );
            if let Some(r) = report(root) {
                let optional = damage == Damage::Remove
                    && file
                        .file_name()
                        .is_some_and(|n| OPTIONAL.contains(&n.to_string_lossy().as_ref()));
                check_invariants(
                    &what,
                    &r,
                    (&b.status, b.exit),
                    !optional,
                    damage != Damage::Swap && !optional,
                    &mut problems,
                );
            }
            std::fs::write(&file, &original).unwrap();
            if let Some((p, b)) = partner {
                std::fs::write(p, b).unwrap();
            }
            done += 1;
        }
    }
    conclude(
        format!(
            "mutation: {done} damaged sysroots over {} fixtures in {:.1} s (seed {seed:#x})",
            scenarios.len(),
            t0.elapsed().as_secs_f64()
        ),
        &problems,
    );
}

/// The sweep: not a sample but every file (and every symbolic link) of a fixture, one at a
/// time, damaged each way in turn; the same invariants. The random test above picks a few hundred
/// of some 30,000 files per run, so a hole behind one particular file (the `aer_dev_nonfatal`
/// of one GPU) can stay unfound for many runs; the sweep finds it in one.
/// `GDRDOCTOR_SWEEP=all` sweeps every fixture (126,000 damaged sysroots with every damage:
/// about 35 minutes of a release build, a local campaign), `GDRDOCTOR_SWEEP=a,b` the named
/// ones (`.ci/run` adds the fixture whose defect lives in files the checks read least: one
/// GPU's AER counters); by default the two small real-shaped nodes (1,300 sysroots, seconds).
/// `GDRDOCTOR_SWEEP_DAMAGE` picks the damages, all five by default: `remove`; `empty`;
/// `truncate`, the first half of the file; `garbage`, bytes of the file's length drawn from
/// its path; `swap`, the file exchanged with the next one of the same name that differs from
/// it (another GPU's, port's or bridge's reading: a failure may move, so only the exit code
/// is judged). Links are removed when `remove` is among them.
#[test]
fn every_file_damaged_in_turn_is_never_good_news() {
    let want = std::env::var("GDRDOCTOR_SWEEP")
        .unwrap_or_else(|_| "h200-vm-live,gh200x2-cx7x2-c2c".into());
    let all_fixtures = scenarios();
    let chosen: Vec<String> = if want == "all" {
        all_fixtures
    } else {
        let v: Vec<String> = want.split(',').map(|s| s.trim().to_string()).collect();
        for f in &v {
            assert!(
                all_fixtures.contains(f),
                "GDRDOCTOR_SWEEP names {f}: no such fixture"
            );
        }
        v
    };
    let damages: Vec<Damage> = std::env::var("GDRDOCTOR_SWEEP_DAMAGE")
        .unwrap_or_else(|_| "remove,empty,truncate,garbage,swap".into())
        .split(',')
        .map(|d| match d.trim() {
            "remove" => Damage::Remove,
            "empty" => Damage::Empty,
            "truncate" => Damage::Truncate,
            "garbage" => Damage::Garbage,
            "swap" => Damage::Swap,
            other => panic!(
                "GDRDOCTOR_SWEEP_DAMAGE names {other:?}: remove, empty, truncate, garbage or swap"
            ),
        })
        .collect();
    let t0 = std::time::Instant::now();
    let mut problems: Vec<String> = Vec::new();
    let mut done = 0usize;
    for s in &chosen {
        let b = base(s);
        let root = b.dir.path();
        let mut all = Vec::new();
        files(root, &mut all);
        all.sort();
        let mut links = Vec::new();
        if damages.contains(&Damage::Remove) {
            symlinks(root, &mut links);
            links.sort();
        }
        for (i, file) in all.iter().enumerate() {
            let original = std::fs::read(file).unwrap();
            let optional = file
                .file_name()
                .is_some_and(|n| OPTIONAL.contains(&n.to_string_lossy().as_ref()));
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            // The swap's partner: the next file of the same name (another GPU's, port's or
            // bridge's) whose bytes differ, round the list.
            let partner = if damages.contains(&Damage::Swap) {
                all[i + 1..]
                    .iter()
                    .chain(&all[..i])
                    .filter(|p| p.file_name() == file.file_name())
                    .find(|p| std::fs::read(p).ok().as_ref() != Some(&original))
            } else {
                None
            };
            for &damage in &damages {
                let mut swapped: Option<(&PathBuf, Vec<u8>)> = None;
                match damage {
                    Damage::Swap => {
                        // Two readings exchanged: a failure may move to another subject
                        // (no flips judged), but the node must not come out healthier.
                        let Some(other) = partner else { continue };
                        let theirs = std::fs::read(other).unwrap();
                        std::fs::write(file, &theirs).unwrap();
                        std::fs::write(other, &original).unwrap();
                        swapped = Some((other, theirs));
                    }
                    Damage::Remove => std::fs::remove_file(file).unwrap(),
                    Damage::Truncate => {
                        std::fs::write(file, &original[..original.len() / 2]).unwrap()
                    }
                    Damage::Garbage => {
                        // Drawn from the path: the same junk in every run.
                        let mut rng = Rng(rel.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
                            (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
                        }) | 1);
                        let n = original.len().clamp(1, 8192);
                        let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                        std::fs::write(file, junk).unwrap()
                    }
                    _ => std::fs::write(file, b"").unwrap(),
                }
                if let Some(r) = report(root) {
                    let legit = optional && damage == Damage::Remove;
                    let with = swapped
                        .as_ref()
                        .map(|(p, _)| format!(" with {}", p.strip_prefix(root).unwrap().display()))
                        .unwrap_or_default();
                    check_invariants(
                        &format!("{s}: {damage:?} {rel}{with}"),
                        &r,
                        (&b.status, b.exit),
                        !legit,
                        !legit && damage != Damage::Swap,
                        &mut problems,
                    );
                }
                std::fs::write(file, &original).unwrap();
                if let Some((p, theirs)) = swapped {
                    std::fs::write(p, theirs).unwrap();
                }
                done += 1;
            }
        }
        for link in &links {
            let target = std::fs::read_link(link).unwrap();
            std::fs::remove_file(link).unwrap();
            if let Some(r) = report(root) {
                let rel = link.strip_prefix(root).unwrap().display();
                check_invariants(
                    &format!("{s}: Remove link {rel}"),
                    &r,
                    (&b.status, b.exit),
                    true,
                    true,
                    &mut problems,
                );
            }
            std::os::unix::fs::symlink(&target, link).unwrap();
            done += 1;
        }
    }
    conclude(
        format!(
            "sweep: {done} damaged sysroots over {} fixtures in {:.1} s",
            chosen.len(),
            t0.elapsed().as_secs_f64()
        ),
        &problems,
    );
}
