//! The conformance suite: one scenario per documented SQS behaviour that redrive relies on, run
//! through the port the engine uses ([`QueuePort`]) on three implementations — the in-memory model
//! ([`MemorySqs`]), moto and LocalStack — and judged against AWS's documentation, not against each
//! other. `tests/conformance.rs` prints the table and holds each implementation to it.
mod calls;

use calls::*;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use redrive::aws::SqsQueue;
use redrive::envelope::OutgoingMessage;
use redrive::event::{SqsRecord, Text};
use redrive::port::{EntryFailure, QueuePort, VisibilityChange};
use redrive::PortError;

use crate::memory::{MemorySqs, QueueSpec};

/// What an implementation did in a scenario, judged against AWS's documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It does what the page says.
    Agrees,
    /// It does something else: what was seen.
    Deviates(String),
    /// Where the page allows two readings, it takes the other one than the model's (the harsher).
    OtherReading(String),
}

impl Verdict {
    fn from_check(agrees: bool, seen: impl FnOnce() -> String) -> Self {
        if agrees {
            Self::Agrees
        } else {
            Self::Deviates(seen())
        }
    }
}

/// An SQS to run the scenarios on: the port, plus what a scenario needs around it.
pub trait Lab: QueuePort {
    /// Creates a queue (CreateQueue with `FifoQueue`, `MessageRetentionPeriod`, `RedrivePolicy`).
    /// Returns its URL and ARN.
    fn create(
        &self,
        name: &str,
        spec: &QueueSpec,
    ) -> impl Future<Output = Result<(String, String), PortError>> + Send;
    /// Lets `span` pass: a virtual clock moves on, a server is waited for.
    fn pass(&self, span: Duration) -> impl Future<Output = ()> + Send;
}

impl Lab for MemorySqs {
    async fn create(&self, name: &str, spec: &QueueSpec) -> Result<(String, String), PortError> {
        Ok(MemorySqs::create(self, name, spec.clone()))
    }

    async fn pass(&self, span: Duration) {
        self.clock()
            .advance(u64::try_from(span.as_millis()).unwrap_or(u64::MAX));
    }
}

/// An SQS server (moto, LocalStack, or AWS itself) through the real SDK.
pub struct Server {
    client: aws_sdk_sqs::Client,
    port: SqsQueue,
}

impl Server {
    /// The server at `endpoint`.
    pub fn at(endpoint: &str) -> Self {
        let client = crate::sqs_client_at(endpoint);
        Self {
            port: SqsQueue::with_client(client.clone()),
            client,
        }
    }
}

impl redrive::port::ForwardingPort for Server {
    type Inner = SqsQueue;

    fn inner(&self) -> &SqsQueue {
        &self.port
    }
}

impl Lab for Server {
    async fn create(&self, name: &str, spec: &QueueSpec) -> Result<(String, String), PortError> {
        let mut create = self.client.create_queue().queue_name(name).attributes(
            QueueAttributeName::MessageRetentionPeriod,
            spec.retention.as_secs().to_string(),
        );
        if spec.fifo {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        if let Some((dlq_arn, max)) = &spec.redrive {
            let policy =
                serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max });
            create = create.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
        }
        let url = create
            .send()
            .await
            .map_err(|e| PortError::new("CreateQueue", aws_sdk_sqs::error::DisplayErrorContext(e)))?
            .queue_url
            .unwrap_or_default();
        let arn = crate::provision::queue_arn(&self.client, &url)
            .await
            .map_err(|e| PortError::new("GetQueueAttributes", e))?;
        Ok((url, arn))
    }

    async fn pass(&self, span: Duration) {
        tokio::time::sleep(span).await;
    }
}

