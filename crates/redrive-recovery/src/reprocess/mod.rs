//! The DLQ reprocessor: drains a dead-letter queue under a [`ReprocessPolicy`]. Each message is
//! re-sent to its origin (reprocess), archived and deleted (discard), or left where it is (manual
//! review, alert, not yet, filtered out). A message is deleted from the DLQ only after SQS has
//! confirmed the copy; whatever is left is made visible again when the run ends.
mod command;
mod groups;
mod inventory;
mod job;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use command::{AttributeFilter, Filter, Plan, ReprocessCommand};
pub use groups::{failure_groups, FailureGroup, Fingerprint};
pub use inventory::{browse, export_line, tenant_counts, Inventory};
pub use job::{Job, JobAction};

use crate::settings::ReprocessSettings;
use inventory::make_visible;
use redrive_core::carry::{Courier, Destination, Outbox};
use redrive_core::clock::{Clock, SystemClock};
use redrive_core::envelope::{annotate, Meta, Timestamp};
use redrive_core::error::{ErrorClass, PortError};
use redrive_core::idempotency::fingerprint;
use redrive_core::port::QueuePort;
use redrive_core::reprocess_policy::{Disposition, ReprocessPolicy};
use redrive_event::{SqsRecord, Text};

/// What a run did (or, in a dry run, would do). `examined` = the sum of the decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReprocessSummary {
    /// URL of the DLQ drained.
    pub source: String,
    /// Nothing was changed.
    pub dry_run: bool,
    /// Messages examined.
    pub examined: u32,
    /// Messages sent home (and deleted from the DLQ, unless a copy run).
    pub reprocessed: u32,
    /// Messages archived or dropped by policy.
    pub discarded: u32,
    /// Messages left for a person.
    pub manual_review: u32,
    /// Messages that used up their redrives.
    pub alerted: u32,
    /// Messages whose backoff has not passed.
    pub not_yet: u32,
    /// Messages the filter left out.
    pub filtered_out: u32,
    /// Re-sends or archive copies SQS did not confirm: those messages stay in the DLQ.
    pub send_failures: u32,
    /// Sent but not deleted from the DLQ: each will be examined again (a duplicate downstream).
    pub delete_failures: u32,
    /// Examined messages by error class (`none`: moved by SQS itself, no metadata).
    pub by_class: BTreeMap<String, u32>,
    /// Whether the run stopped before the DLQ was empty (limit or deadline).
    pub stopped_early: bool,
    /// The age, from its `SentTimestamp`, of the oldest message the run left in the DLQ (0 when
    /// it left none). SQS leaves a message received three times or more out of
    /// `ApproximateAgeOfOldestMessage`, and every run receives what it leaves: after three runs
    /// only this figure sees it age towards the DLQ's retention.
    pub oldest_left_seconds: u64,
    /// Messages of the run's selection it did not find: gone from the DLQ since the selection
    /// was made (redriven by an earlier run of the job, deleted), or hidden by another reader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection_not_found: Option<u32>,
}

impl ReprocessSummary {
    /// The summary as one CloudWatch Embedded Metric Format line (dimension `Source`: the DLQ).
    pub fn emf_line(&self, namespace: &str, timestamp_ms: u64) -> String {
        let figures = [
            ("Examined", self.examined),
            ("Reprocessed", self.reprocessed),
            ("Discarded", self.discarded),
            ("ManualReview", self.manual_review),
            ("Alerted", self.alerted),
            ("NotYet", self.not_yet),
            ("FilteredOut", self.filtered_out),
            ("SendFailures", self.send_failures),
            ("DeleteFailures", self.delete_failures),
        ];
        let queue = self.source.rsplit('/').next().unwrap_or_default();
        let figures = figures
            .map(|(name, value)| (name, value.into(), "Count"))
            .into_iter()
            .chain([(
                "OldestLeftSeconds",
                self.oldest_left_seconds.into(),
                "Seconds",
            )]);
        redrive_core::metrics::emf_line(
            namespace,
            ("Source", queue),
            timestamp_ms,
            figures,
            serde_json::json!({ "DryRun": self.dry_run, "ByClass": self.by_class }),
        )
    }
}

/// How long a batch begun before a run's stop time may still send: the function stops starting
/// batches 10 s before its deadline, and a send cut off leaves its message in the DLQ.
const SEND_GRACE: Duration = Duration::from_secs(5);

/// How long received messages stay hidden while a run decides about them.
const HOLD: Duration = Duration::from_secs(120);

/// Drains a DLQ under a [`ReprocessPolicy`].
pub struct Reprocessor<Q> {
    carry: Courier<Q>,
    policy: ReprocessPolicy,
    clock: Arc<dyn Clock>,
    abort: Option<Arc<AtomicBool>>,
}

/// One received message and what the run decided for it.
struct Examined {
    record: SqsRecord<'static>,
    /// `None`: the command's filters left it out.
    decision: Option<Disposition>,
    /// The queue a reprocessed message goes to.
    destination_arn: Option<String>,
}

