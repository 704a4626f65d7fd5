//! The one place that decides what happens to a record. See the record-fate table in the README.
use std::time::Duration;

use crate::backoff::{whole_seconds, RetryPolicy};
use crate::error::{ErrorClass, RecordError};

/// What happened when the record was (or was not) handled. The error is boxed: it is rare, and a
/// slim value is cheap to keep for each record of a large batch.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The handler returned `Ok`.
    Succeeded,
    /// The handler returned this error (or panicked).
    Failed(Box<RecordError>),
    /// Not started: the Lambda deadline (minus the margin) was reached first.
    NotStarted,
    /// An earlier record of the same FIFO message group did not succeed in this batch.
    GroupBlocked,
    /// The record carries a due time that has not come yet; this much of the wait is left.
    NotDue(Duration),
    /// The record has no body: there is nothing to handle or to copy.
    NoBody,
    /// FIFO, with the attempt ledger: earlier deliveries used up its attempts (a dead letter
    /// whose delete was lost, delivered again); it is dead-lettered without another try.
    AttemptsUsedUp,
    /// FIFO: its group is held on it, waiting for an operator; not tried.
    Held,
    /// FIFO: held, and released to the DLQ by an operator.
    ReleasedToDeadLetter,
    /// FIFO with a retry lane: its group's head waits in the lane, held; it follows, untried.
    FollowsGroup,
}

impl Outcome {
    /// The error, for a failure.
    pub fn error(&self) -> Option<&RecordError> {
        match self {
            Self::Failed(error) => Some(error),
            _ => None,
        }
    }
}

impl From<Result<(), RecordError>> for Outcome {
    fn from(result: Result<(), RecordError>) -> Self {
        match result {
            Ok(()) => Self::Succeeded,
            Err(error) => Self::Failed(Box::new(error)),
        }
    }
}

/// SQS keeps one receive of a message invisible at most 12 hours from that receive, and refuses a
/// ChangeMessageVisibility past it (SQS API reference, ChangeMessageVisibility).
pub const VISIBILITY_LIMIT: Duration = Duration::from_secs(12 * 3600);

/// A FIFO record waiting in place is dead-lettered instead once it is this close to its queue's
/// retention, which would delete it silently: time for it to come back and be dead-lettered.
pub const RETENTION_MARGIN: Duration = Duration::from_secs(3600);

/// How much older than its queue's retention a record must be to be taken for a replayed one.
const REPLAYED_AFTER: Duration = Duration::from_secs(86400);

/// Kept off the 12-hour limit for the clocks of SQS and Lambda.
const CLOCK_MARGIN: Duration = Duration::from_secs(60);

/// The source queue's settings that bound a FIFO record's wait in place. Terraform passes them
/// (`REDRIVE_SOURCE_RETENTION`, `REDRIVE_SOURCE_VISIBILITY_TIMEOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceQueue {
    /// `MessageRetentionPeriod`: SQS deletes a message this long after its send, received or not
    /// (SQS API reference, CreateQueue).
    pub retention: Duration,
    /// `VisibilityTimeout`: how long a receive keeps a message in flight.
    pub visibility_timeout: Duration,
}

impl Default for SourceQueue {
    /// SQS's default retention (4 days) and a visibility timeout of 20 minutes.
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(4 * 86400),
            visibility_timeout: Duration::from_secs(20 * 60),
        }
    }
}

impl SourceQueue {
    /// The longest wait a FIFO record can be given in place. A change of visibility succeeds only
    /// while the message is in flight, so at most one visibility timeout after its receive (Lambda
    /// may have held the batch that long, retrying a throttled invocation); the wait must end within
    /// 12 hours of that receive.
    pub fn max_in_place_wait(&self) -> Duration {
        VISIBILITY_LIMIT.saturating_sub(self.visibility_timeout + CLOCK_MARGIN)
    }

    /// How long a record sent `in_queue_for` ago may still wait in place before it must be
    /// dead-lettered ([`RETENTION_MARGIN`] before SQS would delete it). A record older than the
    /// retention by more than a day cannot have come from the queue, which would have deleted it:
    /// a sample or replayed event, whose waits the retention does not bound.
    fn left_before_expiry(&self, in_queue_for: Duration) -> Duration {
        if in_queue_for > self.retention + REPLAYED_AFTER {
            return Duration::MAX;
        }
        self.retention
            .saturating_sub(in_queue_for)
            .saturating_sub(RETENTION_MARGIN)
    }
}

