//! Percentiles and one-line summaries of samples (latencies in ms, ratios).

/// Nearest-rank percentile `p` (0–100) of `samples`; NaN when empty.
#[must_use]
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `n=N p50=… p99=… max=…` of `samples` (three decimals), `n=0` when empty.
#[must_use]
pub fn summary(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "n=0".to_owned();
    }
    format!(
        "n={} p50={:.3} p99={:.3} max={:.3}",
        samples.len(),
        percentile(samples, 50.0),
        percentile(samples, 99.0),
        percentile(samples, 100.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), 50.0);
        assert_eq!(percentile(&samples, 99.0), 99.0);
        assert_eq!(percentile(&samples, 100.0), 100.0);
        assert_eq!(percentile(&samples, 0.0), 1.0);
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!(summary(&[]), "n=0");
    }
}
