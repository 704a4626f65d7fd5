//! Carrying fates out: the one place that sends re-sent copies and dead letters, changes
//! visibility and says which records it could not confirm. The batch processor, the Kinesis runner
//! and the DLQ reprocessor all go through it, so what counts as a confirmed send is written once.
use std::sync::Mutex;

use crate::envelope::{OutgoingMessage, MAX_MESSAGE_BYTES};
use crate::error::PortError;
use crate::lock;
use crate::port::{QueuePort, VisibilityChange};

/// Messages bound for one queue, each with the index of the record it belongs to, sent in as few
/// SendMessageBatch calls as SQS's limits allow.
#[derive(Default)]
pub struct Outbox<'r> {
    /// The index of each message's record, in the order the messages were pushed.
    pub indexes: Vec<usize>,
    messages: Vec<OutgoingMessage<'r>>,
}

impl<'r> Outbox<'r> {
    /// Adds `message`, which belongs to record `index`.
    pub fn push(&mut self, index: usize, message: OutgoingMessage<'r>) {
        self.indexes.push(index);
        self.messages.push(message);
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The ranges of messages one SendMessageBatch each: at most 10 entries and 1 MiB.
    fn calls(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut start = 0;
        std::iter::from_fn(move || {
            if start >= self.messages.len() {
                return None;
            }
            let mut end = start;
            let mut bytes = 0;
            while end < self.messages.len()
                && end - start < 10
                && (end == start || bytes + self.messages[end].size() <= MAX_MESSAGE_BYTES)
            {
                bytes += self.messages[end].size();
                end += 1;
            }
            let call = start..end;
            start = end;
            Some(call)
        })
    }
}

/// The queue a carry-out sends to or changes visibility on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination<'a> {
    /// The configured DLQ.
    Dlq,
    /// A queue by URL.
    Url(&'a str),
    /// A queue by ARN: its URL is looked up once and kept.
    Arn(&'a str),
}

/// What a carry-out could not confirm, and what it cost.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unconfirmed {
    /// Each record whose send or change SQS did not confirm, with the reason, in call order.
    pub records: Vec<(usize, String)>,
    /// SQS requests made (URL look-ups not counted).
    pub requests: u32,
}

impl Unconfirmed {
    fn all(&mut self, indexes: impl IntoIterator<Item = usize>, reason: &str) {
        self.records
            .extend(indexes.into_iter().map(|index| (index, reason.to_owned())));
    }
}

/// Owns the queue port, the DLQ URL and the queue-URL cache of one function's warm container.
pub struct CarryOut<Q> {
    queue: Q,
    dlq_url: Option<String>,
    /// Queue ARN and URL, for each queue looked up (a handful per container).
    urls: Mutex<Vec<(String, String)>>,
}

impl<Q: QueuePort> CarryOut<Q> {
    /// Carries out through `queue`; dead letters go to `dlq_url`.
    pub fn new(queue: Q, dlq_url: Option<String>) -> Self {
        Self {
            queue,
            dlq_url,
            urls: Mutex::new(Vec::new()),
        }
    }

    /// The port.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The port, the carry-out done with.
    pub fn into_queue(self) -> Q {
        self.queue
    }

    /// The DLQ, if one is configured.
    pub fn dlq_url(&self) -> Option<&str> {
        self.dlq_url.as_deref()
    }

    /// The URL of `destination`, looked up by ARN at most once per container.
    pub async fn url(&self, destination: Destination<'_>) -> Result<String, PortError> {
        let arn = match destination {
            Destination::Dlq => {
                return self
                    .dlq_url
                    .clone()
                    .ok_or_else(|| PortError::new("SendMessageBatch", "no DLQ is configured"))
            }
            Destination::Url(url) => return Ok(url.to_owned()),
            Destination::Arn(arn) => arn,
        };
        if let Some((_, url)) = lock(&self.urls).iter().find(|(a, _)| a == arn) {
            return Ok(url.clone());
        }
        let url = self.queue.queue_url(arn).await?;
        lock(&self.urls).push((arn.to_owned(), url.clone()));
        Ok(url)
    }

    /// Sends each outbox to its destination in SendMessageBatch calls, one destination after the
    /// other; a record counts as sent only when SQS confirmed its entry.
    pub async fn send(&self, outboxes: &[(Destination<'_>, &Outbox<'_>)]) -> Unconfirmed {
        let mut unconfirmed = Unconfirmed::default();
        for (destination, outbox) in outboxes.iter().filter(|(_, o)| !o.is_empty()) {
            let url = match self.url(*destination).await {
                Ok(url) => url,
                Err(error) => {
                    unconfirmed.all(outbox.indexes.iter().copied(), &error.to_string());
                    continue;
                }
            };
            for call in outbox.calls() {
                unconfirmed.requests += 1;
                let indexes = &outbox.indexes[call.clone()];
                match self.queue.send_batch(&url, &outbox.messages[call]).await {
                    Ok(refused) => {
                        for entry in refused {
                            if let Some(&index) = indexes.get(entry.index) {
                                let reason = format!("{}: {}", entry.code, entry.message);
                                unconfirmed.records.push((index, reason));
                            }
                        }
                    }
                    Err(error) => unconfirmed.all(indexes.iter().copied(), &error.to_string()),
                }
            }
        }
        unconfirmed
    }