/// A record's fate. Every record of a batch gets exactly one.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fate {
    /// Handled: Lambda deletes it.
    Done,
    /// Re-send a copy that carries `attempts` and waits `delay` (hops past 900 s).
    Retry {
        /// Attempts spent so far.
        attempts: u32,
        /// The wait before the next.
        delay: Duration,
    },
    /// Send to the DLQ with the failure metadata.
    DeadLetter {
        /// Attempts spent so far.
        attempts: u32,
    },
    /// Re-send a copy that waits `delay`, attempt count unchanged.
    Defer {
        /// The wait.
        delay: Duration,
    },
    /// Report as a batchItemFailure: SQS delivers it again, and the queue's own redrive policy is
    /// the last net. `visibility` asks for a ChangeMessageVisibility first (FIFO backoff).
    GiveBack {
        /// Why.
        reason: GiveBackReason,
        /// The visibility to set first, if any.
        visibility: Option<Duration>,
    },
    /// FIFO with a retry lane (`REDRIVE_LANE_URL`, `REDRIVE_FIFO_ON_DEAD_LETTER=hold`): send to
    /// the lane in its message group, and delete from the source, whose other groups go on past
    /// the held group's backlog.
    SendToLane {
        /// It is the head its group is held on (else it follows one).
        held: bool,
    },
}

impl Fate {
    /// The fate's name in logs.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Retry { .. } => "retry",
            Self::DeadLetter { .. } => "dead_letter",
            Self::Defer { .. } => "defer",
            Self::GiveBack { .. } => "give_back",
            Self::SendToLane { .. } => "send_to_lane",
        }
    }

    /// The wait the copy it re-sends asks for, in whole seconds; 0 for a fate that re-sends nothing.
    pub fn delay_seconds(&self) -> u32 {
        match self {
            Self::Retry { delay, .. } | Self::Defer { delay } => whole_seconds(*delay),
            _ => 0,
        }
    }

    /// A FIFO head given back holding its group: held at this receive, or come back held.
    pub(crate) const fn holds_group(&self) -> bool {
        matches!(
            self,
            Self::GiveBack {
                reason: GiveBackReason::Held,
                ..
            }
        )
    }

    /// Whether it gives its record back without having tried it (the attempt ledger writes such
    /// a receive down: it is no attempt).
    pub(crate) const fn is_untried(&self) -> bool {
        matches!(
            self,
            Self::GiveBack {
                reason: GiveBackReason::GroupBlocked
                    | GiveBackReason::Deadline
                    | GiveBackReason::FifoDefer
                    | GiveBackReason::Released,
                ..
            }
        )
    }
}

/// Why a record is given back to SQS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveBackReason {
    /// Not started before the deadline.
    Deadline,
    /// FIFO: a transient failure, retried in place (a re-sent copy would jump the group's order).
    FifoRetry,
    /// FIFO: deferred in place.
    FifoDefer,
    /// FIFO: an earlier record of its group did not succeed.
    GroupBlocked,
    /// FIFO, `REDRIVE_FIFO_ON_DEAD_LETTER=hold`: it would be dead-lettered; it holds its group
    /// in place until an operator releases it.
    Held,
    /// FIFO: it came back held, and an operator released its hold while it was in flight: it
    /// comes back at once, untried.
    Released,
    /// The re-send or DLQ send was not confirmed.
    SendFailed,
    /// The annotated copy would exceed SQS's size limit: SQS's redrive policy dead-letters it as is.
    TooLarge,
    /// The record has no body to handle or to copy.
    NoBody,
    /// It failed and no DLQ is configured (report-only).
    Reported,
}

impl GiveBackReason {
    /// The reason's name in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::FifoRetry => "fifo_retry",
            Self::FifoDefer => "fifo_defer",
            Self::GroupBlocked => "group_blocked",
            Self::Held => "held",
            Self::Released => "released",
            Self::SendFailed => "send_failed",
            Self::Reported => "reported",
            Self::TooLarge => "too_large",
            Self::NoBody => "no_body",
        }
    }
}

