//! The handler contract: what a user's handler implements and what it sees of a record and of
//! the invocation it arrived in.
use std::any::Any;
use std::future::{poll_fn, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;

use crate::clock::Clock;
use crate::envelope::{FailedIn, Meta, DATA_ENCODING_ATTRIBUTE, META_ATTRIBUTE};
use crate::error::RecordError;
use redrive_event::{MessageAttribute, MessageAttributes, SqsRecord};

/// Handles one message. Return a [`RecordError`] saying whether the failure is transient or
/// permanent; a panic is caught and treated as permanent (class `panic`). Several records of a
/// batch are handled at once ([`ProcessorConfig::concurrency`](crate::processor::ProcessorConfig::concurrency)), all through `&self`: state shared
/// between them needs a lock or an atomic.
pub trait RecordHandler: Sync {
    /// Handles `message`; the error says whether it is worth retrying.
    fn handle(&self, message: &Message<'_>)
        -> impl Future<Output = Result<(), RecordError>> + Send;

    /// Ends what the handler left running on tasks of its own when records were cut off at the
    /// deadline (the idempotency guard's record of an effect already made). The processor waits
    /// for it before carrying fates out, within half the time left for them. Nothing by default;
    /// a handler that wraps another (around an idempotency guard, say) forwards it.
    fn flush(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Since when (ms since the epoch) the downstream this handler calls has been down, as its
    /// breaker says ([`crate::CircuitBreaker::open_since`]); `None` while it answers. With
    /// `REDRIVE_PAUSE_AFTER` set, a consumer whose handler says so for that long asks for its
    /// mapping to be paused (`redrive::intake`). `None` by default; a wrapper forwards it.
    fn outage_since(&self) -> Option<u64> {
        None
    }
}

/// A handler shared by reference (several idempotency guards around one handler, say).
impl<H: RecordHandler> RecordHandler for &H {
    fn handle(
        &self,
        message: &Message<'_>,
    ) -> impl Future<Output = Result<(), RecordError>> + Send {
        (**self).handle(message)
    }

    fn flush(&self) -> impl Future<Output = ()> + Send {
        (**self).flush()
    }

    fn outage_since(&self) -> Option<u64> {
        (**self).outage_since()
    }
}

/// Handles a whole batch at once (a bulk write). When it fails, the processor splits the batch in
/// halves and calls it again on each half until the failing records stand alone; so records of a
/// failed call may be handed over again, and the handler must be idempotent.
pub trait BatchHandler: Sync {
    /// Handles `messages` together; an error fails the call.
    fn handle_batch(
        &self,
        messages: &[Message<'_>],
    ) -> impl Future<Output = Result<(), RecordError>> + Send;
}

/// The Lambda invocation a batch arrived in. A bare deadline converts into one, for callers that
/// have nothing else (tests, a batch from elsewhere).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Invocation<'a> {
    /// The Lambda deadline (`Context::deadline`, ms since the epoch).
    pub deadline_ms: u64,
    /// The function, the request id and the X-Ray trace id: written into the metadata of every
    /// copy and dead letter the batch makes (`failedIn`), so an operator finds its logs and trace.
    pub function_name: Option<&'a str>,
    /// The function's version (`AWS_LAMBDA_FUNCTION_VERSION`).
    pub function_version: Option<&'a str>,
    /// The invocation's request id.
    pub request_id: Option<&'a str>,
    /// The invocation's X-Ray trace id.
    pub trace_id: Option<&'a str>,
}

impl From<u64> for Invocation<'_> {
    fn from(deadline_ms: u64) -> Self {
        Self {
            deadline_ms,
            ..Self::default()
        }
    }
}

impl Invocation<'_> {
    /// Time left before the deadline, on the system clock (a handler that calls something slow
    /// can give up early).
    pub fn remaining(&self) -> Duration {
        let now = crate::clock::SystemClock.now_ms();
        Duration::from_millis(self.deadline_ms.saturating_sub(now))
    }

    pub(crate) fn failed_in(&self) -> Option<FailedIn> {
        Some(FailedIn {
            function: self.function_name?.to_owned(),
            version: self.function_version.map(str::to_owned),
            request_id: self.request_id?.to_owned(),
            trace_id: self.trace_id.map(str::to_owned),
        })
    }
}

/// What a handler sees of a record.
#[derive(Debug, Clone, Copy)]
pub struct Message<'r> {
    pub(crate) record: &'r SqsRecord<'r>,
    pub(crate) id: &'r str,
    pub(crate) meta: Option<&'r Meta<'r>>,
    pub(crate) attempt: u32,
    pub(crate) invocation: &'r Invocation<'r>,
    /// The Kafka record it was read from (none for a copy from the lane, which carries its
    /// origin in [`crate::kafka::KAFKA_ATTRIBUTE`]).
    pub(crate) kafka: Option<&'r crate::kafka::KafkaRecord<'r>>,
}