impl<Q: QueuePort> Reprocessor<Q> {
    /// A reprocessor that makes its SQS calls through `queue`.
    pub fn new(queue: Q, settings: &ReprocessSettings) -> Self {
        Self {
            carry: Courier::new(queue, None),
            policy: settings.policy.clone(),
            clock: Arc::new(SystemClock),
            abort: None,
        }
    }

    /// Stops a run at its next batch once `abort` is set (an operator's abort): what it sent is
    /// deleted first, what it holds is made visible again, and the summary says it stopped early.
    pub fn with_abort(mut self, abort: Arc<AtomicBool>) -> Self {
        self.abort = Some(abort);
        self
    }

    /// Reads the time from `clock` (tests move it by hand).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The port (tests read what it was asked).
    pub fn queue(&self) -> &Q {
        self.carry.queue()
    }

    /// Drains `plan.source_url` until it is empty, `plan.max_messages` were examined or
    /// `stop_at` is near. `progress` sees the running summary after every batch.
    pub async fn run(
        &self,
        plan: &Plan,
        stop_at: Option<Instant>,
        mut progress: impl FnMut(&ReprocessSummary),
    ) -> Result<ReprocessSummary, PortError> {
        let mut summary = ReprocessSummary {
            source: plan.source_url.clone(),
            dry_run: plan.dry_run,
            ..ReprocessSummary::default()
        };
        // tokio's clock, so that the rate can be counted against a paused clock in tests.
        let started = tokio::time::Instant::now();
        let mut seen = HashSet::new();
        let mut left: Vec<String> = Vec::new();
        let selected = plan.filter.selection.as_ref().map(BTreeSet::len);
        let mut selected_seen = 0;
        let outcome = loop {
            if selected.is_some_and(|selected| selected_seen >= selected) {
                break Ok(());
            }
            if summary.examined >= plan.max_messages
                || stop_at.is_some_and(|at| Instant::now() >= at)
                || self
                    .abort
                    .as_ref()
                    .is_some_and(|abort| abort.load(Ordering::Relaxed))
            {
                summary.stopped_early = true;
                break Ok(());
            }
            let want = (plan.max_messages - summary.examined).min(10);
            let records = match self
                .queue()
                .receive(&plan.source_url, want, HOLD, Duration::from_secs(1))
                .await
            {
                Ok(records) if records.is_empty() => break Ok(()),
                Ok(records) => records,
                Err(error) => break Err(error),
            };
            let mut batch = Vec::with_capacity(records.len());
            for record in records {
                let id = record.message_id.as_deref().unwrap_or_default().to_owned();
                if !seen.insert(id) {
                    // Seen earlier in this run (its hold ran out): decided already.
                    left.extend(record.receipt_handle.as_deref().map(str::to_owned));
                    continue;
                }
                if selected.is_some() && plan.filter.selects(&record) {
                    selected_seen += 1;
                }
                batch.push(self.examine(record, plan, &mut summary));
            }
            let deadline = stop_at.map(|at| tokio::time::Instant::from_std(at + SEND_GRACE));
            self.carry_out(&batch, plan, deadline, &mut summary, &mut left)
                .await;
            progress(&summary);
            let sent = summary.reprocessed + summary.discarded;
            let due = Duration::from_secs_f64(f64::from(sent) / plan.rate_per_second);
            // The clock is read once: read twice, the wait could come out negative and panic.
            let wait = due.saturating_sub(started.elapsed());
            if !plan.dry_run && !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        };
        make_visible(self.queue(), &plan.source_url, &left).await;
        summary.selection_not_found =
            selected.map(|selected| u32::try_from(selected - selected_seen).unwrap_or(u32::MAX));
        outcome.map(|()| summary)
    }

    fn examine(
        &self,
        record: SqsRecord<'static>,
        plan: &Plan,
        summary: &mut ReprocessSummary,
    ) -> Examined {
        summary.examined += 1;
        let now = self.clock.now_ms();
        let sent_ms = record.sent_ms().unwrap_or(now);
        let (decision, destination_arn) = match Meta::of(&record) {
            Some(Err(error)) => {
                *summary.by_class.entry("unreadable".into()).or_default() += 1;
                (
                    Some(Disposition::ManualReview {
                        reason: format!("unreadable redrive metadata: {error}"),
                    }),
                    None,
                )
            }
            meta => {
                let meta = meta.and_then(Result::ok);
                let class = meta.as_ref().map_or("none", |m| m.error_class.as_str());
                *summary.by_class.entry(class.into()).or_default() += 1;
                let failed_at = command::last_failure_ms(&record, meta.as_ref(), now);
                // An operator's destination; else the origin the metadata names; else, for a
                // message SQS moved by itself, the queue it came from (one DLQ may serve several);
                // else the configured fallback.
                let destination_arn = plan
                    .destination_arn
                    .clone()
                    .or_else(|| {
                        meta.as_ref()
                            .map(|m| m.origin_queue_arn.to_string())
                            .filter(|arn| !arn.is_empty())
                    })
                    .or_else(|| {
                        let moved_from = record.attributes.dead_letter_queue_source_arn.as_deref();
                        moved_from.map(str::to_owned)
                    })
                    .or_else(|| plan.fallback_destination_arn.clone());
                let age = now.saturating_sub(failed_at);
                let decision = if !plan.filter.admits(&record, meta.as_ref(), age) {
                    None
                } else if plan.discard {
                    Some(Disposition::Discard {
                        reason: "discarded by an operator".into(),
                    })
                } else if plan.force {
                    Some(self.policy.decide_requested(meta.as_ref()))
                } else {
                    Some(self.policy.decide(meta.as_ref(), sent_ms, now))
                };
                (decision, destination_arn)
            }
        };
        Examined {
            record,
            decision,
            destination_arn,
        }
    }

