//! A device unplugged since the baseline (its PCI function and every link into it removed).

use super::*;

/// The healthy 8-GPU node in `root`, with a counter baseline of its own counters (`keep`
/// picks the keys: all of them, or a cloud VM's, where no AER is exposed) as a snapshot holds
/// it, written as the last periodic run's.
fn with_own_baseline(root: &Path, keep: fn(&str) -> bool) {
    let mut node = {
        let mut r = Root::sysroot(root).unwrap();
        let m = meta::read(&r).unwrap();
        r.set_complete(m.is_some());
        collect::collect(&r, m.as_ref())
    };
    node.live = meta::read_live(&Root::sysroot(root).unwrap());
    let values: BTreeMap<String, u64> = gdrdoctor_checks::counters::values(&node)
        .into_iter()
        .filter(|(k, _)| keep(k))
        .collect();
    let baseline = serde_json::json!({
        "elapsed_ms": 300_000, "origin": "the last run (test, 5 min ago)", "values": values,
    });
    std::fs::create_dir_all(root.join("gdrdoctor")).unwrap();
    std::fs::write(
        root.join("gdrdoctor/counters-baseline.json"),
        serde_json::to_vec(&baseline).unwrap(),
    )
    .unwrap();
}

/// A PCI function's directory removed with every link into it: what a device that fell off
/// the bus, or was hot-removed, leaves in sysfs.
fn unplug(root: &Path, bdf: &str) -> Vec<(PathBuf, Vec<u8>, Option<PathBuf>)> {
    let mut dirs = Vec::new();
    walk_dirs(&root.join("sys/devices"), &mut dirs);
    let dir = dirs
        .into_iter()
        .find(|d| d.file_name().is_some_and(|n| n == bdf))
        .unwrap_or_else(|| panic!("no directory for {bdf}"));
    let mut saved = Vec::new();
    let mut inside = Vec::new();
    walk(&dir, &mut |p, t| {
        if t.is_file() {
            inside.push((p.to_path_buf(), std::fs::read(p).unwrap(), None));
        } else if t.is_symlink() {
            inside.push((
                p.to_path_buf(),
                Vec::new(),
                Some(std::fs::read_link(p).unwrap()),
            ));
        }
    });
    saved.extend(inside);
    let mut links = Vec::new();
    symlinks(root, &mut links);
    for l in links {
        if l.starts_with(&dir) {
            continue;
        }
        let to = std::fs::read_link(&l).unwrap();
        if to.to_string_lossy().contains(bdf) {
            std::fs::remove_file(&l).unwrap();
            saved.push((l, Vec::new(), Some(to)));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    saved
}

fn replug(saved: Vec<(PathBuf, Vec<u8>, Option<PathBuf>)>) {
    for (p, bytes, link) in saved {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        match link {
            Some(to) => std::os::unix::fs::symlink(to, &p).unwrap(),
            None => std::fs::write(&p, bytes).unwrap(),
        }
    }
}

fn walk_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(e.path());
            walk_dirs(&e.path(), out);
        }
    }
}

/// Every GPU and RDMA NIC of the healthy 8-GPU node unplugged in turn, after a periodic run
/// read its counters: never exit 0. With AER in the baseline (bare metal) `counters.aer`
/// remembers the function; without (a cloud VM, where a VF hot-removed by the hypervisor
/// takes its PCI function with it) the port and GPU counters do. The first version of this
/// test found the VM case: mlx5_3 gone left seven healthy NICs, topo only warned, exit 0.
/// Each NIC is also unplugged with the last device renamed into its free name (mlx5 names
/// are handed out again): judged by name, that looked like a rename.
#[test]
fn every_device_unplugged_since_the_baseline_is_not_good_news() {
    let mut problems = Vec::new();
    let mut done = 0;
    for (variant, keep) in [
        ("bare metal", (|_: &str| true) as fn(&str) -> bool),
        ("vm, no aer", |k: &str| !k.starts_with("aer/")),
    ] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        copy_tree(&fixture("hgx-h200x8-cx7x8-healthy"), root);
        with_own_baseline(root, keep);
        let base = report(root).unwrap();
        assert_eq!(base.summary.exit_code, 0, "{variant}: the baseline alone");
        let node = {
            let mut r = Root::sysroot(root).unwrap();
            let m = meta::read(&r).unwrap();
            r.set_complete(m.is_some());
            collect::collect(&r, m.as_ref())
        };
        let nics: Vec<String> = node
            .rdma
            .get()
            .unwrap()
            .iter()
            .filter_map(|d| d.pci_bdf.get().cloned().flatten())
            .collect();
        let gpus: Vec<String> = node
            .pci
            .get()
            .unwrap()
            .iter()
            .filter(|d| d.is_nvidia_gpu())
            .map(|d| d.bdf.clone())
            .collect();
        assert_eq!((gpus.len(), nics.len()), (8, 8));
        for bdf in gpus.iter().chain(&nics) {
            let saved = unplug(root, bdf);
            let r = report(root).unwrap();
            if r.summary.exit_code == 0 {
                problems.push(format!("{variant}: {bdf} unplugged, exit 0"));
            }
            replug(saved);
            done += 1;
        }
        // The freed name taken again: after a NIC is gone, the last mlx5 device registers
        // anew (a driver reload, a health recovery) and gets the lowest free name, so by
        // name only the last one is missing, and its function carries a known name.
        let names: Vec<(String, String)> = node
            .rdma
            .get()
            .unwrap()
            .iter()
            .filter_map(|d| Some((d.name.clone(), d.pci_bdf.get().cloned().flatten()?)))
            .collect();
        let class = root.join("sys/class/infiniband");
        let (last, _) = names.iter().max().unwrap().clone();
        for (name, bdf) in names.iter().filter(|(n, _)| *n != last) {
            let saved = unplug(root, bdf);
            std::fs::rename(class.join(&last), class.join(name)).unwrap();
            let r = report(root).unwrap();
            if r.summary.exit_code == 0 {
                problems.push(format!(
                    "{variant}: {bdf} ({name}) unplugged and {last} renamed {name}, exit 0"
                ));
            }
            std::fs::rename(class.join(name), class.join(&last)).unwrap();
            replug(saved);
            done += 1;
        }
        assert_eq!(
            report(root).unwrap().summary.exit_code,
            0,
            "{variant}: replugged"
        );
    }
    conclude(format!("unplug: {done} devices removed in turn"), &problems);
}
