//! The SQS event as Lambda delivers it, parsed without copying: strings borrow from the event bytes
//! whenever JSON escaping allows it.
//!
//! Every field is optional on purpose: one odd record must not fail the deserialisation of the whole
//! batch (a typed `SqsEventObj<T>` would); the processor decides what a missing field means.
#![warn(missing_docs)]
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use base64::Engine as _;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// The JSON reader under the SQS scanner, shared with `redrive-core`'s Kafka scanner: not part
/// of the API.
#[doc(hidden)]
pub mod json {
    pub use crate::scan::Scan as Reader;
}
pub mod quoted_json;
mod scan;
mod source;

pub use source::event_source;

/// A string that borrows from the event when it can.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Text<'_> {
    /// The text with a borrowed string copied.
    pub fn into_owned(self) -> Text<'static> {
        Text(Cow::Owned(self.0.into_owned()))
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Self(Cow::Borrowed(text))
    }
}

impl From<String> for Text<'_> {
    fn from(text: String) -> Self {
        Self(Cow::Owned(text))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A record's body. A JSON body comes in the event as a JSON string, each `"` written `\"`; a body
/// whose only escapes are those stays as it stands in the event: `Message::json` reads it without
/// decoding it, and its text is decoded (once) only when asked for.
#[derive(Clone, Default)]
pub struct Body<'a> {
    /// The text; with `quoted`, the text with each `"` written `\"` and no other backslash.
    raw: Text<'a>,
    quoted: bool,
    decoded: OnceLock<Box<str>>,
}

impl<'a> Body<'a> {
    /// A body whose text is `escaped` with each `"` written `\"`, and no other backslash in it.
    pub(crate) fn quoted(escaped: &'a str) -> Self {
        Body {
            raw: Text::from(escaped),
            quoted: true,
            decoded: OnceLock::new(),
        }
    }

    /// The body as the event has it between its quotes, when that is JSON whose quotes are all
    /// written `\"` (and there is no other backslash); `None` when it is the text itself. Read it
    /// with [`quoted_json::from_str`].
    pub fn quoted_json(&self) -> Option<&str> {
        self.quoted.then_some(&*self.raw)
    }
}

impl Deref for Body<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        if self.quoted {
            self.decoded
                .get_or_init(|| self.raw.replace("\\\"", "\"").into_boxed_str())
        } else {
            &self.raw
        }
    }
}

impl<'a> From<Text<'a>> for Body<'a> {
    fn from(text: Text<'a>) -> Self {
        Body {
            raw: text,
            quoted: false,
            decoded: OnceLock::new(),
        }
    }
}

impl<'a> From<&'a str> for Body<'a> {
    fn from(text: &'a str) -> Self {
        Body::from(Text::from(text))
    }
}

impl From<String> for Body<'_> {
    fn from(text: String) -> Self {
        Body::from(Text::from(text))
    }
}

impl PartialEq for Body<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Body<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for Body<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Body<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Text::deserialize(deserializer).map(Body::from)
    }
}

/// An SQS event as Lambda delivers it.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct SqsEvent<'a> {
    /// Required: an event without it is not an SQS event, and answering it with an empty partial
    /// batch response would acknowledge records that were never read.
    #[serde(rename = "Records", borrow)]
    pub records: Vec<SqsRecord<'a>>,
}

/// One SQS record; every field is optional, so that a bad record fails alone.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SqsRecord<'a> {
    // The fields the processor reads for every record come first, so that they share a cache
    // line or two: a large batch's records do not fit in the cache, and each line is a miss.
    /// The message id (the partial batch response names records by it).
    #[serde(borrow, default)]
    pub message_id: Option<Text<'a>>,
    /// The body.
    #[serde(borrow, default)]
    pub body: Option<Body<'a>>,
    /// The queue the record came from.
    #[serde(rename = "eventSourceARN", borrow, default)]
    pub event_source_arn: Option<Text<'a>>,
    /// The message attributes.
    #[serde(borrow, default)]
    pub message_attributes: MessageAttributes<'a>,
    /// The system attributes SQS set.
    #[serde(borrow, default)]
    pub attributes: SystemAttributes<'a>,
    /// The handle that deletes or hides this delivery.
    #[serde(borrow, default)]
    pub receipt_handle: Option<Text<'a>>,
    /// `aws:sqs`; a function behind both an SQS queue and a Kinesis stream tells them apart by it.
    #[serde(borrow, default)]
    pub event_source: Option<Text<'a>>,
}

/// The SQS system attributes Lambda copies into each record (values are strings).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SystemAttributes<'a> {
    /// First: the processor reads it for every record (FIFO blocking).
    #[serde(borrow, default)]
    pub message_group_id: Option<Text<'a>>,
    /// Deliveries of this message so far.
    #[serde(borrow, default)]
    pub approximate_receive_count: Option<Text<'a>>,
    /// When the message was sent (ms since the epoch).
    #[serde(borrow, default)]
    pub sent_timestamp: Option<Text<'a>>,
    /// When the message was first received (ms since the epoch): a FIFO record's age in place.
    #[serde(borrow, default)]
    pub approximate_first_receive_timestamp: Option<Text<'a>>,
    /// FIFO: the number SQS gave the message, which grows within its group (128 bits, SQS API
    /// reference, SendMessage). (The deduplication id, the producer's business, is not kept: a
    /// record stays as small as the batch's parse needs it.)
    #[serde(borrow, default)]
    pub sequence_number: Option<Text<'a>>,
    /// The X-Ray trace header the sender set.
    #[serde(rename = "AWSTraceHeader", borrow, default)]
    pub aws_trace_header: Option<Text<'a>>,
    /// The queue a message came from when SQS moved it to this DLQ by itself (maxReceiveCount).
    #[serde(rename = "DeadLetterQueueSourceArn", borrow, default)]
    pub dead_letter_queue_source_arn: Option<Text<'a>>,
}

