//! A fast reader for the one JSON shape Lambda's Kafka events have: strings borrowed from the event
//! (found with `memchr`), numbers read in place, records pushed as they are met, unknown fields
//! skipped without building anything. It returns `None` on anything it does not take — an escape
//! in a string, a float where an integer goes, a field twice — and the caller then parses with
//! serde_json, which gives the same event or the precise error.
use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine as _;
use redrive_event::Text;

use super::{HeaderValue, KafkaEvent, KafkaHeader, KafkaRecord, BASE64};

/// Deeper nesting than this in skipped values is refused (the serde path handles it).
const MAX_DEPTH: usize = 64;

/// The event, if the scanner takes it.
pub(super) fn event(json: &[u8]) -> Option<KafkaEvent<'_>> {
    // Valid UTF-8 once for the whole event; a string is then a slice between ASCII quotes.
    let text = std::str::from_utf8(json).ok()?;
    let mut scan = Scan { text, at: 0 };
    let mut event = KafkaEvent::default();
    let mut seen = Seen::default();
    scan.object(|scan, key| match key {
        "eventSource" => {
            seen.first(0)?;
            event.event_source = scan.optional_string()?;
            Some(())
        }
        "eventSourceArn" => {
            seen.first(1)?;
            event.event_source_arn = scan.optional_string()?;
            Some(())
        }
        "records" => {
            seen.first(2)?;
            scan.partitions(&mut event.records)
        }
        _ => scan.skip(0),
    })?;
    scan.whitespace();
    (scan.at == text.len()).then_some(event)
}

