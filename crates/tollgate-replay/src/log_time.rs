//! Timestamps as logs write them, to microseconds since the Unix epoch: the virtual clock of a
//! replay is the log's own time.
//!
//! Written by hand because the two shapes are fixed and this is the hot path of a replay (a
//! date library would parse with a format string per line): nginx's `$time_local`
//! (`10/Oct/2026:13:55:36 +0200`), RFC 3339 (`2026-10-10T13:55:36.25Z`), and epoch numbers
//! (seconds, with a fraction or not; milliseconds or microseconds told by their size).

/// `$time_local`: `dd/Mon/yyyy:HH:MM:SS ±hhmm`.
pub fn parse_clf(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' {
        return None;
    }
    let day = digits(&b[0..2])?;
    let month = month(&b[3..6])?;
    let year = digits(&b[7..11])?;
    let secs = clock_secs(&b[12..20])?;
    let offset = match b.get(20..) {
        Some([b' ', rest @ ..]) => zone(rest)?,
        Some([]) | None => 0,
        _ => return None,
    };
    local_to_micros(year, month, day, secs, 0, offset)
}

/// RFC 3339 (`2026-10-10T13:55:36Z`, `…36.123456+02:00`; a space for the `T` too), or an
/// epoch number: seconds (fraction allowed), milliseconds above 10¹¹, microseconds above 10¹⁴.
pub fn parse_any(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return parse_epoch(text);
    }
    if text.len() >= 20 && text.as_bytes()[2] == b'/' {
        return parse_clf(text);
    }
    parse_rfc3339(text)
}

/// The first instant after year 9999 (10000-01-01T00:00:00Z), µs since the epoch: an epoch
/// number at or past it is no time a log writes (RFC 3339 and nginx's format have four-digit
/// years), and near `u64::MAX` it would overflow the clock's arithmetic.
pub const YEAR_10000_US: u64 = 253_402_300_800_000_000;

/// An epoch number as [`parse_any`] reads it; `None` past year 9999 ([`YEAR_10000_US`]).
pub fn parse_epoch(text: &str) -> Option<u64> {
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    let whole: u64 = whole.parse().ok()?;
    let mut frac_us = 0_u64;
    for (i, c) in fraction.bytes().take(6).enumerate() {
        if !c.is_ascii_digit() {
            return None;
        }
        frac_us += u64::from(c - b'0') * 10_u64.pow(5 - i as u32);
    }
    epoch_us(whole, frac_us)
}

/// An epoch number's whole part and its fraction (in µs of a second, ignored past seconds)
/// as [`parse_epoch`] reads them: seconds below 10¹¹, milliseconds below 10¹⁴, microseconds
/// from there; `None` past year 9999 ([`YEAR_10000_US`]). Nanoseconds are not told apart:
/// a nanosecond epoch of this era (≈ 1.8 × 10¹⁸) read as microseconds is past year 9999, so
/// it is refused rather than misdated.
pub fn epoch_us(whole: u64, frac_us: u64) -> Option<u64> {
    let us = if whole >= 100_000_000_000_000 {
        whole
    } else if whole >= 100_000_000_000 {
        whole * 1_000 + frac_us / 1_000
    } else {
        whole * 1_000_000 + frac_us
    };
    (us < YEAR_10000_US).then_some(us)
}

fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let secs = clock_secs(&b[11..19])?;
    let mut rest = &b[19..];
    let mut micros = 0_u64;
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        for (i, c) in tail[..n].iter().take(6).enumerate() {
            micros += u64::from(c - b'0') * 10_u64.pow(5 - i as u32);
        }
        rest = &tail[n..];
    }
    let offset = match rest {
        [] | [b'Z'] | [b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => zone(&[*sign, *h1, *h2, *m1, *m2])?,
        other => zone(other)?,
    };
    if !(1..=12).contains(&month) {
        return None;
    }
    local_to_micros(year, month, day, secs, micros, offset)
}

/// `+hhmm` / `-hhmm` → seconds east of UTC.
fn zone(b: &[u8]) -> Option<i64> {
    let [sign, rest @ ..] = b else { return None };
    if rest.len() != 4 {
        return None;
    }
    let (hours, mins) = (digits(&rest[0..2])?, digits(&rest[2..4])?);
    // RFC 3339's grammar: hours 00–23, minutes 00–59 (`+9999` is no offset).
    if hours > 23 || mins > 59 {
        return None;
    }
    let minutes = i64::try_from(hours * 60 + mins).ok()?;
    match sign {
        b'+' => Some(minutes * 60),
        b'-' => Some(-minutes * 60),
        _ => None,
    }
}

/// `HH:MM:SS` → seconds into the day. A leap second (`23:59:60`) is refused: no clock a
/// server logs with shows one (they smear or repeat a second), so a line that has one is
/// corrupt, and taking it as the next day's first second would move it.
fn clock_secs(b: &[u8]) -> Option<u64> {
    if b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (digits(&b[0..2])?, digits(&b[3..5])?, digits(&b[6..8])?);
    (h < 24 && m < 60 && s < 60).then_some(h * 3600 + m * 60 + s)
}

