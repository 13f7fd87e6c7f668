//! The report's `inventory`, flattened to `field = value` pairs while it is parsed (no JSON tree:
//! building one cost most of the time of a roll-up), into one string arena per report.
//!
//! Objects become `a.b.c`; lists of objects are keyed by what names their elements (`ibdev`,
//! `bdf`, `port`, `index`, in that order): `nics[mlx5_3].ports[1].rate`, with a `.count` field
//! for the list; lists of plain values are joined with spaces; the command line becomes one field
//! per parameter (`cmdline.iommu = pt`, `cmdline.quiet = (flag)`). Every container (an object, a
//! list element, the command line) also gets a field whose value is [`PRESENT`], so that the
//! roll-up can tell "absent because its container is absent" from "absent".

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::fmt::Write;

/// The value of a container that is present.
pub const PRESENT: &str = "(present)";

/// `field = value` pairs in one arena.
#[derive(Debug, Default)]
pub struct Pairs {
    buf: String,
    /// (key start, key end = value start, value end)
    idx: Vec<(usize, usize, usize)>,
}

impl Pairs {
    pub fn push(&mut self, k: &str, v: &str) {
        let a = self.buf.len();
        self.buf.push_str(k);
        let b = self.buf.len();
        self.buf.push_str(v);
        self.idx.push((a, b, self.buf.len()));
    }
    fn push_fmt(&mut self, k: &str, v: fmt::Arguments) {
        let a = self.buf.len();
        self.buf.push_str(k);
        let b = self.buf.len();
        let _ = self.buf.write_fmt(v);
        self.idx.push((a, b, self.buf.len()));
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.idx
            .iter()
            .map(|&(a, b, c)| (&self.buf[a..b], &self.buf[b..c]))
    }
    pub fn len(&self) -> usize {
        self.idx.len()
    }
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.iter().find(|(x, _)| *x == k).map(|(_, v)| v)
    }
}

/// A report's flattened inventory (deserialize it from the `inventory` value).
#[derive(Debug, Default)]
pub struct Inventory(pub Pairs);

impl<'de> Deserialize<'de> for Inventory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = Pairs::default();
        let mut key = String::new();
        Flat {
            key: &mut key,
            out: &mut out,
            marker: false,
            dot: false,
        }
        .deserialize(d)?;
        Ok(Inventory(out))
    }
}

/// Flatten the value at `key` into `out`. `marker`: an object here gets a [`PRESENT`] field of
/// its own; `dot`: its fields are `key.field` (not for the inventory's root, whose fields are
/// top-level names).
struct Flat<'a> {
    key: &'a mut String,
    out: &'a mut Pairs,
    marker: bool,
    dot: bool,
}

impl<'de> DeserializeSeed<'de> for Flat<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Appends a map key to the key buffer without allocating.
struct AppendKey<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for AppendKey<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for AppendKey<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push_str(v);
        Ok(())
    }
}

