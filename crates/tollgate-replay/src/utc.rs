//! Dates as the summary, the page and the charts print them: UTC, to the second.
//!
//! A log's clock is the only one a report speaks of, so no time zone or locale is consulted,
//! and no date crate is needed for one conversion.

/// `2026-10-10 13:55:36Z` for µs since the epoch.
pub fn utc(micros: u64) -> String {
    let secs = micros / 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Howard Hinnant's inverse of days-from-civil.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_utc() {
        assert_eq!(utc(1_791_640_536_000_000), "2026-10-10 13:55:36Z");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00Z");
    }
}
