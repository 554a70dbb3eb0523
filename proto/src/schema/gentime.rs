//! GeneralizedTime values (RFC 4517 §3.3.13) as instants: reading a stored value as
//! microseconds since the Unix epoch, and writing one the way slapd writes its stamps
//! (`YYYYMMDDHHMMSSZ`, or with six fraction digits as ppolicy's pwdFailureTime). For the
//! server's own time-valued state (the password policy's lockout and failure times), which
//! it compares with the clock.

use super::syntax::{civil_from_days, days_from_civil, generalized_time};

/// The instant a GeneralizedTime value names, in microseconds since 1970-01-01 UTC (a
/// fraction beyond the microsecond is cut); None when it is no GeneralizedTime.
pub fn unix_micros(text: &str) -> Option<i64> {
    // The normaliser gives `YYYYMMDDHHMMSS[.fraction]Z` in UTC whatever form came in.
    let utc = generalized_time(text)?;
    let number = |range: std::ops::Range<usize>| utc.get(range).and_then(|digits| digits.parse::<i64>().ok());
    let days = days_from_civil(number(0..4)?, number(4..6)?, number(6..8)?);
    let seconds = ((days * 24 + number(8..10)?) * 60 + number(10..12)?) * 60 + number(12..14)?;
    let fraction = utc.get(14..utc.len().saturating_sub(1)).unwrap_or("");
    let micros = match fraction.strip_prefix('.') {
        Some(digits) => format!("{:0<6}", &digits[..digits.len().min(6)]).parse::<i64>().ok()?,
        None => 0,
    };
    Some(seconds * 1_000_000 + micros)
}

/// `micros` (since the epoch, UTC) as `YYYYMMDDHHMMSSZ`, or `YYYYMMDDHHMMSS.ffffffZ` with
/// `fraction`: how slapd 2.5 writes pwdAccountLockedTime and pwdFailureTime.
pub fn format_micros(micros: i64, fraction: bool) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    let mut out =
        format!("{year:04}{month:02}{day:02}{:02}{:02}{:02}", of_day / 3600, (of_day / 60) % 60, of_day % 60);
    if fraction {
        out.push_str(&format!(".{:06}", micros.rem_euclid(1_000_000)));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_as_the_same_instant() {
        // 2026-12-04 20:47:26 UTC.
        let at = 1_796_417_246 * 1_000_000;
        assert_eq!(unix_micros("20261204204726Z"), Some(at));
        assert_eq!(unix_micros("20261204204726.5Z"), Some(at + 500_000));
        assert_eq!(unix_micros("20261204204726.500265Z"), Some(at + 500_265));
        assert_eq!(unix_micros("20261204204726.5002659Z"), Some(at + 500_265));
        assert_eq!(unix_micros("20261204214726+0100"), Some(at));
        assert_eq!(unix_micros("19700101000000Z"), Some(0));
        assert_eq!(unix_micros("00000101000000Z"), Some(-62_167_219_200 * 1_000_000));
        assert_eq!(unix_micros("abc"), None);
        assert_eq!(unix_micros("20261304204726Z"), None);
    }

    #[test]
    fn writes_as_slapd_does_and_reads_back() {
        let at = 1_796_417_246 * 1_000_000 + 500_265;
        assert_eq!(format_micros(at, true), "20261204204726.500265Z");
        assert_eq!(format_micros(at, false), "20261204204726Z");
        assert_eq!(format_micros(0, true), "19700101000000.000000Z");
        assert_eq!(unix_micros(&format_micros(at, true)), Some(at));
    }
}
