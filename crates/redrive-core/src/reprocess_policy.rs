//! What the DLQ reprocessor does with one dead letter. Pure decisions, no I/O: the reprocessor
//! (issue #4) reads a DLQ, asks [`ReprocessPolicy::decide`] per message and carries the answer out
//! (re-send first, delete from the DLQ only after the send is confirmed).
use std::time::Duration;

use crate::envelope::Meta;
use crate::error::ErrorClass;

/// What the reprocessor does with one dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Send back to the origin queue with `reprocessCount` + 1.
    Reprocess,
    /// Archive (log with full metadata, and send to the archive queue when there is one), then delete.
    Discard {
        /// Why.
        reason: String,
    },
    /// Leave in the DLQ for a person: it will not succeed by being sent again as it is.
    ManualReview {
        /// Why.
        reason: String,
    },
    /// Leave in the DLQ and raise an alert: it was redriven the allowed number of times and failed again.
    Alert {
        /// Why.
        reason: String,
    },
    /// Leave for now: its eligibility backoff has not passed.
    NotYet {
        /// When it may go (ms since the epoch).
        eligible_at_ms: u64,
    },
}

/// How dead letters are redriven.
#[derive(Debug, Clone, PartialEq)]
pub struct ReprocessPolicy {
    /// Redrives a message gets before it is alerted on instead.
    pub max_reprocess: u32,
    /// Wait after the last failure before the first redrive; doubled for each later one.
    pub eligible_after: Duration,
    /// Error kinds that are archived instead of redriven or reviewed.
    pub discard_kinds: Vec<String>,
}

impl Default for ReprocessPolicy {
    fn default() -> Self {
        Self {
            max_reprocess: 3,
            eligible_after: Duration::from_secs(300),
            discard_kinds: Vec::new(),
        }
    }
}

impl ReprocessPolicy {
    /// The decision for a dead letter. `meta` is its `redrive` attribute (absent when SQS moved the
    /// message itself after maxReceiveCount); `sent_ms` is its SentTimestamp, used as the failure
    /// time when there is no metadata.
    pub fn decide(&self, meta: Option<&Meta<'_>>, sent_ms: u64, now_ms: u64) -> Disposition {
        let (reprocessed, failed_at) =
            meta.map_or((0, sent_ms), |m| (m.reprocess_count, m.last_failure_at.0));
        if let Some(meta) = meta {
            if self
                .discard_kinds
                .iter()
                .any(|kind| *kind == *meta.error_kind)
            {
                return Disposition::Discard {
                    reason: format!("error kind {} is discarded by policy", meta.error_kind),
                };
            }
            if meta.error_class != ErrorClass::Transient {
                return Disposition::ManualReview {
                    reason: format!(
                        "{} error ({}): sending it again as it is will fail again",
                        meta.error_class, meta.error_kind
                    ),
                };
            }
        }
        if reprocessed >= self.max_reprocess {
            return Disposition::Alert {
                reason: format!(
                    "failed again after {reprocessed} redrives (cap {})",
                    self.max_reprocess
                ),
            };
        }
        let eligible_at_ms = eligible_at(self.eligible_after, failed_at, reprocessed);
        if now_ms >= eligible_at_ms {
            Disposition::Reprocess
        } else {
            Disposition::NotYet { eligible_at_ms }
        }
    }
}

/// When a message that last failed at `failed_at_ms` (ms since the epoch) and was redriven
/// `redrives` times before may be redriven again: `after` that failure, doubled per redrive.
pub fn eligible_at(after: Duration, failed_at_ms: u64, redrives: u32) -> u64 {
    let backoff = after.saturating_mul(1 << redrives.min(16));
    failed_at_ms.saturating_add(u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX))
}