fn digits(b: &[u8]) -> Option<u64> {
    let mut n = 0_u64;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(c - b'0');
    }
    Some(n)
}

fn month(b: &[u8]) -> Option<u64> {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    MONTHS
        .iter()
        .position(|m| m.as_slice() == b)
        .map(|i| i as u64 + 1)
}

/// A civil date and time at `offset` seconds east of UTC → µs since the epoch (before 1970:
/// none).
fn local_to_micros(
    year: u64,
    month: u64,
    day: u64,
    secs: u64,
    micros: u64,
    offset: i64,
) -> Option<u64> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(i64::try_from(year).ok()?, month, day);
    let utc = days * 86_400 + i64::try_from(secs).ok()? - offset;
    u64::try_from(utc).ok().map(|s| s * 1_000_000 + micros)
}

/// Days in `month` (1–12) of `year`, Gregorian: `31/Nov` and `29/Feb/2026` are no dates (read
/// as the next month's first days before, they moved lines in time).
fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u64, day: u64) -> i64 {
    let (m, d) = (month as i64, day as i64);
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-10-10T13:55:36Z, from `date -u -d 2026-10-10T13:55:36Z +%s`.
    const T: u64 = 1_791_640_536;

    #[test]
    fn each_shape_reads_the_same_instant() {
        assert_eq!(parse_clf("10/Oct/2026:13:55:36 +0000"), Some(T * 1_000_000));
        assert_eq!(parse_clf("10/Oct/2026:15:55:36 +0200"), Some(T * 1_000_000));
        assert_eq!(parse_clf("10/Oct/2026:08:55:36 -0500"), Some(T * 1_000_000));
        assert_eq!(parse_any("2026-10-10T13:55:36Z"), Some(T * 1_000_000));
        assert_eq!(
            parse_any("2026-10-10T15:55:36.25+02:00"),
            Some(T * 1_000_000 + 250_000)
        );
        assert_eq!(parse_any("2026-10-10 13:55:36"), Some(T * 1_000_000));
        assert_eq!(parse_any(&T.to_string()), Some(T * 1_000_000));
        assert_eq!(parse_any(&format!("{T}.5")), Some(T * 1_000_000 + 500_000));
        assert_eq!(parse_any(&format!("{T}123")), Some(T * 1_000_000 + 123_000));
        assert_eq!(
            parse_any(&format!("{T}123456")),
            Some(T * 1_000_000 + 123_456)
        );
    }

    /// Before: any µs epoch was a time (`18446744073709551615` is year 586 524), and the
    /// replay's `now + 1 h` overflowed on it.
    #[test]
    fn epoch_numbers_past_year_9999_are_refused() {
        for bad in [
            "18446744073709551615",
            "18446744073709551000",
            "253402300800000000",
        ] {
            assert_eq!(parse_any(bad), None, "{bad:?}");
        }
        assert_eq!(parse_any("253402300799999999"), Some(YEAR_10000_US - 1));
        assert_eq!(
            parse_any("9999-12-31T23:59:59Z"),
            Some(YEAR_10000_US - 1_000_000)
        );
    }

    #[test]
    fn malformed_times_are_refused() {
        for bad in [
            "",
            "10/Oct/2026",
            "10/Foo/2026:13:55:36 +0000",
            "10/Oct/2026:25:55:36 +0000",
            "10/Oct/2026:13:55:36 0000",
            "2026-13-10T13:55:36Z",
            "2026-10-10T13:55Z",
            "yesterday",
            "1.2.3",
        ] {
            assert_eq!(parse_any(bad), None, "{bad:?}");
        }
    }

    /// Dates that do not exist, a leap second and offsets past the grammar: read before as
    /// 1 Dec, 2 Mar, the next day's 00:00:00 and a 4-day shift.
    #[test]
    fn impossible_dates_and_offsets_are_refused() {
        for bad in [
            "31/Nov/2026:10:00:00 +0000",
            "30/Feb/2026:10:00:00 +0000",
            "29/Feb/2026:10:00:00 +0000",
            "29/Feb/2100:10:00:00 +0000",
            "31/Apr/2026:10:00:00 +0000",
            "00/Oct/2026:10:00:00 +0000",
            "10/Oct/2026:23:59:60 +0000",
            "10/Oct/2026:13:55:36 +9999",
            "10/Oct/2026:13:55:36 +0060",
            "10/Oct/2026:13:55:36 -2400",
            "2026-11-31T10:00:00Z",
            "2026-02-29T10:00:00Z",
            "2026-10-10T23:59:60Z",
            "2026-10-10T13:55:36+99:99",
            "2026-10-10T13:55:36+24:00",
        ] {
            assert_eq!(parse_any(bad), None, "{bad:?}");
        }
        // The edges that do exist.
        for good in [
            "29/Feb/2024:10:00:00 +0000",
            "29/Feb/2000:10:00:00 +0000",
            "30/Nov/2026:23:59:59 +2359",
            "31/Dec/2026:00:00:00 -2359",
            "2026-04-30T10:00:00Z",
        ] {
            assert!(parse_any(good).is_some(), "{good:?}");
        }
    }
}
