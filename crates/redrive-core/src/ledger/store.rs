//! The port where the books are kept: [`AttemptLedger`] and what it stores. Its implementations:
//! DynamoDB's (`redrive-aws`), and for tests the two in `memory.rs` (`test-util`).
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::lane::{KeyPlace, KeyPositions, Position};
use crate::error::PortError;

/// How long a ledger entry is kept: a FIFO queue keeps a message at most 14 days.
pub const LEDGER_KEEP: Duration = Duration::from_secs(15 * 24 * 3600);

/// The ledger's key for a message id: one namespace beside the idempotency keys in a shared table.
pub fn ledger_key(message_id: &str) -> String {
    format!("attempts#{message_id}")
}

/// What the ledger knows of one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The receive counts at which it was given back untried.
    pub untried: Vec<u32>,
    /// Its attempts are counted from this receive on (an operator's release gives a fresh set);
    /// 0 counts from the first.
    pub attempts_from: u32,
    /// Its group is held on it.
    pub hold: Option<Hold>,
    /// When it first waited in place at the head of its group (ms since the epoch): its waits'
    /// age counts from then, not from its first receive, which it shares with the head it
    /// arrived behind.
    pub head_since_ms: Option<u64>,
    /// Its copy is in the retry lane (SQS confirmed the send): should it come back to its source
    /// (its delete lost), it is done there.
    pub in_lane: bool,
    /// A key's records out in the retry lane (the entry of a Kafka key id,
    /// [`crate::kafka::KafkaOrigin::key_id`], or of a FIFO group, `fifo#<queue arn>#<group>`).
    pub key: Option<KeyPositions>,
}

impl LedgerEntry {
    /// The attempts a delivery `receive_count` has behind it: the receives before it (since
    /// `attempts_from`) that are not written down as untried.
    pub fn attempts_before(&self, receive_count: u32) -> u32 {
        let from = self.attempts_from.max(1);
        let mut untried: Vec<u32> = self
            .untried
            .iter()
            .copied()
            .filter(|&r| r >= from && r < receive_count)
            .collect();
        untried.sort_unstable();
        untried.dedup();
        let receives = receive_count.saturating_sub(from);
        receives.saturating_sub(u32::try_from(untried.len()).unwrap_or(u32::MAX))
    }
}

/// A FIFO group held on its head, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hold {
    /// When the group was first held (ms since the epoch).
    pub since_ms: u64,
    /// The latest receive of the head, and its receipt handle: `dlq release` makes the head
    /// visible through it at once.
    pub receive_count: u32,
    /// The receipt handle of that receive.
    pub receipt_handle: String,
    /// The queue the head waits in.
    pub queue_arn: String,
    /// The failure that held it.
    pub error_kind: String,
    /// Its message, truncated.
    pub error_message: String,
    /// What an operator decided, if anything yet.
    pub release: Option<Release>,
}

/// An operator's decision on a held head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Try it again with a fresh set of attempts (the cause is fixed).
    Retry,
    /// Dead-letter it with its failure: the group goes on without it.
    DeadLetter,
}

impl Release {
    /// The name stored in the ledger and given on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
        }
    }

    /// The release named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Retry, Self::DeadLetter]
            .into_iter()
            .find(|release| release.as_str() == name)
    }
}

/// Where untried deliveries and held groups are written down (DynamoDB in Lambda, memory in tests
/// and the soak). Object-safe: the processor holds one behind an `Arc`, and calls it off the happy
/// path only.
pub trait AttemptLedger: Send + Sync {
    /// What the ledger knows of each message id, in order; `None` for an id it did not answer for
    /// (DynamoDB's `UnprocessedKeys` under throttling), which is not the same as knowing nothing.
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>>;

    /// Writes down that the delivery `receive_count` of `message_id` was given back untried.
    /// Idempotent: writing the same pair twice (a retried call) counts once.
    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>>;

