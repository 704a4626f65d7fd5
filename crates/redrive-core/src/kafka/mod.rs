//! Kafka (Amazon MSK and self-managed Apache Kafka): Lambda's Kafka event, its records as the
//! messages handlers see, and where a record came from ([`KafkaOrigin`]) on every copy of it.
//!
//! A partition is read in order. A record that fails transiently does not hold its partition: it
//! goes to the **retry lane**, an SQS FIFO queue the same function reads
//! (`REDRIVE_LANE_URL`), in a message group of its topic and key, with the failure context
//! and its origin, and the partition goes on; the lane retries it with redrive's backoff, in
//! order per key. A later record of a key that has a record in the lane (or in the DLQ) follows
//! it there untried, so that a key's records take effect in the partition's order.
//! A permanent failure goes to the DLQ. What cannot be sent is given back: the partial batch
//! response names it, and the rest of its partition is left for Lambda to deliver again.
//! [`Processor::process_kafka`] runs a batch.
//!
//! Across batches, the attempt ledger remembers each key that has records out of its partition
//! ([`KeyPositions`](crate::ledger::KeyPositions): the last offset that left, and where, and the last that took effect from
//! the lane): a batch reads its keys first, and a later record of a waiting key follows the
//! earlier ones; the lane's consumer writes a record's offset back when it takes effect.
//!
//! [`Processor::process_kafka`]: crate::processor::Processor::process_kafka

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::envelope::{sqs_accepts, DATA_ENCODING_ATTRIBUTE};
use redrive_event::{Body, MessageAttribute, SqsRecord, Text};

mod scan;

/// The message attribute that carries a Kafka record's origin ([`KafkaOrigin`], JSON) on its
/// message and on every copy of it.
pub const KAFKA_ATTRIBUTE: &str = "kafka";

/// A Kafka event as Lambda delivers it, for Amazon MSK (`aws:kafka`) and self-managed Kafka
/// (`SelfManagedKafka`) alike (Lambda developer guide, "Using Lambda with Amazon MSK", the
/// example event).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEvent<'a> {
    /// `aws:kafka` or `SelfManagedKafka`.
    #[serde(borrow, default)]
    pub event_source: Option<Text<'a>>,
    /// The MSK cluster (none for self-managed Kafka).
    #[serde(borrow, default)]
    pub event_source_arn: Option<Text<'a>>,
    /// The records of each partition (`"<topic>-<partition>"`), in offset order.
    #[serde(borrow, default)]
    pub records: BTreeMap<Text<'a>, Vec<KafkaRecord<'a>>>,
}

impl<'a> KafkaEvent<'a> {
    /// Reads an event from its JSON: a fast scanner for the shape Lambda writes, and serde_json
    /// for anything it does not take (which also gives the precise error). Strings borrow from
    /// `json`.
    pub fn from_slice(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        scan::event(json).map_or_else(|| serde_json::from_slice(json), Ok)
    }
}

/// One Kafka record: where it is, its key, value and headers (base64 in the event).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaRecord<'a> {
    /// The topic.
    #[serde(borrow, default)]
    pub topic: Text<'a>,
    /// The partition.
    #[serde(default)]
    pub partition: i64,
    /// The offset in the partition.
    #[serde(default)]
    pub offset: i64,
    /// Milliseconds since the epoch (`timestamp_type` says whose).
    #[serde(default)]
    pub timestamp: Option<i64>,
    /// `CREATE_TIME` or `LOG_APPEND_TIME`.
    #[serde(borrow, default)]
    pub timestamp_type: Option<Text<'a>>,
    /// The key, base64; none for a record without one.
    #[serde(borrow, default)]
    pub key: Option<Text<'a>>,
    /// The value, base64.
    #[serde(borrow, default)]
    pub value: Option<Text<'a>>,
    /// The headers, in the record's order (Lambda writes each as an object of one name and its
    /// bytes).
    #[serde(borrow, default, deserialize_with = "headers")]
    pub headers: Vec<KafkaHeader<'a>>,
}

/// One header of a Kafka record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KafkaHeader<'a> {
    /// Its name.
    pub name: Text<'a>,
    /// Its bytes.
    pub value: HeaderValue,
}

/// Reads the headers' objects into one list, in order: no map for each header.
fn headers<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<KafkaHeader<'de>>, D::Error> {
    struct Objects;
    impl<'de> serde::de::Visitor<'de> for Objects {
        type Value = Vec<KafkaHeader<'de>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of header objects")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut headers = Vec::with_capacity(seq.size_hint().unwrap_or(1));
            while seq.next_element_seed(Entries(&mut headers))?.is_some() {}
            Ok(headers)
        }
    }
    /// One header object's entries, added to the list.
    struct Entries<'v, 'a>(&'v mut Vec<KafkaHeader<'a>>);
    impl<'de> serde::de::DeserializeSeed<'de> for Entries<'_, 'de> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Entries<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a header object: its name and bytes")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some((name, value)) = map.next_entry::<Text<'de>, HeaderValue>()? {
                self.0.push(KafkaHeader { name, value });
            }
            Ok(())
        }
    }
    deserializer.deserialize_seq(Objects)
}

