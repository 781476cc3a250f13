//! The process's recorder, installed once: Prometheus's, teed into the status page's figures.
//!
//! The core [`tollgate::Limiter`] records through the process-wide `metrics` facade, so the
//! exporter must be the process's global recorder: a per-server local recorder would not see
//! calls made across `.await` points. It is therefore installed **once per process**
//! ([`handle`]), and every server in the process (several, in tests) renders the same
//! registry.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::describe::describe;
use super::record::build_info;
use super::tee_recorder::TeeRecorder;
use crate::status::observed::observed;

/// Buckets for latency histograms: 50 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus handle, installing the recorder on first use.
///
/// If another recorder was installed first (the service embedded in a program that has its
/// own), the handle renders an empty registry and a warning says so.
pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(TeeRecorder::new(recorder, observed())).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            describe();
            build_info();
            handle
        })
        .clone()
}
