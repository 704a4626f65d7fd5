//! The record-fate engine of redrive, without AWS SDK, Lambda runtime or HTTP client: records,
//! fates, backoff, the circuit breaker, the failure metadata, the batch processor and the ports it
//! drives (queues, idempotency stores) as traits. Users depend on the `redrive` crate, which
//! re-exports this one beside the AWS adapters and the Lambda glue.
//!
//! Every record that enters a handler leaves with exactly one of six fates, decided in one place
//! (the fate judge, `fate.rs`): **done**, **retry** (re-sent with an SQS delay and an attempt count),
//! **dead-letter** (sent to the DLQ with its failure context), **defer** (re-sent without spending
//! an attempt), **give back** (reported as a batch item failure so its source delivers it again)
//! or, for a FIFO group or a Kafka key held on a failure, **sent to the retry lane** (a FIFO queue
//! where the group's records wait in order while the rest of the source goes on).
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `aws-sdk-errors` | `RecordError::from_sdk_error`: an AWS SDK error classified as transient or permanent |
//! | `test-util` | test doubles: `port::RecordingQueue`, `ledger::MemoryLedger` and `ledger::Counted`, `clock::ManualClock`, `payload::MemoryPayloads` |
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod breaker;
/// The one sender of copies, dead letters and visibility changes: shared with `redrive-recovery`,
/// not part of redrive's API.
#[doc(hidden)]
pub mod carry;
pub mod clock;
pub mod config;
pub mod envelope;
pub mod error;
pub mod fate;
pub mod fifo;
pub mod handler;
pub mod idempotency;
pub mod kafka;
pub mod ledger;
/// The batch's figures as EMF lines: [`BatchReport`] is the API, the lines are shared with
/// `redrive-recovery`.
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
#[cfg(feature = "test-util")]
pub mod oracles;
pub mod pause;
pub mod payload;
pub mod port;
pub mod processor;
pub mod reprocess_policy;
pub mod stream;
mod sync;

pub use backoff::{Backoff, RetryPolicy};
pub use breaker::{BreakerSettings, CircuitBreaker, TenantBreakerSettings, TenantBreakers};
pub use config::Settings;
pub use envelope::{Meta, DATA_ENCODING_ATTRIBUTE, META_ATTRIBUTE};
pub use error::{BatchError, ConfigError, ErrorClass, PortError, RecordError};
pub use fate::SourceQueue;
pub use handler::{BatchHandler, Invocation, Message, RecordHandler};
pub use metrics::BatchReport;
pub use payload::{PayloadStore, Payloads};
pub use port::QueuePort;
pub use processor::{Processed, Processor, ProcessorConfig};
pub use redrive_event::{SqsEvent, SqsRecord};
pub use stream::{
    DynamoDbEvent, DynamoDbRecord, KinesisEvent, KinesisEventResponse, KinesisRecord, StreamRecord,
    StreamsEventResponse,
};
