//! What travels with a message between attempts and into the DLQ: the `redrive` message attribute.
//!
//! A re-sent copy or a DLQ copy keeps the original body byte for byte and the original message
//! attributes, and adds one attribute, `redrive`, whose String value is a JSON [`Meta`]. When the
//! original already uses 10 attributes (SQS's limit), its attributes are packed into
//! `Meta::attributes` instead and the copy carries `redrive` alone; [`crate::handler::Message::attribute`]
//! and the redrive tools unpack them, so handlers and the origin queue see the original attributes.
use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ErrorClass;
use crate::payload::{self, Pointer};
use redrive_event::{MessageAttribute, MessageAttributes, SqsRecord, Text};

/// Name of the one message attribute redrive adds.
pub const META_ATTRIBUTE: &str = "redrive";

/// Attribute that marks a body as the base64 of binary data
/// ([`Message::data`](crate::handler::Message::data) decodes it); it stays on the DLQ copy, so
/// whoever reads the DLQ knows too.
pub const DATA_ENCODING_ATTRIBUTE: &str = "dataEncoding";
/// SQS: at most 10 message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;
/// SQS: at most 1 MiB per message, body and attributes together.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Error text kept in the metadata; longer messages are cut at a character boundary.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;
/// Version of the metadata schema written by this build.
pub const META_VERSION: u32 = 1;

/// Milliseconds since the Unix epoch, written as RFC 3339 (`2026-11-22T05:36:16.123Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The same instant as a `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            humantime::format_rfc3339_millis(self.to_system_time())
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Text::deserialize(deserializer)?;
        let time = humantime::parse_rfc3339_weak(&text).map_err(serde::de::Error::custom)?;
        let millis = time
            .duration_since(UNIX_EPOCH)
            .map_err(serde::de::Error::custom)?
            .as_millis();
        Ok(Self(
            u64::try_from(millis).map_err(serde::de::Error::custom)?,
        ))
    }
}

/// The failure context a message carries. Field names are the documented schema (README).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Meta<'a> {
    /// Schema version.
    pub v: u32,
    /// Deliveries that have failed so far.
    pub attempts: u32,
    /// Not to be handled before this time: set when the wanted wait exceeds SQS's 900 s delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<Timestamp>,
    /// The queue the message first failed in.
    #[serde(borrow)]
    pub origin_queue_arn: Text<'a>,
    /// The message id of the first delivery (copies get ids of their own).
    #[serde(borrow)]
    pub origin_message_id: Text<'a>,
    /// When it first failed.
    pub first_failure_at: Timestamp,
    /// When it last failed.
    pub last_failure_at: Timestamp,
    /// Class of the latest failure.
    pub error_class: ErrorClass,
    /// Kind of the latest failure (a short snake_case label).
    #[serde(borrow)]
    pub error_kind: Text<'a>,
    /// Message of the latest failure, cut to fit the size limit.
    #[serde(borrow)]
    pub error_message: Text<'a>,
    /// Times the DLQ reprocessor has sent this message back to its origin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reprocess_count: u32,
    /// When the reprocessor last sent it back: the deferral age limit counts from here, not from
    /// the first failure, so that a message sent home after an outage gets the whole limit again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redriven_at: Option<Timestamp>,
    /// When it was sent to the DLQ: set on every dead letter and on nothing else, so that a dead
    /// letter SQS moves back as it is (a move task) is recognised whatever its attempts, and
    /// counted as redriven against the reprocess cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_lettered_at: Option<Timestamp>,
    /// The invocation of the latest failure, for finding its logs and trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_in: Option<FailedIn>,
    /// The original message attributes, when they had to be packed (see the module docs).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<MessageAttributes<'a>>,
}

