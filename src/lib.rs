//! redrive: a record-fate engine for AWS Lambda queue consumers.
//!
//! Every record that enters a handler leaves with exactly one of six fates, decided in one place
//! (the fate judge, `fate.rs`): **done**, **retry** (re-sent with an SQS delay and an attempt count),
//! **dead-letter** (sent to the DLQ with its failure context), **defer** (re-sent without spending
//! an attempt), **give back** (reported as a batch item failure so its source delivers it again)
//! or, for a FIFO group or a Kafka key held on a failure, **sent to the retry lane** (a FIFO queue
//! where the group's records wait in order while the rest of the source goes on).
//!
//! This is the crate to depend on: it re-exports the engine (`redrive-core`), the event reader
//! (`redrive-event`), the AWS adapters (`redrive-aws`), recovery (`redrive-recovery`) and, with the
//! default feature `lambda`, the Lambda glue (`redrive-lambda`) under one set of paths.
//!
//! ```no_run
//! use redrive::{Message, Processor, ProcessorConfig, RecordError, RecordHandler, SqsEvent, SqsQueue};
//!
//! struct Orders;
//! impl RecordHandler for Orders {
//!     async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
//!         let order: serde_json::Value = message.json()?; // malformed JSON: permanent
//!         if order["id"].is_null() {
//!             return Err(RecordError::permanent("invalid_order", "no id"));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # async fn run(event_json: &str, config: ProcessorConfig, deadline_ms: u64) -> Result<(), redrive::BatchError> {
//! let processor = Processor::new(SqsQueue::lazy(), config);
//! let event = SqsEvent::parse(event_json)?;
//! let processed = processor.process(&Orders, &event.records, deadline_ms).await?;
//! println!("{}", serde_json::to_string(&processed.response).unwrap());
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `lambda` | yes | the Lambda glue ([`lambda`]): the runtime loop, settings from `REDRIVE_*` variables, JSON logs |
//! | `dynamodb` | no | `aws::DynamoDbStore`: the idempotency store and attempt ledger every container shares |
//! | `s3` | no | `aws::S3Payloads`: large messages through S3 (Extended Client pointers read, big copies offloaded) |
//! | `test-util` | no | [`testing`]: a test double of every port (`RecordingQueue`, `MemoryLedger`, `ManualClock`, `MemoryPayloads`, `RecordingInvoker`) |
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The facade's modules are named by what a user does with them, each a list of the items that
// task needs, so the engine's modules can move without moving a public path. The doubles are in
// `testing` alone; the courier (`carry`) and the EMF lines are the sibling crates' own.

pub use redrive_aws::SqsQueue;
pub use redrive_core::handler::tenant_of;
pub use redrive_core::{
    BatchError, BatchHandler, BatchReport, ConfigError, DynamoDbEvent, DynamoDbRecord, ErrorClass,
    Invocation, KinesisEvent, KinesisEventResponse, KinesisRecord, Message, Meta, PayloadStore,
    Payloads, PortError, Processed, Processor, ProcessorConfig, QueuePort, RecordError,
    RecordHandler, RetryPolicy, Settings, SourceQueue, SqsEvent, SqsRecord, StreamRecord,
    StreamsEventResponse, DATA_ENCODING_ATTRIBUTE, META_ATTRIBUTE,
};

/// How failed records are tried again: the backoff of re-sent copies, the retry policy's
/// durations as `REDRIVE_*` variables spell them, and what a FIFO group does behind a dead letter.
pub mod retry {
    pub use redrive_core::backoff::{
        parse_duration, parse_sequence, Backoff, RetryPolicy, DEFAULT_DEFER_MAX_AGE,
        DEFER_MAX_AGE_RANGE, MAX_DELAY_SECONDS, MAX_RETRY_DELAY,
    };
    pub use redrive_core::fifo::FifoOnDeadLetter;
}

/// A downstream that fails: the circuit breakers (one per tenant) that stop calling it, and the
/// consumer's request to pause its intake and the probe that ends the pause.
pub mod breaker {
    pub use redrive_core::breaker::{
        BreakerSettings, BreakerState, CircuitBreaker, TenantBreakerSettings, TenantBreakers,
        NAMED_TENANTS,
    };
    pub use redrive_core::pause::{PauseRequest, ProbeVerdict, PROBE_KEY};
}

/// Handling a message once though SQS delivers it more than once.
pub mod idempotency {
    pub use redrive_core::idempotency::{
        fingerprint, reused, Claim, IdempotencyStore, Idempotent, KeyFrom, MemoryStore,
    };
}

/// The failure context a dead letter and a re-sent copy carry, and SQS's message limits.
pub mod envelope {
    pub use redrive_core::envelope::{
        annotate, annotate_offloaded, sqs_accepts, truncate, FailedIn, Meta, OutgoingMessage,
        Timestamp, TooLarge, DATA_ENCODING_ATTRIBUTE, MAX_ERROR_MESSAGE_BYTES,
        MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, META_ATTRIBUTE, META_VERSION,
    };
}