/// A header's bytes. Lambda writes them as a list of numbers (the example event:
/// `"headerKey":[104,101,...]`); a signed byte (-128..-1) is read as its unsigned value, and a
/// base64 string is taken too.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct HeaderValue(pub Vec<u8>);

impl<'de> Deserialize<'de> for HeaderValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor of its own: an untagged enum would buffer every header before trying each form.
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = HeaderValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of bytes or a base64 string")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<HeaderValue, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(n) = seq.next_element::<i16>()? {
                    bytes.push(match n {
                        0..=255 => n as u8,
                        -128..=-1 => (n + 256) as u8,
                        _ => return Err(serde::de::Error::custom(format!("{n} is not a byte"))),
                    });
                }
                Ok(HeaderValue(bytes))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HeaderValue, E> {
                BASE64.decode(text).map(HeaderValue).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Bytes)
    }
}

/// Where a Kafka record came from, as every message and copy of it carries it
/// ([`KAFKA_ATTRIBUTE`]): what `Message::kafka` gives a handler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaOrigin {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i64,
    /// The offset.
    pub offset: i64,
    /// Milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    /// The key's bytes, base64 (none for a record without a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The headers, each a name and its bytes as base64, in the record's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The record has no value (a tombstone: a key's deletion in a compacted topic). Its message
    /// has the body `null`, from the topic and from the lane alike: SQS takes no empty body.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tombstone: bool,
}

impl KafkaOrigin {
    /// The key's bytes.
    pub fn key(&self) -> Option<Vec<u8>> {
        self.key.as_deref().and_then(|key| BASE64.decode(key).ok())
    }

    /// The key as text, when it is UTF-8.
    pub fn key_text(&self) -> Option<String> {
        self.key().and_then(|bytes| String::from_utf8(bytes).ok())
    }

    /// The first header named `name`, as bytes.
    pub fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .and_then(|(_, value)| BASE64.decode(value).ok())
    }

    /// `<topic>-<partition>`, the name Lambda gives the partition in the event and in the
    /// partial batch response.
    pub fn topic_partition(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// The attempt ledger's id of its key in its partition ([`crate::ledger::KeyPositions`]); `None` for a record
    /// without a key, which follows nothing: its partition's later keyless records pass it.
    pub fn key_id(&self) -> Option<String> {
        Some(key_id(&self.topic, self.partition, self.key.as_deref()?))
    }
}

/// `kafka#<topic>-<partition>#<key base64>`: a key's records are ordered within a partition only
/// (a digest past 128 characters).
fn key_id(topic: &str, partition: i64, key: &str) -> String {
    within_128(format!("kafka#{topic}-{partition}#{key}"))
}

