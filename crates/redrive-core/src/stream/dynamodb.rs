//! DynamoDB Streams records: a change to an item (its keys, new and old images) as JSON. The
//! handlers see each record's JSON as Lambda delivered it, so that `Message::json` reads it into
//! the user's own type (or `aws_lambda_events`' `dynamodb::EventRecord`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::sealed::AsMessage;
use super::{mark_encoding, StreamRecord, POINTER_ENCODING};
use crate::error::RecordError;
use redrive_event::{Body, SqsRecord, Text};

/// A DynamoDB Streams event as Lambda delivers it.
#[derive(Debug, Default, Deserialize)]
pub struct DynamoDbEvent<'a> {
    /// The records, in the shard's order.
    #[serde(rename = "Records", borrow)]
    pub records: Vec<DynamoDbRecord<'a>>,
}

impl<'a> DynamoDbEvent<'a> {
    /// Reads an event from its JSON.
    pub fn from_slice(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

/// One DynamoDB Streams record: its JSON as it came, and the fields redrive reads.
#[derive(Debug, Clone)]
pub struct DynamoDbRecord<'a> {
    json: &'a RawValue,
    /// The record's id.
    pub event_id: Option<Text<'a>>,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: Option<Text<'a>>,
    /// The table's stream.
    pub event_source_arn: Option<Text<'a>>,
    /// The change.
    pub dynamodb: DynamoDbStreamRecord<'a>,
}

/// A record's change, as far as redrive reads it (the images stay in [`DynamoDbRecord::json`]).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DynamoDbStreamRecord<'a> {
    /// The sequence number (the checkpoint names records by it).
    #[serde(borrow, default)]
    pub sequence_number: Option<Text<'a>>,
    /// The item's key attributes, as DynamoDB JSON.
    #[serde(borrow, default)]
    pub keys: Option<&'a RawValue>,
    /// When the change was made, seconds since the epoch.
    #[serde(default)]
    pub approximate_creation_date_time: Option<f64>,
    /// The size of the change's images and keys, in bytes.
    #[serde(default)]
    pub size_bytes: Option<u64>,
}

impl<'a> DynamoDbRecord<'a> {
    /// The record's JSON as Lambda delivered it: what handlers get as the message body.
    pub fn json(&self) -> &'a str {
        self.json.get()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for DynamoDbRecord<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields<'a> {
            #[serde(rename = "eventID", borrow, default)]
            event_id: Option<Text<'a>>,
            #[serde(rename = "eventName", borrow, default)]
            event_name: Option<Text<'a>>,
            #[serde(rename = "eventSourceARN", borrow, default)]
            event_source_arn: Option<Text<'a>>,
            #[serde(borrow, default)]
            dynamodb: DynamoDbStreamRecord<'a>,
        }
        let json = <&'de RawValue>::deserialize(deserializer)?;
        let fields: Fields<'de> =
            serde_json::from_str(json.get()).map_err(serde::de::Error::custom)?;
        Ok(DynamoDbRecord {
            json,
            event_id: fields.event_id,
            event_name: fields.event_name,
            event_source_arn: fields.event_source_arn,
            dynamodb: fields.dynamodb,
        })
    }
}

impl StreamRecord for DynamoDbRecord<'_> {
    fn sequence_number(&self) -> Option<&str> {
        self.dynamodb.sequence_number.as_deref()
    }
}

impl AsMessage for DynamoDbRecord<'_> {
    /// The record's JSON as the body, the sequence number as the id.
    fn as_message(&self) -> (SqsRecord<'static>, Option<RecordError>) {
        (self.with_body(self.json().to_owned()), None)
    }

    /// The JSON's base64.
    fn as_encoded(&self) -> SqsRecord<'static> {
        let mut record = self.with_body(BASE64.encode(self.json()));
        mark_encoding(&mut record, "base64");
        record
    }

    /// Stream, event id and name, sequence number, the item's keys, time and size.
    fn as_pointer(&self) -> SqsRecord<'static> {
        let pointer = serde_json::json!({
            "streamArn": self.event_source_arn.as_deref(),
            "eventID": self.event_id.as_deref(),
            "eventName": self.event_name.as_deref(),
            "sequenceNumber": self.sequence_number(),
            "keys": self.dynamodb.keys,
            "approximateCreationDateTime": self.dynamodb.approximate_creation_date_time,
            "sizeBytes": self.dynamodb.size_bytes,
        });
        let mut record = self.with_body(pointer.to_string());
        mark_encoding(&mut record, POINTER_ENCODING);
        record
    }
}

impl DynamoDbRecord<'_> {
    fn with_body(&self, body: String) -> SqsRecord<'static> {
        let mut record = SqsRecord {
            message_id: self.dynamodb.sequence_number.clone().map(Text::into_owned),
            body: Some(Body::from(body)),
            event_source_arn: self.event_source_arn.clone().map(Text::into_owned),
            ..SqsRecord::default()
        };
        record.attributes.sent_timestamp = self
            .dynamodb
            .approximate_creation_date_time
            .map(|seconds| Text::from(((seconds * 1000.0) as u64).to_string()));
        record
    }
}

