//! Ordered streams: the same record handlers on a Kinesis stream ([`KinesisEvent`]) or a DynamoDB
//! stream ([`DynamoDbEvent`]). A shard is read in order and Lambda retries a failed batch from a
//! checkpoint, so the fates differ from SQS (`fate::StreamFate`): a permanent failure is
//! dead-lettered (with its data and the redrive metadata) and the batch goes on; any other
//! failure, or the deadline, ends the batch at that record, whose sequence number is the streams
//! partial batch response ([`StreamsEventResponse`]). The event source mapping's retries,
//! bisection, maximum record age and on-failure destination take over from there.
//! [`Processor::process_stream`] runs a batch of either.
//!
//! [`Processor::process_stream`]: crate::processor::Processor::process_stream

mod dynamodb;
mod kinesis;

pub use dynamodb::{DynamoDbEvent, DynamoDbRecord, DynamoDbStreamRecord, ItemChange};
pub use kinesis::{KinesisData, KinesisEvent, KinesisRecord};

use crate::envelope::DATA_ENCODING_ATTRIBUTE;
use crate::error::RecordError;
use redrive_event::{MessageAttribute, SqsRecord, Text};

/// The partial batch response of a stream batch, Kinesis and DynamoDB Streams alike:
/// `{"batchItemFailures":[{"itemIdentifier":"<SequenceNumber>"}]}`, the sequence number of the
/// first record not done; Lambda checkpoints there and retries from it (Lambda developer guide,
/// "Configuring partial batch response with Kinesis Data Streams" and "... with DynamoDB").
pub type StreamsEventResponse = aws_lambda_events::streams::KinesisEventResponse;

/// The Kinesis name of [`StreamsEventResponse`].
pub type KinesisEventResponse = StreamsEventResponse;

/// Attribute of a Kinesis record's message and DLQ copy that keeps its partition key.
pub const PARTITION_KEY_ATTRIBUTE: &str = "partitionKey";

/// [`DATA_ENCODING_ATTRIBUTE`] of a dead letter whose body is a pointer to the record in its
/// stream (stream ARN, sequence number, keys), for data SQS cannot carry.
pub const POINTER_ENCODING: &str = "pointer";

/// A record of an ordered stream, as [`Processor::process_stream`] takes it: [`KinesisRecord`]
/// or [`DynamoDbRecord`]. Sealed: the runner relies on how each source's records become messages
/// and dead letters.
///
/// [`Processor::process_stream`]: crate::processor::Processor::process_stream
pub trait StreamRecord: sealed::AsMessage {
    /// The record's sequence number: its id for the handlers and the checkpoint's name.
    fn sequence_number(&self) -> Option<&str>;
}

pub(crate) mod sealed {
    use super::{RecordError, SqsRecord};

    /// How a stream record becomes the message handlers see and the body of its dead letter.
    pub trait AsMessage {
        /// The record as the handlers see messages (id = sequence number), and the permanent
        /// error of a record that cannot be read.
        fn as_message(&self) -> (SqsRecord<'static>, Option<RecordError>);
        /// The record for its dead letter when SQS refuses its text: the bytes' base64, marked
        /// [`super::DATA_ENCODING_ATTRIBUTE`] `base64`.
        fn as_encoded(&self) -> SqsRecord<'static>;
        /// The record for its dead letter when it cannot fit in an SQS message even encoded:
        /// where to read it in its stream, marked [`super::POINTER_ENCODING`]. The data stays in
        /// the stream for the stream's retention.
        fn as_pointer(&self) -> SqsRecord<'static>;
    }
}

/// Marks what a record's body holds ([`DATA_ENCODING_ATTRIBUTE`]): `base64` or a pointer.
fn mark_encoding(record: &mut SqsRecord<'static>, encoding: &'static str) {
    record.message_attributes.insert(
        Text::from(DATA_ENCODING_ATTRIBUTE),
        string_attribute(Text::from(encoding)),
    );
}

/// A `String` message attribute.
fn string_attribute(value: Text<'static>) -> MessageAttribute<'static> {
    MessageAttribute {
        string_value: Some(value),
        binary_value: None,
        data_type: Text::from("String"),
    }
}