/// A stream record's fate. A Kinesis shard is read in order and Lambda resumes a failed batch from
/// a checkpoint, so a record that cannot be finished now ends the batch there: the mapping's
/// retries, bisection, maximum record age and on-failure destination take over from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFate {
    /// Handled: done.
    Done,
    /// Send to the DLQ with the failure metadata, and go on with the next record.
    DeadLetter,
    /// Report this record's sequence number: Lambda retries from here.
    Checkpoint,
}

/// A Kafka record's fate. A partition is read in order, and a record that fails transiently
/// leaves it for the retry lane (an SQS FIFO queue the same function reads) instead of holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KafkaFate {
    /// Handled: done.
    Done,
    /// Send to the retry lane with the failure metadata (its first attempt spent); the partition
    /// goes on.
    Lane,
    /// Send to the DLQ with the failure metadata; the partition goes on.
    DeadLetter,
    /// Name it in the partial batch response: Lambda delivers its partition again from it.
    GiveBack,
}

/// What earlier deliveries of a record left behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// Failed attempts before this delivery.
    pub attempts_before: u32,
    /// What bounds its deferrals: on a standard queue the time since the record first failed
    /// (zero when it never has), on FIFO the time since it was first received (it waits in place).
    pub failing_for: Duration,
    /// FIFO: the time since it was sent (the queue's retention counts from then).
    pub in_queue_for: Duration,
}

impl History {
    /// A history of `attempts_before` failed attempts, the first one just now.
    #[cfg(test)]
    pub const fn attempts(attempts_before: u32) -> Self {
        Self {
            attempts_before,
            failing_for: Duration::ZERO,
            in_queue_for: Duration::ZERO,
        }
    }
}

/// Decides fates for one batch. It remembers the FIFO message groups that must stop.
pub(crate) struct Judge<'p> {
    policy: &'p RetryPolicy,
    fifo: bool,
    report_only: bool,
    /// FIFO heads hold their group instead of being dead-lettered, up to this age.
    hold_for: Option<Duration>,
    /// A head that would hold its group is sent to the retry lane instead, and the group's
    /// later records follow it there.
    sends_to_lane: bool,
    source: SourceQueue,
    blocked_groups: Vec<String>,
}

impl<'p> Judge<'p> {
    /// A judge for one batch under `policy`; `fifo` for a FIFO source.
    pub fn new(policy: &'p RetryPolicy, fifo: bool) -> Self {
        Self {
            policy,
            fifo,
            report_only: false,
            hold_for: None,
            sends_to_lane: false,
            source: SourceQueue::default(),
            blocked_groups: Vec::new(),
        }
    }

    /// The source queue's retention and visibility timeout, which bound FIFO waits in place.
    #[must_use]
    pub fn source(mut self, source: SourceQueue) -> Self {
        self.source = source;
        self
    }

    /// FIFO: whether `outcome` would have the record wait in place when its queue's retention is
    /// less than [`RETENTION_MARGIN`] away: it is dead-lettered instead, before SQS deletes it.
    pub fn expiring(&self, outcome: &Outcome, history: History) -> bool {
        let waits = match outcome {
            Outcome::NotDue(_) | Outcome::Held => true,
            Outcome::Failed(error) => error.is_deferral() || error.class() == ErrorClass::Transient,
            _ => false,
        };
        self.fifo
            && !self.report_only
            && waits
            && self.source.left_before_expiry(history.in_queue_for) == Duration::ZERO
    }

    /// FIFO heads that would be dead-lettered hold their group in place instead, until they were
    /// sent `max_age` ago (`REDRIVE_FIFO_ON_DEAD_LETTER=hold`).
    #[must_use]
    pub fn hold_for(mut self, max_age: Option<Duration>) -> Self {
        self.hold_for = max_age;
        self
    }

    /// With a hold: a head that would hold its group is sent to the retry lane instead, with
    /// its group's later records (a batch from a FIFO source, not from the lane itself).
    #[must_use]
    pub fn sends_to_lane(mut self, sends_to_lane: bool) -> Self {
        self.sends_to_lane = sends_to_lane;
        self
    }