/// One documented behaviour, the page it is documented on, and the scenario that shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// A short name (the table's row).
    pub name: &'static str,
    /// What AWS documents.
    pub documented: &'static str,
    /// Where.
    pub source: &'static str,
    run: ScenarioRun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScenarioRun {
    Retention,
    DlqRetention { fifo: bool },
    FifoGroupReturnsInOrder,
    FifoGroupWaitsForItsHead,
    FifoFollowersGivenBackWaitForTheirHead,
    DelayOnStandard,
    DelayPerMessageOnFifo,
    BatchOfEleven,
    BatchOverOneMebibyte,
    MessageOfOneMebibyte,
    ReceiveCountRises,
    MovedPastMaxReceiveCount,
    VisibilityTwelveHours,
    ChangeNotInFlight,
    DeleteWithOlderHandle,
    FifoSequenceNumbersGrow,
    FifoDeduplicationInterval,
    BodiesSqsCannotCarry,
}

/// Every scenario, in the table's order.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "retention",
        documented: "a message is deleted MessageRetentionPeriod after it was sent, received or not",
        source: "SQS API reference, CreateQueue (MessageRetentionPeriod)",
        run: ScenarioRun::Retention,
    },
    Scenario {
        name: "standard DLQ keeps the enqueue time",
        documented: "a message moved to a standard DLQ expires by its original enqueue time",
        source: "SQS developer guide, setting up dead-letter queue retention",
        run: ScenarioRun::DlqRetention { fifo: false },
    },
    Scenario {
        name: "FIFO DLQ resets the enqueue time",
        documented: "a message moved to a FIFO DLQ expires by the time it was moved",
        source: "SQS developer guide, setting up dead-letter queue retention",
        run: ScenarioRun::DlqRetention { fifo: true },
    },
    Scenario {
        name: "FIFO group returns in order",
        documented: "a group's messages, visible again together, are received again in order from the first",
        source: "SQS developer guide, FIFO queue delivery logic (message ordering)",
        run: ScenarioRun::FifoGroupReturnsInOrder,
    },
    Scenario {
        name: "FIFO group waits for its head",
        documented: "no message of a group is received while an earlier one is in flight",
        source: "SQS developer guide, FIFO queue delivery logic",
        run: ScenarioRun::FifoGroupWaitsForItsHead,
    },
    Scenario {
        name: "FIFO followers given back wait for their head",
        documented: "a group's later messages made visible again stay behind an earlier one still in flight",
        source: "SQS developer guide, FIFO queue delivery logic",
        run: ScenarioRun::FifoFollowersGivenBackWaitForTheirHead,
    },
    Scenario {
        name: "DelaySeconds (standard)",
        documented: "a message sent with DelaySeconds stays invisible that long",
        source: "SQS API reference, SendMessageBatchRequestEntry (DelaySeconds)",
        run: ScenarioRun::DelayOnStandard,
    },
    Scenario {
        name: "no DelaySeconds per message on FIFO",
        documented: "a FIFO queue takes DelaySeconds only at queue level: a per-message delay is refused",
        source: "SQS API reference, SendMessageBatchRequestEntry (DelaySeconds)",
        run: ScenarioRun::DelayPerMessageOnFifo,
    },
    Scenario {
        name: "batch of 11 refused",
        documented: "a batch takes at most 10 entries (TooManyEntriesInBatchRequest)",
        source: "SQS API reference, SendMessageBatch",
        run: ScenarioRun::BatchOfEleven,
    },
    Scenario {
        name: "batch over 1 MiB refused",
        documented: "a batch's messages together are at most 1 MiB (BatchRequestTooLong)",
        source: "SQS API reference, SendMessageBatch",
        run: ScenarioRun::BatchOverOneMebibyte,
    },
    Scenario {
        name: "message of 1 MiB accepted",
        documented: "a message may be up to 1 MiB (1,048,576 bytes)",
        source: "SQS API reference, SendMessage (MessageBody)",
        run: ScenarioRun::MessageOfOneMebibyte,
    },
    Scenario {
        name: "receive count rises",
        documented: "each receive raises ApproximateReceiveCount",
        source: "SQS API reference, ReceiveMessage (ApproximateReceiveCount)",
        run: ScenarioRun::ReceiveCountRises,
    },
    Scenario {
        name: "moved past maxReceiveCount",
        documented: "a receive finding a message past maxReceiveCount moves it to the DLQ, with DeadLetterQueueSourceArn",
        source: "SQS developer guide, using dead-letter queues; ReceiveMessage (DeadLetterQueueSourceArn)",
        run: ScenarioRun::MovedPastMaxReceiveCount,
    },
    Scenario {
        name: "visibility within 12 hours of the receive",
        documented: "a change that would keep a message invisible past 12 hours from its receive is rejected",
        source: "SQS API reference, ChangeMessageVisibility",
        run: ScenarioRun::VisibilityTwelveHours,
    },
    Scenario {
        name: "change on a message not in flight",
        documented: "changing the visibility of a message that is visible again fails (MessageNotInflight)",
        source: "SQS API reference, ChangeMessageVisibility (errors)",
        run: ScenarioRun::ChangeNotInFlight,
    },
    Scenario {
        name: "delete with an older receipt handle",
        documented: "succeeds, but the message might not be deleted (the model: it is not)",
        source: "SQS API reference, DeleteMessage",
        run: ScenarioRun::DeleteWithOlderHandle,
    },
    Scenario {
        name: "FIFO sequence numbers grow",
        documented: "each FIFO message has a SequenceNumber of up to 128 bits that grows within its group",
        source: "SQS API reference, SendMessage (SequenceNumber); ReceiveMessage (SequenceNumber)",
        run: ScenarioRun::FifoSequenceNumbersGrow,
    },
    Scenario {
        name: "FIFO deduplication interval",
        documented: "a message sent with a deduplication id taken in the last 5 minutes is accepted and not delivered, even after the first was deleted",
        source: "SQS API reference, SendMessage (MessageDeduplicationId); SQS developer guide, FIFO queue key terms",
        run: ScenarioRun::FifoDeduplicationInterval,
    },
    Scenario {
        name: "empty body and refused characters",
        documented: "a body has at least one character, each of #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF",
        source: "SQS API reference, SendMessage (MessageBody)",
        run: ScenarioRun::BodiesSqsCannotCarry,
    },
];

