//! The wall clock, in the two shapes the reports need: a date for policy waivers and an
//! RFC 3339 timestamp for `report.timestamp`.

use gdrdoctor_checks::policy::Date;

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Today's date, UTC.
pub fn today() -> Date {
    Date::from_unix(unix_now())
}

/// RFC 3339 UTC timestamp with seconds: `2026-11-30T12:34:56Z`.
pub fn rfc3339(secs: i64) -> String {
    let d = Date::from_unix(secs);
    let s = secs.rem_euclid(86_400);
    format!("{d}T{:02}:{:02}:{:02}Z", s / 3600, (s % 3600) / 60, s % 60)
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(unix_now())
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_796_084_248), "2026-12-01T00:17:28Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59Z");
    }
}