    /// Without a DLQ nothing is re-sent: every failure is given back to SQS, whose retries and
    /// redrive policy take over (what a plain partial-batch processor does).
    #[must_use]
    pub fn report_only(mut self, report_only: bool) -> Self {
        self.report_only = report_only;
        self
    }

    /// Whether `outcome` is done whatever the record's history: a success on a standard queue (on
    /// FIFO a success behind its group's failure is given back). The batch asks before it reads a
    /// record's history, which only the other outcomes need.
    pub fn done_whatever_its_history(&self, outcome: &Outcome) -> bool {
        !self.fifo && matches!(outcome, Outcome::Succeeded)
    }

    /// FIFO: true when an earlier record of `group` did not succeed, so this one must not start.
    pub fn is_blocked(&self, group: Option<&str>) -> bool {
        self.fifo && group.is_some_and(|group| self.blocked_groups.iter().any(|g| g == group))
    }

    /// The fate of a record with the given `history`. `jitter` draws a uniform random number in [0, 1), only when a backoff is computed.
    pub fn decide(
        &mut self,
        group: Option<&str>,
        outcome: &Outcome,
        history: History,
        jitter: impl FnOnce() -> f64,
    ) -> Fate {
        // A record that follows its group to the lane is not held back by the head held there.
        let outcome = if self.is_blocked(group) && !matches!(outcome, Outcome::FollowsGroup) {
            &Outcome::GroupBlocked
        } else {
            outcome
        };
        let fate = match self.fate(outcome, history, jitter) {
            Fate::Retry { .. } | Fate::Defer { .. } | Fate::DeadLetter { .. }
                if self.report_only =>
            {
                Fate::GiveBack {
                    reason: GiveBackReason::Reported,
                    visibility: None,
                }
            }
            Fate::DeadLetter { .. }
                if self.fifo
                    && !matches!(outcome, Outcome::ReleasedToDeadLetter)
                    && !self.expiring(outcome, history)
                    && self
                        .hold_for
                        .is_some_and(|max_age| history.in_queue_for < max_age) =>
            {
                // A head held in place before (`Held`) stays there.
                if self.sends_to_lane && !matches!(outcome, Outcome::Held) {
                    return self.block(group, Fate::SendToLane { held: true });
                }
                Fate::GiveBack {
                    reason: GiveBackReason::Held,
                    visibility: Some(self.in_place(history, self.source.max_in_place_wait())),
                }
            }
            fate => fate,
        };
        self.block(group, fate)
    }

    /// `fate`, and on FIFO the rest of `group` blocked when it is not done.
    fn block(&mut self, group: Option<&str>, fate: Fate) -> Fate {
        if self.fifo && fate != Fate::Done {
            if let Some(group) = group {
                if !self.blocked_groups.iter().any(|g| g == group) {
                    self.blocked_groups.push(group.to_owned());
                }
            }
        }
        fate
    }

    /// The fate of a stream record. A permanent failure is dead-lettered (retrying cannot help,
    /// and the shard would stall behind it); anything else that did not succeed is a checkpoint.
    pub fn decide_stream(&self, outcome: &Outcome) -> StreamFate {
        match outcome {
            Outcome::Succeeded => StreamFate::Done,
            Outcome::Failed(error)
                if error.class() != ErrorClass::Transient && !self.report_only =>
            {
                StreamFate::DeadLetter
            }
            _ => StreamFate::Checkpoint,
        }
    }

    /// A Kafka record's fate: a permanent failure or a panic is dead-lettered, a transient one
    /// (or a deferral) goes to the retry lane (`lane`: there is one) while the policy allows
    /// another attempt, else to the DLQ. A failure without a DLQ (report-only), a transient one
    /// without a lane, and a record not started before the deadline are given back.
    pub fn decide_kafka(&self, outcome: &Outcome, lane: bool) -> KafkaFate {
        match outcome {
            Outcome::Succeeded => KafkaFate::Done,
            Outcome::Failed(_) if self.report_only => KafkaFate::GiveBack,
            Outcome::Failed(error) if error.class() != ErrorClass::Transient => {
                KafkaFate::DeadLetter
            }
            Outcome::Failed(_) if self.policy.max_attempts <= 1 => KafkaFate::DeadLetter,
            Outcome::Failed(_) if lane => KafkaFate::Lane,
            _ => KafkaFate::GiveBack,
        }
    }