/// Where a failure happened: the function, the invocation's request id (its logs) and its X-Ray
/// trace id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedIn {
    /// The function's name.
    pub function: String,
    /// The function's version (`$LATEST`, or the published version an alias points at), when
    /// the invocation said: what failed before a fix was deployed can be told from what failed
    /// after it. Added in v1 (a reader that does not know it skips it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The invocation's request id (its log lines carry it).
    pub request_id: String,
    /// The invocation's X-Ray trace id, when tracing is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl<'a> Meta<'a> {
    /// The context of a message's first failure, at `at`: no attempt counted, nothing redriven,
    /// no function named. The struct grows with the schema, so code outside this crate starts here
    /// and sets the fields it knows.
    pub fn new(
        origin_queue_arn: Text<'a>,
        origin_message_id: Text<'a>,
        at: Timestamp,
        error_class: ErrorClass,
        error_kind: Text<'a>,
        error_message: Text<'a>,
    ) -> Self {
        Meta {
            v: META_VERSION,
            attempts: 0,
            due_at: None,
            origin_queue_arn,
            origin_message_id,
            first_failure_at: at,
            last_failure_at: at,
            error_class,
            error_kind,
            error_message,
            reprocess_count: 0,
            redriven_at: None,
            dead_lettered_at: None,
            failed_in: None,
            attributes: None,
        }
    }

    /// The metadata with every borrowed string copied.
    pub fn into_owned(self) -> Meta<'static> {
        Meta {
            origin_queue_arn: self.origin_queue_arn.into_owned(),
            origin_message_id: self.origin_message_id.into_owned(),
            error_kind: self.error_kind.into_owned(),
            error_message: self.error_message.into_owned(),
            attributes: self.attributes.map(|attributes| {
                attributes
                    .into_iter()
                    .map(|(name, value)| (name.into_owned(), value.into_owned()))
                    .collect()
            }),
            ..self
        }
    }

    /// The metadata a record carries, if any. `Err` when the attribute is there but unreadable.
    pub fn of(record: &'a SqsRecord<'a>) -> Option<Result<Self, serde_json::Error>> {
        let attribute = record.message_attributes.get(META_ATTRIBUTE)?;
        Some(serde_json::from_str(
            attribute.string_value.as_deref().unwrap_or_default(),
        ))
    }
}

/// Whether SQS takes `body` as a message body: it refuses characters outside #x9 | #xA | #xD |
/// #x20–#xD7FF | #xE000–#xFFFD | #x10000–#x10FFFF (control characters, U+FFFE, U+FFFF).
pub fn sqs_accepts(body: &str) -> bool {
    // Read as bytes (a `str` holds no surrogate): a byte below 0x20 is that control character,
    // and U+FFFE and U+FFFF are EF BF BE and EF BF BF.
    let bytes = body.as_bytes();
    let control = |byte: &u8| *byte < 0x20 && !matches!(byte, b'\t' | b'\n' | b'\r');
    let nonchar = |window: &[u8]| matches!(window, [0xEF, 0xBF, 0xBE | 0xBF]);
    let refused =
        bytes.iter().any(control) || (bytes.contains(&0xEF) && bytes.windows(3).any(nonchar));
    !refused
}

/// Cuts `text` to at most `max` bytes at a character boundary, marking the cut.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    const MARK: &str = "…[truncated]";
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{MARK}", &text[..end]))
}

/// A message to send with SendMessageBatch.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage<'a> {
    /// The body, byte for byte.
    pub body: Text<'a>,
    /// The message attributes, the `redrive` metadata among them.
    pub attributes: Vec<(Text<'a>, MessageAttribute<'a>)>,
    /// SQS delay (0 to 900 s).
    pub delay_seconds: u32,
    /// Message group: FIFO order, or a fair queue's tenant.
    pub group_id: Option<Text<'a>>,
    /// FIFO deduplication id.
    pub deduplication_id: Option<Text<'a>>,
    /// The X-Ray trace header of the delivery the copy comes from, sent as the `AWSTraceHeader`
    /// system attribute so that the attempts of one message share a trace.
    pub trace_header: Option<Text<'a>>,
}

