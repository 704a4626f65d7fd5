//! Deciding a batch's fates: every record's outcome goes to the judge (`fate.rs`) in the records'
//! order, so that a FIFO group's first failure blocks the rest of the group whichever finished first.
use std::time::Duration;

use super::{FifoOnDeadLetter, Item, Processor};
use crate::error::RecordError;
use crate::fate::{Fate, History, Judge, Outcome};
use crate::port::QueuePort;
use crate::sync::lock;

impl<Q: QueuePort> Processor<Q> {
    /// Every record's fate, decided in the records' order (a FIFO group's first failure blocks the
    /// rest of the group, whichever finished first).
    pub(super) fn decide_all(
        &self,
        items: &[Item<'_>],
        handled: impl IntoIterator<Item = Outcome>,
        fifo: bool,
    ) -> Vec<Ruling> {
        let mut judge = self
            .judge(fifo)
            .sends_to_lane(fifo && self.sends_to_lane(items));
        let mut rng = self.rng();
        let now = self.clock.now_ms();
        let ledger = self.books.is_some();
        items
            .iter()
            .zip(handled)
            .map(|(item, handled)| {
                if judge.done_whatever_its_history(&handled) {
                    return Ruling {
                        fate: Fate::Done,
                        error: None,
                    };
                }
                decide(
                    &mut judge,
                    &mut rng,
                    item.history(now, ledger),
                    item,
                    handled,
                )
            })
            .collect()
    }

    /// The judge of one batch.
    pub(crate) fn judge(&self, fifo: bool) -> Judge<'_> {
        let hold_for = match self.config.fifo_on_dead_letter {
            FifoOnDeadLetter::Hold { max_age } => Some(max_age),
            FifoOnDeadLetter::Continue => None,
        };
        Judge::new(&self.config.retry, fifo)
            .report_only(self.config.dlq_url.is_none())
            .hold_for(hold_for)
            .source(self.config.source)
    }

    /// A generator for this batch's jitter, forked from the processor's (seedable) one.
    fn rng(&self) -> fastrand::Rng {
        lock(&self.rng).fork()
    }
}

/// A record's fate and the error that led to it. The error is boxed: it is rare, and a slim
/// decision is cheap to keep for each record of a large batch.
pub(super) struct Ruling {
    pub(super) fate: Fate,
    pub(super) error: Option<Box<RecordError>>,
}

fn decide(
    judge: &mut Judge<'_>,
    rng: &mut fastrand::Rng,
    history: History,
    item: &Item<'_>,
    outcome: Outcome,
) -> Ruling {
    let expiring = judge.expiring(&outcome, history);
    let fate = judge.decide(item.group(), &outcome, history, || rng.f64());
    // A deferral dead-lettered is one that outlasted the age limit: it says so.
    let error = match outcome {
        _ if expiring && matches!(fate, Fate::DeadLetter { .. }) => Some(Box::new(
            retention_running_out(outcome.error(), history.in_queue_for),
        )),
        Outcome::Failed(error)
            if error.is_deferral() && matches!(fate, Fate::DeadLetter { .. }) =>
        {
            Some(Box::new(deferred_too_long(&error, history.failing_for)))
        }
        Outcome::Failed(error) => Some(error),
        Outcome::AttemptsUsedUp => Some(Box::new(attempts_used_up(item.fifo.receive_count))),
        Outcome::ReleasedToDeadLetter => Some(Box::new(RecordError::permanent(
            "released_to_dlq",
            "its group was held on it, and an operator released it to the DLQ (dlq release --dead-letter): the group went on without it",
        ))),
        // A hold that outlasted REDRIVE_FIFO_HOLD_MAX_AGE: dead-lettered before the queue's
        // retention drops it.
        Outcome::Held if matches!(fate, Fate::DeadLetter { .. }) => Some(Box::new(
            RecordError::transient(
                "held_too_long",
                "its group was held on it past REDRIVE_FIFO_HOLD_MAX_AGE without an operator's release: dead-lettered before the queue's retention drops it, and the group goes on",
            ),
        )),
        _ => None,
    };
    Ruling { fate, error }
}

/// The failure a FIFO record is dead-lettered with when it arrives with its attempts used up:
/// transient, so that the reprocessor may send it home.
fn attempts_used_up(receive_count: u32) -> RecordError {
    RecordError::transient(
        "attempts_used_up",
        format_args!(
            "received {receive_count} times, and the attempt ledger counts REDRIVE_MAX_ATTEMPTS \
             tries among them (a dead letter whose delete was lost, or receives with no try the \
             ledger missed)"
        ),
    )
}

/// The failure a FIFO record is dead-lettered with instead of waiting in place past its queue's
/// retention: transient, so that the reprocessor may send it home; it says what it was waiting for.
fn retention_running_out(waiting_for: Option<&RecordError>, in_queue_for: Duration) -> RecordError {
    let in_queue_for = humantime::format_duration(Duration::from_secs(in_queue_for.as_secs()));
    let waiting_for = waiting_for.map_or_else(
        || "its turn".to_owned(),
        |error| format!("{} ({})", error.kind(), error.message()),
    );
    RecordError::transient(
        "retention_running_out",
        format_args!(
            "waiting for {waiting_for} {in_queue_for} after its send, within an hour of the source \
             queue's retention (REDRIVE_SOURCE_RETENTION): dead-lettered before SQS deletes it"
        ),
    )
}

/// The failure a record is dead-lettered with when its deferrals outlast the age limit: transient,
/// so that the reprocessor sends it home once the downstream has healed.
fn deferred_too_long(deferral: &RecordError, failing_for: Duration) -> RecordError {
    let failing_for = humantime::format_duration(Duration::from_secs(failing_for.as_secs()));
    RecordError::transient(
        "deferred_too_long",
        format_args!(
            "still deferred ({}) {failing_for} after its first failure (on FIFO: its first receive), past REDRIVE_DEFER_MAX_AGE",
            deferral.kind()
        ),
    )
}