impl ReprocessPolicy {
    /// The decision when an operator asks for a redrive (after fixing the cause): the class and the
    /// backoff no longer hold messages back, the cap still does.
    pub fn decide_requested(&self, meta: Option<&Meta<'_>>) -> Disposition {
        match meta.map_or(0, |m| m.reprocess_count) {
            reprocessed if reprocessed >= self.max_reprocess => Disposition::Alert {
                reason: format!(
                    "failed again after {reprocessed} redrives (cap {})",
                    self.max_reprocess
                ),
            },
            _ => Disposition::Reprocess,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Timestamp, META_VERSION};
    use redrive_event::Text;

    const FAILED: u64 = 1_763_790_000_000;
    const MINUTE: u64 = 60_000;

    fn meta(class: ErrorClass, kind: &'static str, reprocess_count: u32) -> Meta<'static> {
        Meta {
            v: META_VERSION,
            attempts: 5,
            due_at: None,
            origin_queue_arn: Text::from("arn:aws:sqs:us-east-1:123456789012:orders"),
            origin_message_id: Text::from("m-1"),
            first_failure_at: Timestamp(FAILED - 10 * MINUTE),
            last_failure_at: Timestamp(FAILED),
            error_class: class,
            error_kind: Text::from(kind),
            error_message: Text::from("boom"),
            reprocess_count,
            redriven_at: None,
            dead_lettered_at: None,
            failed_in: None,
            attributes: None,
        }
    }

    #[test]
    fn transient_failures_are_redriven_after_a_growing_backoff() {
        let policy = ReprocessPolicy::default();
        let first = meta(ErrorClass::Transient, "payment_timeout", 0);
        assert_eq!(
            policy.decide(Some(&first), 0, FAILED + 4 * MINUTE),
            Disposition::NotYet {
                eligible_at_ms: FAILED + 5 * MINUTE
            }
        );
        assert_eq!(
            policy.decide(Some(&first), 0, FAILED + 5 * MINUTE),
            Disposition::Reprocess
        );
        let third = meta(ErrorClass::Transient, "payment_timeout", 2);
        assert_eq!(
            policy.decide(Some(&third), 0, FAILED + 19 * MINUTE),
            Disposition::NotYet {
                eligible_at_ms: FAILED + 20 * MINUTE
            }
        );
        assert_eq!(
            policy.decide(Some(&third), 0, FAILED + 20 * MINUTE),
            Disposition::Reprocess
        );
    }

    #[test]
    fn the_reprocess_cap_turns_into_an_alert() {
        let policy = ReprocessPolicy::default();
        let capped = meta(ErrorClass::Transient, "payment_timeout", 3);
        assert!(matches!(
            policy.decide(Some(&capped), 0, FAILED + 600 * MINUTE),
            Disposition::Alert { .. }
        ));
    }

    #[test]
    fn permanent_errors_and_panics_are_never_redriven_automatically() {
        let policy = ReprocessPolicy::default();
        for class in [ErrorClass::Permanent, ErrorClass::Panic] {
            let dead = meta(class, "invalid_order", 0);
            assert!(matches!(
                policy.decide(Some(&dead), 0, FAILED + 600 * MINUTE),
                Disposition::ManualReview { .. }
            ));
        }
    }

    #[test]
    fn discarded_kinds_are_archived_whatever_their_class() {
        let policy = ReprocessPolicy {
            discard_kinds: vec!["malformed_body".into()],
            ..ReprocessPolicy::default()
        };
        let dead = meta(ErrorClass::Permanent, "malformed_body", 0);
        assert!(matches!(
            policy.decide(Some(&dead), 0, FAILED),
            Disposition::Discard { .. }
        ));
    }

    #[test]
    fn a_requested_redrive_skips_class_and_backoff_but_not_the_cap() {
        let policy = ReprocessPolicy::default();
        let invalid = meta(ErrorClass::Permanent, "invalid_order", 0);
        assert_eq!(
            policy.decide_requested(Some(&invalid)),
            Disposition::Reprocess
        );
        assert_eq!(policy.decide_requested(None), Disposition::Reprocess);
        let capped = meta(ErrorClass::Transient, "payment_timeout", 3);
        assert!(matches!(
            policy.decide_requested(Some(&capped)),
            Disposition::Alert { .. }
        ));
    }

    #[test]
    fn messages_moved_by_sqs_itself_count_from_their_sent_time() {
        let policy = ReprocessPolicy::default();
        assert_eq!(
            policy.decide(None, FAILED, FAILED + MINUTE),
            Disposition::NotYet {
                eligible_at_ms: FAILED + 5 * MINUTE
            }
        );
        assert_eq!(
            policy.decide(None, FAILED, FAILED + 5 * MINUTE),
            Disposition::Reprocess
        );
    }
}