impl OutgoingMessage<'_> {
    /// The message with every borrowed string copied.
    pub fn into_owned(self) -> OutgoingMessage<'static> {
        OutgoingMessage {
            body: self.body.into_owned(),
            attributes: self
                .attributes
                .into_iter()
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect(),
            delay_seconds: self.delay_seconds,
            group_id: self.group_id.map(Text::into_owned),
            deduplication_id: self.deduplication_id.map(Text::into_owned),
            trace_header: self.trace_header.map(Text::into_owned),
        }
    }

    /// The value of a String attribute.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| **n == *name)
            .and_then(|(_, value)| value.string_value.as_deref())
    }

    /// Bytes SQS counts towards its 1 MiB limit (the trace header is not counted).
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(name, value)| value.size(name))
                .sum::<usize>()
    }
}

/// The message would exceed SQS's size limit once annotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the annotated copy would be {size} bytes, over SQS's {MAX_MESSAGE_BYTES}-byte limit")]
pub struct TooLarge {
    /// The size the copy would have had (bytes).
    pub size: usize,
}

/// Builds the copy of `record` that carries `meta`: the original body, the original attributes
/// (packed into the metadata when they leave no room), its message group, and the `redrive`
/// attribute.
pub fn annotate<'r>(
    record: &'r SqsRecord<'r>,
    meta: Meta<'r>,
) -> Result<OutgoingMessage<'r>, TooLarge> {
    carry(record, meta, None)
}

/// The copy of `record` whose body was offloaded to S3: as [`annotate`]'s, with `pointer` for
/// the body and the Extended Client's `ExtendedPayloadSize` attribute ([`crate::payload`]).
pub fn annotate_offloaded<'r>(
    record: &'r SqsRecord<'r>,
    meta: Meta<'r>,
    pointer: &Pointer<'_>,
) -> Result<OutgoingMessage<'r>, TooLarge> {
    carry(record, meta, Some(pointer))
}

