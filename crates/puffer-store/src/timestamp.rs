//! Timestamps written as text: `YYYY-MM-DD` (midnight UTC) or RFC 3339 date-times, as
//! microseconds since the Unix epoch (the store's timestamp values).

/// Microseconds since the epoch of `YYYY-MM-DD` (midnight UTC) or of an RFC 3339
/// date-time (`T`, `t` or a space between date and time; digits past microseconds cut).
pub fn parse_timestamp_micros(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let day_micros = parse_date_days(bytes.get(..10)?)? * 86_400_000_000;
    match bytes.get(10) {
        None => Some(day_micros),
        Some(b'T' | b't' | b' ') => {
            let (time_micros, offset_micros) = parse_time_and_offset(&bytes[11..])?;
            Some(day_micros + time_micros - offset_micros)
        }
        Some(_) => None,
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD`, if it is a real date.
fn parse_date_days(bytes: &[u8]) -> Option<i64> {
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let year = digits(&bytes[0..4])?;
    let month = digits(&bytes[5..7])?;
    let day = digits(&bytes[8..10])?;
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.fraction]` then `Z` or `±HH:MM`: (microseconds into the day, offset).
fn parse_time_and_offset(bytes: &[u8]) -> Option<(i64, i64)> {
    if bytes.len() < 9 || bytes[2] != b':' || bytes[5] != b':' {
        return None;
    }
    let (hour, minute, second) = (
        digits(&bytes[0..2])?,
        digits(&bytes[3..5])?,
        digits(&bytes[6..8])?,
    );
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &bytes[8..];
    let mut fraction_micros = 0;
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let len = after_dot.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        for position in 0..6 {
            let digit = after_dot[..len].get(position).map_or(0, |c| c - b'0');
            fraction_micros = fraction_micros * 10 + i64::from(digit);
        }
        rest = &after_dot[len..];
    }
    let offset_micros = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = (hours * 60 + minutes) * 60_000_000;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };
    let time_micros = ((hour * 60 + minute) * 60 + second) * 1_000_000 + fraction_micros;
    Some((time_micros, offset_micros))
}

/// A decimal number of ASCII digits only (no sign).
fn digits(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(bytes.iter().fold(0, |n, c| n * 10 + i64::from(c - b'0')))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// days_from_civil: years start in March so the leap day comes last).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Formats microseconds since the epoch as RFC 3339 (UTC, microsecond precision).
pub fn format_timestamp_micros(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    let in_day = micros.rem_euclid(86_400_000_000);
    let (year, month, day) = civil_from_days(days);
    let seconds = in_day / 1_000_000;
    let fraction = in_day % 1_000_000;
    let (hour, minute, second) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if fraction == 0 {
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{fraction:06}Z")
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the inverse of
/// `days_from_civil`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_dates_and_rfc3339() {
        assert_eq!(parse_timestamp_micros("1970-01-01"), Some(0));
        assert_eq!(
            parse_timestamp_micros("2000-03-01"),
            Some(951_868_800_000_000)
        );
        assert_eq!(
            parse_timestamp_micros("2015-09-12T00:46:58.771Z"),
            Some(1_442_018_818_771_000)
        );
        assert_eq!(
            parse_timestamp_micros("2015-09-12T02:46:58+02:00"),
            parse_timestamp_micros("2015-09-12T00:46:58Z")
        );
        assert_eq!(parse_timestamp_micros("1969-12-31"), Some(-86_400_000_000));
        for bad in [
            "2015-02-29",
            "2015-13-01",
            "2015-9-12",
            "2015-09-12T25:00:00Z",
            "2015-09-12x",
            "2015-09-12T00:00:00",
        ] {
            assert_eq!(parse_timestamp_micros(bad), None, "{bad}");
        }
        assert!(parse_timestamp_micros("2016-02-29").is_some());
    }

    #[test]
    fn formatting_round_trips() {
        for micros in [
            0,
            1,
            -1,
            951_868_800_000_000,
            1_442_018_818_771_000,
            -86_400_000_000,
        ] {
            let text = format_timestamp_micros(micros);
            assert_eq!(parse_timestamp_micros(&text), Some(micros), "{text}");
        }
    }
}
