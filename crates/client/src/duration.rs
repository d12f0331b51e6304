//! Durations on command lines (`ftctl --timeout`, `ftlab --duration`): a
//! whole number with a unit (`500ms`, `10s`, `2m`, `1h`).
//!
//! A bare number is refused, except `0`: `--timeout 30` could mean seconds
//! or milliseconds, and a guess wrong by a factor of 1000 is worse than an
//! error.

use std::time::Duration;

/// Parses a duration; the error says what was expected.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!("`{text}` is not a duration: expected a number and a unit, like 500ms, 10s or 2m"));
    }
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("`{text}` has no unit: write {s}ms or {s}s")),
        u if u.starts_with('.') => return Err(format!("`{text}`: fractions are not supported, use a smaller unit")),
        u => return Err(format!("`{text}`: unknown unit `{u}` (use ms, s, m or h)")),
    };
    let too_large = || format!("`{text}` is too large");
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    let ms = n.checked_mul(ms_per_unit).ok_or_else(too_large)?;
    Ok(Duration::from_millis(ms))
}

/// A duration for people: `80 ms`, `1.5 s`, `2 min 5 s`; below a
/// millisecond `350 µs`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return format!("{} µs", d.as_micros());
    }
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    if ms < 60_000 {
        let tenths = ms / 100;
        return if tenths.is_multiple_of(10) {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        };
    }
    let s = d.as_secs();
    match (s / 60, s % 60) {
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_for_people() {
        assert_eq!(show(Duration::from_micros(350)), "350 µs");
        assert_eq!(show(Duration::from_millis(80)), "80 ms");
        assert_eq!(show(Duration::from_millis(999)), "999 ms");
        assert_eq!(show(Duration::from_millis(1_000)), "1 s");
        assert_eq!(show(Duration::from_millis(1_540)), "1.5 s");
        assert_eq!(show(Duration::from_secs(125)), "2 min 5 s");
        assert_eq!(show(Duration::from_secs(120)), "2 min");
    }

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse(" 30s "), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn zero_needs_no_unit() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_bare_number_is_refused_with_a_suggestion() {
        let e = parse("30").unwrap_err();
        assert!(e.contains("no unit") && e.contains("30ms") && e.contains("30s"), "{e}");
    }

    #[test]
    fn garbage_is_refused() {
        for bad in ["", "s", "ms", "-5s", "+5s", "abc", "5 s", "5sec", "5S", "1.5s", "5s5", "10d"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse("1.5s").unwrap_err().contains("fractions"));
        assert!(parse("10d").unwrap_err().contains("unknown unit `d`"));
    }

    #[test]
    fn overflow_is_refused() {
        assert!(parse("99999999999999999999ms").unwrap_err().contains("too large"));
        assert!(parse(&format!("{}h", u64::MAX / 1000)).unwrap_err().contains("too large"));
        assert_eq!(parse(&format!("{}ms", u64::MAX)), Ok(Duration::from_millis(u64::MAX)));
    }
}
