//! Expected tool call durations for `tool_eta` events: the mean of each tool's last few
//! successful calls, in a record bounded both per tool and in tools.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::Duration,
};

/// Durations kept per tool: enough to smooth one outlier, few enough to follow a change.
const SAMPLES_PER_TOOL: usize = 8;

/// Tools remembered; the one recorded least recently goes first.
const MAX_TOOLS: usize = 512;

/// Recent durations by canonical tool id.
#[derive(Debug, Default)]
pub struct Etas {
    inner: Mutex<Record>,
}

#[derive(Debug, Default)]
struct Record {
    samples: HashMap<String, VecDeque<Duration>>,
    /// Tools in the order they were last recorded, oldest first.
    recency: VecDeque<String>,
}

impl Etas {
    pub fn new() -> Etas {
        Etas::default()
    }

    /// Notes that a call of `tool` took `took`.
    pub fn record(&self, tool: &str, took: Duration) {
        let mut record = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let record = &mut *record;
        if let Some(at) = record.recency.iter().position(|t| t == tool) {
            record.recency.remove(at);
        } else if record.recency.len() >= MAX_TOOLS
            && let Some(oldest) = record.recency.pop_front()
        {
            record.samples.remove(&oldest);
        }
        record.recency.push_back(tool.to_owned());
        let samples = record.samples.entry(tool.to_owned()).or_default();
        if samples.len() >= SAMPLES_PER_TOOL {
            samples.pop_front();
        }
        samples.push_back(took);
    }

    /// The expected duration of a call of `tool`, when any call of it was recorded.
    pub fn expected(&self, tool: &str) -> Option<Duration> {
        let record = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let samples = record.samples.get(tool)?;
        let count = u32::try_from(samples.len()).ok().filter(|n| *n > 0)?;
        Some(samples.iter().sum::<Duration>() / count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_of_recent_samples() {
        let etas = Etas::new();
        assert_eq!(etas.expected("a.b"), None);
        for ms in [100, 300] {
            etas.record("a.b", Duration::from_millis(ms));
        }
        assert_eq!(etas.expected("a.b"), Some(Duration::from_millis(200)));
        for _ in 0..SAMPLES_PER_TOOL {
            etas.record("a.b", Duration::from_millis(50));
        }
        assert_eq!(etas.expected("a.b"), Some(Duration::from_millis(50)));
    }

    #[test]
    fn bounded_in_tools() {
        let etas = Etas::new();
        for n in 0..=MAX_TOOLS {
            etas.record(&format!("s.t{n}"), Duration::from_millis(1));
        }
        assert_eq!(etas.expected("s.t0"), None, "the oldest tool was forgotten");
        assert!(etas.expected(&format!("s.t{MAX_TOOLS}")).is_some());
    }
}