impl KafkaRecord<'_> {
    /// Where the record came from.
    pub fn origin(&self) -> KafkaOrigin {
        let headers = self
            .headers
            .iter()
            .map(|header| (header.name.to_string(), BASE64.encode(&header.value.0)))
            .collect();
        KafkaOrigin {
            topic: self.topic.to_string(),
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.as_deref().map(str::to_owned),
            headers,
            tombstone: self.value.is_none(),
        }
    }

    /// The attempt ledger's id of its key ([`KafkaOrigin::key_id`]).
    pub fn key_id(&self) -> Option<String> {
        Some(key_id(&self.topic, self.partition, self.key.as_deref()?))
    }

    /// The record's id: `<topic>-<partition>:<offset>`, unique in the cluster, and the
    /// deduplication id of its lane copies (a digest past SQS's 128 characters).
    pub fn id(&self) -> String {
        let mut id = String::new();
        self.write_id(&mut id);
        id
    }

    fn write_id(&self, id: &mut String) {
        write!(id, "{}-{}:{}", self.topic, self.partition, self.offset).expect("a String takes it");
        cap_at_128(id);
    }

    /// The message group of its copies in the lane: its topic and key, so that a key's records
    /// keep their order there; a record without a key keeps its partition's
    /// (`<topic>-<partition>`). A digest past SQS's 128 characters.
    pub fn lane_group(&self) -> String {
        let mut group = String::new();
        self.write_lane_group(&mut group);
        group
    }

    fn write_lane_group(&self, group: &mut String) {
        match self.key.as_deref() {
            Some(key) => write!(group, "{}:{key}", self.topic),
            None => write!(group, "{}-{}", self.topic, self.partition),
        }
        .expect("a String takes it");
        cap_at_128(group);
    }

    /// The record as the handlers see messages: the value decoded as the body (a value that is
    /// not UTF-8, or whose text SQS would refuse, keeps its base64, marked by
    /// [`DATA_ENCODING_ATTRIBUTE`] `base64`, which `Message::data` decodes; a tombstone is `null`),
    /// its id: the same message from the topic and, as its copy, from the lane. A value that is
    /// not base64 is kept as it came, marked `base64`, and `Message::data` gives its text. It
    /// names no source queue: its copies' metadata then name no origin, and the reprocessor sends
    /// them to the lane (a DLQ's fallback destination), the only queue that is their home. Its
    /// origin is written on it ([`KafkaRecord::mark_origin`]) only when a copy is made: a handler
    /// reads it through `Message::kafka` either way.
    pub(crate) fn as_message<'s>(&'s self, text: &'s MessageText) -> SqsRecord<'s> {
        let (body, binary) = match self.value.as_deref() {
            None => ("null", false),
            Some(_) if text.body_is_text => (text.body.as_str(), false),
            Some(value) => (value, true),
        };
        let mut record = SqsRecord {
            message_id: Some(Text::from(text.id.as_str())),
            body: Some(Body::from(body)),
            ..SqsRecord::default()
        };
        record.attributes.sent_timestamp = self.timestamp.map(|_| Text::from(text.sent.as_str()));
        record.attributes.message_group_id = Some(Text::from(text.group.as_str()));
        if binary {
            record.message_attributes.insert(
                Text::from(DATA_ENCODING_ATTRIBUTE),
                string_attribute("base64".to_owned()),
            );
        }
        record
    }

    /// Writes its origin on `message` ([`KAFKA_ATTRIBUTE`]), before a copy of it is made: every
    /// copy in the lane or the DLQ carries where it came from.
    pub(crate) fn mark_origin(&self, message: &mut SqsRecord<'_>) {
        let origin = serde_json::to_string(&self.origin()).expect("an origin serialises");
        message
            .message_attributes
            .insert(Text::from(KAFKA_ATTRIBUTE), string_attribute(origin));
    }
}

/// `text`, or past SQS's 128-character limit on group and deduplication ids, its first 100
/// characters and a 64-bit FNV-1a digest of the whole (two texts that share a digest only share
/// a group: their order is kept together).
fn within_128(mut text: String) -> String {
    cap_at_128(&mut text);
    text
}

/// [`within_128`] in place.
fn cap_at_128(text: &mut String) {
    if text.len() <= 128 {
        return;
    }
    let digest = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    });
    let mut end = 100;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    write!(text, "#{digest:016x}").expect("a String takes it");
}

/// The text a Kafka record's message borrows (its id, decoded value, send time and lane group),
/// written anew for each record of a partition: one set of buffers for the partition, where each
/// record took four allocations of its own.
#[derive(Debug, Default)]
pub(crate) struct MessageText {
    id: String,
    body: String,
    /// Whether `body` is the record's value as text SQS takes (else the message keeps the base64).
    body_is_text: bool,
    sent: String,
    group: String,
}

impl MessageText {
    /// Writes `record`'s text over the last record's.
    pub(crate) fn write(&mut self, record: &KafkaRecord<'_>) {
        self.id.clear();
        record.write_id(&mut self.id);
        self.group.clear();
        record.write_lane_group(&mut self.group);
        self.sent.clear();
        if let Some(ms) = record.timestamp {
            write!(self.sent, "{}", ms.max(0)).expect("a String takes it");
        }
        self.body_is_text = false;
        if let Some(value) = record.value.as_deref() {
            let mut bytes = std::mem::take(&mut self.body).into_bytes();
            bytes.clear();
            let decoded = BASE64.decode_vec(value, &mut bytes).is_ok();
            if !decoded {
                bytes.clear();
            }
            // Not UTF-8: the message keeps the base64, and the buffer goes with the error.
            if let Ok(text) = String::from_utf8(bytes) {
                self.body_is_text = decoded && sqs_accepts(&text);
                self.body = text;
            }
        }
    }

    /// The record's id, as [`KafkaRecord::id`] has it.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

fn string_attribute(value: String) -> MessageAttribute<'static> {
    MessageAttribute {
        string_value: Some(Text::from(value)),
        binary_value: None,
        data_type: Text::from("String"),
    }
}

/// The partial batch response of a Kafka batch: each partition's first record not done, by
/// `<topic>-<partition>` and offset, from which Lambda delivers the partition again.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEventResponse {
    /// The records to deliver again from.
    pub batch_item_failures: Vec<KafkaBatchItemFailure>,
}

/// One record to deliver a partition again from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchItemFailure {
    /// The record.
    pub item_identifier: KafkaItemIdentifier,
}

/// A record in a partial batch response: `{"partition": "<topic>-<partition>", "offset": n}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaItemIdentifier {
    /// `<topic>-<partition>`.
    pub partition: String,
    /// The offset.
    pub offset: i64,
}
