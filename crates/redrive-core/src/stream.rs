//! Kinesis: the same record handlers on a stream. A shard is read in order and Lambda retries a
//! failed batch from a checkpoint, so the fates differ from SQS (`fate::StreamFate`): a
//! permanent failure is dead-lettered (with its data and the redrive metadata) and the batch goes
//! on; any other failure, or the deadline, ends the batch at that record, whose sequence number is
//! the streams partial batch response. The event source mapping's retries, bisection, maximum
//! record age and on-failure destination take over from there. [`Processor::process_stream`]
//! runs a batch.
//!
//! [`Processor::process_stream`]: crate::processor::Processor::process_stream

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;

pub use aws_lambda_events::streams::KinesisEventResponse;

use crate::envelope::DATA_ENCODING_ATTRIBUTE;
use crate::error::RecordError;
use redrive_event::{Body, MessageAttribute, SqsRecord, Text};

/// A Kinesis event as Lambda delivers it.
#[derive(Debug, Default, Deserialize)]
pub struct KinesisEvent<'a> {
    /// The records.
    #[serde(rename = "Records", borrow)]
    pub records: Vec<KinesisRecord<'a>>,
}

impl<'a> KinesisEvent<'a> {
    /// Reads an event from its JSON.
    pub fn from_slice(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

/// One Kinesis record.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct KinesisRecord<'a> {
    /// The record's data and keys.
    #[serde(borrow, default)]
    pub kinesis: KinesisData<'a>,
    /// The stream.
    #[serde(rename = "eventSourceARN", borrow, default)]
    pub event_source_arn: Option<Text<'a>>,
}

/// A record's data and keys.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KinesisData<'a> {
    /// The partition key.
    #[serde(borrow, default)]
    pub partition_key: Option<Text<'a>>,
    /// The sequence number (the checkpoint names records by it).
    #[serde(borrow, default)]
    pub sequence_number: Option<Text<'a>>,
    /// The record's data, base64.
    #[serde(borrow, default)]
    pub data: Option<Text<'a>>,
    /// Seconds since the epoch.
    #[serde(default)]
    pub approximate_arrival_timestamp: Option<f64>,
}

/// Attribute of a stream record's DLQ copy that keeps its partition key.
pub const PARTITION_KEY_ATTRIBUTE: &str = "partitionKey";

/// [`DATA_ENCODING_ATTRIBUTE`] of a dead letter whose body is a pointer to the record in its
/// stream (stream ARN, shard and sequence number), for data SQS cannot carry.
pub const POINTER_ENCODING: &str = "pointer";

impl KinesisRecord<'_> {
    /// The record for its dead letter when SQS refuses its text: the data's base64, marked
    /// [`DATA_ENCODING_ATTRIBUTE`] `base64`, with the partition key.
    pub(crate) fn as_encoded(&self) -> SqsRecord<'static> {
        let (mut record, _) = self.as_message();
        let data = self.kinesis.data.as_deref().unwrap_or_default();
        record.body = Some(Body::from(data.to_owned()));
        mark_encoding(&mut record, "base64");
        record
    }

    /// The record for its dead letter when its data cannot fit in an SQS message even encoded:
    /// where to read it (stream, partition key, sequence number, arrival), marked
    /// [`DATA_ENCODING_ATTRIBUTE`] [`POINTER_ENCODING`]. The data itself stays in the stream for
    /// the stream's retention.
    pub(crate) fn as_pointer(&self) -> SqsRecord<'static> {
        let (mut record, _) = self.as_message();
        let pointer = serde_json::json!({
            "streamArn": self.event_source_arn.as_deref(),
            "partitionKey": self.kinesis.partition_key.as_deref(),
            "sequenceNumber": self.kinesis.sequence_number.as_deref(),
            "approximateArrivalTimestamp": self.kinesis.approximate_arrival_timestamp,
            "dataBytes": self.kinesis.data.as_deref().map_or(0, |data| data.len() / 4 * 3),
        });
        record.body = Some(Body::from(pointer.to_string()));
        mark_encoding(&mut record, POINTER_ENCODING);
        record
    }

    /// The record as the handlers see messages: the data decoded as the body, the sequence number
    /// as the id, the partition key as an attribute. Data that is not UTF-8 keeps its base64 text
    /// as the body, marked by [`DATA_ENCODING_ATTRIBUTE`] (handlers read it with
    /// [`crate::handler::Message::data`]); data that is not base64 fails with a permanent `malformed_data`.
    pub(crate) fn as_message(&self) -> (SqsRecord<'static>, Option<RecordError>) {
        let data = self.kinesis.data.as_deref().unwrap_or_default();
        let (body, binary, error) = match BASE64.decode(data) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => (text, false, None),
                Err(_) => (data.to_owned(), true, None),
            },
            Err(reason) => (
                data.to_owned(),
                false,
                Some(RecordError::permanent(
                    "malformed_data",
                    format!("the record's data is not base64: {reason}"),
                )),
            ),
        };
        let mut record = SqsRecord {
            message_id: self.kinesis.sequence_number.clone().map(Text::into_owned),
            body: Some(Body::from(body)),
            event_source_arn: self.event_source_arn.clone().map(Text::into_owned),
            ..SqsRecord::default()
        };
        record.attributes.sent_timestamp = self
            .kinesis
            .approximate_arrival_timestamp
            .map(|seconds| Text::from(((seconds * 1000.0) as u64).to_string()));
        if binary {
            mark_encoding(&mut record, "base64");
        }
        if let Some(key) = &self.kinesis.partition_key {
            let attribute = MessageAttribute {
                string_value: Some(key.clone().into_owned()),
                binary_value: None,
                data_type: Text::from("String"),
            };
            record
                .message_attributes
                .insert(Text::from(PARTITION_KEY_ATTRIBUTE), attribute);
        }
        (record, error)
    }
}

