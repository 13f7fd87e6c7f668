//! A whole report made harmless for a terminal: every string a node (or a snapshot, a pasted
//! file, a progress area) supplies passes through the terminal escaper
//! ([`crate::sys::escape::text`]) before the table and JUnit print it. The JSON report is not
//! touched: it is data, and serde escapes control characters there.

use crate::sys::escape::dangerous;
pub use crate::sys::escape::{lines, message, text};

use gdrdoctor_checks::report::Report;
use serde::Serialize;
use std::borrow::Cow;

/// Every string of a report through [`text`] (findings, evidence, fixes, host, inventory, GDR
/// verdicts, probe records): what the table and JUnit renderers print. Borrowed when nothing
/// needed escaping.
pub fn report(r: &Report) -> Cow<'_, Report> {
    // Nearly every report has nothing to escape: find that out by visiting its strings (no
    // JSON tree; the round trip below cost a quarter of `check`'s instructions on an 8-GPU
    // node). Conservative: map keys and field names are looked at too, and a report the scan
    // cannot serialize takes the round trip.
    if let Ok(false) = r.serialize(scan::Scan) {
        return Cow::Borrowed(r);
    }
    let Ok(mut v) = serde_json::to_value(r) else {
        return Cow::Owned(fallback(r));
    };
    if !walk(&mut v) {
        return Cow::Borrowed(r);
    }
    match serde_json::from_value(v) {
        Ok(clean) => Cow::Owned(clean),
        Err(_) => Cow::Owned(fallback(r)),
    }
}

/// Escape every string in a JSON value in place; whether anything changed.
fn walk(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => match text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(o) => {
                *s = o;
                true
            }
        },
        Value::Array(a) => a.iter_mut().fold(false, |ch, x| walk(x) | ch),
        Value::Object(m) => m.values_mut().fold(false, |ch, x| walk(x) | ch),
        _ => false,
    }
}

/// Should the JSON round trip ever fail: the fields the renderers print, escaped by hand.
fn fallback(r: &Report) -> Report {
    let t = |s: &str| text(s).into_owned();
    let mut c = r.clone();
    c.host.hostname = c.host.hostname.as_deref().map(t);
    c.host.kernel = c.host.kernel.as_deref().map(t);
    for f in &mut c.findings {
        f.id = t(&f.id);
        f.subject = t(&f.subject);
        f.message = t(&f.message);
        f.remediation = f.remediation.as_deref().map(t);
        for e in &mut f.evidence {
            e.source = t(&e.source);
            e.observed = t(&e.observed);
            e.expected = e.expected.as_deref().map(t);
        }
    }
    for p in &mut c.gdr {
        p.gpu = t(&p.gpu);
        p.nic = t(&p.nic);
        p.path = t(&p.path);
        p.reasons = p.reasons.iter().map(|s| t(s)).collect();
    }
    c.inventory.driver.nvidia_version = c.inventory.driver.nvidia_version.as_deref().map(t);
    c.inventory.driver.flavor = c.inventory.driver.flavor.as_deref().map(t);
    c.inventory.iommu.mode = t(&c.inventory.iommu.mode);
    c
}

/// A serde serializer that writes nothing: it answers whether any string it is given (values,
/// map keys, chars) holds a character [`text`] would escape. Field and variant names are the
/// report's own identifiers, not the node's text: not looked at.
mod scan {
    use super::dangerous;
    use serde::ser::{self, Serialize};
    use std::fmt;