/// Message attributes by name.
pub type MessageAttributes<'a> = BTreeMap<Text<'a>, MessageAttribute<'a>>;

/// A message attribute as it appears in the Lambda event. Binary values are base64 text.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageAttribute<'a> {
    /// The value of a String or Number attribute.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<Text<'a>>,
    /// The value of a Binary attribute, base64.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<Text<'a>>,
    /// `String`, `Number` or `Binary`, with an optional custom suffix.
    #[serde(borrow, default)]
    pub data_type: Text<'a>,
}

impl MessageAttribute<'_> {
    /// Bytes SQS counts for this attribute towards the message size limit.
    pub fn size(&self, name: &str) -> usize {
        let value = match (&self.string_value, &self.binary_value) {
            (Some(text), _) => text.len(),
            (None, Some(base64)) => base64.len() / 4 * 3,
            (None, None) => 0,
        };
        name.len() + self.data_type.len() + value
    }

    /// The attribute with every borrowed string copied.
    pub fn into_owned(self) -> MessageAttribute<'static> {
        MessageAttribute {
            string_value: self.string_value.map(Text::into_owned),
            binary_value: self.binary_value.map(Text::into_owned),
            data_type: self.data_type.into_owned(),
        }
    }
}

impl SqsRecord<'_> {
    /// True for records of a FIFO queue. Decided by the source ARN: standard "fair" queues carry a
    /// MessageGroupId too.
    pub fn is_fifo(&self) -> bool {
        self.event_source_arn
            .as_deref()
            .is_some_and(|arn| arn.ends_with(".fifo"))
    }

    /// When this copy was first received (ms since the epoch), if SQS said.
    pub fn first_received_ms(&self) -> Option<u64> {
        self.attributes
            .approximate_first_receive_timestamp
            .as_deref()
            .and_then(|ms| ms.parse().ok())
    }

    /// When this copy was sent to its queue (ms since the epoch), if SQS said.
    pub fn sent_ms(&self) -> Option<u64> {
        self.attributes
            .sent_timestamp
            .as_deref()
            .and_then(|ms| ms.parse().ok())
    }

    /// SQS's own count of deliveries of this copy (1 on the first delivery).
    pub fn receive_count(&self) -> u32 {
        self.attributes
            .approximate_receive_count
            .as_deref()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
    }
}

/// Lets users of `aws_lambda_events`'s owned types hand their records to the processor.
impl<'a> From<&'a aws_lambda_events::sqs::SqsMessage> for SqsRecord<'a> {
    fn from(message: &'a aws_lambda_events::sqs::SqsMessage) -> Self {
        let text = |value: &'a Option<String>| value.as_deref().map(Text::from);
        let system = |name: &str| {
            message
                .attributes
                .get(name)
                .map(|value| Text::from(value.as_str()))
        };
        SqsRecord {
            message_id: text(&message.message_id),
            receipt_handle: text(&message.receipt_handle),
            body: text(&message.body).map(Body::from),
            attributes: SystemAttributes {
                approximate_receive_count: system("ApproximateReceiveCount"),
                sent_timestamp: system("SentTimestamp"),
                approximate_first_receive_timestamp: system("ApproximateFirstReceiveTimestamp"),
                message_group_id: system("MessageGroupId"),
                sequence_number: system("SequenceNumber"),
                aws_trace_header: system("AWSTraceHeader"),
                dead_letter_queue_source_arn: system("DeadLetterQueueSourceArn"),
            },
            message_attributes: message
                .message_attributes
                .iter()
                .map(|(name, attribute)| {
                    let value = MessageAttribute {
                        string_value: text(&attribute.string_value),
                        binary_value: attribute.binary_value.as_ref().map(|bytes| {
                            Text::from(
                                base64::engine::general_purpose::STANDARD.encode(bytes.as_slice()),
                            )
                        }),
                        data_type: text(&attribute.data_type).unwrap_or_default(),
                    };
                    (Text::from(name.as_str()), value)
                })
                .collect(),
            event_source_arn: text(&message.event_source_arn),
            event_source: text(&message.event_source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_without_escapes_are_borrowed_from_the_event() {
        let json = r#"{"Records":[{"messageId":"m-1","body":"{\"a\":1}","eventSourceARN":"arn:aws:sqs:eu-west-1:1:q.fifo",
            "attributes":{"ApproximateReceiveCount":"3"},"messageAttributes":{"k":{"stringValue":"v","dataType":"String"}}}]}"#;
        let event = SqsEvent::parse(json).unwrap();
        let record = &event.records[0];
        assert!(matches!(
            record.message_id.as_ref().unwrap().0,
            Cow::Borrowed("m-1")
        ));
        let body = record.body.as_ref().unwrap();
        assert_eq!(
            body.quoted_json(),
            Some(r#"{\"a\":1}"#),
            "a JSON body is kept as the event has it"
        );
        assert_eq!(
            &**body, r#"{"a":1}"#,
            "and decoded when its text is asked for"
        );
        assert!(record.is_fifo());
        assert_eq!(record.receive_count(), 3);
        assert_eq!(
            record.message_attributes["k"].string_value.as_deref(),
            Some("v")
        );
    }

    #[test]
    fn missing_and_null_fields_do_not_fail_the_batch() {
        let event = SqsEvent::parse(r#"{"Records":[{"messageId":null},{}]}"#).unwrap();
        assert_eq!(event.records.len(), 2);
        assert!(event.records[0].message_id.is_none());
        assert_eq!(event.records[1].receive_count(), 1);
    }
}