fn carry<'r>(
    record: &'r SqsRecord<'r>,
    mut meta: Meta<'r>,
    offloaded: Option<&Pointer<'_>>,
) -> Result<OutgoingMessage<'r>, TooLarge> {
    let body = record.body.as_deref().unwrap_or_default();
    // The pointer's size attribute is never packed: the Extended Clients look for it by name.
    let pointer_size: Vec<(Text<'r>, MessageAttribute<'r>)> = match offloaded {
        Some(_) => vec![payload::size_attribute(body.len())],
        None => record
            .message_attributes
            .iter()
            .filter(|(name, _)| payload::is_size_attribute(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    };
    let original: MessageAttributes<'r> = match meta.attributes.take() {
        Some(packed) => packed,
        None => record
            .message_attributes
            .iter()
            .filter(|(name, _)| &***name != META_ATTRIBUTE && !payload::is_size_attribute(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    };
    let mut attributes: Vec<(Text<'r>, MessageAttribute<'r>)> =
        Vec::with_capacity(original.len().min(9) + 1 + pointer_size.len());
    if original.len() + pointer_size.len() < MAX_MESSAGE_ATTRIBUTES {
        attributes.extend(original);
    } else {
        meta.attributes = Some(original);
    }
    attributes.extend(pointer_size);
    let mut message = OutgoingMessage {
        body: match offloaded {
            Some(pointer) => Text::from(pointer.to_body()),
            None => Text::from(body),
        },
        attributes,
        delay_seconds: 0,
        // On a standard queue the group names the tenant of a fair queue; a copy keeps it.
        group_id: record.attributes.message_group_id.clone(),
        deduplication_id: None,
        trace_header: record.attributes.aws_trace_header.clone(),
    };
    message.attributes.push(meta_attribute(&meta));
    if message.size() > MAX_MESSAGE_BYTES {
        // The error text is the one part that may give; the body and attributes may not.
        meta.error_message = Text::from("");
        *message
            .attributes
            .last_mut()
            .expect("meta attribute was pushed") = meta_attribute(&meta);
    }
    match message.size() {
        size if size > MAX_MESSAGE_BYTES => Err(TooLarge { size }),
        _ => Ok(message),
    }
}

fn meta_attribute<'r>(meta: &Meta<'_>) -> (Text<'r>, MessageAttribute<'r>) {
    let json = serde_json::to_string(meta).expect("metadata serialises");
    let value = MessageAttribute {
        string_value: Some(Text::from(json)),
        binary_value: None,
        data_type: Text::from("String"),
    };
    (Text::from(META_ATTRIBUTE), value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_event::SqsEvent;

    #[test]
    fn sqs_accepts_the_characters_sqs_documents_and_nothing_else() {
        let documented = |c: char| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
        let edges = [
            '\0',
            '\u{8}',
            '\t',
            '\n',
            '\u{b}',
            '\r',
            '\u{1f}',
            ' ',
            '\u{7f}',
            '\u{80}',
            '\u{d7ff}',
            '\u{e000}',
            '\u{efbf}',
            '\u{fffd}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{10000}',
            '\u{10ffff}',
        ];
        for c in edges {
            for text in [c.to_string(), format!("order {c} é"), format!("{c}{c}")] {
                assert_eq!(sqs_accepts(&text), documented(c), "{:?}", c as u32);
            }
        }
    }

    fn meta(message: &str) -> Meta<'static> {
        Meta {
            v: META_VERSION,
            attempts: 2,
            due_at: None,
            origin_queue_arn: Text::from("arn:aws:sqs:eu-west-1:123456789012:orders"),
            origin_message_id: Text::from("m-1"),
            first_failure_at: Timestamp(1_700_000_000_000),
            last_failure_at: Timestamp(1_700_000_060_000),
            error_class: ErrorClass::Transient,
            error_kind: Text::from("payment_timeout"),
            error_message: Text::from(message.to_owned()),
            reprocess_count: 0,
            redriven_at: None,
            dead_lettered_at: None,
            failed_in: None,
            attributes: None,
        }
    }

    fn event_with_attributes(count: usize, body: &str) -> String {
        let attributes: Vec<String> = (0..count)
            .map(|i| format!(r#""a{i}":{{"stringValue":"v{i}","dataType":"String"}}"#))
            .collect();
        format!(
            r#"{{"Records":[{{"messageId":"m-1","body":"{body}","messageAttributes":{{{}}}}}]}}"#,
            attributes.join(",")
        )
    }

    #[test]
    fn metadata_is_one_attribute_beside_the_originals() {
        let json = event_with_attributes(9, "hello");
        let event = SqsEvent::parse(&json).unwrap();
        let copy = annotate(&event.records[0], meta("boom")).unwrap();
        assert_eq!(&*copy.body, "hello");
        assert_eq!(copy.attributes.len(), 10);
        let (name, value) = copy.attributes.last().unwrap();
        assert_eq!(&**name, META_ATTRIBUTE);
        let written: Meta = serde_json::from_str(value.string_value.as_deref().unwrap()).unwrap();
        assert_eq!(written, meta("boom"));
        assert!(value
            .string_value
            .as_deref()
            .unwrap()
            .contains(r#""firstFailureAt":"2023-11-14T22:13:20.000Z""#));
    }

    #[test]
    fn the_extended_clients_size_attribute_is_never_packed() {
        // Nine attributes of the producer's beside the Extended Client's own: the copy packs the
        // nine and keeps the size attribute by name, where the clients look for it.
        let json = event_with_attributes(9, "pointer").replace(
            r#""a0":"#,
            r#""ExtendedPayloadSize":{"stringValue":"2000000","dataType":"Number"},"a0":"#,
        );
        let event = SqsEvent::parse(&json).unwrap();
        let copy = annotate(&event.records[0], meta("boom")).unwrap();
        let names: Vec<&str> = copy.attributes.iter().map(|(name, _)| &**name).collect();
        assert_eq!(names, ["ExtendedPayloadSize", META_ATTRIBUTE]);
        assert_eq!(copy.attribute("ExtendedPayloadSize"), Some("2000000"));
        let written: Meta = serde_json::from_str(copy.attribute(META_ATTRIBUTE).unwrap()).unwrap();
        assert_eq!(written.attributes.map(|packed| packed.len()), Some(9));

        // An offloaded copy gets the attribute with the body's size, and the pointer for a body.
        let json = event_with_attributes(2, "hello");
        let event = SqsEvent::parse(&json).unwrap();
        let pointer = Pointer {
            bucket: "b".into(),
            key: "redrive/m-1".into(),
        };
        let copy = annotate_offloaded(&event.records[0], meta("boom"), &pointer).unwrap();
        assert_eq!(Pointer::parse(&copy.body).unwrap(), pointer);
        assert_eq!(copy.attribute("ExtendedPayloadSize"), Some("5"));
        assert_eq!(copy.attributes.len(), 4);
    }

    #[test]
    fn ten_original_attributes_are_packed_and_come_back_unchanged() {
        let json = event_with_attributes(10, "hello");
        let event = SqsEvent::parse(&json).unwrap();
        let copy = annotate(&event.records[0], meta("boom")).unwrap();
        assert_eq!(copy.attributes.len(), 1, "only the redrive attribute");
        let written: Meta =
            serde_json::from_str(copy.attributes[0].1.string_value.as_deref().unwrap()).unwrap();
        assert_eq!(
            written.attributes.as_ref(),
            Some(&event.records[0].message_attributes)
        );

        // A packed copy annotated again stays packed, with the same originals.
        let resent = format!(
            r#"{{"Records":[{{"messageId":"m-2","body":"hello","messageAttributes":{{"redrive":{{"stringValue":{},"dataType":"String"}}}}}}]}}"#,
            serde_json::to_string(copy.attributes[0].1.string_value.as_deref().unwrap()).unwrap()
        );
        let event2 = SqsEvent::parse(&resent).unwrap();
        let carried = Meta::of(&event2.records[0]).unwrap().unwrap();
        let again = annotate(&event2.records[0], carried).unwrap();
        assert_eq!(again.attributes.len(), 1);
        let rewritten: Meta =
            serde_json::from_str(again.attributes[0].1.string_value.as_deref().unwrap()).unwrap();
        assert_eq!(rewritten.attributes, written.attributes);
    }

    #[test]
    fn the_error_text_gives_way_before_the_size_limit_and_the_body_never_does() {
        let body = "x".repeat(MAX_MESSAGE_BYTES - 400);
        let json = event_with_attributes(0, &body);
        let event = SqsEvent::parse(&json).unwrap();
        let copy = annotate(&event.records[0], meta(&"e".repeat(1000))).unwrap();
        assert_eq!(copy.body.len(), body.len());
        assert!(copy.size() <= MAX_MESSAGE_BYTES);
        let written: Meta =
            serde_json::from_str(copy.attributes[0].1.string_value.as_deref().unwrap()).unwrap();
        assert_eq!(&*written.error_message, "");

        let full = event_with_attributes(0, &"x".repeat(MAX_MESSAGE_BYTES));
        let event = SqsEvent::parse(&full).unwrap();
        assert!(annotate(&event.records[0], meta("boom")).unwrap_err().size > MAX_MESSAGE_BYTES);
    }

    #[test]
    fn truncation_respects_character_boundaries() {
        assert_eq!(truncate("short", 10), "short");
        let long = "é".repeat(600);
        let cut = truncate(&long, 100);
        assert!(cut.len() <= 100 && cut.ends_with("…[truncated]"));
    }
}
