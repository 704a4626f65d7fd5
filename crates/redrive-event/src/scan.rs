//! A fast reader for the one JSON shape Lambda's SQS events have. Strings are searched eight bytes
//! at a time, borrowed from the event bytes when they hold no escape (and a body when its only
//! escapes are its quotes: see `Body`), and unknown fields are skipped without building anything.
//! It returns `None` on anything it does not understand; the caller then parses with serde_json,
//! which gives the precise error (or the same records).
use std::borrow::Cow;
use std::ops::Range;

use crate::{Body, MessageAttribute, SqsEvent, SqsRecord, Text};

/// Deeper nesting than this in skipped values is refused (the serde path handles it).
const MAX_DEPTH: usize = 64;

/// The most records an SQS event source mapping puts in one batch.
const MAX_BATCH_RECORDS: usize = 10_000;

// The public entry points live beside the scanner they try first.
impl<'a> SqsEvent<'a> {
    /// Parses the event bytes Lambda passed to the function: a fast scanner for the SQS event
    /// shape, and serde_json for anything it does not take (which also gives the precise error).
    /// Strings without escapes borrow from `json`; those with escapes are owned, except a body
    /// whose only escapes are its quotes, which borrows as it stands (see [`Body`]).
    pub fn parse(json: &'a str) -> Result<Self, serde_json::Error> {
        Self::read(json, None)
    }

    /// [`SqsEvent::parse`] from bytes; serde_json names the first invalid UTF-8 in them.
    pub fn from_slice(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        Self::read_bytes(json, None)
    }

    /// [`SqsEvent::from_slice`], the records' strings with escapes decoded into `decoded`, one
    /// after the other, and borrowed from it: one buffer for the batch instead of an allocation
    /// each. What `decoded` held is replaced. (Message attribute values with escapes, and every
    /// string when serde_json reads the event, stay owned.)
    pub fn from_slice_in(
        json: &'a [u8],
        decoded: &'a mut String,
    ) -> Result<Self, serde_json::Error> {
        Self::read_bytes(json, Some(decoded))
    }

    fn read_bytes(
        json: &'a [u8],
        decoded: Option<&'a mut String>,
    ) -> Result<Self, serde_json::Error> {
        match std::str::from_utf8(json) {
            Ok(json) => Self::read(json, decoded),
            Err(_) => serde_json::from_slice(json),
        }
    }

    fn read(json: &'a str, decoded: Option<&'a mut String>) -> Result<Self, serde_json::Error> {
        match event(json, decoded) {
            Some(event) => Ok(event),
            None => serde_json::from_str(json),
        }
    }
}

/// Reads an SQS event. The records' strings with escapes (but bodies that escape only their
/// quotes) are decoded one after the other into one buffer for the batch, not into an allocation
/// each; with `keep`, the buffer is moved there and the records borrow from it, without, each
/// string is copied out.
pub(crate) fn event<'a>(json: &'a str, keep: Option<&'a mut String>) -> Option<SqsEvent<'a>> {
    let mut scan = Scan::new(json, json.as_bytes());
    let mut records = None;
    scan.object(|scan, key| match key {
        "Records" => {
            if records.is_some() {
                return None; // a duplicate field: serde_json refuses it with its error
            }
            let list = records.insert(Vec::new());
            scan.array(|scan| {
                let start = scan.mark();
                scan.record = list.len();
                // Read into its place in the list: a record returned by value was copied twice.
                list.push(SqsRecord::default());
                let record = list.last_mut()?;
                if scan.record_of_last_shape(record).is_none() {
                    scan.rewind(&start);
                    *record = SqsRecord::default();
                    scan.record(record)?;
                }
                if list.len() == 1 {
                    // Records are alike in size: reserve for the rest at once rather than grow
                    // (and copy) the list and the decoded text a dozen times on a large batch.
                    // Capped at the largest batch Lambda delivers, so that a small first record
                    // cannot inflate it.
                    let estimate = scan.bytes.len() / (scan.at - start.at).max(1);
                    let estimate = estimate.min(MAX_BATCH_RECORDS);
                    list.reserve(estimate);
                    scan.decoded_text
                        .reserve(scan.decoded_text.len() * estimate);
                    scan.decoded.reserve(scan.decoded.len() * estimate);
                }
                Some(())
            })
        }
        _ => scan.skip(0),
    })?;
    scan.whitespace();
    // No `Records`: not an SQS event; serde_json then gives the precise error.
    let mut records = records.filter(|_| scan.at == scan.bytes.len())?;
    place_decoded(&mut records, scan.decoded_text, scan.decoded, keep)?;
    Some(SqsEvent { records })
}

/// A record field whose string was decoded into the batch's decoded text.
struct Decoded {
    record: usize,
    field: Field,
    range: Range<usize>,
}

/// Gives each record field decoded into `text` its string: borrowed from `keep`, which takes
/// the text, or else a copy of its own.
fn place_decoded<'a>(
    records: &mut [SqsRecord<'a>],
    text: Vec<u8>,
    decoded: Vec<Decoded>,
    keep: Option<&'a mut String>,
) -> Option<()> {
    // One check of the whole text: each string was decoded from valid UTF-8 and escapes that
    // encode whole characters, so this never fails, and the ranges fall on character boundaries.
    let text = String::from_utf8(text).ok()?;
    let place = |string: &dyn Fn(Range<usize>) -> Option<Cow<'a, str>>| {
        for Decoded {
            record,
            field,
            range,
        } in decoded
        {
            let record = records.get_mut(record)?;
            let text = Text(string(range)?);
            match field {
                Field::Body => record.body = Some(Body::from(text)),
                _ => *string_slot(field, record)? = Some(text),
            }
        }
        Some(())
    };
    match keep {
        Some(keep) => {
            *keep = text;
            let kept: &'a String = keep;
            place(&|range| kept.get(range).map(Cow::Borrowed))
        }
        None => place(&|range| text.get(range).map(|string| Cow::Owned(string.to_owned()))),
    }
}