/// Runs `scenario` on `lab`, its queues named after `prefix`.
pub async fn run<L: Lab>(lab: &L, scenario: &Scenario, prefix: &str) -> Result<Verdict, PortError> {
    let tag = scenario
        .name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(24)
        .collect::<String>();
    let name = |suffix: &str| format!("{prefix}-{tag}{suffix}");
    // A queue's name and default settings; FIFO by its `.fifo` suffix, as SQS decides.
    let queue = |suffix: &str, is_fifo: bool| {
        let name = name(&format!("{suffix}{}", if is_fifo { ".fifo" } else { "" }));
        let spec = QueueSpec::named(&name);
        (name, spec)
    };
    let standard = |suffix: &str| queue(suffix, false);
    let fifo = |suffix: &str| queue(suffix, true);
    Ok(match scenario.run {
        ScenarioRun::Retention => {
            let (name, spec) = standard("");
            let (url, _) = lab
                .create(&name, &spec.retaining(Duration::from_secs(60)))
                .await?;
            send(lab, &url, &["m0"], None, 0).await?;
            lab.pass(Duration::from_secs(66)).await;
            let got = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(got.is_empty(), || {
                format!("{got:?} still received after 66 s")
            })
        }
        ScenarioRun::DlqRetention { fifo: is_fifo } => {
            let (dlq_name, dlq_spec) = queue("-dlq", is_fifo);
            let dlq_spec = dlq_spec.retaining(Duration::from_secs(60));
            let (dlq, dlq_arn) = lab.create(&dlq_name, &dlq_spec).await?;
            let (name, spec) = queue("", is_fifo);
            let spec = spec
                .retaining(Duration::from_secs(600))
                .dead_letters_to(&dlq_arn, 1);
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], is_fifo.then_some("g"), 0).await?;
            receive(lab, &url, 1).await?;
            lab.pass(Duration::from_secs(36)).await;
            // This receive finds it past maxReceiveCount 1 and moves it, 36 s after it was sent.
            let moved_too_early = !receive(lab, &url, 30).await?.is_empty();
            lab.pass(Duration::from_secs(30)).await;
            let kept = !receive(lab, &dlq, 30).await?.is_empty();
            // 66 s after the send, 30 s after the move, with 60 s of DLQ retention.
            let expected = is_fifo;
            Verdict::from_check(!moved_too_early && kept == expected, || {
                format!(
                    "{} in the DLQ 66 s after the send, 30 s after the move{}",
                    if kept { "still" } else { "gone" },
                    if moved_too_early {
                        " (not moved at the second receive)"
                    } else {
                        ""
                    }
                )
            })
        }
        ScenarioRun::FifoGroupReturnsInOrder => {
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0", "m1", "m2"], Some("g"), 0).await?;
            let first = bodies(&receive(lab, &url, 1).await?);
            lab.pass(Duration::from_millis(2_500)).await;
            let again = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(first == ["m0", "m1", "m2"] && again == first, || {
                format!("first {first:?}, then {again:?}")
            })
        }
        ScenarioRun::FifoGroupWaitsForItsHead => {
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0", "m1"], Some("g"), 0).await?;
            let head = bodies(
                &lab.receive(&url, 1, Duration::from_secs(30), Duration::ZERO)
                    .await?,
            );
            let behind = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(head == ["m0"] && behind.is_empty(), || {
                format!("{head:?}, then {behind:?} while it was in flight")
            })
        }
        ScenarioRun::FifoFollowersGivenBackWaitForTheirHead => {
            // What the engine does when a group's head fails: the head waits in place, the
            // records behind it are given back at once.
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0", "m1", "m2"], Some("g"), 0).await?;
            let got = receive(lab, &url, 30).await?;
            let handles = handles(&got);
            let changes: Vec<VisibilityChange<'_>> = handles
                .iter()
                .enumerate()
                .map(|(index, handle)| VisibilityChange {
                    receipt_handle: handle,
                    timeout: if index == 0 {
                        Duration::from_secs(20)
                    } else {
                        Duration::ZERO
                    },
                })
                .collect();
            let refused = lab.change_visibility_batch(&url, &changes).await?;
            let behind = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(
                got.len() == 3 && refused.is_empty() && behind.is_empty(),
                || format!("{behind:?} received while m0 was in flight"),
            )
        }
        ScenarioRun::DelayOnStandard => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], None, 3).await?;
            let early = bodies(&receive(lab, &url, 30).await?);
            lab.pass(Duration::from_secs(4)).await;
            let late = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(early.is_empty() && late == ["m0"], || {
                format!("{early:?} at once, {late:?} after the delay")
            })
        }
        ScenarioRun::DelayPerMessageOnFifo => {
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            let refused = refused(send(lab, &url, &["m0"], Some("g"), 5).await);
            Verdict::from_check(refused.is_some(), || "accepted".into())
        }
        ScenarioRun::BatchOfEleven => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            let bodies: Vec<String> = (0..11).map(|n| format!("m{n}")).collect();
            let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
            let refused = refused(send(lab, &url, &bodies, None, 0).await);
            Verdict::from_check(refused.is_some(), || "accepted".into())
        }
        ScenarioRun::BatchOverOneMebibyte => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            let body = "x".repeat(600 * 1024);
            let refused = refused(send(lab, &url, &[&body, &body], None, 0).await);
            Verdict::from_check(
                refused
                    .as_deref()
                    .is_some_and(|error| error.contains("BatchRequestTooLong")),
                || refused.as_deref().unwrap_or("accepted").to_owned(),
            )
        }
        ScenarioRun::MessageOfOneMebibyte => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            let body = "x".repeat(1_048_576);
            let refused = refused(send(lab, &url, &[&body], None, 0).await);
            let got = receive(lab, &url, 30).await?;
            let intact = got.len() == 1 && got[0].body.as_deref() == Some(body.as_str());
            Verdict::from_check(refused.is_none() && intact, || {
                refused.unwrap_or_else(|| "accepted, not received intact".into())
            })
        }
        ScenarioRun::BodiesSqsCannotCarry => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            let empty = refused(send(lab, &url, &[""], None, 0).await);
            let control = refused(send(lab, &url, &["order\u{0}7"], None, 0).await);
            let plain = refused(send(lab, &url, &["order 7"], None, 0).await);
            let got = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(
                empty.is_some() && control.is_some() && plain.is_none() && got == ["order 7"],
                || {
                    format!(
                        "empty: {empty:?}, a NUL: {control:?}, plain: {plain:?}, received {got:?}"
                    )
                },
            )
        }
        ScenarioRun::ReceiveCountRises => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], None, 0).await?;
            receive(lab, &url, 1).await?;
            lab.pass(Duration::from_millis(2_500)).await;
            let counts = receive_counts(&receive(lab, &url, 30).await?);
            Verdict::from_check(counts == ["2"], || {
                format!("count {counts:?} at the second receive")
            })
        }
        ScenarioRun::MovedPastMaxReceiveCount => {
            let (dlq_name, dlq_spec) = standard("-dlq");
            let (dlq, dlq_arn) = lab.create(&dlq_name, &dlq_spec).await?;
            let (name, spec) = standard("");
            let (url, arn) = lab
                .create(&name, &spec.dead_letters_to(&dlq_arn, 2))
                .await?;
            send(lab, &url, &["m0"], None, 0).await?;
            for _ in 0..2 {
                receive(lab, &url, 1).await?;
                lab.pass(Duration::from_millis(2_500)).await;
            }
            let third = bodies(&receive(lab, &url, 30).await?);
            let moved = receive(lab, &dlq, 30).await?;
            let from = moved
                .first()
                .and_then(|r| r.attributes.dead_letter_queue_source_arn.as_deref())
                .unwrap_or_default()
                .to_owned();
            Verdict::from_check(
                third.is_empty() && bodies(&moved) == ["m0"] && from == arn,
                || {
                    format!(
                        "third receive {third:?}, DLQ {:?} from {from:?}",
                        bodies(&moved)
                    )
                },
            )
        }
        ScenarioRun::VisibilityTwelveHours => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], None, 0).await?;
            let twelve_hours = Duration::from_secs(43_200);
            let got = receive(lab, &url, 43_200).await?;
            let handle = handles(&got);
            lab.pass(Duration::from_secs(2)).await;
            let change = lab
                .change_visibility_batch(
                    &url,
                    &[VisibilityChange {
                        receipt_handle: handle.first().map_or("", String::as_str),
                        timeout: twelve_hours,
                    }],
                )
                .await;
            let refused = refused(change);
            Verdict::from_check(got.len() == 1 && refused.is_some(), || {
                "12 hours more, 2 s after a receive for 12 hours: accepted".into()
            })
        }
        ScenarioRun::ChangeNotInFlight => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], None, 0).await?;
            let handle = handles(&receive(lab, &url, 1).await?);
            lab.pass(Duration::from_millis(2_500)).await;
            let change = lab
                .change_visibility_batch(
                    &url,
                    &[VisibilityChange {
                        receipt_handle: handle.first().map_or("", String::as_str),
                        timeout: Duration::from_secs(30),
                    }],
                )
                .await;
            let refused = refused(change);
            Verdict::from_check(
                refused
                    .as_deref()
                    .is_some_and(|error| error.contains("MessageNotInflight")),
                || refused.unwrap_or_else(|| "accepted".into()),
            )
        }
        ScenarioRun::DeleteWithOlderHandle => {
            let (name, spec) = standard("");
            let (url, _) = lab.create(&name, &spec).await?;
            send(lab, &url, &["m0"], None, 0).await?;
            let older = handles(&receive(lab, &url, 1).await?);
            lab.pass(Duration::from_millis(2_500)).await;
            receive(lab, &url, 1).await?;
            let older: Vec<&str> = older.iter().map(String::as_str).collect();
            let refused = lab.delete_batch(&url, &older).await?;
            lab.pass(Duration::from_millis(2_500)).await;
            let after = bodies(&receive(lab, &url, 30).await?);
            match (refused.first(), after.is_empty()) {
                (None, false) => Verdict::Agrees,
                (None, true) => Verdict::OtherReading("deleted".into()),
                (Some(entry), _) => Verdict::Deviates(format!("refused: {}", entry.code)),
            }
        }
        ScenarioRun::FifoSequenceNumbersGrow => {
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            // Ten sends: random numbers (moto's) come out growing once in 10! runs, not once in 3!.
            let bodies: Vec<String> = (0..10).map(|n| format!("m{n}")).collect();
            for body in &bodies {
                send(lab, &url, &[body.as_str()], Some("g"), 0).await?;
            }
            let numbers: Vec<Option<u128>> = receive(lab, &url, 30)
                .await?
                .iter()
                .map(|record| record.attributes.sequence_number.as_deref()?.parse().ok())
                .collect();
            let growing = numbers.len() == bodies.len()
                && numbers.windows(2).all(|pair| match pair {
                    [Some(a), Some(b)] => a < b,
                    _ => false,
                });
            Verdict::from_check(growing, || format!("sequence numbers {numbers:?}"))
        }
        ScenarioRun::FifoDeduplicationInterval => {
            let (name, spec) = fifo("");
            let (url, _) = lab.create(&name, &spec).await?;
            let message = |body: &'static str| OutgoingMessage {
                body: Text::from(body),
                attributes: Vec::new(),
                delay_seconds: 0,
                group_id: Some(Text::from("g")),
                deduplication_id: Some(Text::from("the-same-id")),
                trace_header: None,
            };
            lab.send_batch(&url, &[message("m0")]).await?;
            let first = receive(lab, &url, 30).await?;
            let first_handles = handles(&first);
            let first_handles: Vec<&str> = first_handles.iter().map(String::as_str).collect();
            lab.delete_batch(&url, &first_handles).await?;
            let accepted = refused(lab.send_batch(&url, &[message("m1")]).await);
            let again = bodies(&receive(lab, &url, 30).await?);
            Verdict::from_check(
                bodies(&first) == ["m0"] && accepted.is_none() && again.is_empty(),
                || {
                    format!(
                        "first {:?}, the second send {accepted:?}, then {again:?}",
                        bodies(&first)
                    )
                },
            )
        }
    })
}

/// Every scenario on `lab`, side by side (the waits of the slow ones overlap), in table order.
pub async fn run_all<L: Lab + 'static>(
    lab: Arc<L>,
    prefix: &str,
) -> Vec<(&'static Scenario, Result<Verdict, PortError>)> {
    let tasks: Vec<_> = SCENARIOS
        .iter()
        .map(|scenario| {
            let (lab, prefix) = (lab.clone(), prefix.to_owned());
            tokio::spawn(async move { run(lab.as_ref(), scenario, &prefix).await })
        })
        .collect();
    let mut verdicts = Vec::new();
    for (scenario, task) in SCENARIOS.iter().zip(tasks) {
        let verdict = task
            .await
            .unwrap_or_else(|panic| Err(PortError::new("scenario", panic)));
        verdicts.push((scenario, verdict));
    }
    verdicts
}
