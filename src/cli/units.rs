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
pub(crate) fn bytes(s: &str) -> anyhow::Result<u64> {
    let (n, unit) = split_number(s)?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "k" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "KiB" | "K" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(anyhow::anyhow!(
                "unknown size unit \"{unit}\" in \"{s}\": use B, kB, MB, GB, KiB, MiB or GiB"
            ))
        }
    };
    Ok((n * mult).round() as u64)
}

/// A duration: with ns, us/µs, ms or s.
pub(crate) fn duration(s: &str) -> anyhow::Result<Duration> {
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
    Ok(Duration::from_secs_f64(secs))
}

/// A rate in bit/s: with bps, kbps, Mbps, Gbps (k/M/G are powers of 1000).
pub(crate) fn rate(s: &str) -> anyhow::Result<u64> {
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
    Ok((n * mult).round() as u64)
}

/// A probability: `0.05` or `5%`.
pub(crate) fn probability(s: &str) -> anyhow::Result<f64> {
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
}
