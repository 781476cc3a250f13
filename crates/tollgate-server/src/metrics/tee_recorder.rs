//! The process's metrics recorder: Prometheus's, with two series copied to [`Observed`] for
//! the status page (`tollgate_decisions_total` and `tollgate_store_latency_seconds`).
//!
//! Everything else goes straight to the Prometheus recorder. The copied series' handles are
//! cached by key in a map read without a lock (`ArcSwap`; written once per new key), so a
//! decision costs one map lookup here instead of one in the Prometheus registry, plus one
//! relaxed add: no lock shared by every core on the hot path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::names::{DECISIONS, STORE_LATENCY};
use crate::status::observed::Observed;

/// Prometheus's recorder, teeing two series into [`Observed`].
#[derive(Debug)]
pub(crate) struct TeeRecorder {
    prometheus: PrometheusRecorder,
    observed: Arc<Observed>,
    counters: ArcSwap<HashMap<Key, Counter>>,
    histograms: ArcSwap<HashMap<Key, Histogram>>,
}

impl TeeRecorder {
    pub(crate) fn new(prometheus: PrometheusRecorder, observed: Arc<Observed>) -> TeeRecorder {
        TeeRecorder {
            prometheus,
            observed,
            counters: ArcSwap::default(),
            histograms: ArcSwap::default(),
        }
    }
}

/// A handle cached under `key`, or the one `make` builds (then cached). Two threads making
/// the same one at once both get a handle on the same series.
fn cached<T: Clone>(cache: &ArcSwap<HashMap<Key, T>>, key: &Key, make: impl FnOnce() -> T) -> T {
    if let Some(h) = cache.load().get(key) {
        return h.clone();
    }
    let made = make();
    cache.rcu(|map| {
        let mut map = HashMap::clone(map);
        map.entry(key.clone()).or_insert_with(|| made.clone());
        map
    });
    made
}

struct TeeCounter {
    prometheus: Counter,
    copy: Arc<AtomicU64>,
}

impl CounterFn for TeeCounter {
    fn increment(&self, value: u64) {
        self.prometheus.increment(value);
        self.copy.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.prometheus.absolute(value);
        self.copy.fetch_max(value, Ordering::Relaxed);
    }
}

struct TeeHistogram {
    prometheus: Histogram,
    observed: Arc<Observed>,
}

impl HistogramFn for TeeHistogram {
    fn record(&self, value: f64) {
        self.prometheus.record(value);
        self.observed.store_latency(value);
    }
}

impl Recorder for TeeRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if key.name() != DECISIONS {
            return self.prometheus.register_counter(key, metadata);
        }
        cached(&self.counters, key, || {
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            Counter::from_arc(Arc::new(TeeCounter {
                prometheus: self.prometheus.register_counter(key, metadata),
                copy: self
                    .observed
                    .decision_counter(&label("limit"), &label("outcome")),
            }))
        })
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if key.name() != STORE_LATENCY {
            return self.prometheus.register_histogram(key, metadata);
        }
        cached(&self.histograms, key, || {
            Histogram::from_arc(Arc::new(TeeHistogram {
                prometheus: self.prometheus.register_histogram(key, metadata),
                observed: Arc::clone(&self.observed),
            }))
        })
    }
}