/// The known fields of one object already read. serde_json refuses a duplicate known field, so the
/// scanner hands such input over to it rather than keep the last value.
#[derive(Default)]
struct Fields(u32);

impl Fields {
    /// `None` when `field` was read before.
    fn first(&mut self, field: u32) -> Option<()> {
        let bit = 1 << field;
        let first = self.0 & bit == 0;
        self.0 |= bit;
        first.then_some(())
    }
}

/// A reader of JSON text, a byte at a time where it must be and eight where it can: the SQS
/// scanner, and the generic steps (objects, arrays, strings without escapes, integers, values
/// read over) that `redrive-core`'s Kafka scanner takes from it as [`crate::json::Reader`]. Each
/// step returns `None` on anything it does not take, for serde_json to judge.
pub struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// The first record's source ARN. Every record of a batch names the same queue; records that
    /// borrow this one copy keep the processor's per-record FIFO check in cache rather than
    /// reading each record's own copy from across the event.
    source: Option<&'a str>,
    shape: Shape<'a>,
    /// The records' strings that had escapes, decoded (see [`event`]).
    decoded_text: Vec<u8>,
    /// Where each of them goes.
    decoded: Vec<Decoded>,
    /// The index of the record being read.
    record: usize,
}

/// Where a reading started, to read again from there another way.
struct Mark {
    at: usize,
    decoded_text: usize,
    decoded: usize,
}

/// Where a string with escapes is decoded to.
#[derive(Clone, Copy)]
enum DecodeTo {
    /// A field of the record being read: into the batch's decoded text.
    Batch(Field),
    /// A message attribute's value: its own string.
    Own,
}

/// Where a value of a record goes.
#[derive(Clone, Copy)]
enum Field {
    MessageId,
    ReceiptHandle,
    Body,
    EventSourceArn,
    EventSource,
    MessageAttributes,
    /// The `attributes` object: its fields are the seven below.
    Attributes,
    ReceiveCount,
    SentTimestamp,
    FirstReceiveTimestamp,
    MessageGroupId,
    SequenceNumber,
    TraceHeader,
    DeadLetterQueueSourceArn,
    /// A field the records do not keep.
    Other,
}

impl Field {
    fn of_record(key: &str) -> Self {
        match key {
            "messageId" => Self::MessageId,
            "receiptHandle" => Self::ReceiptHandle,
            "body" => Self::Body,
            "eventSourceARN" => Self::EventSourceArn,
            "eventSource" => Self::EventSource,
            "messageAttributes" => Self::MessageAttributes,
            "attributes" => Self::Attributes,
            _ => Self::Other,
        }
    }

    fn of_attributes(key: &str) -> Self {
        match key {
            "ApproximateReceiveCount" => Self::ReceiveCount,
            "SentTimestamp" => Self::SentTimestamp,
            "ApproximateFirstReceiveTimestamp" => Self::FirstReceiveTimestamp,
            "MessageGroupId" => Self::MessageGroupId,
            "SequenceNumber" => Self::SequenceNumber,
            "AWSTraceHeader" => Self::TraceHeader,
            "DeadLetterQueueSourceArn" => Self::DeadLetterQueueSourceArn,
            _ => Self::Other,
        }
    }
}

/// One value of a shape.
#[derive(Clone, Copy)]
struct Step<'a> {
    /// The text before the value (from the record's `{`, or the end of the value before).
    before: &'a [u8],
    field: Field,
    /// The length of the value in the last record, when it was a string without escapes: the
    /// same field most often has the same length in the next record (ids, ARNs, timestamps).
    plain: Option<usize>,
}

/// The last record read field by field, as the text between its values and where each value
/// went. Lambda writes every record of a batch with the same fields in the same order, so the
/// next record is most likely the same text around other values: checking that text is much
/// cheaper than reading each field's name and finding its place.
#[derive(Default)]
struct Shape<'a> {
    values: Vec<Step<'a>>,
    /// The text after the last value, to the record's `}`.
    end: &'a [u8],
    /// The values of the fields every record of a batch has alike (all come from one queue:
    /// `eventSource`, `eventSourceARN`, `awsRegion`), kept as part of the text around the
    /// others: a record that has that text has these values.
    alike: Vec<(Field, &'a str)>,
    /// While a record is read field by field: where the text before its next value starts.
    recorded_to: usize,
}

impl<'a> Scan<'a> {
    /// A reader at the start of `text`.
    pub fn of(text: &'a str) -> Self {
        Self::new(text, text.as_bytes())
    }

    /// Whether nothing but whitespace is left.
    pub fn finished(&mut self) -> bool {
        self.whitespace();
        self.at == self.bytes.len()
    }

