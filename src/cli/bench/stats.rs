//! One run's latency samples reduced to what the report shows: nearest-rank percentiles and
//! calls per second over the run's wall time.

use std::time::Duration;

/// What one run of a target at one concurrency measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Calls that answered as expected (their latencies are the samples).
    pub calls: usize,
    /// Calls that failed; a run with errors is reported, not hidden.
    pub errors: usize,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Successful calls divided by the run's wall time.
    pub per_sec: f64,
}

impl Summary {
    /// Summarizes `samples` (one per successful call, any order) of a run that took `wall`.
    pub fn new(mut samples: Vec<Duration>, errors: usize, wall: Duration) -> Summary {
        samples.sort_unstable();
        let secs = wall.as_secs_f64();
        Summary {
            calls: samples.len(),
            errors,
            p50: percentile(&samples, 50.0),
            p95: percentile(&samples, 95.0),
            p99: percentile(&samples, 99.0),
            max: samples.last().copied().unwrap_or_default(),
            per_sec: if secs > 0.0 {
                samples.len() as f64 / secs
            } else {
                0.0
            },
        }
    }
}

/// The nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending): the smallest
/// sample with at least p% of the samples at or below it. Zero for no samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_micros).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples = micros(1..=100);
        assert_eq!(percentile(&samples, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&samples, 95.0), Duration::from_micros(95));
        assert_eq!(percentile(&samples, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&samples, 100.0), Duration::from_micros(100));
        // Ten samples: p99 is the largest, p50 the fifth.
        let ten = micros(1..=10);
        assert_eq!(percentile(&ten, 99.0), Duration::from_micros(10));
        assert_eq!(percentile(&ten, 50.0), Duration::from_micros(5));
        assert_eq!(percentile(&micros([7]), 50.0), Duration::from_micros(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn summary_sorts_and_counts_throughput_over_wall_time() {
        let summary = Summary::new(micros([30, 10, 20, 40]), 1, Duration::from_secs(2));
        assert_eq!(summary.calls, 4);
        assert_eq!(summary.errors, 1);
        assert_eq!(summary.p50, Duration::from_micros(20));
        assert_eq!(summary.p99, Duration::from_micros(40));
        assert_eq!(summary.max, Duration::from_micros(40));
        assert!((summary.per_sec - 2.0).abs() < 1e-9);
        assert_eq!(Summary::new(Vec::new(), 0, Duration::ZERO).per_sec, 0.0);
    }
}