/// The fields of one object met so far: serde refuses a field twice.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, field: u32) -> Option<()> {
        let bit = 1 << field;
        (self.0 & bit == 0).then(|| self.0 |= bit)
    }
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.text[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// An object, each field handed to `field` with its name (the value after the colon).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.whitespace();
            let key = self.string()?;
            self.eat(b':')?;
            self.whitespace();
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

    /// An array, each element handed to `element`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.whitespace();
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

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        let bytes = self.bytes();
        if bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let end = start + memchr::memchr2(b'"', b'\\', &bytes[start..])?;
        // An escape is left to serde; so is a raw control character, which JSON refuses.
        let controls = bytes[start..end]
            .iter()
            .fold(false, |found, &byte| found | (byte < 0x20));
        if bytes[end] != b'"' || controls {
            return None;
        }
        self.at = end + 1;
        Some(&self.text[start..end])
    }

    fn optional_string(&mut self) -> Option<Option<Text<'a>>> {
        if self.literal("null").is_some() {
            return Some(None);
        }
        Some(Some(Text(Cow::Borrowed(self.string()?))))
    }

    /// An integer as `i64` takes it: no fraction, no exponent, no overflow.
    fn integer(&mut self) -> Option<i64> {
        let bytes = self.bytes();
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

    fn optional_integer(&mut self) -> Option<Option<i64>> {
        if self.literal("null").is_some() {
            return Some(None);
        }
        Some(Some(self.integer()?))
    }

    /// `"<topic>-<partition>": [records]`, each partition's records in order. A partition named
    /// twice keeps its last list, as serde's map does.
    fn partitions(&mut self, records: &mut BTreeMap<Text<'a>, Vec<KafkaRecord<'a>>>) -> Option<()> {
        self.object(|scan, partition| {
            let mut list = Vec::new();
            scan.array(|scan| {
                let mut record = KafkaRecord::default();
                scan.record(&mut record)?;
                list.push(record);
                Some(())
            })?;
            records.insert(Text(Cow::Borrowed(partition)), list);
            Some(())
        })
    }

    fn record(&mut self, record: &mut KafkaRecord<'a>) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|scan, key| {
            match key {
                "topic" => {
                    seen.first(0)?;
                    record.topic = Text(Cow::Borrowed(scan.string()?));
                }
                "partition" => {
                    seen.first(1)?;
                    record.partition = scan.integer()?;
                }
                "offset" => {
                    seen.first(2)?;
                    record.offset = scan.integer()?;
                }
                "timestamp" => {
                    seen.first(3)?;
                    record.timestamp = scan.optional_integer()?;
                }
                "timestampType" => {
                    seen.first(4)?;
                    record.timestamp_type = scan.optional_string()?;
                }
                "key" => {
                    seen.first(5)?;
                    record.key = scan.optional_string()?;
                }
                "value" => {
                    seen.first(6)?;
                    record.value = scan.optional_string()?;
                }
                "headers" => {
                    seen.first(7)?;
                    scan.headers(&mut record.headers)?;
                }
                _ => scan.skip(0)?,
            }
            Some(())
        })
    }

    /// The headers' objects, each entry a header, in order.
    fn headers(&mut self, headers: &mut Vec<KafkaHeader<'a>>) -> Option<()> {
        self.array(|scan| {
            scan.object(|scan, name| {
                let value = match scan.peek()? {
                    b'[' => scan.header_bytes()?,
                    _ => HeaderValue(BASE64.decode(scan.string()?).ok()?),
                };
                headers.push(KafkaHeader {
                    name: Text(Cow::Borrowed(name)),
                    value,
                });
                Some(())
            })
        })
    }

    /// A header's bytes as Lambda writes them: numbers, a signed byte read as its unsigned value.
    fn header_bytes(&mut self) -> Option<HeaderValue> {
        let mut bytes = Vec::new();
        self.array(|scan| {
            let byte = match scan.integer()? {
                n @ 0..=255 => n as u8,
                n @ -128..=-1 => (n + 256) as u8,
                _ => return None,
            };
            bytes.push(byte);
            Some(())
        })?;
        Some(HeaderValue(bytes))
    }

    /// Any value, read over.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|scan, _| scan.skip(depth + 1)),
            b'[' => self.array(|scan| scan.skip(depth + 1)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => self.number(),
        }
    }

    /// A number as JSON writes it, read over.
    fn number(&mut self) -> Option<()> {
        let bytes = self.bytes();
        let start = self.at;
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|byte| matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .count();
        // Anything odd in it (a sign in the middle, two points) is serde's to judge.
        serde_json::from_str::<serde::de::IgnoredAny>(&self.text[start..end]).ok()?;
        self.at = end;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scanner's event, and serde's, as their debug forms (`None` where it leaves it).
    fn both(json: &str) -> (Option<String>, Result<String, String>) {
        let scanned = event(json.as_bytes()).map(|event| format!("{event:?}"));
        let parsed = serde_json::from_slice::<KafkaEvent<'_>>(json.as_bytes())
            .map(|event| format!("{event:?}"))
            .map_err(|e| e.to_string());
        (scanned, parsed)
    }

    /// Whatever the scanner takes, serde reads the same; whatever serde refuses, the scanner
    /// leaves to it.
    fn agrees(json: &str) -> bool {
        match both(json) {
            (Some(scanned), Ok(parsed)) => {
                assert_eq!(scanned, parsed, "{json}");
                true
            }
            (Some(scanned), Err(error)) => {
                panic!("serde refuses ({error}), scanned {scanned}: {json}")
            }
            (None, _) => false,
        }
    }

    const SAMPLE: &str = include_str!("../../../../events/kafka-orders.json");

    #[test]
    fn reads_the_sample_event_as_serde_does() {
        assert!(agrees(SAMPLE), "the sample event is the scanner's");
        let event = event(SAMPLE.as_bytes()).unwrap();
        assert!(event.records.values().flatten().count() > 0);
    }

    #[test]
    fn reads_every_form_lambda_writes_as_serde_does() {
        let taken = [
            r#"{"eventSource":"SelfManagedKafka","records":{}}"#,
            r#"{"eventSource":null,"eventSourceArn":null,"bootstrapServers":"b:9092","records":{"t-0":[]}}"#,
            r#" { "records" : { "t-0" : [ { "topic" : "t" , "partition" : 0 , "offset" : 7 } ] } } "#,
            r#"{"records":{"t-1":[{"topic":"t","partition":1,"offset":-2,"timestamp":null,"timestampType":null,"key":null,"value":null,"headers":[]}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":9223372036854775807,"headers":[{"a":[104,-1,0,255]},{"b":"aGk=","c":[]}]}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","extra":{"x":[1,2.5e3,true,false,null,"s"]},"offset":1}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":1}],"t-0":[{"topic":"t","offset":2}]}}"#,
            r#"{"records":{"t-0":[{"topic":"ünïcödé","offset":1}]}}"#,
        ];
        for json in taken {
            assert!(agrees(json), "taken by the scanner: {json}");
        }
        let left = [
            r#"{"records":{"t-0":[{"topic":"a\"b","offset":1}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":1.0}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":1e3}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":01}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":9223372036854775808}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","offset":1,"offset":2}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","headers":[{"a":[256]}]}]}}"#,
            r#"{"records":{"t-0":[{"topic":"t","headers":[{"a":"not base64!"}]}]}}"#,
            r#"{"records":null}"#,
            r#"{"records":{"t-0":[{"topic":null}]}}"#,
            "{\"records\":{\"t-0\":[{\"topic\":\"a\tb\"}]}}",
            r#"{"records":{}} x"#,
            r#"[]"#,
        ];
        for json in left {
            assert!(!agrees(json), "left to serde: {json}");
        }
    }

    /// Bytes dropped, doubled or changed at random in the sample: the scanner takes what serde
    /// reads the same, or leaves it.
    #[test]
    fn a_damaged_event_is_read_as_serde_reads_it_or_left_to_serde() {
        let mut rng = fastrand::Rng::with_seed(54);
        let noise = [
            b' ', b'"', b'\\', b',', b'{', b']', b'0', b'-', b'.', b'e', b'n', 0x01,
        ];
        let mut taken = 0;
        for _ in 0..3_000 {
            let mut bytes = SAMPLE.as_bytes().to_vec();
            for _ in 0..rng.usize(1..4) {
                let at = rng.usize(..bytes.len());
                match rng.u8(..3) {
                    0 => drop(bytes.remove(at)),
                    1 => bytes.insert(at, bytes[at]),
                    _ => bytes[at] = noise[rng.usize(..noise.len())],
                }
            }
            if let Ok(json) = std::str::from_utf8(&bytes) {
                taken += usize::from(agrees(json));
            }
        }
        assert!(
            taken > 300,
            "the scanner takes a damaged event that is still valid: {taken}"
        );
    }
}
