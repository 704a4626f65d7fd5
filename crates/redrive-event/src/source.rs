//! Which source sent an event, read from its first bytes: every record Lambda delivers from SQS,
//! Kinesis or DynamoDB Streams names its source in `eventSource`, and a Kafka event names it once,
//! beside its records.

/// The source an event names, as Lambda spells it (`aws:sqs`, `aws:kinesis`, `aws:dynamodb`,
/// `aws:kafka`, `SelfManagedKafka`): the event's own `eventSource`, else its first record's.
///
/// Reads the event only as far as that name, not through the rest of its batch, and checks
/// nothing else: the parse of the source's event that follows judges the whole of it. `None`
/// when it finds no name (not an object, no records, a first record without one).
pub fn event_source(json: &[u8]) -> Option<&str> {
    Walk { bytes: json, at: 0 }.source_in_object(true)
}

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    /// The string value of `eventSource` in the object at hand; with `records`, in the first
    /// element of its `Records` too, whichever comes first. Every other value is stepped over.
    fn source_in_object(&mut self, records: bool) -> Option<&'a str> {
        self.eat(b'{')?;
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            match key {
                b"eventSource" if self.peek()? == b'"' => {
                    return std::str::from_utf8(self.string()?).ok();
                }
                b"Records" if records => {
                    self.eat(b'[')?;
                    return self.source_in_object(false);
                }
                _ => self.step_over()?,
            }
            self.eat(b',')?;
        }
    }

    /// Steps over one value, to the `,` or closing bracket after it: strings whole (a bracket in
    /// one is text), objects and arrays to their own closing bracket.
    fn step_over(&mut self) -> Option<()> {
        let mut depth = 0_usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.string()?;
                }
                b',' | b'}' | b']' if depth == 0 => return Some(()),
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth -= 1;
                    self.at += 1;
                }
                _ => self.at += 1,
            }
        }
    }

    /// The bytes between a string's quotes, as they stand.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(&self.bytes[start..self.at - 1]);
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }
}

#[cfg(test)]
mod tests {
    use super::event_source;

    fn sample(name: &str) -> Vec<u8> {
        let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    #[test]
    fn names_the_source_of_each_sample_event() {
        for (name, source) in [
            ("sqs-mixed-batch.json", "aws:sqs"),
            ("sqs-fifo-two-groups.json", "aws:sqs"),
            ("sqs-ten-attributes.json", "aws:sqs"),
            ("kinesis-orders.json", "aws:kinesis"),
            ("dynamodb-orders.json", "aws:dynamodb"),
            ("kafka-orders.json", "aws:kafka"),
        ] {
            assert_eq!(event_source(&sample(name)), Some(source), "{name}");
        }
    }

    #[test]
    fn steps_over_what_comes_before_the_name_whatever_it_holds() {
        let event =
            br#" { "other": {"eventSource": "in a nested object", "list": [1, "]", {"x": "}"}]},
            "Records": [ {"body": "{\"eventSource\": \"in a body\"}", "n": -1.5e3, "ok": true,
            "messageAttributes": {"eventSource": {"stringValue": "an attribute"}},
            "eventSource" : "aws:sqs"}, {"eventSource": "a later record"}]}"#;
        assert_eq!(event_source(event), Some("aws:sqs"));
        let kafka =
            br#"{"records": {"t-0": [{"key": "a2V5"}]}, "eventSource": "SelfManagedKafka"}"#;
        assert_eq!(event_source(kafka), Some("SelfManagedKafka"));
    }

    #[test]
    fn finds_nothing_where_no_source_is_named() {
        for event in [
            &b""[..],
            b"[]",
            b"{}",
            b"{\"Records\": []}",
            b"{\"Records\": [{\"body\": \"x\"}]}",
            b"{\"Records\": [{\"body\": \"unterminated",
            b"{\"eventSource\": 7}",
            b"null",
        ] {
            assert_eq!(
                event_source(event),
                None,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }
}
