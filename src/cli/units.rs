//! Command-line quantities: byte sizes (`100MB`, `64KiB`), durations (`1ms`, `2s`),
//! rates (`100Mbps`) and probabilities (`0.05` or `5%`).

use std::time::Duration;

fn split_number(s: &str) -> anyhow::Result<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| anyhow::anyhow!("\"{s}\" does not start with a number"))?;
    if !num.is_finite() || num < 0.0 {
        return Err(anyhow::anyhow!("\"{s}\" is not a non-negative number"));
    }
    Ok((num, unit.trim()))
}

/// Bytes: plain, or with B, kB/KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).
/// Exact (no floating point): at most 2^64 − 1 bytes; a fraction of a byte rounds.
pub fn bytes(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let mult: u128 = match unit.trim() {
        "" | "B" => 1,
        "k" | "kB" | "KB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "KiB" | "K" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        unit => {
            return Err(anyhow::anyhow!(
                "unknown size unit \"{unit}\" in \"{s}\": use B, kB, MB, GB, KiB, MiB or GiB"
            ))
        }
    };
    let num = num.replace('_', "");
    let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(anyhow::anyhow!("\"{s}\" does not start with a number"));
    }
    let too_large = || {
        anyhow::anyhow!("size \"{s}\" is too large: at most 18446744073709551615 bytes (2^64 - 1)")
    };
    // Digits past the 30th of a fraction are far below a byte.
    let frac = &frac.trim_end_matches('0')[..frac.trim_end_matches('0').len().min(30)];
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().map_err(|_| too_large())?;
    let scale = 10u128.pow(u32::try_from(frac.len()).unwrap_or(30));
    let product = mantissa.checked_mul(mult).ok_or_else(too_large)?;
    u64::try_from((product + scale / 2) / scale).map_err(|_| too_large())
}

/// A duration: with ns, us/µs, ms or s.
pub fn duration(s: &str) -> anyhow::Result<Duration> {
    let (n, unit) = split_number(s)?;
    let secs = match unit {
        "ns" => n * 1e-9,
        "us" | "µs" => n * 1e-6,
        "ms" => n * 1e-3,
        "s" | "" => n,
        _ => {
            return Err(anyhow::anyhow!(
                "unknown time unit \"{unit}\" in \"{s}\": use ns, us, ms or s"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| anyhow::anyhow!("duration \"{s}\" is too long"))
}

/// A rate in bit/s: with bps, kbps, Mbps, Gbps (k/M/G are powers of 1000).
pub fn rate(s: &str) -> anyhow::Result<u64> {
    let (n, unit) = split_number(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "bps" | "b/s" => 1e0,
        "k" | "kbps" | "kbit/s" => 1e3,
        "m" | "mbps" | "mbit/s" => 1e6,
        "g" | "gbps" | "gbit/s" => 1e9,
        _ => {
            return Err(anyhow::anyhow!(
                "unknown rate unit \"{unit}\" in \"{s}\": use bps, kbps, Mbps or Gbps"
            ))
        }
    };
    let bps = (n * mult).round();
    // 2^64 as a float: every rate below it fits a u64.
    if bps >= 18_446_744_073_709_551_616.0 {
        return Err(anyhow::anyhow!(
            "rate \"{s}\" is too large: at most 2^64 - 1 bit/s"
        ));
    }
    Ok(bps as u64)
}

/// A probability: `0.05` or `5%`.
pub fn probability(s: &str) -> anyhow::Result<f64> {
    let (n, unit) = split_number(s)?;
    let p = match unit {
        "" => n,
        "%" => n / 100.0,
        _ => {
            return Err(anyhow::anyhow!(
                "\"{s}\" is not a probability: use 0.05 or 5%"
            ))
        }
    };
    if p > 1.0 {
        return Err(anyhow::anyhow!("probability \"{s}\" is above 1"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_nonsense() {
        assert_eq!(bytes("100MB").ok(), Some(100_000_000));
        assert_eq!(bytes("64KiB").ok(), Some(65_536));
        assert_eq!(bytes("1_000").ok(), Some(1000));
        assert_eq!(duration("1ms").ok(), Some(Duration::from_millis(1)));
        assert_eq!(duration("250us").ok(), Some(Duration::from_micros(250)));
        assert_eq!(rate("100Mbps").ok(), Some(100_000_000));
        assert_eq!(rate("1.5gbps").ok(), Some(1_500_000_000));
        assert_eq!(probability("5%").ok(), Some(0.05));
        assert!(bytes("12parsecs")
            .unwrap_err()
            .to_string()
            .contains("parsecs"));
        assert!(rate("fast").is_err());
        assert!(probability("2").is_err());
        assert!(duration("-1ms").is_err());
    }

    #[test]
    fn sizes_are_exact_up_to_two_to_the_64_and_refused_above() {
        assert_eq!(bytes("1.5KiB").ok(), Some(1536));
        assert_eq!(bytes("0.5").ok(), Some(1));
        assert_eq!(
            bytes("2.000000000000000000000000000000000001kB").ok(),
            Some(2000)
        );
        assert_eq!(bytes("18446744073709551615").ok(), Some(u64::MAX));
        for big in [
            "18446744073709551616",
            "18446744073709551616B",
            "20000000000GB",
            "99999999999999999999999999999999999999999GiB",
        ] {
            let e = bytes(big).expect_err(big).to_string();
            assert!(e.contains("too large") && e.contains("2^64"), "{big}: {e}");
        }
        assert!(bytes(".").is_err());
        assert!(bytes("1.2.3").is_err());
        let e = rate("20000000000Gbps").unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        assert!(duration("99999999999999999999999s").is_err());
    }
}