    fn fate(&self, outcome: &Outcome, history: History, jitter: impl FnOnce() -> f64) -> Fate {
        let give_back = |reason, visibility| Fate::GiveBack { reason, visibility };
        let in_place = |reason, wait| give_back(reason, Some(self.in_place(history, wait)));
        if self.expiring(outcome, history) {
            let tried = matches!(outcome, Outcome::Failed(error) if !error.is_deferral());
            return Fate::DeadLetter {
                attempts: history.attempts_before.saturating_add(u32::from(tried)),
            };
        }
        match outcome {
            Outcome::Succeeded => Fate::Done,
            Outcome::NotStarted => give_back(GiveBackReason::Deadline, None),
            Outcome::NoBody => give_back(GiveBackReason::NoBody, None),
            Outcome::GroupBlocked => give_back(GiveBackReason::GroupBlocked, Some(Duration::ZERO)),
            Outcome::FollowsGroup => Fate::SendToLane { held: false },
            // Held: dead-lettered, which the hold (`decide`) turns into another wait in place
            // until it is too old.
            Outcome::AttemptsUsedUp | Outcome::Held | Outcome::ReleasedToDeadLetter => {
                Fate::DeadLetter {
                    attempts: history.attempts_before,
                }
            }
            Outcome::NotDue(left) if self.fifo => in_place(GiveBackReason::FifoDefer, *left),
            Outcome::NotDue(left) => Fate::Defer { delay: *left },
            Outcome::Failed(error)
                if error.is_deferral() && history.failing_for >= self.policy.defer_max_age =>
            {
                Fate::DeadLetter {
                    attempts: history.attempts_before,
                }
            }
            Outcome::Failed(error) if error.is_deferral() => {
                let delay = error.retry_after_hint().unwrap_or_default();
                if self.fifo {
                    in_place(GiveBackReason::FifoDefer, self.grown(delay, history))
                } else {
                    Fate::Defer { delay }
                }
            }
            Outcome::Failed(error) => {
                let attempts = history.attempts_before.saturating_add(1);
                if error.class() != ErrorClass::Transient || attempts >= self.policy.max_attempts {
                    return Fate::DeadLetter { attempts };
                }
                let delay = error
                    .retry_after_hint()
                    .unwrap_or_else(|| self.policy.delay(attempts, jitter()));
                if self.fifo {
                    in_place(GiveBackReason::FifoRetry, delay)
                } else {
                    Fate::Retry { attempts, delay }
                }
            }
        }
    }

    /// `wait`, cut to what one delivery's visibility and the queue's retention allow.
    fn in_place(&self, history: History, wait: Duration) -> Duration {
        wait.min(self.source.max_in_place_wait())
            .min(self.source.left_before_expiry(history.in_queue_for))
    }

