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

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Today's date, UTC.
pub fn today() -> Date {
    Date::from_unix(unix_now())
}

/// RFC 3339 UTC timestamp with seconds: `2026-11-30T12:34:56Z` (jiff's civil time of the
/// `Timestamp` in UTC; whole seconds, no fraction); times outside years 0000 to 9999 are
/// clamped to them.
pub fn rfc3339(secs: i64) -> String {
    // RFC 3339 has four-digit years: nothing before 0000-01-01T00:00:00Z.
    const YEAR_ZERO: i64 = -62_167_219_200;
    let t = jiff::Timestamp::from_second(secs.max(YEAR_ZERO)).unwrap_or(jiff::Timestamp::MAX);
    let dt = jiff::tz::TimeZone::UTC.to_datetime(t);
    format!(
        "{}T{:02}:{:02}:{:02}Z",
        dt.date(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(unix_now())
}

/// A duration for `--interval`: `10s`, `500ms`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" | "secs" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("`{s}`: unknown unit `{u}` (use ms, s, m or h)")),
    };
    // Under a second, a rate says nothing a threshold can use (and the counters of some
    // drivers are refreshed only every second or so).
    if !(1.0..=3600.0).contains(&secs) || secs.is_nan() {
        return Err(format!("`{s}`: the interval must be between 1s and 1h"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_duration("500ms").is_err());
        assert!(parse_duration("0").is_err());
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("2d").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_796_084_248), "2026-12-01T00:17:28Z");
        assert_eq!(super::rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(super::rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        // Out of the calendar's range: clamped (to jiff's last instant, late on 9999-12-30 so
        // that every offset stays in the calendar), still the one shape.
        for t in [super::rfc3339(i64::MAX), super::rfc3339(i64::MIN)] {
            assert_eq!(t.len(), 20, "{t}");
            assert!(t.ends_with('Z') && &t[10..11] == "T", "{t}");
        }
        assert!(super::rfc3339(i64::MAX).starts_with("9999-12-"));
        assert_eq!(super::rfc3339(i64::MIN), "0000-01-01T00:00:00Z");
    }
}