/// Marks what a record's body holds ([`DATA_ENCODING_ATTRIBUTE`]): `base64` or a pointer.
fn mark_encoding(record: &mut SqsRecord<'static>, encoding: &'static str) {
    record.message_attributes.insert(
        Text::from(DATA_ENCODING_ATTRIBUTE),
        MessageAttribute {
            string_value: Some(Text::from(encoding)),
            binary_value: None,
            data_type: Text::from("String"),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::RetryPolicy;
    use crate::envelope::Meta;
    use crate::handler::{Message, RecordHandler};
    use crate::port::RecordingQueue;
    use crate::processor::{Processed, Processor, ProcessorConfig};

    const DLQ: &str = "https://sqs.local/123456789012/stream-dlq";

    struct Orders;
    impl RecordHandler for Orders {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            match message.body() {
                "bad" => Err(RecordError::permanent("invalid", "bad order")),
                "slow" => Err(RecordError::transient("timeout", "slow")),
                "bug" => panic!("bug"),
                _ => Ok(()),
            }
        }
    }

    fn record(sequence: &str, data: &str) -> KinesisRecord<'static> {
        KinesisRecord {
            kinesis: KinesisData {
                partition_key: Some(Text::from("p")),
                sequence_number: Some(Text::from(sequence.to_owned())),
                data: Some(Text::from(BASE64.encode(data))),
                approximate_arrival_timestamp: Some(1_763_791_800.5),
            },
            event_source_arn: Some(Text::from(
                "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            )),
        }
    }

    fn processor(dlq: Option<&str>) -> Processor<RecordingQueue> {
        Processor::new(
            RecordingQueue::default(),
            ProcessorConfig {
                dlq_url: dlq.map(str::to_owned),
                source_queue_url: None,
                retry: RetryPolicy::default(),
                deadline_margin: std::time::Duration::ZERO,
                ..ProcessorConfig::default()
            },
        )
    }

    fn checkpoint(processed: &Processed<KinesisEventResponse>) -> Option<&str> {
        processed
            .response
            .batch_item_failures
            .first()
            .and_then(|f| f.item_identifier.as_deref())
    }

    const LATER: u64 = u64::MAX / 2;

    #[tokio::test]
    async fn permanent_failures_and_panics_are_dead_lettered_and_the_batch_goes_on() {
        let processor = processor(Some(DLQ));
        let records = [
            record("1", "ok"),
            record("2", "bad"),
            record("3", "bug"),
            record("4", "ok"),
        ];
        let processed = processor
            .process_stream(&Orders, &records, LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), None);
        let dead: Vec<String> = processor
            .queue()
            .sent_to(DLQ)
            .iter()
            .map(|m| m.body.to_string())
            .collect();
        assert_eq!(dead, ["bad", "bug"]);
        let sent = processor.queue().sent_to(DLQ);
        let meta: Meta<'_> = serde_json::from_str(sent[1].attribute("redrive").unwrap()).unwrap();
        assert_eq!(
            (meta.error_class.as_str(), &*meta.origin_message_id),
            ("panic", "3")
        );
        assert_eq!(
            (processed.report.done, processed.report.dead_lettered),
            (2, 2)
        );
    }

    #[tokio::test]
    async fn a_transient_failure_a_refused_dead_letter_or_no_dlq_stops_the_batch_there() {
        let records = [record("1", "ok"), record("2", "slow"), record("3", "ok")];
        let processed = processor(Some(DLQ))
            .process_stream(&Orders, &records, LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), Some("2"));
        assert_eq!((processed.report.done, processed.report.given_back), (1, 2));

        let refusing = processor(Some(DLQ));
        refusing.queue().fail_calls_to(DLQ);
        let records = [record("1", "bad"), record("2", "ok")];
        let processed = refusing
            .process_stream(&Orders, &records, LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), Some("1"));

        let report_only = processor(None);
        let processed = report_only
            .process_stream(&Orders, &records, LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), Some("1"));
        assert!(report_only.queue().calls().is_empty());
    }

    /// Keeps the bytes it is given; refuses an empty payload.
    #[derive(Default)]
    struct Bytes(std::sync::Mutex<Vec<Vec<u8>>>);
    impl RecordHandler for Bytes {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            let data = message.data().into_owned();
            if data.len() < 3 {
                return Err(RecordError::permanent("too_short", "no payload"));
            }
            self.0.lock().unwrap().push(data);
            Ok(())
        }
    }

    #[tokio::test]
    async fn data_that_is_not_utf8_reaches_the_handler_as_bytes_and_its_dead_letter_says_base64() {
        let gzip: &[u8] = &[0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe];
        let binary = |sequence: &str, bytes: &[u8]| {
            let mut record = record(sequence, "");
            record.kinesis.data = Some(Text::from(BASE64.encode(bytes)));
            record
        };
        let processor = processor(Some(DLQ));
        let handler = Bytes::default();
        let records = [binary("1", gzip), record("2", "text"), binary("3", &[0xc3])];
        let processed = processor
            .process_stream(&handler, &records, LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), None);
        assert_eq!(
            *handler.0.lock().unwrap(),
            [gzip.to_vec(), b"text".to_vec()]
        );
        let dead = &processor.queue().sent_to(DLQ)[0];
        assert_eq!(&*dead.body, BASE64.encode([0xc3]));
        assert_eq!(dead.attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
    }

    /// Refuses every record: each one is dead-lettered.
    struct RefuseAll;
    impl RecordHandler for RefuseAll {
        async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
            Err(RecordError::permanent("invalid", "refused"))
        }
    }

    /// Text SQS refuses (a NUL, U+FFFF) is dead-lettered as the data's base64, and data that
    /// cannot fit even so as a pointer to the record: before, the send was refused (or the copy
    /// too large), the batch stopped at the record, and its data went with the stream's retention.
    #[tokio::test]
    async fn data_sqs_cannot_carry_is_dead_lettered_encoded_or_as_a_pointer() {
        let processor = processor(Some(DLQ));
        let control = record("1", "a\u{0}b\u{ffff}");
        let mut huge = record("2", "");
        huge.kinesis.data = Some(Text::from(BASE64.encode(vec![0xff_u8; 800 * 1024])));
        let processed = processor
            .process_stream(&RefuseAll, &[control, huge, record("3", "fine")], LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), None, "nothing holds the shard");
        assert_eq!(processed.report.dead_lettered, 3);
        let dead = processor.queue().sent_to(DLQ);
        assert!(dead.iter().all(|m| crate::envelope::sqs_accepts(&m.body)));
        assert_eq!(&*dead[0].body, BASE64.encode("a\u{0}b\u{ffff}"));
        assert_eq!(dead[0].attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
        let pointer: serde_json::Value = serde_json::from_str(&dead[1].body).unwrap();
        assert_eq!(pointer["sequenceNumber"], "2");
        assert_eq!(
            pointer["streamArn"],
            "arn:aws:kinesis:us-east-1:123456789012:stream/s"
        );
        assert_eq!(
            dead[1].attribute(DATA_ENCODING_ATTRIBUTE),
            Some(POINTER_ENCODING)
        );
        assert_eq!(&*dead[2].body, "fine", "text SQS takes stays text");
    }

    #[tokio::test]
    async fn undecodable_data_is_dead_lettered_as_it_came_and_the_deadline_checkpoints() {
        let processor = processor(Some(DLQ));
        let mut garbled = record("1", "");
        garbled.kinesis.data = Some(Text::from("not base64!"));
        let processed = processor
            .process_stream(&Orders, &[garbled, record("2", "ok")], LATER)
            .await
            .unwrap();
        assert_eq!(checkpoint(&processed), None);
        let dead = &processor.queue().sent_to(DLQ)[0];
        assert_eq!(&*dead.body, "not base64!");

        let processed = processor
            .process_stream(&Orders, &[record("7", "ok")], 0)
            .await
            .unwrap();
        assert_eq!(
            checkpoint(&processed),
            Some("7"),
            "no time left: nothing is started"
        );
    }
}
