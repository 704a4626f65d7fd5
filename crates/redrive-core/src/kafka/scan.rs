//! A fast reader for the one JSON shape Lambda's Kafka events have, on `redrive-event`'s JSON
//! reader: strings borrowed from the event, numbers read in place, records pushed as they are
//! met, unknown fields read over without building anything. It returns `None` on anything it does
//! not take — an escape in a string, a float where an integer goes, a field twice — and the caller
//! then parses with serde_json, which gives the same event or the precise error.
use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine as _;
use redrive_event::json::Reader;
use redrive_event::Text;

use super::{HeaderValue, KafkaEvent, KafkaHeader, KafkaRecord, BASE64};

/// The event, if the scanner takes it.
pub(super) fn event(json: &[u8]) -> Option<KafkaEvent<'_>> {
    // Valid UTF-8 once for the whole event; a string is then a slice between ASCII quotes.
    let mut reader = Reader::of(std::str::from_utf8(json).ok()?);
    let mut event = KafkaEvent::default();
    let mut seen = Seen::default();
    reader.object(|reader, key| match key {
        "eventSource" => {
            seen.first(0)?;
            event.event_source = optional_string(reader)?;
            Some(())
        }
        "eventSourceArn" => {
            seen.first(1)?;
            event.event_source_arn = optional_string(reader)?;
            Some(())
        }
        "records" => {
            seen.first(2)?;
            partitions(reader, &mut event.records)
        }
        _ => reader.skip(0),
    })?;
    reader.finished().then_some(event)
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

fn text<'a>(reader: &mut Reader<'a>) -> Option<Text<'a>> {
    Some(Text(Cow::Borrowed(reader.string()?)))
}

fn optional_string<'a>(reader: &mut Reader<'a>) -> Option<Option<Text<'a>>> {
    if reader.peek()? == b'n' {
        return reader.literal(b"null").map(|()| None);
    }
    text(reader).map(Some)
}

fn optional_integer(reader: &mut Reader<'_>) -> Option<Option<i64>> {
    if reader.peek()? == b'n' {
        return reader.literal(b"null").map(|()| None);
    }
    reader.integer().map(Some)
}

/// `"<topic>-<partition>": [records]`, each partition's records in order. A partition named
/// twice keeps its last list, as serde's map does.
fn partitions<'a>(
    reader: &mut Reader<'a>,
    records: &mut BTreeMap<Text<'a>, Vec<KafkaRecord<'a>>>,
) -> Option<()> {
    reader.object(|reader, partition| {
        let mut list = Vec::new();
        reader.array(|reader| {
            let mut record = KafkaRecord::default();
            self::record(reader, &mut record)?;
            list.push(record);
            Some(())
        })?;
        records.insert(Text(Cow::Borrowed(partition)), list);
        Some(())
    })
}

fn record<'a>(reader: &mut Reader<'a>, record: &mut KafkaRecord<'a>) -> Option<()> {
    let mut seen = Seen::default();
    reader.object(|reader, key| {
        match key {
            "topic" => {
                seen.first(0)?;
                record.topic = text(reader)?;
            }
            "partition" => {
                seen.first(1)?;
                record.partition = reader.integer()?;
            }
            "offset" => {
                seen.first(2)?;
                record.offset = reader.integer()?;
            }
            "timestamp" => {
                seen.first(3)?;
                record.timestamp = optional_integer(reader)?;
            }
            "timestampType" => {
                seen.first(4)?;
                record.timestamp_type = optional_string(reader)?;
            }
            "key" => {
                seen.first(5)?;
                record.key = optional_string(reader)?;
            }
            "value" => {
                seen.first(6)?;
                record.value = optional_string(reader)?;
            }
            "headers" => {
                seen.first(7)?;
                headers(reader, &mut record.headers)?;
            }
            _ => reader.skip(0)?,
        }
        Some(())
    })
}

/// The headers' objects, each entry a header, in order.
fn headers<'a>(reader: &mut Reader<'a>, headers: &mut Vec<KafkaHeader<'a>>) -> Option<()> {
    reader.array(|reader| {
        reader.object(|reader, name| {
            let value = match reader.peek()? {
                b'[' => header_bytes(reader)?,
                _ => HeaderValue(BASE64.decode(reader.string()?).ok()?),
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
fn header_bytes(reader: &mut Reader<'_>) -> Option<HeaderValue> {
    let mut bytes = Vec::new();
    reader.array(|reader| {
        let byte = match reader.integer()? {
            n @ 0..=255 => n as u8,
            n @ -128..=-1 => (n + 256) as u8,
            _ => return None,
        };
        bytes.push(byte);
        Some(())
    })?;
    Some(HeaderValue(bytes))
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