    /// A FIFO deferral's wait in place: as long as the record has waited so far, so that the
    /// waits double and an outage of hours costs a few receives, not one per breaker period; at
    /// least the hint, and not past the deferral age limit.
    fn grown(&self, hint: Duration, history: History) -> Duration {
        let left = self
            .policy
            .defer_max_age
            .saturating_sub(history.failing_for);
        history.failing_for.min(left).max(hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_dead_letters_permanent_failures_and_checkpoints_the_rest() {
        let policy = RetryPolicy::default();
        let judge = Judge::new(&policy, false);
        let permanent = RecordError::permanent("invalid", "no");
        let deferred = RecordError::defer("circuit_open", Duration::from_secs(5));
        assert_eq!(judge.decide_stream(&Outcome::Succeeded), StreamFate::Done);
        assert_eq!(
            judge.decide_stream(&Outcome::Failed(Box::new(permanent.clone()))),
            StreamFate::DeadLetter
        );
        assert_eq!(
            judge.decide_stream(&Outcome::Failed(Box::new(transient()))),
            StreamFate::Checkpoint
        );
        assert_eq!(
            judge.decide_stream(&Outcome::Failed(Box::new(deferred.clone()))),
            StreamFate::Checkpoint
        );
        assert_eq!(
            judge.decide_stream(&Outcome::NotStarted),
            StreamFate::Checkpoint
        );
        let report_only = Judge::new(&policy, false).report_only(true);
        assert_eq!(
            report_only.decide_stream(&Outcome::Failed(Box::new(permanent.clone()))),
            StreamFate::Checkpoint
        );
    }

    fn transient() -> RecordError {
        RecordError::transient("timeout", "slow")
    }

    #[test]
    fn transient_failures_retry_until_attempts_run_out() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, false);
        let error = transient();
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(error.clone())),
                History::attempts(0),
                || 0.5
            ),
            Fate::Retry {
                attempts: 1,
                delay: Duration::from_secs(1)
            }
        );
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(error.clone())),
                History::attempts(3),
                || 1.0
            ),
            Fate::Retry {
                attempts: 4,
                delay: Duration::from_secs(16)
            }
        );
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(error.clone())),
                History::attempts(4),
                || 0.5
            ),
            Fate::DeadLetter { attempts: 5 }
        );
    }

    #[test]
    fn permanent_errors_and_panics_are_dead_lettered_at_once() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, false);
        let permanent = RecordError::permanent("invalid", "no");
        let panic = RecordError::panic("boom".into());
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(permanent.clone())),
                History::attempts(0),
                || 0.5
            ),
            Fate::DeadLetter { attempts: 1 }
        );
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(panic.clone())),
                History::attempts(2),
                || 0.5
            ),
            Fate::DeadLetter { attempts: 3 }
        );
    }

    #[test]
    fn a_retry_after_hint_replaces_the_backoff_and_a_deferral_spends_no_attempt() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, false);
        let hinted = transient().retry_after(Duration::from_secs(3600));
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(hinted.clone())),
                History::attempts(0),
                || 0.5
            ),
            Fate::Retry {
                attempts: 1,
                delay: Duration::from_secs(3600)
            }
        );
        let deferred = RecordError::defer("circuit_open", Duration::from_secs(30));
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(deferred.clone())),
                History::attempts(4),
                || 0.5
            ),
            Fate::Defer {
                delay: Duration::from_secs(30)
            }
        );
        assert_eq!(
            judge.decide(
                None,
                &Outcome::NotDue(Duration::from_secs(60)),
                History::attempts(1),
                || 0.5
            ),
            Fate::Defer {
                delay: Duration::from_secs(60)
            }
        );
    }

    #[test]
    fn a_deferral_past_the_age_limit_is_dead_lettered_without_spending_an_attempt() {
        let policy = RetryPolicy::default();
        let deferred = RecordError::defer("circuit_open", Duration::from_secs(30));
        let failing_for = |age| History {
            attempts_before: 2,
            failing_for: age,
            ..History::default()
        };
        let just_under = failing_for(policy.defer_max_age - Duration::from_millis(1));
        assert_eq!(
            Judge::new(&policy, false).decide(
                None,
                &Outcome::Failed(Box::new(deferred.clone())),
                just_under,
                || 0.5
            ),
            Fate::Defer {
                delay: Duration::from_secs(30)
            }
        );
        let at_limit = failing_for(policy.defer_max_age);
        assert_eq!(
            Judge::new(&policy, false).decide(
                None,
                &Outcome::Failed(Box::new(deferred.clone())),
                at_limit,
                || 0.5
            ),
            Fate::DeadLetter { attempts: 2 }
        );
        // The age limit bounds deferrals only; attempts bound failures.
        assert_eq!(
            Judge::new(&policy, false).decide(
                None,
                &Outcome::Failed(Box::new(transient())),
                at_limit,
                || 0.5
            ),
            Fate::Retry {
                attempts: 3,
                delay: Duration::from_secs(4)
            }
        );
        // On FIFO too: the age is the time since the record was first received.
        assert_eq!(
            Judge::new(&policy, true).decide(
                Some("a"),
                &Outcome::Failed(Box::new(deferred.clone())),
                at_limit,
                || 0.5
            ),
            Fate::DeadLetter { attempts: 2 }
        );
    }

    #[test]
    fn a_fifo_deferral_waits_as_long_as_the_record_has_waited_within_the_age_limit() {
        let policy = RetryPolicy {
            defer_max_age: Duration::from_secs(12 * 3600),
            ..RetryPolicy::default()
        };
        let open_for = Duration::from_secs(30);
        let deferred = RecordError::defer("circuit_open", open_for);
        let wait_at = |age: Duration| match Judge::new(&policy, true).decide(
            Some("a"),
            &Outcome::Failed(Box::new(deferred.clone())),
            History {
                failing_for: age,
                ..History::default()
            },
            || 0.5,
        ) {
            Fate::GiveBack {
                reason: GiveBackReason::FifoDefer,
                visibility: Some(wait),
            } => wait,
            fate => panic!("in place, not {fate:?}"),
        };
        assert_eq!(wait_at(Duration::ZERO), open_for);
        assert_eq!(wait_at(Duration::from_secs(10)), open_for);
        assert_eq!(
            wait_at(Duration::from_secs(3600)),
            Duration::from_secs(3600)
        );
        // Past half the limit the wait ends at the limit, where the record is dead-lettered.
        assert_eq!(
            wait_at(Duration::from_secs(8 * 3600)),
            Duration::from_secs(4 * 3600)
        );
        // Waits that double: an outage of eleven hours costs twelve receives, not 1,320.
        let (mut age, mut receives) = (Duration::ZERO, 0);
        while age < Duration::from_secs(11 * 3600) {
            age += wait_at(age);
            receives += 1;
        }
        assert_eq!(receives, 12);
    }

    #[test]
    fn a_record_whose_attempts_are_used_up_is_dead_lettered_without_spending_another() {
        let policy = RetryPolicy::default();
        assert_eq!(
            Judge::new(&policy, true).decide(
                Some("a"),
                &Outcome::AttemptsUsedUp,
                History::attempts(5),
                || 0.5
            ),
            Fate::DeadLetter { attempts: 5 }
        );
    }

    #[test]
    fn fifo_retries_in_place_and_blocks_the_rest_of_the_group_only() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, true);
        let error = transient();
        assert_eq!(
            judge.decide(
                Some("a"),
                &Outcome::Failed(Box::new(error.clone())),
                History::attempts(0),
                || 1.0
            ),
            Fate::GiveBack {
                reason: GiveBackReason::FifoRetry,
                visibility: Some(Duration::from_secs(2))
            }
        );
        assert!(judge.is_blocked(Some("a")));
        assert!(!judge.is_blocked(Some("b")));
        assert_eq!(
            judge.decide(
                Some("a"),
                &Outcome::GroupBlocked,
                History::attempts(0),
                || 0.5
            ),
            Fate::GiveBack {
                reason: GiveBackReason::GroupBlocked,
                visibility: Some(Duration::ZERO)
            }
        );
        assert_eq!(
            judge.decide(Some("b"), &Outcome::Succeeded, History::attempts(0), || 0.5),
            Fate::Done
        );
        assert!(!judge.is_blocked(Some("b")));
    }

    #[test]
    fn a_fifo_wait_in_place_stays_inside_the_visibility_limit_of_its_delivery() {
        let policy = RetryPolicy::default();
        let visibility = |outcome: &Outcome| match Judge::new(&policy, true).decide(
            Some("a"),
            outcome,
            History::default(),
            || 0.5,
        ) {
            Fate::GiveBack { visibility, .. } => visibility,
            fate => panic!("in place, not {fate:?}"),
        };
        let hinted = transient().retry_after(Duration::from_secs(12 * 3600));
        let deferred = RecordError::defer("circuit_open", Duration::from_secs(13 * 3600));
        for outcome in [
            Outcome::Failed(Box::new(hinted)),
            Outcome::Failed(Box::new(deferred)),
            Outcome::NotDue(Duration::from_secs(12 * 3600)),
        ] {
            assert_eq!(
                visibility(&outcome),
                Some(SourceQueue::default().max_in_place_wait())
            );
        }
        let short = transient().retry_after(Duration::from_secs(3600));
        assert_eq!(
            visibility(&Outcome::Failed(Box::new(short.clone()))),
            Some(Duration::from_secs(3600))
        );
    }

    /// Issue 42, item 4: a FIFO record waiting in place near its queue's retention (4 days by
    /// default) was deleted by SQS with no DLQ copy; its waits now end an hour before the
    /// retention, and inside that hour it is dead-lettered, with its attempts.
    #[test]
    fn a_fifo_wait_in_place_ends_before_the_queue_retention_deletes_the_record() {
        let policy = RetryPolicy::default();
        let retention = Duration::from_secs(4 * 86400);
        let decide = |outcome: &Outcome, left: Duration| {
            let history = History {
                attempts_before: 1,
                failing_for: Duration::ZERO,
                in_queue_for: retention - left,
            };
            Judge::new(&policy, true)
                .hold_for(Some(Duration::from_secs(3 * 86400)))
                .decide(Some("a"), outcome, history, || 0.5)
        };
        let hour = Duration::from_secs(3600);
        let deferred = || {
            let error = RecordError::defer("circuit_open", 6 * hour);
            Outcome::Failed(Box::new(error))
        };
        assert_eq!(
            decide(&deferred(), 3 * hour),
            Fate::GiveBack {
                reason: GiveBackReason::FifoDefer,
                visibility: Some(2 * hour),
            }
        );
        let half_an_hour = hour / 2;
        assert_eq!(
            decide(&deferred(), half_an_hour),
            Fate::DeadLetter { attempts: 1 }
        );
        let failed = Outcome::Failed(Box::new(transient()));
        assert_eq!(
            decide(&failed, half_an_hour),
            Fate::DeadLetter { attempts: 2 }
        );
        assert_eq!(
            decide(&Outcome::NotDue(hour), half_an_hour),
            Fate::DeadLetter { attempts: 1 }
        );
        let permanent = Outcome::Failed(Box::new(RecordError::permanent("invalid", "no")));
        assert_eq!(
            decide(&permanent, half_an_hour),
            Fate::DeadLetter { attempts: 2 }
        );
        // Older than the retention by days: a sample or replayed event, not bounded by it.
        let replayed = History {
            in_queue_for: retention + 2 * 24 * hour,
            ..History::attempts(1)
        };
        assert!(matches!(
            Judge::new(&policy, true).decide(Some("a"), &deferred(), replayed, || 0.5),
            Fate::GiveBack {
                reason: GiveBackReason::FifoDefer,
                ..
            }
        ));
    }

    /// Issue 42, item 5: the wait in place assumed the visibility change within 20 minutes of the
    /// receive; with a longer visibility timeout (Lambda retries a throttled batch that long) SQS
    /// refused it. The wait now leaves the queue's visibility timeout off the 12 hours.
    #[test]
    fn a_fifo_wait_in_place_leaves_the_visibility_timeout_off_the_twelve_hours() {
        let policy = RetryPolicy::default();
        let source = SourceQueue {
            visibility_timeout: Duration::from_secs(95 * 60),
            ..SourceQueue::default()
        };
        let deferred = RecordError::defer("circuit_open", Duration::from_secs(13 * 3600));
        let fate = Judge::new(&policy, true).source(source).decide(
            Some("a"),
            &Outcome::Failed(Box::new(deferred)),
            History::default(),
            || 0.5,
        );
        assert_eq!(
            fate,
            Fate::GiveBack {
                reason: GiveBackReason::FifoDefer,
                visibility: Some(Duration::from_secs(12 * 3600 - 95 * 60 - 60)),
            }
        );
    }

    #[test]
    fn report_only_gives_every_failure_back() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, false).report_only(true);
        let reported = Fate::GiveBack {
            reason: GiveBackReason::Reported,
            visibility: None,
        };
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(transient())),
                History::attempts(0),
                || 0.5
            ),
            reported
        );
        let permanent = RecordError::permanent("invalid", "no");
        assert_eq!(
            judge.decide(
                None,
                &Outcome::Failed(Box::new(permanent.clone())),
                History::attempts(0),
                || 0.5
            ),
            reported
        );
        assert_eq!(
            judge.decide(None, &Outcome::Succeeded, History::attempts(0), || 0.5),
            Fate::Done
        );
    }

    #[test]
    fn standard_queues_never_block_groups() {
        let policy = RetryPolicy::default();
        let mut judge = Judge::new(&policy, false);
        judge.decide(
            Some("a"),
            &Outcome::NotStarted,
            History::attempts(0),
            || 0.5,
        );
        assert!(!judge.is_blocked(Some("a")));
    }
}
