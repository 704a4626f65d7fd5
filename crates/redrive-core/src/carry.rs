//! Carrying fates out: the one place that sends re-sent copies and dead letters, changes
//! visibility and says which records it could not confirm. The batch processor, the Kinesis runner
//! and the DLQ reprocessor all go through it, so what counts as a confirmed send is written once.
use std::future::Future;
use std::sync::Mutex;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::envelope::{OutgoingMessage, MAX_MESSAGE_BYTES};
use crate::error::PortError;
use crate::port::{EntryFailure, QueuePort, VisibilityChange};
use crate::sync::lock;

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
pub struct Courier<Q> {
    queue: Q,
    dlq_url: Option<String>,
    /// Queue ARN and URL, for each queue looked up (a handful per container).
    urls: Mutex<Vec<(String, String)>>,
}

impl<Q: QueuePort> Courier<Q> {
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

    /// Sends each outbox to its destination in SendMessageBatch calls, all at once but for a FIFO
    /// queue's, which go one after the other so that a group's messages keep their order. A record
    /// counts as sent only when SQS confirmed its entry before `deadline`; a call still out then
    /// leaves its records unconfirmed (Lambda would otherwise fail the whole batch at its timeout).
    pub async fn send(
        &self,
        outboxes: &[(Destination<'_>, &Outbox<'_>)],
        deadline: Option<Instant>,
    ) -> Unconfirmed {
        let mut unconfirmed = Unconfirmed::default();
        let mut calls: Vec<(String, &[usize], &[OutgoingMessage<'_>])> = Vec::new();
        let mut chains: Vec<Vec<usize>> = Vec::new();
        for (destination, outbox) in outboxes.iter().filter(|(_, o)| !o.is_empty()) {
            let url = match by(deadline, self.url(*destination)).await {
                Ok(url) => url,
                Err(error) => {
                    unconfirmed.all(outbox.indexes.iter().copied(), &error.to_string());
                    continue;
                }
            };
            let first = calls.len();
            for call in outbox.calls() {
                let entries = (&outbox.indexes[call.clone()], &outbox.messages[call]);
                calls.push((url.clone(), entries.0, entries.1));
            }
            let ids = first..calls.len();
            if url.ends_with(".fifo") {
                chains.push(ids.collect());
            } else {
                chains.extend(ids.map(|id| vec![id]));
            }
        }
        if calls.is_empty() {
            return unconfirmed;
        }
        let results = in_chains(chains, calls.len(), deadline, |id| {
            let (url, _, messages) = &calls[id];
            self.queue.send_batch(url, messages)
        })
        .await;
        for ((_, indexes, _), result) in calls.iter().zip(results) {
            unconfirmed.add(indexes, result);
        }
        unconfirmed
    }

    /// Changes the visibility of deliveries from `destination`, each with its record's index, in
    /// ChangeMessageVisibilityBatch calls of 10, all at once and bounded by `deadline` as
    /// [`Courier::send`] is.
    pub async fn change_visibility(
        &self,
        destination: Destination<'_>,
        changes: &[(usize, VisibilityChange<'_>)],
        deadline: Option<Instant>,
    ) -> Unconfirmed {
        let mut unconfirmed = Unconfirmed::default();
        if changes.is_empty() {
            return unconfirmed;
        }
        let url = match by(deadline, self.url(destination)).await {
            Ok(url) => url,
            Err(error) => {
                unconfirmed.all(changes.iter().map(|(index, _)| *index), &error.to_string());
                return unconfirmed;
            }
        };
        let calls: Vec<(Vec<usize>, Vec<VisibilityChange<'_>>)> = changes
            .chunks(10)
            .map(|chunk| chunk.iter().copied().unzip())
            .collect();
        let chains = (0..calls.len()).map(|id| vec![id]).collect();
        let results = in_chains(chains, calls.len(), deadline, |id| {
            self.queue.change_visibility_batch(&url, &calls[id].1)
        })
        .await;
        for ((indexes, _), result) in calls.iter().zip(results) {
            unconfirmed.add(indexes, result);
        }
        unconfirmed
    }
}

/// What one batch call came to: SQS's answer, or `None` when it had not answered by the deadline.
type CallResult = Option<Result<Vec<EntryFailure>, PortError>>;

impl Unconfirmed {
    /// Counts one call over the records `indexes` (in entry order) and notes those it did not confirm.
    fn add(&mut self, indexes: &[usize], result: CallResult) {
        match result {
            Some(Ok(refused)) => {
                self.requests += 1;
                for entry in refused {
                    if let Some(&index) = indexes.get(entry.index) {
                        let reason = format!("{}: {}", entry.code, entry.message);
                        self.records.push((index, reason));
                    }
                }
            }
            Some(Err(error)) => {
                self.requests += 1;
                self.all(indexes.iter().copied(), &error.to_string());
            }
            None => self.all(indexes.iter().copied(), NOT_BY_THE_DEADLINE),
        }
    }
}

const NOT_BY_THE_DEADLINE: &str = "SQS had not answered by the deadline";

/// `call(id)` for every call id, the chains side by side and each chain's calls one after the other,
/// until `deadline`; each call's result, `None` for one that had not answered by then (a call not
/// yet started counts as one that did not answer: it is not made).
async fn in_chains<'c, F, Fut>(
    chains: Vec<Vec<usize>>,
    calls: usize,
    deadline: Option<Instant>,
    call: F,
) -> Vec<CallResult>
where
    F: Fn(usize) -> Fut + 'c,
    Fut: Future<Output = Result<Vec<EntryFailure>, PortError>> + 'c,
{
    let results: Mutex<Vec<CallResult>> = Mutex::new((0..calls).map(|_| None).collect());
    let (call, results_ref) = (&call, &results);
    let all = join_all(chains.into_iter().map(|chain| async move {
        for id in chain {
            let result = call(id).await;
            lock(results_ref)[id] = Some(result);
        }
    }));
    let _ = by(deadline, async {
        all.await;
        Ok(())
    })
    .await;
    results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `future`'s answer, or an error when `deadline` comes first.
async fn by<T>(
    deadline: Option<Instant>,
    future: impl Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    match deadline {
        None => future.await,
        Some(deadline) => tokio::time::timeout_at(deadline, future)
            .await
            .unwrap_or_else(|_| Err(PortError::new("SQS", NOT_BY_THE_DEADLINE))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::envelope::OutgoingMessage;
    use crate::port::{Call, RecordingQueue};
    use redrive_event::Text;

    fn message(body: &str) -> OutgoingMessage<'static> {
        OutgoingMessage {
            body: Text::from(body.to_owned()),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
            deduplication_id: None,
            trace_header: None,
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
        let carry = Courier::new(RecordingQueue::default(), Some(DLQ.to_owned()));
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
            .send(
                &[
                    (Destination::Arn(SOURCE_ARN), &to_source),
                    (Destination::Dlq, &to_dlq),
                ],
                None,
            )
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
        let carry = Courier::new(RecordingQueue::default(), Some(DLQ.to_owned()));
        carry.queue().fail_calls_to(DLQ);
        let to_dlq = outbox(&["a", "b"], 3);
        let unconfirmed = carry.send(&[(Destination::Dlq, &to_dlq)], None).await;
        let indexes: Vec<usize> = unconfirmed.records.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [3, 4]);

        let report_only = Courier::new(RecordingQueue::default(), None);
        let unconfirmed = report_only.send(&[(Destination::Dlq, &to_dlq)], None).await;
        assert_eq!(unconfirmed.records.len(), 2);
        assert!(unconfirmed.records[0].1.contains("no DLQ is configured"));
        assert!(report_only.queue().calls().is_empty());
    }

    #[tokio::test]
    async fn visibility_changes_go_in_tens_to_the_queue_an_arn_names() {
        let carry = Courier::new(RecordingQueue::default(), None);
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
            .change_visibility(Destination::Arn(SOURCE_ARN), &changes, None)
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
