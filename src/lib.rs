//! redrive: a record-fate engine for AWS Lambda queue consumers.
//!
//! Every record that enters a handler leaves with exactly one fate, decided in one place
//! ([`fate::Judge`]): **done**, **retry** (re-sent with an SQS delay and an attempt count),
//! **dead-letter** (sent to the DLQ with its failure context), **defer** (re-sent without spending
//! an attempt) or **give back** (reported as a batchItemFailure so SQS delivers it again).
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
#![warn(missing_docs)]

pub mod backoff;
pub mod breaker;
pub mod clock;
pub mod config;
#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod envelope;
pub mod error;
pub mod event;
pub mod eventbridge;
pub mod fate;
pub mod idempotency;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod metrics;
#[doc(hidden)]
#[cfg(feature = "test-util")]
pub mod oracles;
pub mod port;
pub mod processor;
mod quoted_json;
pub mod redrive;
pub mod reprocess;
mod scan;
pub mod sqs;
pub mod stream;

/// Locks `mutex`, taking its data as it is when a panic poisoned it: every mutex here guards data
/// that a panicking holder leaves consistent (a cache, a generator, a breaker's state).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use backoff::{Backoff, RetryPolicy};
pub use breaker::{BreakerSettings, CircuitBreaker};
pub use config::Settings;
pub use envelope::{Meta, META_ATTRIBUTE};
pub use error::{BatchError, ConfigError, ErrorClass, PortError, RecordError};
pub use event::{SqsEvent, SqsRecord};
pub use fate::Fate;
pub use metrics::BatchReport;
pub use port::QueuePort;
pub use processor::{
    BatchHandler, Invocation, Message, Processed, Processor, ProcessorConfig, RecordHandler,
    DATA_ENCODING_ATTRIBUTE,
};
pub use sqs::SqsQueue;