    /// A string without escapes, borrowed (one with escapes is serde's to decode).
    pub fn string(&mut self) -> Option<&'a str> {
        match self.raw_string()? {
            (text, false) => Some(text),
            (_, true) => None,
        }
    }

    /// An integer as serde reads an `i64`: no fraction, no exponent, no overflow.
    pub fn integer(&mut self) -> Option<i64> {
        self.whitespace();
        let bytes = self.bytes;
        let negative = bytes.get(self.at) == Some(&b'-');
        let start = self.at + usize::from(negative);
        let mut end = start;
        let mut magnitude: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = bytes.get(end) {
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            end += 1;
        }
        // JSON writes no leading zero; a fraction or an exponent is no i64 to serde.
        if end == start
            || (end - start > 1 && bytes[start] == b'0')
            || matches!(bytes.get(end), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let value = if negative {
            0_i64.checked_sub_unsigned(magnitude)?
        } else {
            i64::try_from(magnitude).ok()?
        };
        self.at = end;
        Some(value)
    }

    /// A scanner at the start of `bytes`, which are `text`'s (tests may leave `text` empty).
    fn new(text: &'a str, bytes: &'a [u8]) -> Self {
        Scan {
            text,
            bytes,
            at: 0,
            source: None,
            shape: Shape::default(),
            decoded_text: Vec::new(),
            decoded: Vec::new(),
            record: 0,
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            at: self.at,
            decoded_text: self.decoded_text.len(),
            decoded: self.decoded.len(),
        }
    }

    /// Back to `mark`, forgetting what was decoded since.
    fn rewind(&mut self, mark: &Mark) {
        self.at = mark.at;
        self.decoded_text.truncate(mark.decoded_text);
        self.decoded.truncate(mark.decoded);
    }

    /// Reads a record field by field into `record`, and records its shape for the next one.
    fn record(&mut self, record: &mut SqsRecord<'a>) -> Option<()> {
        let mut seen = Fields::default();
        self.shape.values.clear();
        self.shape.alike.clear();
        self.shape.recorded_to = self.at;
        self.object(|scan, key| match Field::of_record(key) {
            Field::Attributes => {
                seen.first(Field::Attributes as u32)
                    .and(scan.object(|scan, key| {
                        let field = Field::of_attributes(key);
                        scan.recorded_value(field, false, record, &mut seen)
                    }))
            }
            field => {
                let alike = matches!(key, "eventSource" | "eventSourceARN" | "awsRegion");
                scan.recorded_value(field, alike, record, &mut seen)
            }
        })?;
        self.shape.end = &self.bytes[self.shape.recorded_to..self.at];
        Some(())
    }

    /// Reads into `record` a record that has the shape of the last one read field by field;
    /// `None` when it does not (or is invalid), and the caller resets `record` and reads it field
    /// by field.
    fn record_of_last_shape(&mut self, record: &mut SqsRecord<'a>) -> Option<()> {
        // The shape holds each field once (it came from a record without duplicates).
        let mut seen = Fields::default();
        for step in 0..self.shape.values.len() {
            let Step {
                before,
                field,
                plain,
            } = self.shape.values[step];
            self.expect(before)?;
            match plain.and_then(|len| self.plain_string(len)) {
                Some(value) => self.put(field, value, record, &mut seen)?,
                None => {
                    let start = self.at;
                    self.value(field, record, &mut seen)?;
                    self.shape.values[step].plain = plain_length(&self.bytes[start..self.at]);
                }
            }
        }
        self.expect(self.shape.end)?;
        for value in 0..self.shape.alike.len() {
            let (field, value) = self.shape.alike[value];
            self.put(field, value, record, &mut seen)?;
        }
        (!self.shape.values.is_empty()).then_some(())
    }

    fn expect(&mut self, text: &[u8]) -> Option<()> {
        let end = self.at + text.len();
        (self.bytes.get(self.at..end)? == text).then(|| self.at = end)
    }

    /// [`Scan::value`], noting the text before the value in the shape being recorded. A plain
    /// string value of a field that is `alike` in every record of a batch becomes part of that
    /// text instead (see [`Shape::alike`]).
    fn recorded_value(
        &mut self,
        field: Field,
        alike: bool,
        record: &mut SqsRecord<'a>,
        seen: &mut Fields,
    ) -> Option<()> {
        self.whitespace();
        let start = self.at;
        self.value(field, record, seen)?;
        let plain = plain_length(&self.bytes[start..self.at]);
        if alike && plain.is_some() {
            if !matches!(field, Field::Other) {
                let value = &self.text[start + 1..self.at - 1];
                self.shape.alike.push((field, value));
            }
            return Some(());
        }
        self.shape.values.push(Step {
            before: &self.bytes[self.shape.recorded_to..start],
            field,
            plain,
        });
        self.shape.recorded_to = self.at;
        Some(())
    }

    /// Reads the value of `field` into `record`; `None` for a field seen before in this record
    /// (serde_json refuses duplicates) or a value the scanner does not take.
    fn value(&mut self, field: Field, record: &mut SqsRecord<'a>, seen: &mut Fields) -> Option<()> {
        match field {
            Field::MessageAttributes => {
                seen.first(field as u32)?;
                self.object(|scan, name| {
                    let name = Text(Cow::Borrowed(name));
                    record
                        .message_attributes
                        .insert(name, scan.message_attribute()?);
                    Some(())
                })
            }
            Field::Attributes => None, // an object of fields, not a value
            Field::Other => self.skip(0),
            Field::Body => {
                seen.first(field as u32)?;
                record.body = match self.quote_escaped_string() {
                    Some((text, false)) => Some(Body::from(text)),
                    Some((escaped, true)) => Some(Body::quoted(escaped)),
                    None => {
                        let mut text = None;
                        self.optional_string(&mut text, DecodeTo::Batch(field))?;
                        text.map(Body::from)
                    }
                };
                Some(())
            }
            _ => {
                seen.first(field as u32)?;
                let slot = string_slot(field, record)?;
                self.optional_string(slot, DecodeTo::Batch(field))?;
                self.share_source(field, slot);
                Some(())
            }
        }
    }

    /// [`Scan::value`] for a string value already read.
    fn put(
        &mut self,
        field: Field,
        value: &'a str,
        record: &mut SqsRecord<'a>,
        seen: &mut Fields,
    ) -> Option<()> {
        match field {
            Field::Other => return Some(()),
            Field::Body => {
                seen.first(field as u32)?;
                record.body = Some(Body::from(value));
                return Some(());
            }
            _ => {}
        }
        seen.first(field as u32)?;
        let slot = string_slot(field, record)?;
        *slot = Some(Text(Cow::Borrowed(value)));
        self.share_source(field, slot);
        Some(())
    }

    /// Every record of a batch names the same queue: a source ARN equal to the first record's
    /// borrows that one copy (see [`Scan::source`]).
    fn share_source(&mut self, field: Field, slot: &mut Option<Text<'a>>) {
        let (Field::EventSourceArn, Some(Text(Cow::Borrowed(arn)))) = (field, slot) else {
            return;
        };
        match self.source {
            Some(first) if first == *arn => *arn = first,
            Some(_) => {}
            None => self.source = Some(arn),
        }
    }

    /// The string at the position if it is `len` bytes between quotes, none of them special (the
    /// length of the field's value in the last record); `None`, the position unchanged, if not.
    /// Unlike a search for the closing quote, the position after the value does not wait on the
    /// value's bytes: the next field's text can be checked while this value is.
    fn plain_string(&mut self, len: usize) -> Option<&'a str> {
        let start = self.at + 1;
        let end = start + len;
        let quoted = self.bytes.get(self.at) == Some(&b'"') && self.bytes.get(end) == Some(&b'"');
        if !(quoted && is_plain(self.bytes, start, end)) {
            return None;
        }
        self.at = end + 1;
        Some(&self.text[start..end])
    }

    fn message_attribute(&mut self) -> Option<MessageAttribute<'a>> {
        let mut attribute = MessageAttribute::default();
        let mut seen = Fields::default();
        self.object(|scan, key| {
            match key {
                "stringValue" => seen
                    .first(0)
                    .and(scan.optional_string(&mut attribute.string_value, DecodeTo::Own))?,
                "binaryValue" => seen
                    .first(1)
                    .and(scan.optional_string(&mut attribute.binary_value, DecodeTo::Own))?,
                "dataType" => {
                    let mut data_type = None;
                    seen.first(2)
                        .and(scan.optional_string(&mut data_type, DecodeTo::Own))?;
                    attribute.data_type = data_type.unwrap_or_default();
                }
                _ => scan.skip(0)?,
            }
            Some(())
        })?;
        Some(attribute)
    }

    /// Reads over whitespace.
    #[inline(always)]
    pub fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes.get(self.at).copied()
    }

    /// Reads `byte` after whitespace.
    #[inline(always)]
    pub fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// `{ "key": value, ... }`, calling `field` with the scanner positioned at each value.
    pub fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let (key, escaped) = self.raw_string()?;
            if escaped {
                return None; // no field of an SQS event has an escaped name: let serde decide
            }
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `[ element, ... ]`, calling `element` at each.
    pub fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string or `null`, into `slot` (written in place: a returned `Option<Option<Text>>` went
    /// through memory and stalled the copy out of it, a tenth of the reading of a record).
    fn optional_string(&mut self, slot: &mut Option<Text<'a>>, to: DecodeTo) -> Option<()> {
        if self.peek()? == b'n' {
            *slot = None;
            return self.literal(b"null");
        }
        self.eat(b'"')?;
        let start = self.at;
        self.at = self.next_special(start)?;
        match self.bytes[self.at] {
            b'"' => {
                self.at += 1;
                *slot = Some(Text(Cow::Borrowed(&self.text[start..self.at - 1])));
                Some(())
            }
            b'\\' => {
                let from = self.decoded_text.len();
                // Taken out while decoding: a local buffer's length stays in a register.
                let mut out = std::mem::take(&mut self.decoded_text);
                out.extend_from_slice(&self.bytes[start..self.at]);
                let decoded = self.unescape_into(&mut out);
                self.decoded_text = out;
                decoded?;
                *slot = Some(match to {
                    DecodeTo::Batch(field) => {
                        let range = from..self.decoded_text.len();
                        let record = self.record;
                        self.decoded.push(Decoded {
                            record,
                            field,
                            range,
                        });
                        Text::default() // until the event is read: `place_decoded`
                    }
                    DecodeTo::Own => {
                        let own = std::str::from_utf8(&self.decoded_text[from..]).ok()?;
                        let own = Text(Cow::Owned(own.to_owned()));
                        self.decoded_text.truncate(from);
                        own
                    }
                });
                Some(())
            }
            _ => None, // JSON forbids raw control characters inside strings.
        }
    }

    /// A string whose only escapes are `\"` (a JSON body, as Lambda writes it), as it stands in
    /// the event, and whether it has any; `None`, the position unchanged, for any other string
    /// (or value).
    ///
    /// Its end is found a word at a time from exact masks of its quotes and backslashes: a body
    /// escapes every quote it has, and finding the next special byte, escape after escape, is a
    /// chain of dependent loads and jumps that costs as much as decoding the body.
    fn quote_escaped_string(&mut self) -> Option<(&'a str, bool)> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        // The high bit of the first byte when the word before ended with a backslash.
        let mut escaped_first = 0;
        let mut any_escape = 0;
        loop {
            let word = u64::from_le_bytes(*self.bytes.get(at..)?.first_chunk::<8>()?);
            let backslash = exact_match(word, b'\\');
            let quote = exact_match(word, b'"');
            let escaped = (backslash << 8) | escaped_first;
            let end = quote & !escaped;
            // The bytes of the string in this word: those before its closing quote.
            let inside = match end {
                0 => u64::MAX,
                end => (end & end.wrapping_neg()) - 1,
            };
            // Any control byte, escaped backslash or escape of another byte: not this reading.
            if (exact_control(word) | (backslash & escaped) | (escaped & !quote)) & inside != 0 {
                return None;
            }
            any_escape |= backslash & inside;
            if end != 0 {
                let close = at + (end.trailing_zeros() / 8) as usize;
                self.at = close + 1;
                return Some((&self.text[start..close], any_escape != 0));
            }
            escaped_first = (backslash >> 63) << 7;
            at += 8;
        }
    }

    /// The text between the quotes, as it stands, and whether it holds escapes.
    fn raw_string(&mut self) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            self.at = self.next_special(self.at)?;
            match self.bytes[self.at] {
                b'"' => {
                    self.at += 1;
                    return Some((&self.text[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                _ => return None, // a raw control character
            }
        }
    }

    /// Decodes the rest of a JSON string, from the escape at `self.at` to the closing quote, into
    /// `out`; `None` for an invalid escape, a raw control character or no closing quote.
    ///
    /// Eight bytes at a time, each word stored whole and cut back to its first special: the runs
    /// between a body's dense `\"` escapes are short, and a store of fixed size is one
    /// instruction where finding each run's end and copying its length would be a loop each.
    fn unescape_into(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let bytes = self.bytes;
        loop {
            let rest = bytes.get(self.at..)?;
            let word = match rest.first_chunk::<8>() {
                Some(word) => u64::from_le_bytes(*word),
                None => {
                    // The end of the event: padded with bytes that are not special.
                    let mut padded = [b' '; 8];
                    padded[..rest.len()].copy_from_slice(rest);
                    u64::from_le_bytes(padded)
                }
            };
            let found = specials(word);
            out.extend_from_slice(&word.to_le_bytes());
            if found == 0 {
                if rest.len() <= 8 {
                    return None; // no closing quote
                }
                self.at += 8;
                continue;
            }
            let run = (found.trailing_zeros() / 8) as usize;
            out.truncate(out.len() - 8 + run);
            self.at += run;
            // The special byte and the one after it, from the word when it holds them: not
            // loading them again keeps them off the way to the next word.
            match (word >> (8 * run)) as u8 {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => {
                    let escape = match run {
                        7 => *bytes.get(self.at + 1)?,
                        _ => (word >> (8 * (run + 1))) as u8,
                    };
                    self.at += 2;
                    let decoded = match escape {
                        // A body of JSON escapes little else: handled before the others.
                        b'"' | b'\\' | b'/' => {
                            out.push(escape);
                            continue;
                        }
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let decoded = unicode_escape(bytes, &mut self.at)?;
                            out.extend_from_slice(decoded.encode_utf8(&mut [0; 4]).as_bytes());
                            continue;
                        }
                        _ => return None,
                    };
                    out.push(decoded);
                }
                _ => return None, // JSON forbids raw control characters inside strings.
            }
        }
    }

    /// The position of the first `"`, `\` or control character at or after `from`.
    #[inline(always)]
    fn next_special(&self, from: usize) -> Option<usize> {
        let rest = self.bytes.get(from..)?;
        let mut words = rest.chunks_exact(8);
        let mut offset = from;
        for word in &mut words {
            let found = specials(u64::from_le_bytes(word.try_into().ok()?));
            if found != 0 {
                // Little-endian: the lowest flagged byte comes first.
                return Some(offset + (found.trailing_zeros() / 8) as usize);
            }
            offset += 8;
        }
        let tail = words.remainder();
        Some(
            offset
                + tail
                    .iter()
                    .position(|b| matches!(b, b'"' | b'\\' | 0..=0x1f))?,
        )
    }

    /// Reads `word` as it stands (`null`, `true`, `false`).
    pub fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// Reads over any value, `depth` deep in values read over.
    pub fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            // A skipped string's escapes are not checked here: let serde_json judge one that has any.
            b'"' => match self.raw_string()? {
                (_, false) => Some(()),
                (_, true) => None,
            },
            b'{' => self.object(|scan, _| scan.skip(depth + 1)),
            b'[' => self.array(|scan| scan.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => {
                let start = self.at;
                while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') =
                    self.bytes.get(self.at)
                {
                    self.at += 1;
                }
                is_json_number(&self.bytes[start..self.at]).then_some(())
            }
            _ => None,
        }
    }
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, as JSON has it (Rust's float parser
/// also takes `1.`, `01` and `+1`).
fn is_json_number(bytes: &[u8]) -> bool {
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at > start
    };
    let mut at = usize::from(bytes.first() == Some(&b'-'));
    match bytes.get(at) {
        Some(b'0') => at += 1,
        Some(b'1'..=b'9') => {
            digits(&mut at);
        }
        _ => return false,
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        if !digits(&mut at) {
            return false;
        }
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = bytes.get(at) {
            at += 1;
        }
        if !digits(&mut at) {
            return false;
        }
    }
    at == bytes.len()
}

/// A `\u` escape from `at` (after the `u`), joined with its low surrogate when it is a high one.
fn unicode_escape(bytes: &[u8], at: &mut usize) -> Option<char> {
    let first = hex4(bytes, at)?;
    match first {
        0xD800..=0xDBFF => {
            (bytes.get(*at..*at + 2)? == b"\\u").then_some(())?;
            *at += 2;
            let second = hex4(bytes, at)?;
            (0xDC00..=0xDFFF).contains(&second).then_some(())?;
            char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        }
        _ => char::from_u32(first),
    }
}

/// Exactly four hex digits (`u32::from_str_radix` would also take a sign).
fn hex4(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let digits = bytes.get(*at..*at + 4)?;
    *at += 4;
    digits.iter().try_fold(0, |value, digit| {
        Some(value * 16 + char::from(*digit).to_digit(16)?)
    })
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const LOW_BITS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// Where a string value of `field` goes in `record`; `None` for fields that are not strings.
fn string_slot<'r, 'a>(
    field: Field,
    record: &'r mut SqsRecord<'a>,
) -> Option<&'r mut Option<Text<'a>>> {
    let attributes = &mut record.attributes;
    Some(match field {
        Field::MessageId => &mut record.message_id,
        Field::ReceiptHandle => &mut record.receipt_handle,
        Field::EventSource => &mut record.event_source,
        Field::EventSourceArn => &mut record.event_source_arn,
        Field::ReceiveCount => &mut attributes.approximate_receive_count,
        Field::SentTimestamp => &mut attributes.sent_timestamp,
        Field::FirstReceiveTimestamp => &mut attributes.approximate_first_receive_timestamp,
        Field::MessageGroupId => &mut attributes.message_group_id,
        Field::SequenceNumber => &mut attributes.sequence_number,
        Field::TraceHeader => &mut attributes.aws_trace_header,
        Field::DeadLetterQueueSourceArn => &mut attributes.dead_letter_queue_source_arn,
        Field::Body | Field::MessageAttributes | Field::Attributes | Field::Other => return None,
    })
}

/// The length between the quotes of a value read as it stands (`"..."`, no escape); `None` for
/// any other value.
fn plain_length(value: &[u8]) -> Option<usize> {
    (value.len() >= 2 && value[0] == b'"' && !value.contains(&b'\\')).then(|| value.len() - 2)
}

/// True when `bytes[start..end]` holds no `"`, `\` or control character. Every word is checked,
/// without an early exit: the loop runs as often as it did for the last record's value.
fn is_plain(bytes: &[u8], start: usize, end: usize) -> bool {
    let Some(text) = bytes.get(start..end) else {
        return false;
    };
    let word = |at: usize| {
        bytes
            .get(at..)
            .and_then(<[u8]>::first_chunk::<8>)
            .map(|word| u64::from_le_bytes(*word))
    };
    if text.len() < 8 {
        // The word from `start`, its bytes from `end` on masked off: a flag never spreads to a
        // lower byte, so the mask keeps exactly the flags of the text.
        return match word(start) {
            Some(word) => specials(word) & ((1 << (8 * text.len())) - 1) == 0,
            None => !text.iter().any(|b| matches!(b, b'"' | b'\\' | 0..=0x1f)),
        };
    }
    let words = text.chunks_exact(8);
    // The last eight bytes cover what the whole words leave over.
    let last = u64::from_le_bytes(*text.last_chunk::<8>().expect("eight bytes or more"));
    let found = words.fold(specials(last), |found, word| {
        found | specials(u64::from_le_bytes(word.try_into().expect("eight bytes")))
    });
    found == 0
}

/// The high bit of each byte of `word` equal to `byte`, and no other (no borrow between bytes).
#[inline(always)]
pub(crate) fn exact_match(word: u64, byte: u8) -> u64 {
    let zero_where_equal = word ^ (ONES * u64::from(byte));
    !(((zero_where_equal & LOW_BITS) + LOW_BITS) | zero_where_equal) & HIGH_BITS
}

/// The high bit of each byte of `word` below 0x20, and no other.
#[inline(always)]
fn exact_control(word: u64) -> u64 {
    !(((word & LOW_BITS) + ONES * 0x60) | word) & HIGH_BITS
}

/// The high bit of each byte of `word` that is `"`, `\` or a control character (below 0x20):
/// eight bytes at a time without SIMD (strings in an SQS event are short, where a SIMD search's
/// set-up costs more than it saves), and the control-character check comes free. A borrow can
/// flag a byte above a truly flagged one, never below, so the lowest flag is exact.
#[inline(always)]
fn specials(word: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    (quote | backslash | control) & HIGH_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(
        json: &str,
    ) -> (
        Option<SqsEvent<'_>>,
        Result<SqsEvent<'_>, serde_json::Error>,
    ) {
        let mut kept = String::new();
        let (fast, kept) = (event(json, None), event(json, Some(&mut kept)));
        assert_eq!(
            fast, kept,
            "read with and without a buffer for decoded text: {json}"
        );
        (fast, serde_json::from_str(json))
    }

    fn scanner(bytes: &[u8]) -> Scan<'_> {
        Scan::new("", bytes)
    }

    #[test]
    fn reads_what_serde_reads() {
        let samples = [
            r#"{"Records":[]}"#,
            r#" { "Records" : [ { "messageId" : "m-1" , "body" : "plain" } ] , "other" : {"a":[1,2.5e3,-4,true,false,null,{"b":"c"}]} } "#,
            r#"{"Records":[{"messageId":"m","body":"{\"a\":\"\\u00e9\\ud83d\\ude00\\n\\t\\\\ \\/ \\b\\f\\r\"}","receiptHandle":null,
               "attributes":{"ApproximateReceiveCount":"2","MessageGroupId":"g","Unknown":"x"},
               "messageAttributes":{"k":{"stringValue":"v","stringListValues":[],"binaryListValues":[],"dataType":"String"},
                                    "b":{"binaryValue":"AAE=","dataType":"Binary"}},
               "eventSourceARN":"arn:aws:sqs:us-east-1:1:q.fifo","awsRegion":"us-east-1","md5OfBody":"x"}]}"#,
            // Records of one shape, then others: other fields, order, spacing, values, attributes.
            r#"{"Records":[{"messageId":"1","body":"a","attributes":{"SentTimestamp":"1"},"messageAttributes":{}},
                           {"messageId":"2","body":"b\"c","attributes":{"SentTimestamp":"2"},"messageAttributes":{}},
                           {"messageId":"3","body":null,"attributes":{"SentTimestamp":"3"},"messageAttributes":{"k":{"stringValue":"v","dataType":"String"}}},
                           {"messageId":"4","body":"d","attributes":{"SentTimestamp":"4","AWSTraceHeader":"t"},"messageAttributes":{}},
                           {"body":"e","messageId":"5","attributes":{"SentTimestamp":"5"},"messageAttributes":{}},
                           {"body":"f","messageId":"6","attributes":{"SentTimestamp":"6"},"messageAttributes":{},"x":[1,{}]},
                           {"body":"g", "messageId":"7","attributes":{"SentTimestamp":"7"},"messageAttributes":{},"x":[2]},
                           {}, {}]}"#,
        ];
        for json in samples {
            let (fast, slow) = both(json);
            assert_eq!(
                fast.expect("the scanner reads it").records,
                slow.unwrap().records,
                "{json}"
            );
        }
        for file in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../events")).unwrap()
        {
            let json = std::fs::read_to_string(file.unwrap().path()).unwrap();
            let (fast, slow) = both(&json);
            if let Ok(slow) = slow {
                assert_eq!(
                    fast.expect("sample events are read by the scanner").records,
                    slow.records
                );
            }
        }
    }

    #[test]
    fn a_record_shaped_as_the_last_is_read_without_its_field_names() {
        let first = r#"{"messageId":"1","attributes":{"SentTimestamp":"1","Other":2},"body":"a"}"#;
        let same =
            r#"{"messageId":"2","attributes":{"SentTimestamp":"2","Other":3},"body":"b\"c"}"#;
        let json = format!("{first},{same}");
        let mut scan = scanner(json.as_bytes());
        scan.text = &json;
        assert!(
            scan.record_of_last_shape(&mut SqsRecord::default())
                .is_none(),
            "no shape before a record is read"
        );
        scan.record(&mut SqsRecord::default()).unwrap();
        scan.eat(b',').unwrap();
        let mut record = SqsRecord::default();
        scan.record_of_last_shape(&mut record)
            .expect("the same shape");
        assert_eq!(record.message_id.as_deref(), Some("2"));
        assert_eq!(record.attributes.sent_timestamp.as_deref(), Some("2"));
        assert_eq!(scan.at, json.len());
        // Its escaped body was decoded into the batch's text, and is placed once all is read.
        let mut records = [record];
        place_decoded(&mut records, scan.decoded_text, scan.decoded, None).unwrap();
        assert_eq!(records[0].body.as_deref(), Some("b\"c"));
        for other in [
            r#"{"attributes":{"SentTimestamp":"2","Other":3},"messageId":"2","body":"b"}"#,
            r#"{"messageId":"2","attributes":{"SentTimestamp":"2","Other":3},"body":"b","x":1}"#,
            r#"{"messageId":"2","attributes":{"SentTimestamp":"2","Other":3}, "body":"b"}"#,
        ] {
            let json = format!("{first},{other}");
            let mut scan = scanner(json.as_bytes());
            scan.text = &json;
            scan.record(&mut SqsRecord::default()).unwrap();
            scan.eat(b',').unwrap();
            let mut record = SqsRecord::default();
            assert!(scan.record_of_last_shape(&mut record).is_none(), "{other}");
        }
    }

    #[test]
    fn a_value_of_the_last_records_length_is_taken_only_when_it_is_a_plain_string() {
        // Values around eight bytes long (one word, or a word and a few bytes), plain or with
        // what must send them to the reader that decodes or refuses: escapes, a quote, a raw
        // control character, another type; each record picks its values at random.
        let plain = [
            r#""abcdefg""#,
            r#""abcdefgh""#,
            r#""abcdefghi""#,
            r#""abc""#,
            r#""""#,
            r#""é😀efg""#,
            "null",
        ];
        let escaped = [
            r#""abc\"efg""#,
            r#""abc\\efg""#,
            r#""abcdef\"""#,
            r#""\"bcdefg""#,
            r#""abc\u0041efg""#,
        ];
        let mut rng = fastrand::Rng::with_seed(5);
        let mut pick = |field: &str| match (field, rng.u8(..64)) {
            // Now and then a value to refuse: a raw control character.
            (_, 0) => "\"abc\tefg\"",
            // The fields a batch's records have alike (one queue) mostly are, and sometimes not.
            ("alike", 1..48) => r#""arn:aws:sqs:us-east-1:1:q""#,
            // A field the records do not keep takes any value (an escaped one is handed over).
            ("other", 1..8) => "12345678",
            ("alike" | "other", _) => plain[rng.usize(..plain.len())],
            (_, _) => {
                if rng.bool() {
                    plain[rng.usize(..plain.len())]
                } else {
                    escaped[rng.usize(..escaped.len())]
                }
            }
        };
        let mut read = 0;
        for _ in 0..3_000 {
            let records: Vec<String> = (0..4)
                .map(|_| {
                    format!(
                        r#"{{"messageId":{},"eventSourceARN":{},"attributes":{{"SentTimestamp":{}}},"x":{},"awsRegion":{},"body":{},"eventSource":{}}}"#,
                        pick("id"),
                        pick("alike"),
                        pick("timestamp"),
                        pick("other"),
                        pick("alike"),
                        pick("body"),
                        pick("alike"),
                    )
                })
                .collect();
            let json = format!(r#"{{"Records":[{}]}}"#, records.join(","));
            match both(&json) {
                (Some(fast), Ok(slow)) => {
                    assert_eq!(fast.records, slow.records, "{json}");
                    read += 1;
                }
                // Handed over: an escaped string in a field the records do not keep.
                (None, Ok(_)) => {}
                (fast, Err(_)) => assert!(fast.is_none(), "{json}"),
            }
        }
        assert!(read > 500, "only {read} events read by the scanner");
    }

    #[test]
    fn escaped_strings_of_records_borrow_from_one_buffer_for_the_batch() {
        // The second record has the first one's shape up to past its body, then another field:
        // its body is decoded twice (shaped, then field by field), and kept once. (Bodies whose
        // only escapes are `\"` are not decoded at all: see the test after this one.)
        let json = r#"{"Records":[{"body":"a\nb","messageId":"1","messageAttributes":{"k":{"stringValue":"x\"y","dataType":"String"}}},
                                  {"body":"c\nd","messageId":"2","messageAttributes":{},"x":1},
                                  {"body":"plain","messageId":"3\u0033","messageAttributes":{}}]}"#;
        let mut kept = String::new();
        let records = event(json, Some(&mut kept)).unwrap().records;
        let at = |text: &str| text.as_ptr() as usize;
        let body = |record: usize| records[record].body.as_deref().unwrap();
        let id = |record: usize| records[record].message_id.as_deref().unwrap();
        // One buffer, in the order read, without the first decoding of the second body.
        let first = at(body(0));
        assert_eq!(at(body(1)), first + 3);
        assert_eq!(at(id(2)), first + 6);
        let plain = json.find("plain").unwrap();
        assert_eq!(at(body(2)), at(&json[plain..]));
        assert_eq!([body(0), body(1), id(2)], ["a\nb", "c\nd", "33"]);
        // A message attribute's value keeps a string of its own.
        let value = &records[0]
            .message_attributes
            .values()
            .next()
            .unwrap()
            .string_value;
        assert!(matches!(value, Some(Text(Cow::Owned(value))) if value == r#"x"y"#));
        drop(records);
        assert_eq!(kept, "a\nbc\nd33");
    }

    #[test]
    fn a_body_escaping_only_its_quotes_is_kept_as_the_event_has_it() {
        let json = r#"{"Records":[{"body":"{\"a\":\"é\"}","messageId":"1"},{"body":"{\"a\":\"b\"}","messageId":"2"},{"body":"x\ty","messageId":"3"}]}"#;
        let records = event(json, None).unwrap().records;
        let quoted = |record: usize| records[record].body.as_ref().unwrap().quoted_json();
        assert_eq!(quoted(0), Some(r#"{\"a\":\"é\"}"#));
        assert_eq!(
            quoted(1),
            Some(r#"{\"a\":\"b\"}"#),
            "read by the last record's shape"
        );
        assert_eq!(quoted(2), None, "another escape: decoded");
        let bodies = records.iter().map(|record| record.body.as_deref().unwrap());
        assert!(bodies.eq([r#"{"a":"é"}"#, r#"{"a":"b"}"#, "x\ty"]));
    }

    #[test]
    fn finds_where_a_string_escaping_only_quotes_ends_wherever_its_escapes_fall() {
        let pieces = [
            "a", "bcdefgh", "é", r#"\""#, r"\\", r"\n", r"\u0041", "\t", r#"\\\""#,
        ];
        let mut rng = fastrand::Rng::with_seed(13);
        let mut taken = 0;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..rng.usize(0..12) {
                text.push_str(pieces[rng.usize(..pieces.len())]);
            }
            // At least a word after the string, as a record's fields follow its body.
            let json = format!(r#""{text}","next":"........"}}"#);
            let mut scan = Scan::new(&json, json.as_bytes());
            let only_quotes = !text
                .replace(r#"\""#, "")
                .bytes()
                .any(|byte| byte == b'\\' || byte < 0x20);
            match scan.quote_escaped_string() {
                Some((raw, escaped)) => {
                    assert!(only_quotes, "{text}");
                    assert_eq!((raw, escaped), (&*text, text.contains('\\')));
                    assert_eq!(scan.at, text.len() + 2);
                    let decoded: String = serde_json::from_str(&json[..scan.at]).unwrap();
                    assert_eq!(decoded, text.replace(r#"\""#, "\""));
                    taken += 1;
                }
                None => {
                    assert!(!only_quotes, "{text}");
                    assert_eq!(scan.at, 0);
                }
            }
        }
        assert!(taken > 1_000, "only {taken} taken");
    }

    #[test]
    fn records_of_one_source_share_one_copy_of_its_arn() {
        let json = r#"{"Records":[{"eventSourceARN":"arn:q"},{"eventSourceARN":"arn:q"},{"eventSourceARN":"arn:other"}]}"#;
        let records = event(json, None).unwrap().records;
        let arn = |i: usize| records[i].event_source_arn.as_deref().unwrap();
        assert_eq!([arn(0), arn(1), arn(2)], ["arn:q", "arn:q", "arn:other"]);
        assert!(
            std::ptr::eq(arn(0), arn(1)),
            "the second record borrows the first's copy"
        );
        assert!(!std::ptr::eq(arn(0), arn(2)));
    }

    #[test]
    fn finds_the_first_special_byte_as_the_definition_does() {
        let is_special = |b: &u8| matches!(b, b'"' | b'\\' | 0..=0x1f);
        // Bytes around the edges of the three tests (and UTF-8 continuation bytes), at random.
        let interesting = [
            0, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..200_000 {
            let len = rng.usize(0..40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.bool() {
                        interesting[rng.usize(..interesting.len())]
                    } else {
                        rng.u8(..)
                    }
                })
                .collect();
            let scan = scanner(&bytes);
            for from in 0..=len {
                assert_eq!(
                    scan.next_special(from),
                    bytes[from..]
                        .iter()
                        .position(is_special)
                        .map(|at| from + at),
                    "{bytes:?} from {from}"
                );
            }
        }
    }

    #[test]
    fn decodes_strings_as_serde_does_wherever_their_escapes_fall() {
        let pieces = [
            "a",
            "bcdefgh",
            "0123456789abcdefghij",
            "é",
            "😀",
            r#"\""#,
            r"\\",
            r"\/",
            r"\n",
            r"\t",
            r"\u00e9",
            r"\ud83d\ude00",
            r"\u0000",
        ];
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..3_000 {
            let mut text = String::new();
            while text.len() < rng.usize(0..200) {
                text.push_str(pieces[rng.usize(..pieces.len())]);
            }
            // An escape first: the body takes the decoding path.
            let json = format!(r#"{{"Records":[{{"body":"\n{text}"}}]}}"#);
            let (fast, slow) = both(&json);
            assert_eq!(fast.expect("read").records, slow.unwrap().records, "{json}");
            let unterminated = format!(r#"{{"Records":[{{"body":"\n{text}"#);
            assert!(event(&unterminated, None).is_none(), "{unterminated}");
        }
    }

    #[test]
    fn leaves_what_it_does_not_understand_to_serde() {
        for json in [
            "",
            "[]",
            r#"{"Records":[{"messageId":1}]}"#,
            r#"{"Records":[{"body":"unterminated}]}"#,
            r#"{"Records":[{"body":"bad \q escape"}]}"#,
            r#"{"Records":[{"body":"lone \ud800 surrogate"}]}"#,
            r#"{"Records":[]} trailing"#,
            r#"{"Records":[{"messageId":"m",}]}"#,
            r#"{"Records":[{"messageId":"a","messageId":"b"}]}"#,
            r#"{"Records":[],"Records":[]}"#,
            "{\"Records\":[{\"body\":\"tab\there\"}]}",
            r#"{"Records":[],"n":01}"#,
            r#"{"Records":[],"n":1.}"#,
            r#"{"Records":[],"n":-}"#,
            r#"{"Records":[],"n":1e}"#,
            r#"{"Records":[],"skipped":"bad \q escape"}"#,
            r#"{"Rec\u006frds":[]}"#,
            r#"{"Records":[{"body":"sign \u+0e9"}]}"#,
            // In a record of the shape of the one before.
            r#"{"Records":[{"messageId":"a","x":"1"},{"messageId":"b","x":"\q"}]}"#,
            r#"{"Records":[{"messageId":"a","x":"1"},{"messageId":"b","x":"2","messageId":"c"}]}"#,
            r#"{"Records":[{"messageId":"a","x":1},{"messageId":"b","x":01}]}"#,
            r#"{"Records":[{"messageId":"a"},{"messageId":"b"]}"#,
        ] {
            assert!(event(json, None).is_none(), "{json}");
        }
    }
}