    /// Changes the visibility of deliveries from `destination`, each with its record's index, in
    /// ChangeMessageVisibilityBatch calls of 10.
    pub async fn change_visibility(
        &self,
        destination: Destination<'_>,
        changes: &[(usize, VisibilityChange<'_>)],
    ) -> Unconfirmed {
        let mut unconfirmed = Unconfirmed::default();
        if changes.is_empty() {
            return unconfirmed;
        }
        let url = match self.url(destination).await {
            Ok(url) => url,
            Err(error) => {
                unconfirmed.all(changes.iter().map(|(index, _)| *index), &error.to_string());
                return unconfirmed;
            }
        };
        for chunk in changes.chunks(10) {
            unconfirmed.requests += 1;
            let entries: Vec<VisibilityChange<'_>> =
                chunk.iter().map(|(_, change)| *change).collect();
            match self.queue.change_visibility_batch(&url, &entries).await {
                Ok(refused) => {
                    for entry in refused {
                        if let Some((index, _)) = chunk.get(entry.index) {
                            unconfirmed.records.push((*index, entry.code));
                        }
                    }
                }
                Err(error) => {
                    unconfirmed.all(chunk.iter().map(|(index, _)| *index), &error.to_string())
                }
            }
        }
        unconfirmed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::envelope::OutgoingMessage;
    use crate::event::Text;
    use crate::port::{Call, RecordingQueue};

    fn message(body: &str) -> OutgoingMessage<'static> {
        OutgoingMessage {
            body: Text::from(body.to_owned()),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
            deduplication_id: None,
        }
    }

    fn outbox(bodies: &[&str], first_index: usize) -> Outbox<'static> {
        let mut outbox = Outbox::default();
        for (i, body) in bodies.iter().enumerate() {
            outbox.push(first_index + i, message(body));
        }
        outbox
    }

    const DLQ: &str = "https://sqs.local/123456789012/dlq";
    const SOURCE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:source";

    #[tokio::test]
    async fn sends_in_calls_of_ten_and_names_every_record_sqs_did_not_confirm() {
        let carry = CarryOut::new(RecordingQueue::default(), Some(DLQ.to_owned()));
        carry.queue().refuse_entries_containing("refuse");
        let bodies: Vec<String> = (0..12)
            .map(|i| {
                if i == 11 {
                    "refuse".into()
                } else {
                    format!("m{i}")
                }
            })
            .collect();
        let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
        let to_dlq = outbox(&bodies, 0);
        let to_source = outbox(&["again"], 12);
        let unconfirmed = carry
            .send(&[
                (Destination::Arn(SOURCE_ARN), &to_source),
                (Destination::Dlq, &to_dlq),
            ])
            .await;
        assert_eq!(unconfirmed.requests, 3);
        assert_eq!(
            unconfirmed.records,
            [(11, "InternalError: injected".to_owned())]
        );
        assert_eq!(carry.queue().sent_to(DLQ).len(), 12);
        let source = "https://sqs.local/123456789012/source";
        assert_eq!(carry.queue().sent_to(source).len(), 1);
    }

    #[tokio::test]
    async fn a_failed_call_or_a_missing_dlq_leaves_every_record_of_it_unconfirmed() {
        let carry = CarryOut::new(RecordingQueue::default(), Some(DLQ.to_owned()));
        carry.queue().fail_calls_to(DLQ);
        let to_dlq = outbox(&["a", "b"], 3);
        let unconfirmed = carry.send(&[(Destination::Dlq, &to_dlq)]).await;
        let indexes: Vec<usize> = unconfirmed.records.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [3, 4]);

        let report_only = CarryOut::new(RecordingQueue::default(), None);
        let unconfirmed = report_only.send(&[(Destination::Dlq, &to_dlq)]).await;
        assert_eq!(unconfirmed.records.len(), 2);
        assert!(unconfirmed.records[0].1.contains("no DLQ is configured"));
        assert!(report_only.queue().calls().is_empty());
    }

    #[tokio::test]
    async fn visibility_changes_go_in_tens_to_the_queue_an_arn_names() {
        let carry = CarryOut::new(RecordingQueue::default(), None);
        let handles: Vec<String> = (0..11).map(|i| format!("h{i}")).collect();
        let changes: Vec<(usize, VisibilityChange<'_>)> = handles
            .iter()
            .enumerate()
            .map(|(i, handle)| {
                let change = VisibilityChange {
                    receipt_handle: handle,
                    timeout: Duration::from_secs(30),
                };
                (i, change)
            })
            .collect();
        let unconfirmed = carry
            .change_visibility(Destination::Arn(SOURCE_ARN), &changes)
            .await;
        assert_eq!(
            unconfirmed,
            Unconfirmed {
                records: vec![],
                requests: 2
            }
        );
        let calls = carry.queue().calls();
        let source = "https://sqs.local/123456789012/source";
        assert!(matches!(&calls[..], [
            Call::ChangeVisibility { queue_url: a, .. },
            Call::ChangeVisibility { queue_url: b, changes },
        ] if a == source && b == source && changes.len() == 1));
    }
}
