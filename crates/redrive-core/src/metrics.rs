//! Per-batch figures, written as one CloudWatch Embedded Metric Format log line: CloudWatch turns
//! the line into metrics with no API call from the function.
use serde::Serialize;

use crate::error::ErrorClass;
use crate::fate::{Fate, GiveBackReason};
use crate::handler::Invocation;

/// One batch's figures (the EMF line's metrics).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct BatchReport {
    /// Records in the batch.
    pub records: u32,
    /// Records done.
    pub done: u32,
    /// Done on a later attempt: with `retried`, the share of retries that end well.
    pub done_after_retry: u32,
    /// Records re-sent for a retry.
    pub retried: u32,
    /// Records dead-lettered.
    pub dead_lettered: u32,
    /// Records deferred: re-sent with a delay, or on FIFO waiting in place (given back too).
    pub deferred: u32,
    /// Records given back to SQS.
    pub given_back: u32,
    /// FIFO heads holding their group (`REDRIVE_FIFO_ON_DEAD_LETTER=hold`; given back too): an
    /// operator's job.
    pub held: u32,
    /// Records sent to the retry lane: a held FIFO group's (its head too) and a Kafka key's failed
    /// record and its followers; `retried` counts only copies re-sent to their own queue.
    pub sent_to_lane: u32,
    /// Transient failures.
    pub transient_errors: u32,
    /// Permanent failures.
    pub permanent_errors: u32,
    /// Panics.
    pub panics: u32,
    /// Sends (re-sends and DLQ sends) that SQS refused or that failed as a call.
    pub send_failures: u32,
    /// SQS requests this batch made.
    pub sqs_requests: u32,
    /// The longest retry delay of the batch.
    pub retry_delay_max_seconds: u32,
    /// The retry delays of the batch added up.
    pub retry_delay_sum_seconds: u64,
    /// Large message bodies read from S3 (Extended Client pointers).
    pub payloads_fetched: u32,
    /// Copies whose body went to S3 to leave room for the failure context.
    pub payloads_offloaded: u32,
    /// Objects redrive wrote for a message now done that it could not delete: left to the
    /// bucket's lifecycle rule.
    pub payload_orphans: u32,
    /// FIFO with `REDRIVE_FIFO_ON_DEAD_LETTER=hold`: the heads that hold a group of the batch's
    /// queue, as the attempt ledger listed them when this batch counted them (a container counts
    /// at most once a minute, and after a batch that held or finished a head); `None` when this
    /// batch did not count, which leaves the metric out of the line. The Held alarm watches it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_heads: Option<u32>,
}

const COUNTS: [&str; 17] = [
    "Records",
    "Done",
    "DoneAfterRetry",
    "Retried",
    "DeadLettered",
    "Deferred",
    "GivenBack",
    "Held",
    "SentToLane",
    "TransientErrors",
    "PermanentErrors",
    "Panics",
    "SendFailures",
    "SqsRequests",
    "PayloadsFetched",
    "PayloadsOffloaded",
    "PayloadOrphans",
];

impl BatchReport {
    /// Adds another batch's figures (totals over many batches).
    pub fn absorb(&mut self, other: &BatchReport) {
        self.records += other.records;
        self.done += other.done;
        self.done_after_retry += other.done_after_retry;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.deferred += other.deferred;
        self.given_back += other.given_back;
        self.held += other.held;
        self.sent_to_lane += other.sent_to_lane;
        self.transient_errors += other.transient_errors;
        self.permanent_errors += other.permanent_errors;
        self.panics += other.panics;
        self.send_failures += other.send_failures;
        self.sqs_requests += other.sqs_requests;
        self.retry_delay_max_seconds = self
            .retry_delay_max_seconds
            .max(other.retry_delay_max_seconds);
        self.retry_delay_sum_seconds += other.retry_delay_sum_seconds;
        self.payloads_fetched += other.payloads_fetched;
        self.payloads_offloaded += other.payloads_offloaded;
        self.payload_orphans += other.payload_orphans;
        if other.held_heads.is_some() {
            self.held_heads = other.held_heads;
        }
    }