    /// Sends re-sent copies and archive copies, deletes what SQS confirmed, logs what is left.
    async fn carry_out(
        &self,
        batch: &[Examined],
        plan: &Plan,
        deadline: Option<tokio::time::Instant>,
        summary: &mut ReprocessSummary,
        left: &mut Vec<String>,
    ) {
        let now = self.clock.now_ms();
        let mut outboxes: BTreeMap<&str, Outbox<'_>> = BTreeMap::new();
        let mut archive = Outbox::default();
        let mut delete = vec![false; batch.len()];
        for (index, examined) in batch.iter().enumerate() {
            let record = &examined.record;
            let id = record.message_id.as_deref().unwrap_or_default();
            match &examined.decision {
                None => summary.filtered_out += 1,
                Some(Disposition::NotYet { .. }) => summary.not_yet += 1,
                Some(Disposition::ManualReview { reason }) => {
                    summary.manual_review += 1;
                    tracing::info!(message_id = id, %reason, "left for manual review");
                }
                Some(Disposition::Alert { reason }) => {
                    summary.alerted += 1;
                    tracing::error!(
                        message_id = id,
                        %reason,
                        meta = meta_text(record),
                        "redrive cap reached: needs a person",
                    );
                }
                Some(Disposition::Discard { reason }) => {
                    // The body may hold personal data, and logs are kept and read more widely than
                    // queues: it goes to the archive queue; the log names it by id and fingerprint.
                    let body = record.body.as_deref().unwrap_or_default();
                    tracing::warn!(
                        message_id = id,
                        %reason,
                        dry_run = plan.dry_run,
                        body_fingerprint = format_args!("{:016x}", fingerprint(body)),
                        body_bytes = body.len(),
                        meta = meta_text(record),
                        "discarded",
                    );
                    match (plan.dry_run, &plan.archive_url, as_is(record)) {
                        (true, _, _) => summary.discarded += 1,
                        (false, None, _) => {
                            summary.discarded += 1;
                            delete[index] = true;
                        }
                        (false, Some(_), Some(copy)) => archive.push(index, copy),
                        (false, Some(_), None) => summary.send_failures += 1,
                    }
                }
                Some(Disposition::Reprocess) => match (&examined.destination_arn, plan.dry_run) {
                    (None, _) => {
                        summary.manual_review += 1;
                        tracing::info!(
                            message_id = id,
                            "left for manual review: SQS moved it without metadata, so it names no origin; give a destination",
                        );
                    }
                    (Some(_), true) => summary.reprocessed += 1,
                    (Some(arn), false) => match redriven(record, arn, now) {
                        Some(copy) => outboxes.entry(arn).or_default().push(index, copy),
                        None => summary.send_failures += 1,
                    },
                },
            }
        }

        let mut sends: Vec<(Destination<'_>, &Outbox<'_>)> = outboxes
            .iter()
            .map(|(arn, outbox)| (Destination::Arn(arn), outbox))
            .collect();
        if let Some(url) = &plan.archive_url {
            sends.push((Destination::Url(url), &archive));
        }
        let failed = self.carry.send(&sends, deadline).await.records;
        let refused: HashSet<usize> = failed.iter().map(|(index, _)| *index).collect();
        for outbox in outboxes.values() {
            for &index in outbox.indexes.iter().filter(|i| !refused.contains(i)) {
                summary.reprocessed += 1;
                delete[index] = true;
            }
        }
        for &index in archive.indexes.iter().filter(|i| !refused.contains(i)) {
            summary.discarded += 1;
            delete[index] = true;
        }
        for (index, reason) in &failed {
            let id = batch[*index]
                .record
                .message_id
                .as_deref()
                .unwrap_or_default();
            tracing::error!(
                message_id = id,
                error = %reason,
                "send not confirmed: the message stays in the DLQ",
            );
            summary.send_failures += 1;
        }

        let (mut done, mut stay) = (Vec::new(), Vec::new());
        for (examined, delete) in batch.iter().zip(delete) {
            let delete = delete && !plan.copy;
            if !delete {
                let sent_ms = examined.record.sent_ms().unwrap_or(now);
                let age = Duration::from_millis(now.saturating_sub(sent_ms)).as_secs();
                summary.oldest_left_seconds = summary.oldest_left_seconds.max(age);
            }
            if let Some(handle) = examined.record.receipt_handle.as_deref() {
                if delete {
                    done.push(handle)
                } else {
                    stay.push(handle.to_owned())
                }
            }
        }
        left.extend(stay);
        for handles in done.chunks(10) {
            let refused = match self.queue().delete_batch(&plan.source_url, handles).await {
                Ok(failures) => failures.len(),
                Err(error) => {
                    tracing::error!(
                        %error,
                        "delete not confirmed: those messages will be examined again",
                    );
                    handles.len()
                }
            };
            summary.delete_failures += u32::try_from(refused).unwrap_or(u32::MAX);
        }
    }
}

