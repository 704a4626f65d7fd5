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
//! | `dynamodb` | no | `dynamodb::DynamoDbStore`: the idempotency store and attempt ledger every container shares |
//! | `s3` | no | `s3::S3Payloads`: large messages through S3 (Extended Client pointers read, big copies offloaded) |
//! | `test-util` | no | test doubles: `port::RecordingQueue`, `ledger::MemoryLedger`, `clock::ManualClock`, `payload::MemoryPayloads`, `eventbridge::RecordingInvoker` |
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use redrive_aws::dynamodb;
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub use redrive_aws::s3;
pub use redrive_aws::sqs;
#[doc(hidden)]
#[cfg(feature = "test-util")]
pub use redrive_core::oracles;
// The engine's modules a user reaches: the handler contract, the processor and its settings,
// errors, the ports and their test doubles, idempotency, FIFO and the attempt ledger, the failure
// envelope, the breakers (per tenant) and the pause requests. The fates, the batch's figures and
// the stream records are named at the root; the courier (`carry`) and the EMF lines are the
// sibling crates' own.
pub use redrive_core::{
    backoff, breaker, clock, envelope, error, fifo, handler, idempotency, kafka, ledger, pause,
    payload, port, processor, reprocess_policy, stream,
};

/// Configuration from `REDRIVE_*` variables: the consumer's [`Settings`] and
/// the recovery functions' settings, validated at start with errors that name the variable.
pub mod config {
    pub use redrive_core::config::*;
    pub use redrive_recovery::settings::*;
}
pub use redrive_event as event;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub use redrive_lambda as lambda;
pub use redrive_recovery::{eventbridge, intake, reprocess};

pub use redrive_aws::SqsQueue;
pub use redrive_core::{
    Backoff, BatchError, BatchHandler, BatchReport, BreakerSettings, CircuitBreaker, ConfigError,
    DynamoDbEvent, DynamoDbRecord, ErrorClass, Invocation, KinesisEvent, KinesisEventResponse,
    KinesisRecord, Message, Meta, PayloadStore, Payloads, PortError, Processed, Processor,
    ProcessorConfig, QueuePort, RecordError, RecordHandler, RetryPolicy, Settings, SourceQueue,
    SqsEvent, SqsRecord, StreamRecord, StreamsEventResponse, TenantBreakerSettings, TenantBreakers,
    DATA_ENCODING_ATTRIBUTE, META_ATTRIBUTE,
};

/// The README's examples compile (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