    #[derive(Debug)]
    pub struct Never;
    impl fmt::Display for Never {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("scan")
        }
    }
    impl std::error::Error for Never {}
    impl ser::Error for Never {
        fn custom<T: fmt::Display>(_: T) -> Self {
            Never
        }
    }

    fn bad(s: &str) -> bool {
        crate::sys::escape::any_dangerous(s)
    }

    #[derive(Clone, Copy)]
    pub struct Scan;

    /// The compound states: whether a string seen so far was dangerous.
    pub struct Acc(bool);

    impl Acc {
        fn add<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Never> {
            if !self.0 {
                self.0 = v.serialize(Scan)?;
            }
            Ok(())
        }
    }

    macro_rules! no {
        ($($f:ident($t:ty)),*) => {
            $(fn $f(self, _: $t) -> Result<bool, Never> { Ok(false) })*
        };
    }

    impl ser::Serializer for Scan {
        type Ok = bool;
        type Error = Never;
        type SerializeSeq = Acc;
        type SerializeTuple = Acc;
        type SerializeTupleStruct = Acc;
        type SerializeTupleVariant = Acc;
        type SerializeMap = Acc;
        type SerializeStruct = Acc;
        type SerializeStructVariant = Acc;
        no!(
            serialize_bool(bool),
            serialize_i8(i8),
            serialize_i16(i16),
            serialize_i32(i32),
            serialize_i64(i64),
            serialize_i128(i128),
            serialize_u8(u8),
            serialize_u16(u16),
            serialize_u32(u32),
            serialize_u64(u64),
            serialize_u128(u128),
            serialize_f32(f32),
            serialize_f64(f64),
            serialize_bytes(&[u8]),
            serialize_unit_struct(&'static str)
        );
        fn serialize_char(self, c: char) -> Result<bool, Never> {
            Ok(dangerous(c))
        }
        fn serialize_str(self, s: &str) -> Result<bool, Never> {
            Ok(bad(s))
        }
        fn serialize_none(self) -> Result<bool, Never> {
            Ok(false)
        }
        fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<bool, Never> {
            v.serialize(self)
        }
        fn serialize_unit(self) -> Result<bool, Never> {
            Ok(false)
        }
        fn serialize_unit_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
        ) -> Result<bool, Never> {
            Ok(false)
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            v: &T,
        ) -> Result<bool, Never> {
            v.serialize(self)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            v: &T,
        ) -> Result<bool, Never> {
            v.serialize(self)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_tuple(self, _: usize) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Acc, Never> {
            Ok(Acc(false))
        }
        fn collect_str<T: ?Sized + fmt::Display>(self, v: &T) -> Result<bool, Never> {
            Ok(bad(&v.to_string()))
        }
    }

    macro_rules! elements {
        ($($tr:ident :: $f:ident),*) => {$(
            impl ser::$tr for Acc {
                type Ok = bool;
                type Error = Never;
                fn $f<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Never> {
                    self.add(v)
                }
                fn end(self) -> Result<bool, Never> {
                    Ok(self.0)
                }
            }
        )*};
    }
    elements!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field,
        SerializeTupleVariant::serialize_field
    );

    impl ser::SerializeMap for Acc {
        type Ok = bool;
        type Error = Never;
        fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Result<(), Never> {
            self.add(k)
        }
        fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), Never> {
            self.add(v)
        }
        fn end(self) -> Result<bool, Never> {
            Ok(self.0)
        }
    }

    macro_rules! fields {
        ($($tr:ident),*) => {$(
            impl ser::$tr for Acc {
                type Ok = bool;
                type Error = Never;
                fn serialize_field<T: ?Sized + Serialize>(&mut self, _: &'static str, v: &T) -> Result<(), Never> {
                    self.add(v)
                }
                fn end(self) -> Result<bool, Never> {
                    Ok(self.0)
                }
            }
        )*};
    }
    fields!(SerializeStruct, SerializeStructVariant);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sys::escape::any_dangerous;
    use gdrdoctor_checks::report::Evidence;
    use proptest::prelude::*;

    fn golden() -> Report {
        serde_json::from_str(include_str!(
            "../../fixtures/golden/hgx-h200x8-cx7x8-healthy.json"
        ))
        .unwrap()
    }

    /// What the JSON round trip would change (values only, as `walk` escapes).
    fn walk_changes(r: &Report) -> bool {
        walk(&mut serde_json::to_value(r).unwrap())
    }

    /// A string put into one of the places a node's text reaches in a report.
    fn plant(r: &mut Report, place: usize, s: &str) {
        match place % 8 {
            0 => r.host.hostname = Some(s.into()),
            1 => r.findings[0].message = s.into(),
            2 => {
                let n = r.findings.len() - 1;
                r.findings[n].subject = s.into()
            }
            3 => r.findings[0].evidence.push(Evidence {
                source: s.into(),
                observed: "x".into(),
                expected: None,
            }),
            4 => r.gdr[0].reasons.push(s.into()),
            5 => r.inventory.driver.nvidia_version = Some(s.into()),
            6 => r.probe = Some(serde_json::json!({"steps": [{"note": s}]})),
            _ => r.findings[2].remediation = Some(s.into()),
        }
    }

    #[test]
    fn the_scan_borrows_a_clean_report_and_catches_a_control_anywhere() {
        let r = golden();
        assert!(!r.serialize(scan::Scan).unwrap());
        assert!(matches!(report(&r), Cow::Borrowed(_)));
        for place in 0..8 {
            let mut d = golden();
            plant(&mut d, place, "gpu\u{1b}[2Jok");
            assert!(d.serialize(scan::Scan).unwrap(), "place {place}");
            let clean = report(&d);
            assert!(matches!(clean, Cow::Owned(_)), "place {place}");
            let v = serde_json::to_string(&*clean).unwrap();
            assert!(!v.contains("\\u001b"), "place {place}: {v}");
            assert!(v.contains(r"gpu\\x1b[2Jok"), "place {place}: {v}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// Differential: the scan says "something to escape" exactly when the JSON walk it
        /// short-cuts would change a string.
        #[test]
        fn the_scan_agrees_with_the_walk(
            place in 0usize..8,
            s in r"\PC{0,12}|[a-z\x00-\x1f\x7f-\u{a0}\u{2028}-\u{206f}]{0,6}",
        ) {
            let mut r = golden();
            plant(&mut r, place, &s);
            let scanned = r.serialize(scan::Scan).unwrap();
            prop_assert_eq!(scanned, walk_changes(&r));
            prop_assert_eq!(scanned, s.chars().any(dangerous));
        }
    }

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert!(matches!(text("mlx5_0 0000:19:00.0 ·"), Cow::Borrowed(_)));
        assert_eq!(text("a\u{1b}[2J\u{1b}[1;1Hb"), "a\\x1b[2J\\x1b[1;1Hb");
        assert_eq!(text("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(text("\u{9b}31m"), "\\u{009b}31m");
        assert_eq!(text("\u{7}\u{7f}"), "\\x07\\x7f");
        assert_eq!(text("abc\u{202e}def"), "abc\\u{202e}def");
        assert!(matches!(lines("a\nb\n"), Cow::Borrowed(_)));
        assert_eq!(
            lines("a\u{1b}]0;x\u{7}\nb\tc\n"),
            "a\\x1b]0;x\\x07\nb\\tc\n"
        );
        for c in (0u32..0x110000).filter_map(char::from_u32) {
            let s = c.to_string();
            assert_eq!(any_dangerous(&s), dangerous(c), "U+{:04X}", c as u32);
            assert_eq!(any_dangerous(&format!("ok{s}ok")), dangerous(c));
            assert!(!text(&s).chars().any(dangerous), "U+{:04X}", c as u32);
        }
    }
}
