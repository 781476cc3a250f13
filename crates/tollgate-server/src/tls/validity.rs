//! A certificate's validity period, read from its DER: the one field rustls and webpki verify
//! but do not hand out, needed to refuse an expired certificate at start-up and at reload
//! (rustls would serve it, and every client would then refuse the handshake) and to export
//! when the one served expires.
//!
//! A few lines of DER walking rather than an X.509 crate: only `tbsCertificate.validity` is
//! read, and a certificate that does not parse this far is refused as malformed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// When a certificate begins and ends being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: SystemTime,
    pub(crate) not_after: SystemTime,
}

impl Validity {
    /// The validity of the DER certificate `der`; `None` when it does not parse.
    pub(crate) fn of(der: &[u8]) -> Option<Validity> {
        let (certificate, _) = element(der, SEQUENCE)?;
        let (mut tbs, _) = element(certificate, SEQUENCE)?;
        if tbs.first() == Some(&VERSION) {
            tbs = element(tbs, VERSION)?.1;
        }
        let (_serial, rest) = element(tbs, INTEGER)?;
        let (_signature, rest) = element(rest, SEQUENCE)?;
        let (_issuer, rest) = element(rest, SEQUENCE)?;
        let (validity, _) = element(rest, SEQUENCE)?;
        let (not_before, rest) = time(validity)?;
        let (not_after, _) = time(rest)?;
        Some(Validity {
            not_before,
            not_after,
        })
    }
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xA0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The content of the element of type `tag` at the start of `input`, and what follows it.
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    any(rest)
}

/// After the tag: the content (by its length) and what follows.
fn any(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, mut rest) = input.split_first()?;
    let len = if len < 0x80 {
        usize::from(len)
    } else {
        let octets = usize::from(len & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (bytes, after) = rest.split_at(octets);
        rest = after;
        bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b))
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// A `UTCTime` or `GeneralizedTime` (`Z` form, as RFC 5280 requires), and what follows.
fn time(input: &[u8]) -> Option<(SystemTime, &[u8])> {
    let (&tag, _) = input.split_first()?;
    let (content, rest) = any(&input[1..])?;
    let text = std::str::from_utf8(content).ok()?.strip_suffix('Z')?;
    let digits = |range: std::ops::Range<usize>| -> Option<u64> { text.get(range)?.parse().ok() };
    let (year, text_at) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy = digits(0..2)?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (digits(0..4)?, 4),
        _ => return None,
    };
    let at = |i: usize| digits(text_at + i..text_at + i + 2);
    let (month, day, hour, minute, second) = (at(0)?, at(2)?, at(4)?, at(6)?, at(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Before 1970 (a CA's or a test certificate's `notBefore` of 1950, say) is before
    // `UNIX_EPOCH`, not malformed.
    let days = days_from_civil(year, month, day);
    let time_of_day = hour * 3600 + minute * 60 + second.min(60);
    let at = match u64::try_from(days) {
        Ok(days) => UNIX_EPOCH + Duration::from_secs(days * 86_400 + time_of_day),
        Err(_) => {
            UNIX_EPOCH
                - Duration::from_secs((days.unsigned_abs() * 86_400).saturating_sub(time_of_day))
        }
    };
    Some((at, rest))
}

/// Days from 1970-01-01 to the date (proleptic Gregorian, year 1 to 9999), negative before
/// 1970 (Howard Hinnant's algorithm).
fn days_from_civil(year: u64, month: u64, day: u64) -> i64 {
    // The year and the month shifted so that a year starts in March; the year from 1 BC.
    let y = if month <= 2 { year + 399 } else { year + 400 };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // `era` counts from 1 BC (y shifted by one 400-year era): back by that era's days.
    let days = i64::try_from(era * 146_097 + doe).unwrap_or(i64::MAX);
    days - 719_468 - 146_097
}

/// `at` as `2026-05-01T12:00:00Z`.
pub fn format_time(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dates round-trip through the two conversions, leap days and century years included.
    #[test]
    fn dates_convert_both_ways() {
        for (y, m, d, text) in [
            (1970, 1, 1, "1970-01-01T00:00:00Z"),
            (2000, 2, 29, "2000-02-29T00:00:00Z"),
            (2024, 12, 31, "2024-12-31T00:00:00Z"),
            (2100, 3, 1, "2100-03-01T00:00:00Z"),
        ] {
            let days = u64::try_from(days_from_civil(y, m, d)).expect("after 1970");
            let at = UNIX_EPOCH + Duration::from_secs(days * 86_400);
            assert_eq!(format_time(at), text);
        }
    }

    /// Both time encodings are read; anything else is refused.
    #[test]
    fn times_are_read_in_both_encodings() {
        let utc = [&[UTC_TIME, 13][..], b"491231235959Z"].concat();
        let (at, rest) = time(&utc).expect("UTCTime");
        assert_eq!(format_time(at), "2049-12-31T23:59:59Z");
        assert!(rest.is_empty());
        let general = [&[GENERALIZED_TIME, 15][..], b"20500101000000Z"].concat();
        assert_eq!(
            format_time(time(&general).expect("GeneralizedTime").0),
            "2050-01-01T00:00:00Z"
        );
        let local = [&[UTC_TIME, 12][..], b"491231235959"].concat();
        assert!(time(&local).is_none(), "a time without Z");
    }

    /// A time before 1970 is a time (before `UNIX_EPOCH`), not a malformed certificate.
    #[test]
    fn times_before_1970_are_read() {
        let day = Duration::from_secs(86_400);
        for (encoded, before_epoch) in [
            (&b"691231000000Z"[..], day),
            (b"691231235959Z", Duration::from_secs(1)),
            (b"500101000000Z", day * 7305),
            (b"680229120000Z", day * 672 - Duration::from_secs(12 * 3600)),
        ] {
            let utc = [&[UTC_TIME, 13][..], encoded].concat();
            let (at, _) = time(&utc).expect("UTCTime before 1970");
            assert_eq!(
                UNIX_EPOCH - before_epoch,
                at,
                "{:?}",
                std::str::from_utf8(encoded)
            );
        }
        let general = [&[GENERALIZED_TIME, 15][..], b"19000301000000Z"].concat();
        let (at, _) = time(&general).expect("GeneralizedTime");
        assert_eq!(UNIX_EPOCH - Duration::from_secs(86_400 * 25_508), at);
    }
}