impl<'r> Message<'r> {
    /// The message id.
    pub fn id(&self) -> &'r str {
        self.id
    }

    /// The body (empty when there is none). For a large message sent through S3 (an Extended
    /// Client pointer, [`crate::payload`]), the real body, fetched before the handler ran.
    pub fn body(&self) -> &'r str {
        self.record.body.as_deref().unwrap_or_default()
    }

    /// The body as bytes. A Kinesis record whose data is not UTF-8 (gzip, protobuf, a CloudWatch
    /// Logs subscription) has its data's base64 as the body and the [`DATA_ENCODING_ATTRIBUTE`]
    /// `base64`: this decodes it. Any other body is its UTF-8 bytes.
    pub fn data(&self) -> std::borrow::Cow<'r, [u8]> {
        let encoded = self
            .attribute(DATA_ENCODING_ATTRIBUTE)
            .and_then(|value| value.string_value.as_deref())
            == Some("base64");
        match encoded.then(|| BASE64.decode(self.body()).ok()) {
            Some(Some(bytes)) => std::borrow::Cow::Owned(bytes),
            _ => std::borrow::Cow::Borrowed(self.body().as_bytes()),
        }
    }

    /// Parses the body as JSON, as `serde_json::from_str(message.body())` does. A body that does
    /// not parse is a permanent `malformed_body` error.
    pub fn json<T: Deserialize<'r>>(&self) -> Result<T, RecordError> {
        // A body as Lambda writes JSON (its quotes escaped) is read where it stands, without
        // decoding it first; what that reading leaves is decoded for serde_json.
        let quoted = self
            .record
            .body
            .as_ref()
            .and_then(|body| body.quoted_json());
        if let Some(value) = quoted.and_then(|json| redrive_event::quoted_json::from_str(json).ok())
        {
            return Ok(value);
        }
        serde_json::from_str(self.body())
            .map_err(|error| RecordError::permanent("malformed_body", error))
    }

    /// The Lambda invocation the record arrived in: its request id, trace id and deadline
    /// ([`Invocation::remaining`]).
    pub fn invocation(&self) -> &'r Invocation<'r> {
        self.invocation
    }

    /// 1 on the first try, 2 on the first retry, ... On FIFO it is SQS's receive count, less the
    /// receives the attempt ledger knows were untried ([`crate::ledger`]); without the ledger,
    /// a record held back behind its group or deferred counts those receives too.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// An original message attribute (unpacked if redrive had to pack them).
    pub fn attribute(&self, name: &str) -> Option<&'r MessageAttribute<'r>> {
        if name == META_ATTRIBUTE {
            return None;
        }
        self.original_attributes().get(name)
    }

    /// The original message attributes; the `redrive` attribute is left out.
    pub fn attributes(&self) -> impl Iterator<Item = (&'r str, &'r MessageAttribute<'r>)> {
        self.original_attributes()
            .iter()
            .filter(|(name, _)| &***name != META_ATTRIBUTE)
            .map(|(name, value)| (&**name, value))
    }

    /// Where a Kafka record came from (topic, partition, offset, timestamp, key, headers), on
    /// the record read from Kafka and on its copies in the retry lane and the DLQ; `None` for any
    /// other message. Its value is [`Message::body`] (or [`Message::data`]).
    pub fn kafka(&self) -> Option<crate::kafka::KafkaOrigin> {
        if let Some(record) = self.kafka {
            return Some(record.origin());
        }
        let origin = self
            .attribute(crate::kafka::KAFKA_ATTRIBUTE)?
            .string_value
            .as_deref()?;
        serde_json::from_str(origin).ok()
    }

    /// The failure context this message carries from earlier attempts, if any.
    pub fn meta(&self) -> Option<&'r Meta<'r>> {
        self.meta
    }

    /// The message group (FIFO order, or a fair queue's tenant).
    pub fn group_id(&self) -> Option<&'r str> {
        self.record.attributes.message_group_id.as_deref()
    }

    /// The tenant the record belongs to, for `TenantBreakers`: a Kafka record's
    /// key (as text when it is UTF-8, else base64), on the record and on its copies; else the
    /// message group (a fair queue's tenant, or a FIFO group); `None` without either.
    pub fn tenant(&self) -> Option<std::borrow::Cow<'r, str>> {
        match self.kafka {
            Some(record) => Some(key_tenant(record.key.as_deref()?)),
            None => tenant_of(self.record, self.meta),
        }
    }

    /// The record as Lambda delivered it; for a large message sent through S3, with the real
    /// body and without the Extended Client's size attribute (as the Extended Client hands it over).
    pub fn record(&self) -> &'r SqsRecord<'r> {
        self.record
    }

    fn original_attributes(&self) -> &'r MessageAttributes<'r> {
        self.meta
            .and_then(|meta| meta.attributes.as_ref())
            .unwrap_or(&self.record.message_attributes)
    }
}

