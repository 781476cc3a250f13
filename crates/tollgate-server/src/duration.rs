//! Durations as people write them in config files and on the command line: `"50ms"`, `"30s"`,
//! `"1m"`, `"1h30m"`, `"7d"`.
//!
//! A dozen lines of our own instead of `humantime`: the accepted forms are exactly the units a
//! rate limit needs (no months or years, whose length varies), and the error message can show
//! them. Units: `ms`, `s`, `m`, `h`, `d`; segments add up, largest unit first, each unit
//! once (`"1h30m"`; `"30m1h"` or `"1m30s30s"` is refused: a typo, not a duration anyone
//! means); no fractions, no spaces.

use std::time::Duration;

/// Text that is not a duration; the message shows the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration: write e.g. \"50ms\", \"30s\", \"1m\", \"1h30m\" or \"7d\"")]
pub struct DurationError {
    /// What was written.
    pub text: String,
}

/// Parses `"50ms"`, `"30s"`, `"1m"`, `"1h30m"`, `"7d"`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_server::duration::parse;
///
/// assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse("50ms"), Ok(Duration::from_millis(50)));
/// assert!(parse("1 minute").is_err());
/// assert!(parse("30m1h").is_err(), "largest unit first");
/// assert!(parse("1m30s30s").is_err(), "each unit once");
/// ```
///
/// # Errors
/// [`DurationError`], whose message says what is accepted.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let bad = || DurationError {
        text: text.to_owned(),
    };
    let mut rest = text;
    let mut total = Duration::ZERO;
    // The previous segment's unit: each one must be smaller.
    let mut previous: Option<Duration> = None;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..letters] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3_600),
            "d" => Duration::from_secs(86_400),
            _ => return Err(bad()),
        };
        rest = &rest[letters..];
        if previous.is_some_and(|p| unit >= p) {
            return Err(bad());
        }
        previous = Some(unit);
        let part = u32::try_from(number)
            .ok()
            .and_then(|n| unit.checked_mul(n))
            .ok_or_else(bad)?;
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    Ok(total)
}

/// Formats a duration the way [`parse`] reads it, in the largest exact units.
///
/// ```
/// use std::time::Duration;
/// use tollgate_server::duration::format;
///
/// assert_eq!(format(Duration::from_secs(90)), "1m30s");
/// assert_eq!(format(Duration::from_millis(50)), "50ms");
/// ```
pub fn format(duration: Duration) -> String {
    let mut ms = duration.as_millis();
    if ms == 0 {
        return "0ms".into();
    }
    let mut out = String::new();
    for (unit, len) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if ms >= len {
            out.push_str(&format!("{}{unit}", ms / len));
            ms %= len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit parses, segments add up, and malformed text is refused with the accepted forms.
    #[test]
    fn parses_units_and_refuses_the_rest() {
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for bad in [
            "",
            "5",
            "s",
            "1.5s",
            "1 s",
            "-1s",
            "1w",
            "1m30",
            "99999999999999999999s",
        ] {
            let err = parse(bad).expect_err(bad).to_string();
            assert!(err.contains("\"30s\""), "{err}");
        }
    }

    /// Formatting round-trips through parsing.
    #[test]
    fn format_round_trips() {
        for ms in [1, 50, 1_000, 61_000, 3_600_000, 90_061_001] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
        }
    }
}
