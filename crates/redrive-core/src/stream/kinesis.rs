//! Kinesis records: the data base64 in the event, a partition key, a sequence number.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;

use super::sealed::AsMessage;
use super::{
    mark_encoding, string_attribute, StreamRecord, PARTITION_KEY_ATTRIBUTE, POINTER_ENCODING,
};
use crate::error::RecordError;
use redrive_event::{Body, SqsRecord, Text};

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

impl StreamRecord for KinesisRecord<'_> {
    fn sequence_number(&self) -> Option<&str> {
        self.kinesis.sequence_number.as_deref()
    }
}

impl AsMessage for KinesisRecord<'_> {
    /// The data's base64, with the partition key.
    fn as_encoded(&self) -> SqsRecord<'static> {
        let (mut record, _) = self.as_message();
        let data = self.kinesis.data.as_deref().unwrap_or_default();
        record.body = Some(Body::from(data.to_owned()));
        mark_encoding(&mut record, "base64");
        record
    }

    /// Stream, partition key, sequence number, arrival and size.
    fn as_pointer(&self) -> SqsRecord<'static> {
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

    /// The data decoded as the body, the partition key as an attribute. Data that is not UTF-8
    /// keeps its base64 text as the body, marked by [`crate::DATA_ENCODING_ATTRIBUTE`] (handlers
    /// read it with [`crate::handler::Message::data`]); data that is not base64 fails with a
    /// permanent `malformed_data`.
    fn as_message(&self) -> (SqsRecord<'static>, Option<RecordError>) {
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
            record.message_attributes.insert(
                Text::from(PARTITION_KEY_ATTRIBUTE),
                string_attribute(key.clone().into_owned()),
            );
        }
        (record, error)
    }
}