pub(super) fn meta_text<'r>(record: &'r SqsRecord<'r>) -> &'r str {
    record
        .message_attributes
        .get(redrive_core::envelope::META_ATTRIBUTE)
        .and_then(|value| value.string_value.as_deref())
        .unwrap_or_default()
}

/// The copy sent back to `destination_arn`: a fresh set of attempts, `reprocessCount` + 1, the
/// failure history kept. A message SQS moved by itself gets metadata here for the first time.
fn redriven<'r>(
    record: &'r SqsRecord<'r>,
    destination_arn: &str,
    now: u64,
) -> Option<redrive_core::envelope::OutgoingMessage<'r>> {
    let id = record.message_id.as_deref().unwrap_or_default();
    let mut meta = match Meta::of(record) {
        Some(Ok(meta)) => meta,
        _ => {
            let sent = record.sent_ms().unwrap_or(now);
            Meta::new(
                Text::from(destination_arn.to_owned()),
                Text::from(id),
                Timestamp(sent),
                ErrorClass::Transient,
                Text::from("max_receive_count"),
                Text::from("moved to the DLQ by SQS after maxReceiveCount receives"),
            )
        }
    };
    meta.attempts = 0;
    meta.due_at = None;
    meta.dead_lettered_at = None;
    meta.reprocess_count += 1;
    meta.redriven_at = Some(Timestamp(now));
    let count = meta.reprocess_count;
    let mut copy = annotate(record, meta).ok()?;
    if destination_arn.ends_with(".fifo") {
        copy.group_id = Some(
            record
                .attributes
                .message_group_id
                .clone()
                .unwrap_or_else(|| Text::from("redrive")),
        );
        copy.deduplication_id = Some(Text::from(format!("{id}-r{count}")));
    }
    Some(copy)
}

