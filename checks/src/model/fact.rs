//! A fact about the node with its provenance, and the rule that damaged evidence is no
//! absence.

use serde::{Deserialize, Serialize};

/// One fact about the node, with its provenance.
///
/// Serialized as an internally tagged object (`{"state": "known", "value": .., "source": ..}`,
/// `{"state": "absent", "source": .., "reason": ..}`). Read by [`FactRepr`], not by serde's
/// derive for internally tagged enums, which buffers every fact's whole value (a snapshot's
/// `live.json`, a report) in an intermediate tree before reading it: one pass instead, with the
/// same rules (the `state` required and one of the two, each state's fields required, other
/// fields ignored). One difference, on purpose: a field of the other state that does not have
/// its type (an absent fact's `value` its type cannot hold, a known fact's `reason` that is
/// not a string) makes the fact damaged, where the derive ignored it. Objects only: the array
/// form serde also accepted for a derived enum is never written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Fact<T> {
    /// The value, and where it was read (`/proc/cmdline`, `getrlimit(RLIMIT_MEMLOCK)`, ...).
    Known { value: T, source: String },
    /// Could not be read: `source` says where we looked, `reason` why it failed.
    Absent { source: String, reason: String },
}

/// The wire form of a [`Fact`], read field by field in whatever order they come.
#[derive(Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
struct FactRepr<T> {
    state: FactState,
    /// Present (even as `null`, a known `None` of an optional value) or not.
    #[serde(default, deserialize_with = "present")]
    value: Option<T>,
    source: Option<String>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum FactState {
    Known,
    Absent,
}

fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Fact<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = FactRepr::<T>::deserialize(d)?;
        let source = r.source.ok_or_else(|| D::Error::missing_field("source"))?;
        match r.state {
            FactState::Known => Ok(Fact::Known {
                value: match r.value {
                    Some(v) => v,
                    // As the derive does: an optional value left out is `None`, anything
                    // else is a missing field.
                    None => T::deserialize(MissingValue(std::marker::PhantomData::<D::Error>))?,
                },
                source,
            }),
            FactState::Absent => Ok(Fact::Absent {
                source,
                reason: r.reason.ok_or_else(|| D::Error::missing_field("reason"))?,
            }),
        }
    }
}

/// A known fact's `value` that is not there: `None` to an `Option`, a missing field to any
/// other type (serde's rule for a derived struct's missing field).
struct MissingValue<E>(std::marker::PhantomData<E>);

impl<'de, E: serde::de::Error> serde::Deserializer<'de> for MissingValue<E> {
    type Error = E;
    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, E> {
        Err(E::missing_field("value"))
    }
    fn deserialize_option<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_none()
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<T> Fact<T> {
    pub fn known(value: T, source: impl Into<String>) -> Self {
        Fact::Known {
            value,
            source: source.into(),
        }
    }
    pub fn absent(source: impl Into<String>, reason: impl Into<String>) -> Self {
        Fact::Absent {
            source: source.into(),
            reason: reason.into(),
        }
    }
    pub fn get(&self) -> Option<&T> {
        match self {
            Fact::Known { value, .. } => Some(value),
            Fact::Absent { .. } => None,
        }
    }
    pub fn source(&self) -> &str {
        match self {
            Fact::Known { source, .. } | Fact::Absent { source, .. } => source,
        }
    }
    /// The reason the fact is absent, or `None` when it is known.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Fact::Known { .. } => None,
            Fact::Absent { reason, .. } => Some(reason),
        }
    }
    pub fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Fact<U> {
        match self {
            Fact::Known { value, source } => Fact::Known {
                value: f(value),
                source: source.clone(),
            },
            Fact::Absent { source, reason } => Fact::Absent {
                source: source.clone(),
                reason: reason.clone(),
            },
        }
    }
    /// Human text for evidence: the value via `show`, or `unknown (<reason>)`.
    pub fn describe(&self, show: impl FnOnce(&T) -> String) -> String {
        match self {
            Fact::Known { value, .. } => show(value),
            Fact::Absent { reason, .. } => format!("unknown ({reason})"),
        }
    }
}

/// How the reason of an absent live fact starts when its record exists but cannot be used (a
/// corrupt or unreadable `gdrdoctor/live.json`). Unlike "not in this snapshot" (a `skip`),
/// damaged evidence is an `error`.
pub const DAMAGED: &str = "damaged: ";

