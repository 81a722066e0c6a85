//! A running average of durations: each new sample weighs an eighth, and the first is taken as it
//! is (an average that started at zero would call the first slow handlers fast for a while).

use std::time::Duration;

/// The weight of a new sample, as a power of two (1/8).
const SMOOTHING_SHIFT: u32 = 3;

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Average {
    nanos: Option<u64>,
}

impl Average {
    pub(super) fn add(&mut self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        self.nanos = Some(match self.nanos {
            None => sample,
            Some(average) if sample >= average => average + ((sample - average) >> SMOOTHING_SHIFT),
            Some(average) => average - ((average - sample) >> SMOOTHING_SHIFT),
        });
    }

    /// `None` before the first sample.
    pub(super) fn get(&self) -> Option<Duration> {
        self.nanos.map(Duration::from_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sample_is_the_average_and_later_ones_move_it_by_an_eighth() {
        let mut a = Average::default();
        assert_eq!(a.get(), None);
        a.add(Duration::from_millis(50));
        assert_eq!(a.get(), Some(Duration::from_millis(50)));
        a.add(Duration::from_millis(130));
        assert_eq!(a.get(), Some(Duration::from_millis(60)));
        a.add(Duration::from_millis(20));
        assert_eq!(a.get(), Some(Duration::from_millis(55)));
    }

    #[test]
    fn extreme_samples_never_overflow() {
        let mut a = Average::default();
        a.add(Duration::MAX);
        assert!(a.get().is_some_and(|d| d > Duration::ZERO));
        for _ in 0..400 {
            a.add(Duration::ZERO);
        }
        assert!(a.get().is_some_and(|d| d < Duration::from_nanos(8)));
    }
}