/// The message as it is (body, attributes, metadata) for the archive queue.
fn as_is<'r>(record: &'r SqsRecord<'r>) -> Option<redrive_core::envelope::OutgoingMessage<'r>> {
    match Meta::of(record) {
        Some(Ok(meta)) => annotate(record, meta).ok(),
        _ => Some(redrive_core::envelope::OutgoingMessage {
            body: Text::from(record.body.as_deref().unwrap_or_default()),
            attributes: record
                .message_attributes
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            delay_seconds: 0,
            group_id: record.attributes.message_group_id.clone(),
            deduplication_id: None,
            trace_header: record.attributes.aws_trace_header.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_core::clock::ManualClock;
    use redrive_core::port::{Call, RecordingQueue};
    use redrive_event::MessageAttribute;

    pub(super) const NOW: u64 = 1_763_790_000_000;
    const HOUR: u64 = 3_600_000;
    pub(super) const DLQ: &str = "https://sqs.local/123456789012/orders-dlq";
    const ORIGIN_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:orders";
    pub(super) const ORIGIN: &str = "https://sqs.local/123456789012/orders";

    pub(super) fn dead_letter(
        id: &str,
        class: Option<ErrorClass>,
        reprocess_count: u32,
    ) -> SqsRecord<'static> {
        failed_ago(id, class, reprocess_count, HOUR)
    }

    fn failed_ago(
        id: &str,
        class: Option<ErrorClass>,
        reprocess_count: u32,
        ago: u64,
    ) -> SqsRecord<'static> {
        let mut record = SqsRecord {
            message_id: Some(Text::from(id.to_owned())),
            receipt_handle: Some(Text::from(format!("rh-{id}"))),
            body: Some(redrive_event::Body::from(format!("{{\"id\":\"{id}\"}}"))),
            ..SqsRecord::default()
        };
        record.attributes.sent_timestamp = Some(Text::from((NOW - 2 * HOUR).to_string()));
        record.attributes.aws_trace_header = Some(Text::from(trace_header(id)));
        let tenant = MessageAttribute {
            string_value: Some(Text::from("acme")),
            binary_value: None,
            data_type: Text::from("String"),
        };
        record
            .message_attributes
            .insert(Text::from("tenant"), tenant);
        if let Some(class) = class {
            let mut meta = Meta::new(
                Text::from(ORIGIN_ARN),
                Text::from(id.to_owned()),
                Timestamp(NOW - 2 * HOUR),
                class,
                Text::from("payment_timeout"),
                Text::from("timed out"),
            );
            meta.attempts = 5;
            meta.last_failure_at = Timestamp(NOW - ago);
            meta.reprocess_count = reprocess_count;
            let copy = annotate(&record, meta).unwrap().into_owned();
            record.message_attributes = copy.attributes.into_iter().collect();
        }
        record
    }

    fn trace_header(id: &str) -> String {
        format!(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;id={id}"
        )
    }

    pub(super) fn reprocessor(settings: &ReprocessSettings) -> Reprocessor<RecordingQueue> {
        Reprocessor::new(RecordingQueue::default(), settings)
            .with_clock(Arc::new(ManualClock::at(NOW)))
    }

    pub(super) fn settings() -> ReprocessSettings {
        ReprocessSettings::from_lookup([], |_| None).unwrap()
    }

    fn plan(command: ReprocessCommand) -> Plan {
        ReprocessCommand {
            source: Some(DLQ.into()),
            ..command
        }
        .plan(&settings())
        .unwrap()
    }

    pub(super) fn released(queue: &RecordingQueue) -> Vec<String> {
        queue
            .visibility_changes()
            .into_iter()
            .map(|(handle, timeout)| {
                assert_eq!(timeout, Duration::ZERO);
                handle
            })
            .collect()
    }

    #[tokio::test]
    async fn eligible_messages_go_back_to_their_origin_and_are_deleted_only_after_the_send() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        queue.stock(
            DLQ,
            [
                dead_letter("due", Some(ErrorClass::Transient), 0),
                dead_letter("invalid", Some(ErrorClass::Permanent), 0),
                dead_letter("capped", Some(ErrorClass::Transient), 3),
                failed_ago("recent", Some(ErrorClass::Transient), 2, 10 * 60_000),
            ],
        );
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), None, |_| {})
            .await
            .unwrap();
        assert_eq!(
            (
                summary.examined,
                summary.reprocessed,
                summary.manual_review,
                summary.alerted,
                summary.not_yet
            ),
            (4, 1, 1, 1, 1)
        );
        let sent = queue.sent_to(ORIGIN);
        assert_eq!(sent.len(), 1);
        assert_eq!(&*sent[0].body, "{\"id\":\"due\"}");
        assert_eq!(sent[0].attribute("tenant"), Some("acme"));
        assert_eq!(
            sent[0].trace_header.as_deref(),
            Some(&*trace_header("due")),
            "the trace goes on"
        );
        let meta: Meta<'_> = serde_json::from_str(sent[0].attribute("redrive").unwrap()).unwrap();
        assert_eq!((meta.attempts, meta.reprocess_count), (0, 1));
        assert_eq!(
            meta.redriven_at,
            Some(Timestamp(NOW)),
            "the deferral age restarts"
        );
        assert_eq!(&*meta.error_kind, "payment_timeout", "history kept");
        assert_eq!(queue.deleted_from(DLQ), ["rh-due"]);
        let send_at = queue
            .calls()
            .iter()
            .position(|c| matches!(c, Call::Send { .. }));
        let delete_at = queue
            .calls()
            .iter()
            .position(|c| matches!(c, Call::Delete { .. }));
        assert!(send_at < delete_at, "send first, delete after");
        assert_eq!(released(queue), ["rh-invalid", "rh-capped", "rh-recent"]);
    }

    /// Issue 43, item 2: what a run leaves is received again by every run, so SQS soon leaves it
    /// out of `ApproximateAgeOfOldestMessage`; the run reports its age for the expiry alarm, and
    /// only what it left (a message sent home older still does not count).
    #[tokio::test]
    async fn a_run_reports_the_age_of_the_oldest_message_it_left() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        let mut old_but_sent_home = dead_letter("due", Some(ErrorClass::Transient), 0);
        old_but_sent_home.attributes.sent_timestamp =
            Some(Text::from((NOW - 72 * HOUR).to_string()));
        let mut left_longest = dead_letter("invalid", Some(ErrorClass::Permanent), 0);
        left_longest.attributes.sent_timestamp = Some(Text::from((NOW - 9 * HOUR).to_string()));
        queue.stock(
            DLQ,
            [
                old_but_sent_home,
                left_longest,
                failed_ago("recent", Some(ErrorClass::Transient), 2, 10 * 60_000),
            ],
        );
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), None, |_| {})
            .await
            .unwrap();
        assert_eq!((summary.reprocessed, summary.examined), (1, 3));
        assert_eq!(summary.oldest_left_seconds, 9 * 3600);
        let line: serde_json::Value =
            serde_json::from_str(&summary.emf_line("redrive", NOW)).unwrap();
        assert_eq!(line["OldestLeftSeconds"], 9 * 3600);
    }

    #[tokio::test]
    async fn a_refused_send_leaves_the_message_in_the_dlq() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        queue.stock(
            DLQ,
            [
                dead_letter("ok", Some(ErrorClass::Transient), 0),
                dead_letter("refused", Some(ErrorClass::Transient), 0),
            ],
        );
        queue.refuse_entries_containing("refused");
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), None, |_| {})
            .await
            .unwrap();
        assert_eq!((summary.reprocessed, summary.send_failures), (1, 1));
        assert_eq!(queue.deleted_from(DLQ), ["rh-ok"]);
        assert_eq!(released(queue), ["rh-refused"]);

        let reprocessor = reprocessor_failing_origin();
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), None, |_| {})
            .await
            .unwrap();
        assert_eq!((summary.reprocessed, summary.send_failures), (0, 1));
        assert!(reprocessor.queue().deleted_from(DLQ).is_empty());
    }

    fn reprocessor_failing_origin() -> Reprocessor<RecordingQueue> {
        let reprocessor = reprocessor(&settings());
        reprocessor
            .queue()
            .stock(DLQ, [dead_letter("a", Some(ErrorClass::Transient), 0)]);
        reprocessor.queue().fail_calls_to(ORIGIN);
        reprocessor
    }

    #[tokio::test]
    async fn a_dry_run_sends_and_deletes_nothing() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        queue.stock(
            DLQ,
            [
                dead_letter("due", Some(ErrorClass::Transient), 0),
                dead_letter("invalid", Some(ErrorClass::Permanent), 0),
            ],
        );
        let command = ReprocessCommand {
            dry_run: true,
            ..ReprocessCommand::default()
        };
        let summary = reprocessor.run(&plan(command), None, |_| {}).await.unwrap();
        assert_eq!((summary.reprocessed, summary.manual_review), (1, 1));
        assert!(queue
            .calls()
            .iter()
            .all(|c| matches!(c, Call::Receive { .. } | Call::ChangeVisibility { .. })));
        assert_eq!(released(queue), ["rh-due", "rh-invalid"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_spaces_the_sends_on_the_clock() {
        let reprocessor = reprocessor(&settings());
        let letters: Vec<_> = (0..25)
            .map(|i| dead_letter(&format!("m-{i}"), Some(ErrorClass::Transient), 0))
            .collect();
        reprocessor.queue().stock(DLQ, letters);
        let started = tokio::time::Instant::now();
        let plan = plan(ReprocessCommand {
            rate_per_second: Some(10.0),
            ..ReprocessCommand::default()
        });
        let mut sent_at = Vec::new();
        let summary = reprocessor
            .run(&plan, None, |summary| {
                sent_at.push((summary.reprocessed, started.elapsed()))
            })
            .await
            .unwrap();
        assert_eq!(summary.reprocessed, 25);
        assert_eq!(reprocessor.queue().sent_to(ORIGIN).len(), 25);
        // Ten a second: each batch of ten goes out only once the ones before it are a second old.
        let secs = |s: f64| Duration::from_secs_f64(s);
        assert_eq!(
            sent_at,
            [(10, secs(0.0)), (20, secs(1.0)), (25, secs(2.0))],
            "(sent so far, paused-clock time it was sent at)"
        );
        assert_eq!(
            started.elapsed(),
            secs(2.5),
            "and the run waits out the last"
        );
    }

    fn failed_on_version(id: &str, version: Option<&str>) -> SqsRecord<'static> {
        let mut record = dead_letter(id, Some(ErrorClass::Transient), 0);
        let mut meta = Meta::of(&record).unwrap().unwrap().into_owned();
        meta.failed_in = Some(redrive_core::envelope::FailedIn {
            function: "orders".into(),
            version: version.map(str::to_owned),
            request_id: format!("r-{id}"),
            trace_id: None,
        });
        let copy = annotate(&record, meta).unwrap().into_owned();
        record.message_attributes = copy.attributes.into_iter().collect();
        record
    }

    /// Issue 55: what failed before a fix deployed as version 8 goes home; what failed on 8 and
    /// later, on `$LATEST` or with no version named stays.
    #[tokio::test]
    async fn before_a_version_takes_what_failed_on_published_versions_below_it() {
        let reprocessor = reprocessor(&settings());
        let versions = [
            Some("6"),
            Some("7"),
            Some("8"),
            Some("9"),
            Some("$LATEST"),
            None,
        ];
        reprocessor.queue().stock(
            DLQ,
            versions
                .iter()
                .enumerate()
                .map(|(n, version)| failed_on_version(&format!("m{n}"), *version)),
        );
        let command = ReprocessCommand {
            before_version: Some(8),
            ..ReprocessCommand::default()
        };
        let summary = reprocessor.run(&plan(command), None, |_| {}).await.unwrap();
        assert_eq!((summary.reprocessed, summary.filtered_out), (2, 4));
        assert_eq!(reprocessor.queue().deleted_from(DLQ), ["rh-m0", "rh-m1"]);
    }

    #[tokio::test]
    async fn a_copy_run_sends_and_leaves_every_message_in_the_dlq() {
        let reprocessor = reprocessor(&settings());
        reprocessor.queue().stock(
            DLQ,
            [
                dead_letter("a", Some(ErrorClass::Transient), 0),
                dead_letter("b", Some(ErrorClass::Transient), 0),
            ],
        );
        let summary = reprocessor
            .run(
                &plan(ReprocessCommand {
                    copy: true,
                    ..ReprocessCommand::default()
                }),
                None,
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!(summary.reprocessed, 2);
        assert_eq!(reprocessor.queue().sent_to(ORIGIN).len(), 2);
        assert!(
            reprocessor.queue().deleted_from(DLQ).is_empty(),
            "nothing deleted"
        );
    }

    #[tokio::test]
    async fn messages_sqs_moved_itself_need_a_destination() {
        let reprocessor = reprocessor(&settings());
        reprocessor
            .queue()
            .stock(DLQ, [dead_letter("moved", None, 0)]);
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), None, |_| {})
            .await
            .unwrap();
        assert_eq!((summary.manual_review, summary.reprocessed), (1, 0));
        assert_eq!(summary.by_class.get("none"), Some(&1));

        let reprocessor = self::reprocessor(&settings());
        reprocessor
            .queue()
            .stock(DLQ, [dead_letter("moved", None, 0)]);
        let command = ReprocessCommand {
            destination: Some(ORIGIN_ARN.into()),
            ..ReprocessCommand::default()
        };
        let summary = reprocessor.run(&plan(command), None, |_| {}).await.unwrap();
        assert_eq!(summary.reprocessed, 1);
        let sent = reprocessor.queue().sent_to(ORIGIN);
        let meta: Meta<'_> = serde_json::from_str(sent[0].attribute("redrive").unwrap()).unwrap();
        assert_eq!(
            (meta.reprocess_count, &*meta.error_kind),
            (1, "max_receive_count")
        );
    }

    #[tokio::test]
    async fn a_message_sqs_moved_goes_back_to_the_queue_it_came_from_else_to_the_fallback() {
        const PAYMENTS_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:payments";
        let settings =
            ReprocessSettings::from_lookup(["REDRIVE_REPROCESS_DESTINATION_ARN"], |name| {
                (name == "REDRIVE_REPROCESS_DESTINATION_ARN").then(|| ORIGIN_ARN.into())
            })
            .unwrap();
        let reprocessor = reprocessor(&settings);
        let mut from_payments = dead_letter("from-payments", None, 0);
        from_payments.attributes.dead_letter_queue_source_arn = Some(Text::from(PAYMENTS_ARN));
        reprocessor
            .queue()
            .stock(DLQ, [from_payments, dead_letter("unnamed", None, 0)]);
        let plan = ReprocessCommand {
            source: Some(DLQ.into()),
            ..ReprocessCommand::default()
        }
        .plan(&settings)
        .unwrap();
        let summary = reprocessor.run(&plan, None, |_| {}).await.unwrap();
        assert_eq!(summary.reprocessed, 2);
        let ids = |url: &str| -> Vec<String> {
            reprocessor
                .queue()
                .sent_to(url)
                .iter()
                .map(|m| {
                    let meta: Meta<'_> =
                        serde_json::from_str(m.attribute("redrive").unwrap()).unwrap();
                    meta.origin_message_id.to_string()
                })
                .collect()
        };
        assert_eq!(
            ids("https://sqs.local/123456789012/payments"),
            ["from-payments"]
        );
        assert_eq!(
            ids(ORIGIN),
            ["unnamed"],
            "REDRIVE_REPROCESS_DESTINATION_ARN"
        );
    }

    /// A DLQ shared by two source queues, drained by the scheduled command (its fallback the
    /// queue the schedule was made for): each message goes home to its own origin.
    #[tokio::test]
    async fn a_shared_dlq_sends_each_message_to_its_own_origin_and_only_unnamed_ones_to_the_fallback(
    ) {
        const PAYMENTS_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:payments";
        const SHIPPING_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:shipping";
        let reprocessor = reprocessor(&settings());
        let failed = dead_letter("payments-1", Some(ErrorClass::Transient), 0);
        let mut meta = Meta::of(&failed).unwrap().unwrap().into_owned();
        meta.origin_queue_arn = Text::from(PAYMENTS_ARN);
        let mut payments = dead_letter("payments-1", None, 0);
        let annotated = annotate(&payments, meta).unwrap().into_owned();
        payments.message_attributes = annotated.attributes.into_iter().collect();
        let mut shipping = dead_letter("shipping-1", None, 0);
        shipping.attributes.dead_letter_queue_source_arn = Some(Text::from(SHIPPING_ARN));
        let unnamed = dead_letter("unnamed", None, 0);
        reprocessor
            .queue()
            .stock(DLQ, [payments, shipping, unnamed]);
        let command: ReprocessCommand = serde_json::from_str(&format!(
            r#"{{"source":"{DLQ}","fallbackDestination":"{ORIGIN_ARN}"}}"#
        ))
        .unwrap();
        let plan = command.plan(&settings()).unwrap();
        let summary = reprocessor.run(&plan, None, |_| {}).await.unwrap();
        assert_eq!(summary.reprocessed, 3);
        let bodies = |url: &str| -> Vec<String> {
            let sent = reprocessor.queue().sent_to(url);
            sent.iter().map(|m| m.body.to_string()).collect()
        };
        let body = |id: &str| format!(r#"{{"id":"{id}"}}"#);
        let payments_url = "https://sqs.local/123456789012/payments";
        assert_eq!(bodies(payments_url), [body("payments-1")]);
        let shipping_url = "https://sqs.local/123456789012/shipping";
        assert_eq!(bodies(shipping_url), [body("shipping-1")]);
        assert_eq!(bodies(ORIGIN), [body("unnamed")]);
    }

    /// Logs are kept longer and read more widely than queues: a discarded message's body goes to
    /// the archive queue, and its log line names it by id and fingerprint only.
    #[test]
    fn a_discarded_body_goes_to_the_archive_and_not_into_the_log() {
        let log = LogBuffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);
        let settings = ReprocessSettings::from_lookup([], |name| match name {
            "REDRIVE_DISCARD_KINDS" => Some("payment_timeout".into()),
            "REDRIVE_ARCHIVE_QUEUE_URL" => Some(ARCHIVE.into()),
            _ => None,
        })
        .unwrap();
        let reprocessor = reprocessor(&settings);
        let mut secret = dead_letter("card", Some(ErrorClass::Permanent), 0);
        secret.body = Some(redrive_event::Body::from(
            r#"{"id":"card","pan":"4111111111111111"}"#.to_owned(),
        ));
        reprocessor.queue().stock(DLQ, [secret]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let command = ReprocessCommand {
            source: Some(DLQ.into()),
            ..ReprocessCommand::default()
        };
        let summary = runtime
            .block_on(reprocessor.run(&command.plan(&settings).unwrap(), None, |_| {}))
            .unwrap();
        assert_eq!(summary.discarded, 1);
        let archived = reprocessor.queue().sent_to(ARCHIVE);
        assert!(
            archived[0].body.contains("4111111111111111"),
            "archived whole"
        );
        let logged = log.text();
        assert!(
            logged.contains("discarded") && logged.contains("message_id=\"card\""),
            "{logged}"
        );
        assert!(
            logged.contains(&format!(
                "{:016x}",
                fingerprint(r#"{"id":"card","pan":"4111111111111111"}"#)
            )),
            "{logged}"
        );
        assert!(!logged.contains("4111111111111111"), "{logged}");
    }

    const ARCHIVE: &str = "https://sqs.local/123456789012/archive";

    /// What the test's subscriber wrote.
    #[derive(Clone, Default)]
    struct LogBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

    impl LogBuffer {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    impl std::io::Write for LogBuffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
        type Writer = LogBuffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[tokio::test]
    async fn filters_and_force_pick_what_an_operator_asked_for() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        let mut other_tenant = dead_letter("globex", Some(ErrorClass::Permanent), 0);
        other_tenant
            .message_attributes
            .get_mut("tenant")
            .unwrap()
            .string_value = Some(Text::from("globex"));
        queue.stock(
            DLQ,
            [
                dead_letter("invalid", Some(ErrorClass::Permanent), 0),
                other_tenant,
                dead_letter("transient", Some(ErrorClass::Transient), 0),
            ],
        );
        let command = ReprocessCommand {
            error_classes: vec![ErrorClass::Permanent],
            attribute: Some(AttributeFilter {
                name: "tenant".into(),
                value: "acme".into(),
            }),
            min_age: Some("30m".into()),
            force: true,
            ..ReprocessCommand::default()
        };
        let summary = reprocessor.run(&plan(command), None, |_| {}).await.unwrap();
        assert_eq!((summary.reprocessed, summary.filtered_out), (1, 2));
        assert_eq!(queue.deleted_from(DLQ), ["rh-invalid"]);
    }

    #[tokio::test]
    async fn a_run_stops_at_its_stop_time_and_releases_what_it_left() {
        let reprocessor = reprocessor(&settings());
        reprocessor
            .queue()
            .stock(DLQ, [dead_letter("due", Some(ErrorClass::Transient), 0)]);
        let soon = Some(Instant::now() + Duration::from_secs(20));
        let summary = reprocessor
            .run(&plan(ReprocessCommand::default()), soon, |_| {})
            .await
            .unwrap();
        assert_eq!((summary.reprocessed, summary.stopped_early), (1, false));

        let reprocessor = self::reprocessor(&settings());
        reprocessor
            .queue()
            .stock(DLQ, [dead_letter("due", Some(ErrorClass::Transient), 0)]);
        let summary = reprocessor
            .run(
                &plan(ReprocessCommand::default()),
                Some(Instant::now()),
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!((summary.examined, summary.stopped_early), (0, true));
    }

    #[test]
    fn commands_are_checked_with_clear_errors() {
        let bad: [(&str, &str); 4] = [
            (r#"{"source":"u","minAge":"soon"}"#, "minAge"),
            (r#"{"source":"u","destination":"orders"}"#, "destination"),
            (r#"{"source":"u","ratePerSecond":0}"#, "ratePerSecond"),
            (r#"{}"#, "source"),
        ];
        for (json, field) in bad {
            let command: ReprocessCommand = serde_json::from_str(json).unwrap();
            assert_eq!(command.plan(&settings()).unwrap_err().name, field);
        }
        let typo = serde_json::from_str::<ReprocessCommand>(r#"{"dryrun":true}"#).unwrap_err();
        assert!(
            typo.to_string().contains("unknown field `dryrun`"),
            "{typo}"
        );
    }

    #[test]
    fn the_summary_is_one_emf_line() {
        let summary = ReprocessSummary {
            source: DLQ.into(),
            examined: 3,
            reprocessed: 2,
            ..ReprocessSummary::default()
        };
        let line: serde_json::Value =
            serde_json::from_str(&summary.emf_line("redrive", NOW)).unwrap();
        assert_eq!(line["Source"], "orders-dlq");
        assert_eq!(line["Reprocessed"], 2);
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .len(),
            10
        );
    }
}