/// Large messages: bodies kept in a payload store (S3: [`aws::S3Payloads`](crate::aws)) behind a
/// pointer the SQS Extended Client libraries read too.
pub mod payload {
    pub use redrive_core::payload::{
        is_size_attribute, size_attribute, PayloadError, PayloadStore, Payloads, Pointer,
        DEFAULT_PREFIX, LEGACY_POINTER_CLASS, LEGACY_SIZE_ATTRIBUTE, POINTER_CLASS, SIZE_ATTRIBUTE,
    };
}

/// The books of FIFO attempts, held groups and Kafka keys, and the retry lane's positions: the
/// trait a shared store implements, and the holds an operator lists and releases.
pub mod ledger {
    pub use redrive_core::ledger::{
        ledger_key, release_head, AttemptLedger, ForwardingLedger, Hold, KeyPlace, KeyPositions,
        LedgerCall, LedgerEntry, Position, Release, Released, LEDGER_KEEP,
    };
}

/// The ports the processor and the recovery functions drive: the queue, and the time.
pub mod port {
    pub use redrive_core::clock::{Clock, SystemClock};
    pub use redrive_core::port::{EntryFailure, ForwardingPort, QueuePort, VisibilityChange};
}

/// DynamoDB Streams and Kinesis records: the processor's stream runner.
pub mod stream {
    pub use redrive_core::stream::{
        DynamoDbEvent, DynamoDbRecord, DynamoDbStreamRecord, ItemChange, KinesisData, KinesisEvent,
        KinesisEventResponse, KinesisRecord, StreamRecord, StreamsEventResponse,
        PARTITION_KEY_ATTRIBUTE, POINTER_ENCODING,
    };
}

/// Kafka records (Amazon MSK and self-managed): the processor's Kafka runner.
pub mod kafka {
    pub use redrive_core::kafka::{
        HeaderValue, KafkaBatchItemFailure, KafkaEvent, KafkaEventResponse, KafkaHeader,
        KafkaItemIdentifier, KafkaOrigin, KafkaRecord, KAFKA_ATTRIBUTE,
    };
}

/// The AWS SDK adapters: the SQS queue, and with their features the DynamoDB store (idempotency
/// keys and the attempt ledger) and S3 payloads.
pub mod aws {
    #[cfg(feature = "dynamodb")]
    #[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
    pub use redrive_aws::dynamodb::DynamoDbStore;
    #[cfg(feature = "s3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
    pub use redrive_aws::s3::{client as s3_client, S3Payloads};
    pub use redrive_aws::sqs::{
        https_client, sdk_config_from_env, MoveTask, QueueDescription, SqsQueue,
    };
}

/// Recovering a DLQ: what the reprocessor does with each dead letter, its commands and jobs, and
/// the inventory and failure groups an operator chooses from.
pub mod reprocess {
    pub use redrive_core::reprocess_policy::{eligible_at, Disposition, ReprocessPolicy};
    pub use redrive_recovery::reprocess::{
        browse, export_line, failure_groups, tenant_counts, AttributeFilter, FailureGroup, Filter,
        Fingerprint, Inventory, Job, JobAction, Plan, ReprocessCommand, ReprocessSummary,
        Reprocessor,
    };
}

/// EventBridge DLQ redrive: failed events delivered again to the target that failed.
pub mod eventbridge {
    pub use redrive_recovery::eventbridge::{
        client_context, error_type, EventRedrive, FailedEvent, InvokePort, Reply,
        PERMANENT_ERROR_TYPE, REDRIVE_COUNT_KEY, REDRIVE_EVENT_ID_KEY,
    };
}

/// The intake controller: event source mappings paused through a downstream's outage, one probe
/// at a time, and resumed.
pub mod intake {
    pub use redrive_recovery::intake::{
        fifo_probe_due, take_requests, IntakeController, IntakePort, IntakeSettings, Mapping,
        MappingState, PauseRequest, Probe, Tick,
    };
}

/// Test doubles of every port: a queue that records its calls, an in-memory attempt ledger and
/// payload store, a clock that stands still, an invoker that records its invocations.
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing {
    pub use redrive_core::clock::ManualClock;
    pub use redrive_core::ledger::{Counted, MemoryLedger};
    pub use redrive_core::payload::MemoryPayloads;
    pub use redrive_core::port::{Call, RecordingQueue};
    pub use redrive_recovery::eventbridge::{Invoke, RecordingInvoker};
}
#[doc(hidden)]
#[cfg(feature = "test-util")]
pub use redrive_core::oracles;

/// Configuration from `REDRIVE_*` variables: the consumer's [`Settings`] and
/// the recovery functions' settings, validated at start with errors that name the variable.
pub mod config {
    pub use redrive_core::config::*;
    pub use redrive_core::processor::DEFAULT_CONCURRENCY;
    pub use redrive_recovery::settings::*;
}
pub use redrive_event as event;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub use redrive_lambda as lambda;

/// The README's examples compile (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
