//! Why a GPU waiter is stuck: the one stall classification of `probe --hang` (its own kernels,
//! src/probe/hang/detector.rs) and `gdrdoctor watch` (a user's kernels instrumented with
//! progress.cuh, [`crate::watch`]). Each gathers the same six signs from what it can see (the
//! probe from its launch plan and host-mapped flags, watch from the area's launch generations,
//! site table and words) and asks [`classify`]; the rules and their order live only here
//! (docs/checks/probe.hang-inject.md "How a stall is classified", docs/guides/watch.md).

use serde::{Deserialize, Serialize};

/// The class of a stall. The order of the variants is the order of the rules, most specific
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Blocks of the waiter's launch never started while every started one waits: the grid is
    /// larger than what can be resident, and the awaited write comes from a block that cannot
    /// run.
    ForwardProgress,
    /// The awaited value is written by a peer GPU over peer access, and it never came.
    RemoteWait,
    /// The launch that would write the awaited value was enqueued but never started: stream or
    /// event ordering puts it behind the waiter.
    Ordering,
    /// Memory holds a value that ends the wait, the waiter never saw it: a hoisted or cached
    /// load (missing volatile/acquire).
    StaleRead,
    /// The waiter stopped publishing heartbeats: an uninstrumented loop, trapped, preempted.
    Silent,
    /// The waiter is alive and re-reading memory; the value just never arrives.
    SpinStall,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::ForwardProgress,
        Class::RemoteWait,
        Class::Ordering,
        Class::StaleRead,
        Class::Silent,
        Class::SpinStall,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::ForwardProgress => "forward-progress",
            Class::RemoteWait => "remote-wait",
            Class::Ordering => "ordering",
            Class::StaleRead => "stale-read",
            Class::Silent => "silent",
            Class::SpinStall => "spin-stall",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// What the classification of one stalled waiter rests on. A sign the caller cannot see is
/// `false`: the rule it feeds does not fire, and a later one answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signs {
    /// Blocks of the waiter's launch that never started.
    pub never_started: usize,
    /// Every block of that launch that started is waiting (and at least one started).
    pub all_started_wait: bool,
    /// The awaited value is written by a peer GPU over peer access.
    pub writer_on_peer: bool,
    /// The launch that writes the awaited value was enqueued but never started.
    pub writer_never_started: bool,
    /// Memory holds a value that satisfies the wait while the waiter last saw one that does
    /// not (readable only where the host can read the awaited word).
    pub memory_satisfies: bool,
    /// No heartbeat from the waiter for at least the stall threshold.
    pub heartbeat_stale: bool,
}

/// The class of a stall, by the first rule that holds, most specific first.
pub fn classify(s: &Signs) -> Class {
    if s.never_started > 0 && s.all_started_wait {
        Class::ForwardProgress
    } else if s.writer_on_peer {
        Class::RemoteWait
    } else if s.writer_never_started {
        Class::Ordering
    } else if s.memory_satisfies {
        Class::StaleRead
    } else if s.heartbeat_stale {
        Class::Silent
    } else {
        Class::SpinStall
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_rule_alone_and_the_order_between_them() {
        let none = Signs::default();
        assert_eq!(classify(&none), Class::SpinStall);
        let fp = Signs {
            never_started: 8,
            all_started_wait: true,
            ..none
        };
        assert_eq!(classify(&fp), Class::ForwardProgress);
        // Blocks that never started are not enough while a started block still runs.
        assert_eq!(
            classify(&Signs {
                all_started_wait: false,
                ..fp
            }),
            Class::SpinStall
        );
        let every = Signs {
            never_started: 1,
            all_started_wait: true,
            writer_on_peer: true,
            writer_never_started: true,
            memory_satisfies: true,
            heartbeat_stale: true,
        };
        assert_eq!(classify(&every), Class::ForwardProgress);
        let every = Signs {
            never_started: 0,
            ..every
        };
        assert_eq!(classify(&every), Class::RemoteWait);
        let every = Signs {
            writer_on_peer: false,
            ..every
        };
        assert_eq!(classify(&every), Class::Ordering);
        let every = Signs {
            writer_never_started: false,
            ..every
        };
        assert_eq!(classify(&every), Class::StaleRead);
        let every = Signs {
            memory_satisfies: false,
            ..every
        };
        assert_eq!(classify(&every), Class::Silent);
    }

    #[test]
    fn names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.as_str()), Some(c));
            assert_eq!(
                serde_json::to_value(c).unwrap_or_default(),
                serde_json::Value::String(c.as_str().into())
            );
        }
        assert_eq!(Class::parse("hung"), None);
    }

    proptest! {
        /// The class is the first rule that holds: no sign of an earlier rule holds.
        #[test]
        fn the_first_rule_that_holds_wins(
            never in 0usize..3, all: bool, peer: bool, writer: bool, mem: bool, stale: bool,
        ) {
            let s = Signs {
                never_started: never,
                all_started_wait: all,
                writer_on_peer: peer,
                writer_never_started: writer,
                memory_satisfies: mem,
                heartbeat_stale: stale,
            };
            let rules = [
                never > 0 && all,
                peer,
                writer,
                mem,
                stale,
                true,
            ];
            let first = rules.iter().position(|r| *r).unwrap_or(5);
            prop_assert_eq!(classify(&s), Class::ALL[first]);
        }
    }
}
