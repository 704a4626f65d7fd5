//! A fast reader for the one JSON shape Lambda's SQS events have. Strings are found with SIMD
//! `memchr`, borrowed from the event bytes when they hold no escape, and unknown fields are skipped
//! without building anything. It returns `None` on anything it does not understand; the caller then
//! parses with serde_json, which gives the precise error (or the same records).
use std::borrow::Cow;

use crate::event::{MessageAttribute, SqsEvent, SqsRecord, SystemAttributes, Text};

/// Deeper nesting than this in skipped values is refused (the serde path handles it).
const MAX_DEPTH: usize = 64;

pub(crate) fn event(json: &str) -> Option<SqsEvent<'_>> {
    let mut scan = Scan {
        text: json,
        bytes: json.as_bytes(),
        at: 0,
    };
    let mut records = None;
    scan.object(|scan, key| match key {
        "Records" => {
            if records.is_some() {
                return None; // a duplicate field: serde_json refuses it with its error
            }
            let list = records.insert(Vec::new());
            scan.array(|scan| {
                list.push(scan.record()?);
                Some(())
            })
        }
        _ => scan.skip(0),
    })?;
    scan.whitespace();
    // No `Records`: not an SQS event; serde_json then gives the precise error.
    (scan.at == scan.bytes.len()).then_some(SqsEvent { records: records? })
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

struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn record(&mut self) -> Option<SqsRecord<'a>> {
        let mut record = SqsRecord::default();
        let mut seen = Fields::default();
        self.object(|scan, key| {
            match key {
                "messageId" => record.message_id = seen.first(0).and(scan.optional_string())?,
                "receiptHandle" => {
                    record.receipt_handle = seen.first(1).and(scan.optional_string())?
                }
                "body" => record.body = seen.first(2).and(scan.optional_string())?,
                "eventSourceARN" => {
                    record.event_source_arn = seen.first(3).and(scan.optional_string())?
                }
                "attributes" => record.attributes = seen.first(4).and(scan.system_attributes())?,
                "messageAttributes" => seen.first(5).and(scan.object(|scan, name| {
                    let name = Text(Cow::Borrowed(name));
                    record
                        .message_attributes
                        .insert(name, scan.message_attribute()?);
                    Some(())
                }))?,
                _ => scan.skip(0)?,
            }
            Some(())
        })?;
        Some(record)
    }

    fn system_attributes(&mut self) -> Option<SystemAttributes<'a>> {
        let mut attributes = SystemAttributes::default();
        let mut seen = Fields::default();
        self.object(|scan, key| {
            match key {
                "ApproximateReceiveCount" => {
                    attributes.approximate_receive_count =
                        seen.first(0).and(scan.optional_string())?
                }
                "SentTimestamp" => {
                    attributes.sent_timestamp = seen.first(1).and(scan.optional_string())?
                }
                "MessageGroupId" => {
                    attributes.message_group_id = seen.first(2).and(scan.optional_string())?
                }
                "MessageDeduplicationId" => {
                    attributes.message_deduplication_id =
                        seen.first(3).and(scan.optional_string())?
                }
                "AWSTraceHeader" => {
                    attributes.aws_trace_header = seen.first(4).and(scan.optional_string())?
                }
                _ => scan.skip(0)?,
            }
            Some(())
        })?;
        Some(attributes)
    }

    fn message_attribute(&mut self) -> Option<MessageAttribute<'a>> {
        let mut attribute = MessageAttribute::default();
        let mut seen = Fields::default();
        self.object(|scan, key| {
            match key {
                "stringValue" => {
                    attribute.string_value = seen.first(0).and(scan.optional_string())?
                }
                "binaryValue" => {
                    attribute.binary_value = seen.first(1).and(scan.optional_string())?
                }
                "dataType" => {
                    attribute.data_type = seen
                        .first(2)
                        .and(scan.optional_string())?
                        .unwrap_or_default()
                }
                _ => scan.skip(0)?,
            }
            Some(())
        })?;
        Some(attribute)
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// `{ "key": value, ... }`, calling `field` with the scanner positioned at each value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
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

    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
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

    fn optional_string(&mut self) -> Option<Option<Text<'a>>> {
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        self.eat(b'"')?;
        let start = self.at;
        let found = memchr::memchr2(b'"', b'\\', self.bytes.get(self.at..)?)?;
        self.at += found;
        if self.bytes[self.at] == b'"' {
            self.at += 1;
            let raw = &self.text[start..start + found];
            // JSON forbids raw control characters inside strings.
            return (!raw.bytes().any(|b| b < 0x20)).then_some(Some(Text(Cow::Borrowed(raw))));
        }
        // Escapes are dense where they occur (a JSON body is full of `\"`): decode the rest in
        // one scalar pass instead of searching escape by escape.
        let before = &self.bytes[start..self.at];
        if before.iter().any(|b| *b < 0x20) {
            return None;
        }
        let mut out = Vec::with_capacity(found + 64);
        out.extend_from_slice(before);
        self.at = unescape_into(self.bytes, self.at, &mut out)?;
        Some(Some(Text(Cow::Owned(String::from_utf8(out).ok()?))))
    }

    /// The text between the quotes, as it stands, and whether it holds escapes.
    fn raw_string(&mut self) -> Option<(&'a str, bool)> {
        self.eat(b'"')?;
        let start = self.at;
        let mut escaped = false;
        loop {
            let found = memchr::memchr2(b'"', b'\\', self.bytes.get(self.at..)?)?;
            self.at += found;
            if self.bytes[self.at] == b'\\' {
                escaped = true;
                self.at += 2;
                continue;
            }
            let raw = &self.text[start..self.at];
            self.at += 1;
            // JSON forbids raw control characters inside strings.
            if raw.bytes().any(|b| b < 0x20) {
                return None;
            }
            return Some((raw, escaped));
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn skip(&mut self, depth: usize) -> Option<()> {
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

/// Decodes a JSON string from `at` (inside the quotes) to its closing quote into `out`, and
/// returns the position after the quote; `None` for an invalid escape or no closing quote.
fn unescape_into(bytes: &[u8], mut at: usize, out: &mut Vec<u8>) -> Option<usize> {
    let mut run = at;
    loop {
        match *bytes.get(at)? {
            b'"' => {
                out.extend_from_slice(&bytes[run..at]);
                return Some(at + 1);
            }
            b'\\' => {
                out.extend_from_slice(&bytes[run..at]);
                let escape = *bytes.get(at + 1)?;
                at += 2;
                match escape {
                    b'"' | b'\\' | b'/' => out.push(escape),
                    b'b' => out.push(0x08),
                    b'f' => out.push(0x0c),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let first = hex4(bytes, &mut at)?;
                        let decoded = match first {
                            0xD800..=0xDBFF => {
                                (bytes.get(at..at + 2)? == b"\\u").then_some(())?;
                                at += 2;
                                let second = hex4(bytes, &mut at)?;
                                (0xDC00..=0xDFFF).contains(&second).then_some(())?;
                                char::from_u32(
                                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00),
                                )?
                            }
                            _ => char::from_u32(first)?,
                        };
                        out.extend_from_slice(decoded.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    _ => return None,
                }
                run = at;
            }
            // JSON forbids raw control characters inside strings.
            0..=0x1f => return None,
            _ => at += 1,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn both(
        json: &str,
    ) -> (
        Option<SqsEvent<'_>>,
        Result<SqsEvent<'_>, serde_json::Error>,
    ) {
        (event(json), serde_json::from_str(json))
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
        ];
        for json in samples {
            let (fast, slow) = both(json);
            assert_eq!(
                fast.expect("the scanner reads it").records,
                slow.unwrap().records,
                "{json}"
            );
        }
        for file in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/events")).unwrap() {
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
        ] {
            assert!(event(json).is_none(), "{json}");
        }
    }
}