/// A DynamoDB Streams record's change with its images as plain JSON (`{"amount": 19.5}`, not
/// DynamoDB's `{"amount": {"N": "19.5"}}`), read from a message's body: the record's JSON, whether
/// it came from the stream or back from its DLQ through a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemChange {
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: String,
    /// The item's key attributes.
    pub keys: serde_json::Value,
    /// The item after the change (stream views `NEW_IMAGE`, `NEW_AND_OLD_IMAGES`; not on `REMOVE`).
    pub new_image: Option<serde_json::Value>,
    /// The item before the change (views `OLD_IMAGE`, `NEW_AND_OLD_IMAGES`; not on `INSERT`).
    pub old_image: Option<serde_json::Value>,
}

impl ItemChange {
    /// The change a message carries, `None` when its body is not a DynamoDB Streams record; a
    /// record whose images are not DynamoDB JSON is a permanent `malformed_change`.
    pub fn from_message(
        message: &crate::handler::Message<'_>,
    ) -> Result<Option<Self>, RecordError> {
        #[derive(Deserialize)]
        struct Record<'a> {
            #[serde(rename = "eventSource", borrow, default)]
            event_source: Option<Text<'a>>,
            #[serde(rename = "eventName", borrow, default)]
            event_name: Option<Text<'a>>,
            #[serde(default)]
            dynamodb: Option<Images>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Images {
            #[serde(default)]
            keys: Option<serde_json::Map<String, serde_json::Value>>,
            #[serde(default)]
            new_image: Option<serde_json::Map<String, serde_json::Value>>,
            #[serde(default)]
            old_image: Option<serde_json::Map<String, serde_json::Value>>,
        }
        let Ok(record) = serde_json::from_str::<Record<'_>>(message.body()) else {
            return Ok(None);
        };
        let (Some("aws:dynamodb"), Some(images)) =
            (record.event_source.as_deref(), record.dynamodb)
        else {
            return Ok(None);
        };
        let item = |image: Option<serde_json::Map<_, _>>| image.map(unmarshal_item).transpose();
        let malformed = |reason: String| RecordError::permanent("malformed_change", reason);
        Ok(Some(ItemChange {
            event_name: record
                .event_name
                .map(|name| name.to_string())
                .unwrap_or_default(),
            keys: item(images.keys).map_err(malformed)?.unwrap_or_default(),
            new_image: item(images.new_image).map_err(malformed)?,
            old_image: item(images.old_image).map_err(malformed)?,
        }))
    }

    /// The item after the change as the user's type; a change without a new image (a `REMOVE`,
    /// a `KEYS_ONLY` or `OLD_IMAGE` stream) or an image that does not fit `T` is a permanent
    /// `malformed_change`.
    pub fn new_image<'v, T: Deserialize<'v>>(&'v self) -> Result<T, RecordError> {
        let image = self.new_image.as_ref().ok_or_else(|| {
            RecordError::permanent(
                "malformed_change",
                format!("the {} change has no new image", self.event_name),
            )
        })?;
        T::deserialize(image).map_err(|error| RecordError::permanent("malformed_change", error))
    }
}

/// An item in DynamoDB JSON as plain JSON.
fn unmarshal_item(
    item: serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Value, String> {
    item.into_iter()
        .map(|(name, value)| Ok((name, unmarshal(value)?)))
        .collect::<Result<serde_json::Map<_, _>, String>>()
        .map(serde_json::Value::Object)
}

/// One attribute value in DynamoDB JSON (`{"N": "19.5"}`) as plain JSON. Numbers that JSON cannot
/// hold exactly (more digits than an f64 keeps) lose precision; binary stays base64 text.
fn unmarshal(value: serde_json::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let mut typed = match value {
        Value::Object(typed) => typed.into_iter(),
        other => return Err(format!("{other} is not a DynamoDB attribute value")),
    };
    let (Some((kind, inner)), None) = (typed.next(), typed.next()) else {
        return Err("a DynamoDB attribute value has exactly one type".to_owned());
    };
    let number = |text: &Value| -> Result<Value, String> {
        text.as_str()
            .and_then(|n| serde_json::from_str::<serde_json::Number>(n).ok())
            .map(Value::Number)
            .ok_or_else(|| format!("{text} is not a DynamoDB number"))
    };
    let list = |inner: Value, each: &dyn Fn(Value) -> Result<Value, String>| match inner {
        Value::Array(items) => items
            .into_iter()
            .map(each)
            .collect::<Result<_, _>>()
            .map(Value::Array),
        other => Err(format!("{other} is not a list")),
    };
    match (kind.as_str(), inner) {
        ("S" | "B" | "BOOL", inner) => Ok(inner),
        ("NULL", _) => Ok(Value::Null),
        ("N", inner) => number(&inner),
        ("M", Value::Object(map)) => unmarshal_item(map),
        ("L", inner) => list(inner, &unmarshal),
        ("SS" | "BS", inner) => list(inner, &Ok),
        ("NS", inner) => list(inner, &|n| number(&n)),
        (kind, inner) => Err(format!("{kind}: {inner} is not a DynamoDB attribute value")),
    }
}