    /// Writes down that `message_id` began to wait in place at the head of its group at
    /// `since_ms`. Only the first write counts (a retried or a later one keeps it).
    fn record_head_wait<'a>(
        &'a self,
        message_id: &'a str,
        since_ms: u64,
    ) -> BoxFuture<'a, Result<(), PortError>>;

    /// Holds the group on `message_id`, or renews the hold with this receive (`since_ms` and,
    /// when `hold` has none, the error are kept from the hold before). `untried`: this receive was
    /// not a try (the head came back while held), and is written down as such. `Ok(false)`, and
    /// nothing written, over an operator's release to the DLQ (a head whose release it did not
    /// read, tried and failed again, must not wait for a hold that no longer stands), and for a
    /// renewal (no error in `hold`) whose hold an operator released to a retry meanwhile.
    fn hold<'a>(
        &'a self,
        message_id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<bool, PortError>>;

    /// An operator's release of a held head: `Retry` ends the hold and gives the head a fresh set
    /// of attempts from its next receive; `DeadLetter` marks it for the consumer to dead-letter.
    /// Returns the hold released (its queue and receipt handle), or `None` when none was held.
    fn release_hold<'a>(
        &'a self,
        message_id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>>;

    /// Every held head: its message id and hold.
    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>>;

    /// Ends the hold on `message_id`, whose head has gone to the DLQ (released there by an
    /// operator, or held too long): `dlq held` no longer lists it.
    fn clear_hold<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>>;

    /// Writes down that SQS confirmed the copy of `message_id` in the retry lane.
    fn record_in_lane<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>>;

    /// Writes down that the record at `position` of key `key_id` left for `place` (before it is
    /// sent: a key never looks free while a record of it is out). An earlier position than the
    /// one written (a retried batch) changes nothing.
    fn record_key_left<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
        place: KeyPlace,
    ) -> BoxFuture<'a, Result<(), PortError>>;

    /// Writes down that the record at `position` of key `key_id` took effect from the lane. An
    /// earlier position than the one written changes nothing.
    fn record_key_done<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
    ) -> BoxFuture<'a, Result<(), PortError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::MemoryLedger;

    fn untried(untried: &[u32]) -> LedgerEntry {
        LedgerEntry {
            untried: untried.to_vec(),
            ..LedgerEntry::default()
        }
    }

    #[test]
    fn attempts_are_the_earlier_receives_not_written_down_as_untried() {
        assert_eq!(untried(&[]).attempts_before(1), 0);
        assert_eq!(untried(&[]).attempts_before(6), 5);
        // Received 10 times, 8 of them held back behind its group: this is its second try.
        assert_eq!(untried(&[1, 2, 3, 4, 5, 6, 7, 9]).attempts_before(10), 1);
        // This delivery's own entry (a retried write), duplicates and noise do not count.
        assert_eq!(untried(&[3, 3, 4, 0, 12]).attempts_before(4), 2);
        // Released after its hold at receive 7: receives 8 on count afresh.
        let released = LedgerEntry {
            attempts_from: 8,
            ..untried(&[1, 2])
        };
        assert_eq!(released.attempts_before(8), 0);
        assert_eq!(released.attempts_before(10), 2);
    }

    #[tokio::test]
    async fn the_memory_ledger_counts_a_written_delivery_once() {
        let ledger = MemoryLedger::new();
        ledger.record_untried("m-1", 2).await.unwrap();
        ledger.record_untried("m-1", 2).await.unwrap();
        ledger.record_untried("m-1", 3).await.unwrap();
        let found: Vec<LedgerEntry> = ledger
            .entries(&["m-1", "m-2"])
            .await
            .unwrap()
            .into_iter()
            .map(Option::unwrap)
            .collect();
        assert_eq!(found[0].untried, [2, 3]);
        assert_eq!(found[1], LedgerEntry::default());
        assert_eq!(found[0].attempts_before(5), 2);
    }

    #[tokio::test]
    async fn a_hold_keeps_its_start_and_a_release_and_a_retry_gives_fresh_attempts() {
        let ledger = MemoryLedger::new();
        let hold = |receive_count, since_ms| Hold {
            since_ms,
            receive_count,
            receipt_handle: format!("rh-{receive_count}"),
            queue_arn: "arn:aws:sqs:eu-west-1:1:payments.fifo".into(),
            error_kind: "invalid".into(),
            ..Hold::default()
        };
        ledger.hold("m-1", &hold(5, 100), false).await.unwrap();
        ledger.hold("m-1", &hold(6, 900), true).await.unwrap();
        let entry = ledger.entries(&["m-1"]).await.unwrap()[0].clone().unwrap();
        let held = entry.hold.as_ref().unwrap();
        assert_eq!(
            (held.since_ms, held.receive_count, &*held.receipt_handle),
            (100, 6, "rh-6")
        );
        assert_eq!(entry.untried, [6], "the receive while held was no try");
        assert_eq!(ledger.held().await.unwrap().len(), 1);

        let released = ledger
            .release_hold("m-1", Release::DeadLetter)
            .await
            .unwrap();
        assert_eq!(released.unwrap().receipt_handle, "rh-6");
        // A renewal by a consumer that read the hold before that release is refused: its head
        // comes back at once and goes to the DLQ, instead of waiting 11 h 40 min.
        let renewal = Hold {
            error_kind: String::new(),
            ..hold(7, 2000)
        };
        assert!(!ledger.hold("m-1", &renewal, true).await.unwrap());
        // So is a new hold by a consumer that did not read the release, tried the head and
        // failed again: the release stands.
        assert!(!ledger.hold("m-1", &hold(7, 2000), true).await.unwrap());
        let entry = ledger.entries(&["m-1"]).await.unwrap()[0].clone().unwrap();
        let held = entry.hold.as_ref().unwrap();
        assert_eq!(
            (held.release, held.receive_count),
            (Some(Release::DeadLetter), 6),
            "the release and the hold it released stand"
        );

        ledger.hold("m-2", &hold(5, 100), false).await.unwrap();
        ledger.release_hold("m-2", Release::Retry).await.unwrap();
        let entry = ledger.entries(&["m-2"]).await.unwrap()[0].clone().unwrap();
        assert_eq!((entry.hold.is_none(), entry.attempts_before(6)), (true, 0));
        assert_eq!(
            ledger.release_hold("m-3", Release::Retry).await.unwrap(),
            None
        );
    }
}
