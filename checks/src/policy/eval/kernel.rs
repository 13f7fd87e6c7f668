//! `policy.kernel` and `policy.cmdline`: the kernel release and command line.

use super::context::{cannot, Context};
use crate::model::Node;
use crate::policy::glob::glob;
use crate::policy::types::*;
use crate::report::{Finding, Status};
use std::collections::BTreeSet;

pub(super) fn kernel(node: &Node, r: &KernelRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.kernel";
    let Some(rel) = node.kernel_release.get() else {
        return vec![cannot(
            ID,
            "read the kernel release",
            node.kernel_release.source(),
            node.kernel_release.reason().unwrap_or("?"),
        )];
    };
    let src = node.kernel_release.source();
    let mut out = Vec::new();
    let fix = "boot the site's kernel (the default entry in /etc/default/grub, then `update-grub` or `grub2-mkconfig`), or change kernel.release in the policy if the fleet moved";
    if let Some(want) = &r.release {
        if rel != want.as_str() {
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!("kernel {rel}, the policy expects {}", want.as_str()),
                )
                .expected(src, rel, cx.want(want.as_str(), "kernel.release"))
                .fix(fix),
            );
        }
    }
    if let Some(min) = &r.min_release {
        match Version::parse(rel) {
            Some(v) if v.cmp_parts(min).is_lt() => out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!(
                        "kernel {rel} is older than the policy's minimum {}",
                        min.text
                    ),
                )
                .expected(
                    src,
                    rel,
                    cx.want(format!(">= {}", min.text), "kernel.min_release"),
                )
                .fix(fix),
            ),
            Some(_) => {}
            None => out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    "node",
                    format!("kernel release `{rel}` has no numeric parts to compare"),
                )
                .evidence(src, rel),
            ),
        }
    }
    if out.is_empty() {
        out.push(
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("kernel {rel}, as the policy expects"),
            )
            .expected(src, rel, {
                let mut want = Vec::new();
                if let Some(r) = &r.release {
                    want.push(r.as_str().to_string());
                }
                if let Some(m) = &r.min_release {
                    want.push(format!(">= {}", m.text));
                }
                cx.want(want.join(", "), "kernel")
            }),
        );
    }
    out
}

pub(super) fn cmdline(node: &Node, r: &CmdlineRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.cmdline";
    let Some(args) = node.cmdline.get() else {
        return vec![cannot(
            ID,
            "read the kernel command line",
            node.cmdline.source(),
            node.cmdline.reason().unwrap_or("?"),
        )];
    };
    let key_of = |a: &str| {
        a.split_once('=')
            .map(|(k, _)| k.to_string())
            .unwrap_or_else(|| a.to_string())
    };
    let ignored = |k: &str| r.ignore.iter().any(|i| glob(i.as_str(), k));
    let mut problems = Vec::new();
    let required: Vec<&CmdlineParam> = r.require.iter().filter(|p| !ignored(p.key())).collect();
    for p in &required {
        if args.contains(&p.0) {
            continue;
        }
        let same_key: Vec<&String> = args.iter().filter(|a| key_of(a) == p.key()).collect();
        if same_key.is_empty() {
            problems.push(format!("missing {}", p.0));
        } else {
            let have: Vec<&str> = same_key.iter().map(|s| s.as_str()).collect();
            problems.push(format!("{} instead of {}", have.join(" "), p.0));
        }
    }
    for p in &r.forbid {
        let hits: Vec<&String> = args
            .iter()
            .filter(|a| {
                if p.has_value() {
                    **a == p.0
                } else {
                    key_of(a) == p.0
                }
            })
            .collect();
        for h in hits {
            problems.push(format!("forbidden {h}"));
        }
    }
    if !r.allow_extra {
        let req_keys: BTreeSet<&str> = required.iter().map(|p| p.key()).collect();
        for a in args {
            let k = key_of(a);
            if ignored(&k) || required.iter().any(|p| p.0 == *a) || req_keys.contains(k.as_str()) {
                continue;
            }
            if r.forbid
                .iter()
                .any(|p| if p.has_value() { p.0 == *a } else { p.0 == k })
            {
                continue;
            }
            problems.push(format!("unexpected {a}"));
        }
    }
    let mut want = Vec::new();
    if !required.is_empty() {
        want.push(format!(
            "require {}",
            required
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !r.forbid.is_empty() {
        want.push(format!(
            "forbid {}",
            r.forbid
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !r.allow_extra {
        want.push("nothing else".into());
    }
    if !r.ignore.is_empty() {
        want.push(format!(
            "ignoring {}",
            r.ignore
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let f = if problems.is_empty() {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            format!(
                "the kernel command line matches the policy ({} required parameter(s) present)",
                required.len()
            ),
        )
    } else {
        Finding::new(ID, Status::Fail, "node", format!("the kernel command line differs from the policy: {}", problems.join(", ")))
            .fix("edit GRUB_CMDLINE_LINUX in /etc/default/grub (or the node image's boot configuration), run `update-grub` or `grub2-mkconfig -o /boot/grub2/grub.cfg`, and reboot; change kernel.cmdline in the policy if the difference is intended")
    };
    vec![f.expected(
        node.cmdline.source(),
        args.join(" "),
        cx.want(want.join("; "), "kernel.cmdline"),
    )]
}
