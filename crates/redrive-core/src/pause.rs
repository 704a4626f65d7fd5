//! Pausing a consumer's intake through an outage of its downstream: the consumer's request to the
//! intake controller (`redrive::intake`), and what a probe answers.

/// A consumer's request to pause its event source mappings while its downstream is down
/// (`REDRIVE_PAUSE_AFTER`): one JSON message on `REDRIVE_PAUSE_QUEUE_URL`, which redrive's intake
/// controller reads (`redrive::intake`). It names the function: its breaker guards the downstream
/// every one of its mappings feeds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PauseRequest {
    /// The consumer function.
    pub function: String,
    /// Since when (ms since the epoch) its breaker has been open.
    pub outage_since_ms: u64,
}

impl PauseRequest {
    /// A request from `function`, down since `outage_since_ms`.
    pub fn new(function: impl Into<String>, outage_since_ms: u64) -> Self {
        Self {
            function: function.into(),
            outage_since_ms,
        }
    }
}

/// The `ClientContext` custom key that marks an invocation as the intake controller's probe
/// (Lambda passes an `Invoke` call's `ClientContext` to the function's context object).
pub const PROBE_KEY: &str = "redrive-probe";

/// A probe's verdict on the consumer's downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeVerdict {
    /// Every record was handled or failed for good: the downstream answers.
    Up,
    /// A record was deferred or failed transiently: still down.
    Down,
}

impl ProbeVerdict {
    /// What `report` says of the downstream.
    pub fn of(report: &crate::metrics::BatchReport) -> Self {
        if report.deferred > 0 || report.transient_errors > 0 {
            Self::Down
        } else {
            Self::Up
        }
    }
}
