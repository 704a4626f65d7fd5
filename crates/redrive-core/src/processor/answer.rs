//! Answering Lambda: the partial batch response, the batch's counts and one log line for each
//! record that did not succeed.
use aws_lambda_events::sqs::SqsBatchResponse;

use super::decide::Ruling;
use super::{Item, Processed};
use crate::envelope::truncate;
use crate::error::RecordError;
use crate::fate::{Fate, GiveBackReason};
use crate::metrics::BatchReport;

/// The partial batch response (every give-back listed), with each fate and error counted in
/// `report` and every record that did not succeed logged.
pub(super) fn answer(items: &[Item<'_>], rulings: &[Ruling], mut report: BatchReport) -> Processed {
    let mut response = SqsBatchResponse::default();
    for (item, Ruling { fate, error }) in items.iter().zip(rulings) {
        report.count_fate(fate, fate.delay_seconds());
        if *fate == Fate::Done && item.attempts_before > 0 {
            report.done_after_retry += 1;
        }
        if let Some(error) = error {
            report.count_error(error.class());
        }
        if let Fate::GiveBack { .. } = fate {
            response.add_failure(item.id);
        }
        if *fate != Fate::Done {
            log_fate(item, fate, error.as_deref());
        }
    }
    Processed { response, report }
}

/// One line per record that did not succeed; none on the happy path.
fn log_fate(item: &Item<'_>, fate: &Fate, error: Option<&RecordError>) {
    let (error_class, error_kind, message) = match error {
        Some(error) => (
            error.class().as_str(),
            error.kind(),
            truncate(error.message(), 512),
        ),
        None => ("", "", Default::default()),
    };
    let attempt = item.attempts_before + 1;
    match fate {
        Fate::Done => {}
        Fate::Retry { attempts, .. } => {
            tracing::warn!(
                message_id = item.id,
                attempt,
                next_attempt = attempts + 1,
                delay_s = fate.delay_seconds(),
                error_class,
                error_kind,
                error = %message,
                fate = "retry",
                "record failed, retry scheduled",
            )
        }
        Fate::Defer { .. } => {
            tracing::info!(
                message_id = item.id,
                attempt,
                delay_s = fate.delay_seconds(),
                error_kind,
                fate = "defer",
                "record deferred"
            )
        }
        Fate::DeadLetter { attempts } => {
            tracing::error!(
                message_id = item.id,
                attempt,
                attempts,
                error_class,
                error_kind,
                error = %message,
                fate = "dead_letter",
                "record dead-lettered",
            )
        }
        // A fresh hold (it failed now; a head that comes back held has no error), in place or
        // sent to the retry lane with its group's later records: an operator's job.
        Fate::GiveBack {
            reason: GiveBackReason::Held,
            ..
        }
        | Fate::SendToLane { held: true }
            if error.is_some() =>
        {
            tracing::error!(
                message_id = item.id,
                group = item.group().unwrap_or_default(),
                attempt,
                error_class,
                error_kind,
                error = %message,
                fate = fate.name(),
                "FIFO group held on this record: fix the cause, then `dlq release`",
            )
        }
        Fate::SendToLane { .. } => {
            tracing::debug!(
                message_id = item.id,
                group = item.group().unwrap_or_default(),
                fate = "send_to_lane",
                "record follows its held group to the retry lane",
            )
        }
        Fate::GiveBack { reason, visibility } => {
            let visibility_s = visibility.map(|v| v.as_secs());
            tracing::warn!(
                message_id = item.id,
                attempt,
                reason = reason.as_str(),
                visibility_s,
                error_class,
                error_kind,
                error = %message,
                fate = "give_back",
                "record given back to SQS",
            )
        }
    }
}