/// Whether an absence reason says the evidence was there but damaged (see [`DAMAGED`]).
pub fn is_damaged(reason: &str) -> bool {
    reason.starts_with(DAMAGED)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    /// serde's derive for the same internally tagged shape: the reference [`Fact`]'s own
    /// `Deserialize` replaced (it buffered every value).
    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "state", rename_all = "lowercase")]
    enum Derived<T> {
        Known { value: T, source: String },
        Absent { source: String, reason: String },
    }

    impl<T> From<Derived<T>> for Fact<T> {
        fn from(d: Derived<T>) -> Self {
            match d {
                Derived::Known { value, source } => Fact::Known { value, source },
                Derived::Absent { source, reason } => Fact::Absent { source, reason },
            }
        }
    }

    /// One field of a fact object: left out, or one of a few values (right and wrong types).
    fn field(values: &'static [&'static str]) -> impl Strategy<Value = Option<&'static str>> {
        prop_oneof![Just(None), proptest::sample::select(values).prop_map(Some)]
    }

    /// A fact object as JSON text, its fields in any order, with or without a stray one.
    fn object() -> impl Strategy<Value = String> {
        (
            field(&["\"known\"", "\"absent\"", "\"other\"", "1", "null"]),
            field(&["null", "7", "\"x\"", "[1]", "{\"a\":1}", "-1", "4294967296"]),
            field(&["\"/sys/x\"", "null", "3"]),
            field(&["\"gone\"", "null", "3"]),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(|(state, value, source, reason, extra, order)| {
                let mut kv: Vec<String> = [
                    ("state", state),
                    ("value", value),
                    ("source", source),
                    ("reason", reason),
                    ("extra", extra.then_some("{\"deep\":[1,2]}")),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| format!("\"{k}\":{v}")))
                .collect();
                // A permutation from the seed.
                let mut o = order;
                for i in (1..kv.len()).rev() {
                    kv.swap(i, (o % (i as u64 + 1)) as usize);
                    o /= i as u64 + 1;
                }
                format!("{{{}}}", kv.join(","))
            })
    }

    fn same_as_derived<T>(text: &str)
    where
        T: for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let ours = serde_json::from_str::<Fact<T>>(text).ok();
        let theirs = serde_json::from_str::<Derived<T>>(text)
            .ok()
            .map(Fact::from);
        // One difference, on purpose: a fact carrying a field of the other state (`value` in
        // an absent fact, `reason` in a known one) that does not have that field's type is
        // refused (inconsistent evidence is damaged); the derive ignored the field.
        if ours.is_none() && theirs.is_some() {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let wrong = match theirs {
                Some(Fact::Absent { .. }) => v
                    .get("value")
                    .is_some_and(|x| serde_json::from_value::<T>(x.clone()).is_err()),
                _ => v
                    .get("reason")
                    .is_some_and(|x| serde_json::from_value::<Option<String>>(x.clone()).is_err()),
            };
            assert!(wrong, "{text}");
            return;
        }
        assert_eq!(ours, theirs, "{text}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The one-pass reader accepts exactly what serde's internally tagged derive accepts,
        /// and reads the same fact from it, whatever the order of the fields.
        #[test]
        fn reads_what_the_derive_reads(text in object()) {
            same_as_derived::<u32>(&text);
            same_as_derived::<Option<u32>>(&text);
            same_as_derived::<String>(&text);
            same_as_derived::<Vec<u8>>(&text);
            same_as_derived::<serde_json::Value>(&text);
        }

        #[test]
        fn round_trips(v in proptest::option::of(any::<u32>()), s in ".{0,8}", known in any::<bool>()) {
            let f: Fact<Option<u32>> = if known { Fact::known(v, s) } else { Fact::absent(s, "r") };
            let text = serde_json::to_string(&f).unwrap();
            prop_assert_eq!(serde_json::from_str::<Fact<Option<u32>>>(&text).unwrap(), f);
        }
    }

    #[test]
    fn a_known_null_or_left_out_option_is_none_and_a_missing_value_is_an_error() {
        let f: Fact<Option<u32>> =
            serde_json::from_str(r#"{"value":null,"source":"s","state":"known"}"#).unwrap();
        assert_eq!(f, Fact::known(None, "s"));
        let f: Fact<Option<u32>> =
            serde_json::from_str(r#"{"state":"known","source":"s"}"#).unwrap();
        assert_eq!(f, Fact::known(None, "s"));
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"known","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `value`"), "{e}");
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"absent","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `reason`"), "{e}");
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"maybe","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `maybe`"), "{e}");
    }
}