/// The tenant of an SQS record, as [`Message::tenant`] names it: the key of
/// the Kafka record it is a copy of (in the retry lane or a DLQ), else its message group. `meta` is
/// its failure context, which may carry its original attributes.
pub fn tenant_of<'r>(
    record: &'r SqsRecord<'r>,
    meta: Option<&'r Meta<'r>>,
) -> Option<std::borrow::Cow<'r, str>> {
    let attributes = meta
        .and_then(|meta| meta.attributes.as_ref())
        .unwrap_or(&record.message_attributes);
    match attributes.get(crate::kafka::KAFKA_ATTRIBUTE) {
        Some(origin) => {
            let origin: crate::kafka::KafkaOrigin =
                serde_json::from_str(origin.string_value.as_deref()?).ok()?;
            Some(std::borrow::Cow::Owned(
                key_tenant(origin.key.as_deref()?).into_owned(),
            ))
        }
        None => record
            .attributes
            .message_group_id
            .as_deref()
            .map(std::borrow::Cow::Borrowed),
    }
}

/// A Kafka key (base64) as a tenant: its text when it is UTF-8, else the base64.
fn key_tenant(key: &str) -> std::borrow::Cow<'_, str> {
    let text = BASE64
        .decode(key)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    text.map_or(std::borrow::Cow::Borrowed(key), std::borrow::Cow::Owned)
}

/// The writes an invocation's records left running, each on a task of its own so that a record
/// cut off at the deadline after its effect still gets it recorded (the idempotency guard's key
/// completions; [`RecordHandler::flush`] waits for them).
pub(crate) type Completing = Arc<tokio::sync::watch::Sender<usize>>;

tokio::task_local! {
    /// The pending writes of the invocation being processed: invocations that run side by side
    /// in one process (Lambda Managed Instances) each wait for their own.
    pub(crate) static COMPLETING: Completing;
}

/// Runs one invocation's work with a count of its own of the writes its records leave running.
pub(crate) async fn with_own_completions<F: Future>(work: F) -> F::Output {
    COMPLETING.scope(Completing::default(), work).await
}

/// Runs a handler future; a panic becomes a `panic` error for this record only.
pub(crate) async fn caught(
    future: impl Future<Output = Result<(), RecordError>>,
) -> Result<(), RecordError> {
    let mut future = pin!(future);
    poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Err(RecordError::panic(panic_message(payload.as_ref())))),
        },
    )
    .await
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(text), _) => (*text).to_owned(),
        (_, Some(text)) => text.clone(),
        _ => "panic with a non-string payload".to_owned(),
    }
}