    pub(crate) fn count_fate(&mut self, fate: &Fate, delay_seconds: u32) {
        match fate {
            Fate::Done => self.done += 1,
            Fate::Retry { .. } => {
                self.retried += 1;
                self.retry_delay_max_seconds = self.retry_delay_max_seconds.max(delay_seconds);
                self.retry_delay_sum_seconds += u64::from(delay_seconds);
            }
            Fate::DeadLetter { .. } => self.dead_lettered += 1,
            Fate::Defer { .. } => self.deferred += 1,
            // A FIFO deferral waits in place: given back, and a deferral for the Deferred alarm.
            Fate::GiveBack {
                reason: GiveBackReason::FifoDefer,
                ..
            } => {
                self.given_back += 1;
                self.deferred += 1;
            }
            Fate::GiveBack {
                reason: GiveBackReason::Held,
                ..
            } => {
                self.given_back += 1;
                self.held += 1;
            }
            Fate::GiveBack { .. } => self.given_back += 1,
            Fate::SendToLane { .. } => self.sent_to_lane += 1,
        }
    }

    pub(crate) fn count_error(&mut self, class: ErrorClass) {
        match class {
            ErrorClass::Transient => self.transient_errors += 1,
            ErrorClass::Permanent => self.permanent_errors += 1,
            ErrorClass::Panic => self.panics += 1,
        }
    }

    /// The EMF log line: metrics in `namespace` with the dimension `Function`, and the
    /// invocation's `requestId` and `traceId` (logged, not metrics), which tie the line to its
    /// invocation when several run in one process.
    pub fn emf_line(
        &self,
        namespace: &str,
        invocation: &Invocation<'_>,
        timestamp_ms: u64,
    ) -> String {
        let fields = serde_json::to_value(self).expect("report serialises");
        let units = COUNTS
            .iter()
            .map(|name| (*name, "Count"))
            .chain(["RetryDelayMaxSeconds", "RetryDelaySumSeconds"].map(|name| (name, "Seconds")))
            .chain(self.held_heads.map(|_| ("HeldHeads", "Count")));
        let mut ids = serde_json::Map::new();
        for (name, id) in [
            ("requestId", invocation.request_id),
            ("traceId", invocation.trace_id),
        ] {
            if let Some(id) = id {
                ids.insert(name.into(), id.into());
            }
        }
        emf_line(
            namespace,
            ("Function", invocation.function_name.unwrap_or_default()),
            timestamp_ms,
            units.map(|(name, unit)| (name, fields[name].clone(), unit)),
            serde_json::Value::Object(ids),
        )
    }
}

/// One EMF line: every figure becomes a metric with `dimension`; `extra` (an object) adds fields
/// that are logged but not turned into metrics.
pub fn emf_line<'a>(
    namespace: &str,
    dimension: (&str, &str),
    timestamp_ms: u64,
    figures: impl IntoIterator<Item = (&'a str, serde_json::Value, &'a str)>,
    extra: serde_json::Value,
) -> String {
    let mut line = match extra {
        serde_json::Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    let mut metrics = Vec::new();
    for (name, value, unit) in figures {
        line.insert(name.into(), value);
        metrics.push(serde_json::json!({ "Name": name, "Unit": unit }));
    }
    line.insert(dimension.0.into(), dimension.1.into());
    line.insert(
        "_aws".into(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": namespace, "Dimensions": [[dimension.0]], "Metrics": metrics }],
        }),
    );
    serde_json::Value::Object(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emf_line_declares_every_figure_it_carries() {
        let report = BatchReport {
            records: 3,
            done: 2,
            dead_lettered: 1,
            permanent_errors: 1,
            ..Default::default()
        };
        let invocation = Invocation {
            function_name: Some("orders"),
            request_id: Some("8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c"),
            ..Invocation::default()
        };
        let line: serde_json::Value =
            serde_json::from_str(&report.emf_line("redrive", &invocation, 1_700_000_000_000))
                .unwrap();
        assert_eq!(line["Function"], "orders");
        assert_eq!(line["requestId"], "8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c");
        assert!(
            line.get("traceId").is_none(),
            "only what the invocation had"
        );
        assert_eq!(line["DeadLettered"], 1);
        let declared = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap();
        for metric in declared {
            let name = metric["Name"].as_str().unwrap();
            assert!(
                line.get(name).is_some(),
                "{name} is declared but not present"
            );
        }
        assert_eq!(
            declared.len(),
            line.as_object().unwrap().len() - 3,
            "every figure is declared"
        );
        assert!(
            line.get("HeldHeads").is_none(),
            "a batch that did not count"
        );
        let counted = BatchReport {
            held_heads: Some(0),
            ..report
        };
        let line: serde_json::Value =
            serde_json::from_str(&counted.emf_line("redrive", &invocation, 1_700_000_000_000))
                .unwrap();
        assert_eq!(line["HeldHeads"], 0);
        assert!(line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|metric| metric["Name"] == "HeldHeads"));
    }
}