impl<'de> Visitor<'de> for Flat<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an inventory value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out.push(self.key, if v { "true" } else { "false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.out.push_fmt(self.key, format_args!("{v}"));
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.out.push_fmt(self.key, format_args!("{v}"));
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.out.push_fmt(self.key, format_args!("{v}"));
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.out.push(self.key, v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.push(self.key, "null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.marker {
            self.out.push(self.key, PRESENT);
        }
        let len = self.key.len();
        loop {
            if self.dot {
                self.key.push('.');
            }
            if map.next_key_seed(AppendKey(self.key))?.is_none() {
                self.key.truncate(len);
                break;
            }
            map.next_value_seed(Flat {
                key: self.key,
                out: self.out,
                marker: true,
                dot: true,
            })?;
            self.key.truncate(len);
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut elems: Vec<Elem> = Vec::new();
        while let Some(e) = seq.next_element::<Elem>()? {
            elems.push(e);
        }
        if self.key == "cmdline" {
            self.out.push(self.key, PRESENT);
            let mut by: Vec<(&str, Vec<&str>)> = Vec::new();
            for e in &elems {
                let s = match e {
                    Elem::Scalar(s) => s.as_str(),
                    Elem::Object(_) => continue,
                };
                let (k, v) = s.split_once('=').unwrap_or((s, "(flag)"));
                match by.iter_mut().find(|(x, _)| *x == k) {
                    Some((_, vals)) => vals.push(v),
                    None => by.push((k, vec![v])),
                }
            }
            let len = self.key.len();
            for (k, vals) in by {
                self.key.push('.');
                self.key.push_str(k);
                self.out.push(self.key, &vals.join(" "));
                self.key.truncate(len);
            }
            return Ok(());
        }
        if !elems.iter().any(|e| matches!(e, Elem::Object(_))) {
            let parts: Vec<&str> = elems
                .iter()
                .filter_map(|e| match e {
                    Elem::Scalar(s) => Some(s.as_str()),
                    Elem::Object(_) => None,
                })
                .collect();
            self.out.push(self.key, &parts.join(" "));
            return Ok(());
        }
        let len = self.key.len();
        self.key.push_str(".count");
        self.out.push_fmt(self.key, format_args!("{}", elems.len()));
        self.key.truncate(len);
        for (i, e) in elems.iter().enumerate() {
            self.key.push('[');
            match e {
                Elem::Object(p) => {
                    match [".ibdev", ".bdf", ".port", ".index"]
                        .iter()
                        .find_map(|k| p.get(k).filter(|v| *v != PRESENT))
                    {
                        Some(id) => self.key.push_str(id),
                        None => {
                            let _ = write!(self.key, "#{i}");
                        }
                    }
                    self.key.push(']');
                    self.out.push(self.key, PRESENT);
                    let l2 = self.key.len();
                    for (rk, v) in p.iter() {
                        self.key.push_str(rk);
                        self.out.push(self.key, v);
                        self.key.truncate(l2);
                    }
                }
                Elem::Scalar(s) => {
                    let _ = write!(self.key, "#{i}]");
                    self.out.push(self.key, s);
                }
            }
            self.key.truncate(len);
        }
        Ok(())
    }
}

/// One list element: a plain value, or an object flattened relative to itself (`.bdf`, ...).
enum Elem {
    Scalar(String),
    Object(Pairs),
}

impl<'de> Deserialize<'de> for Elem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elem;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list element")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Elem, E> {
                Ok(Elem::Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Elem, E> {
                Ok(Elem::Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Elem, E> {
                Ok(Elem::Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Elem, E> {
                Ok(Elem::Scalar(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Elem, E> {
                Ok(Elem::Scalar(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Elem, E> {
                Ok(Elem::Scalar("null".into()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Elem, E> {
                self.visit_unit()
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Elem, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Elem, A::Error> {
                // Fields relative to the element (`.bdf`); the list writes the element's marker.
                let mut out = Pairs::default();
                let mut key = String::new();
                Flat {
                    key: &mut key,
                    out: &mut out,
                    marker: false,
                    dot: true,
                }
                .visit_map(map)?;
                Ok(Elem::Object(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Elem, A::Error> {
                // A list inside a list: flattened as one value.
                let mut out = Pairs::default();
                let mut key = String::from("-");
                Flat {
                    key: &mut key,
                    out: &mut out,
                    marker: true,
                    dot: true,
                }
                .visit_seq(seq)?;
                let joined: Vec<&str> = out.iter().map(|(_, v)| v).collect();
                Ok(Elem::Scalar(joined.join(" ")))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    fn flat(v: &serde_json::Value) -> Vec<(String, String)> {
        let inv: Inventory = serde_json::from_value(v.clone()).unwrap();
        inv.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn inventory_flattens_by_element_id() {
        let got = flat(&serde_json::json!({
            "gpus": [{"bdf": "0000:18:00.0", "link": {"cur_width": 16}, "bars": [{"index": 1, "size": 5, "start": "0x1"}]}],
            "nics": [{"ibdev": "mlx5_0", "bdf": "0000:19:00.0", "fw_ver": "1", "ports": [{"port": 1, "rate": "400"}]}],
            "cmdline": ["ro", "iommu=pt", "root=UUID=1"],
            "env": {"NCCL_IB_HCA": "mlx5"},
            "iommu": {"mode": "off", "evidence": ["a", "b"]},
            "driver": {"peermem": null, "grdma_topo_override": 0, "x": -1, "f": 32.5},
        }));
        let has = |k: &str, v: &str| {
            assert!(
                got.iter().any(|(a, b)| a == k && b == v),
                "no {k} = {v} in {got:#?}"
            )
        };
        has("gpus.count", "1");
        has("gpus[0000:18:00.0]", PRESENT);
        has("gpus[0000:18:00.0].bdf", "0000:18:00.0");
        has("gpus[0000:18:00.0].link", PRESENT);
        has("gpus[0000:18:00.0].link.cur_width", "16");
        has("gpus[0000:18:00.0].bars.count", "1");
        has("gpus[0000:18:00.0].bars[1]", PRESENT);
        has("gpus[0000:18:00.0].bars[1].size", "5");
        has("nics[mlx5_0].fw_ver", "1");
        has("nics[mlx5_0].ports[1].rate", "400");
        has("cmdline", PRESENT);
        has("cmdline.ro", "(flag)");
        has("cmdline.iommu", "pt");
        has("cmdline.root", "UUID=1");
        has("env", PRESENT);
        has("env.NCCL_IB_HCA", "mlx5");
        has("iommu.evidence", "a b");
        has("driver.peermem", "null");
        has("driver.x", "-1");
        has("driver.f", "32.5");
    }

    #[test]
    fn elements_without_a_name_are_numbered() {
        let got = flat(&serde_json::json!({"things": [{"a": 1}, "x", {"a": 2}]}));
        assert!(
            got.contains(&("things[#0].a".into(), "1".into())),
            "{got:?}"
        );
        assert!(got.contains(&("things[#1]".into(), "x".into())));
        assert!(got.contains(&("things[#2].a".into(), "2".into())));
    }

    proptest! {
        #[test]
        fn any_json_flattens_without_panicking(s in "\\PC{0,60}") {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&s) {
                let _ = serde_json::from_value::<Inventory>(v);
            }
        }
    }
}
