//! Reads a JSON body as the event has it: inside a JSON string, each of its quotes written `\"`.
//! Only for bodies with no other backslash (see [`Body`]): their strings hold no escape, so each
//! is borrowed from the event as serde_json would borrow it from the decoded body.
//!
//! It takes only what it reads exactly as `serde_json::from_str` reads the decoded body — the same
//! visitor calls, numbers parsed by serde_json itself — and refuses the rest (enums with data,
//! bytes, deep nesting, anything invalid); the caller then decodes the body and lets serde_json
//! read it, which gives the same value or the precise error.
//!
//! [`Body`]: crate::Body
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::de::StrRead;

use crate::scan::exact_match;

/// Below serde_json's own recursion limit (128), so that nothing it refuses is read here.
const MAX_DEPTH: usize = 100;

/// Not read here; the caller hands the decoded body to serde_json.
#[derive(Debug, thiserror::Error)]
#[error("left to serde_json")]
pub struct Refused;

impl de::Error for Refused {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Refused
    }
}

/// `T` from `escaped`, the JSON with each quote written `\"` and no other backslash.
pub fn from_str<'de, T: Deserialize<'de>>(escaped: &'de str) -> Result<T, Refused> {
    let mut reader = Reader {
        text: escaped,
        at: 0,
        depth: 0,
    };
    let value = T::deserialize(&mut reader)?;
    reader.whitespace();
    if reader.at == escaped.len() {
        Ok(value)
    } else {
        Err(Refused)
    }
}

struct Reader<'de> {
    text: &'de str,
    at: usize,
    depth: usize,
}

impl<'de> Reader<'de> {
    fn bytes(&self) -> &'de [u8] {
        self.text.as_bytes()
    }

    /// JSON whitespace; the body has no backslash but its quotes', so no `\n`, `\r` or `\t`.
    fn whitespace(&mut self) {
        while self.bytes().get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Result<(), Refused> {
        if self.peek() != Some(byte) {
            return Err(Refused);
        }
        self.at += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), Refused> {
        if !self.text[self.at..].starts_with(word) {
            return Err(Refused);
        }
        self.at += word.len();
        Ok(())
    }

    /// A string at the position (after whitespace): from `\"` to the next backslash, which must
    /// start the closing `\"` (the body has no other backslash).
    fn string(&mut self) -> Result<&'de str, Refused> {
        self.whitespace();
        let bytes = self.bytes();
        if bytes.get(self.at..self.at + 2) != Some(b"\\\"") {
            return Err(Refused);
        }
        let start = self.at + 2;
        let end = next_backslash(bytes, start).ok_or(Refused)?;
        if bytes.get(end + 1) != Some(&b'"') {
            return Err(Refused);
        }
        self.at = end + 2;
        Ok(&self.text[start..end])
    }

    /// A number at the position, read from its text by serde_json's `read` (a number has no
    /// quote): serde_json chooses the visitor call from the literal and the type, as it does for
    /// the decoded body.
    fn number<T>(
        &mut self,
        read: impl FnOnce(&mut serde_json::Deserializer<StrRead<'de>>) -> serde_json::Result<T>,
    ) -> Result<T, Refused> {
        self.whitespace();
        let start = self.at;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.bytes().get(self.at) {
            self.at += 1;
        }
        if self.at == start {
            return Err(Refused);
        }
        let mut json = serde_json::Deserializer::from_str(&self.text[start..self.at]);
        let value = read(&mut json).map_err(|_| Refused)?;
        json.end().map_err(|_| Refused)?;
        Ok(value)
    }

    /// A value inside an object or array, one level deeper.
    fn nested<T>(
        &mut self,
        close: u8,
        read: impl FnOnce(&mut Self) -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.at += 1; // the opening bracket, peeked
        let value = read(self)?;
        self.eat(close)?;
        self.depth -= 1;
        Ok(value)
    }

    fn map<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Refused> {
        self.nested(b'}', |reader| {
            visitor.visit_map(Entries {
                reader,
                first: true,
            })
        })
    }

    fn seq<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, Refused> {
        self.nested(b']', |reader| {
            visitor.visit_seq(Entries {
                reader,
                first: true,
            })
        })
    }
}

/// The position of the first backslash at or after `from`, eight bytes at a time.
fn next_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let found = exact_match(u64::from_le_bytes(*word), b'\\');
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..)?;
    Some(at + tail.iter().position(|&byte| byte == b'\\')?)
}

/// `deserialize_<type>` methods that leave the value to serde_json.
macro_rules! refuse {
    ($($method:ident($($arg:ident: $type:ty),*))*) => {$(
        fn $method<V: Visitor<'de>>(self, $(_: $type,)* _: V) -> Result<V::Value, Refused> {
            Err(Refused)
        }
    )*};
}

/// serde_json's `deserialize_<type>` for a number (see `Reader::number`).
macro_rules! numbers {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
            self.number(|json| json.$method(visitor))
        }
    )*};
}

impl<'de> Deserializer<'de> for &mut Reader<'de> {
    type Error = Refused;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek().ok_or(Refused)? {
            b'{' => self.map(visitor),
            b'[' => self.seq(visitor),
            b'\\' => visitor.visit_borrowed_str(self.string()?),
            b't' => self.literal("true").and_then(|()| visitor.visit_bool(true)),
            b'f' => self
                .literal("false")
                .and_then(|()| visitor.visit_bool(false)),
            b'n' => self.literal("null").and_then(|()| visitor.visit_unit()),
            b'-' | b'0'..=b'9' => self.number(|json| json.deserialize_any(visitor)),
            _ => Err(Refused),
        }
    }

    numbers! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b't' | b'f') => self.deserialize_any(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        visitor.visit_borrowed_str(self.string()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b'n') => self.literal("null").and_then(|()| visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b'n') => self.literal("null").and_then(|()| visitor.visit_unit()),
            _ => Err(Refused),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        // serde_json gives names of its own (`RawValue`'s) a meaning of their own.
        if name.starts_with('$') {
            Err(Refused)
        } else {
            visitor.visit_newtype_struct(self)
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b'[') => self.seq(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b'{') => self.map(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        match self.peek() {
            Some(b'{') => self.map(visitor),
            Some(b'[') => self.seq(visitor),
            _ => Err(Refused),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        // A unit variant, as a string; a variant with data (an object) is left to serde_json.
        visitor.visit_enum(BorrowedStrDeserializer::<Refused>::new(self.string()?))
    }

    refuse! { deserialize_bytes() deserialize_byte_buf() }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        // Checked as read, then ignored: serde_json hands such a visitor a unit.
        self.deserialize_any(de::IgnoredAny)?;
        visitor.visit_unit()
    }
}

/// The entries of an object or the elements of an array.
struct Entries<'r, 'de> {
    reader: &'r mut Reader<'de>,
    first: bool,
}

impl Entries<'_, '_> {
    /// Whether another entry follows, past the `,` before it; `close` ends the list. (A `,` with
    /// nothing after it is refused by the reading of the entry.)
    fn next(&mut self, close: u8) -> Result<bool, Refused> {
        let byte = self.reader.peek().ok_or(Refused)?;
        let first = std::mem::replace(&mut self.first, false);
        match (byte, first) {
            (byte, _) if byte == close => Ok(false),
            (b',', false) => {
                self.reader.at += 1;
                Ok(true)
            }
            (_, true) => Ok(true),
            (_, false) => Err(Refused),
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'_, 'de> {
    type Error = Refused;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Refused> {
        if !self.next(b'}')? {
            return Ok(None);
        }
        let key = self.reader.string()?;
        self.reader.eat(b':')?;
        seed.deserialize(Key(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refused> {
        seed.deserialize(&mut *self.reader)
    }
}

impl<'de> SeqAccess<'de> for Entries<'_, 'de> {
    type Error = Refused;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Refused> {
        if self.next(b']')? {
            seed.deserialize(&mut *self.reader).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// An object's key: a string, as serde_json gives it to a string-like key; a key read as another
/// type (a number, a bool, an enum, ...) is left to serde_json.
struct Key<'de>(&'de str);

impl<'de> Deserializer<'de> for Key<'de> {
    type Error = Refused;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        visitor.visit_borrowed_str(self.0)
    }

    serde::forward_to_deserialize_any! { str string identifier ignored_any }

    refuse! {
        deserialize_bool() deserialize_char() deserialize_bytes() deserialize_byte_buf()
        deserialize_i8() deserialize_i16() deserialize_i32() deserialize_i64() deserialize_i128()
        deserialize_u8() deserialize_u16() deserialize_u32() deserialize_u64() deserialize_u128()
        deserialize_f32() deserialize_f64() deserialize_option() deserialize_unit()
        deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str)
        deserialize_seq() deserialize_tuple(len: usize)
        deserialize_tuple_struct(name: &'static str, len: usize)
        deserialize_map()
        deserialize_struct(name: &'static str, fields: &'static [&'static str])
        deserialize_enum(name: &'static str, variants: &'static [&'static str])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)] // compared through Debug
    #[serde(rename_all = "camelCase")]
    struct Order<'a> {
        order_id: Option<&'a str>,
        amount: Option<f64>,
        count: Option<u8>,
        status: Option<Status>,
        tags: Option<Vec<String>>,
        nested: Option<Box<Order<'a>>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    #[allow(dead_code)] // compared through Debug
    enum Status {
        Ok,
        Fail,
        Data(u8),
    }

    #[derive(Debug, Deserialize)]
    struct Newtype(#[allow(dead_code)] i64);

    /// Random JSON text (sometimes invalid), with the literals and spacing serde_json accepts and
    /// some it does not, and no backslash (what the scanner hands over has none but its quotes').
    fn random_json(rng: &mut fastrand::Rng, depth: usize, out: &mut String) {
        const STRINGS: [&str; 12] = [
            "", "a", "é😀", "x y", "ok", "fail", "data", "orderId", "amount", "count", "status",
            "tags",
        ];
        const NUMBERS: [&str; 14] = [
            "0",
            "-0",
            "7",
            "255",
            "256",
            "-1",
            "1.5",
            "1e3",
            "2E-2",
            "12345678901234567890",
            "01",
            "1.",
            "-",
            "3.0e",
        ];
        let space = |rng: &mut fastrand::Rng, out: &mut String| {
            if rng.u8(..8) == 0 {
                out.push(' ');
            }
        };
        space(rng, out);
        match rng.u8(..if depth > 3 { 5 } else { 8 }) {
            0 => out.push_str(["true", "false", "null", "nul"][rng.usize(..4)]),
            1 | 2 => out.push_str(NUMBERS[rng.usize(..NUMBERS.len())]),
            3 | 4 => {
                out.push('"');
                out.push_str(STRINGS[rng.usize(..STRINGS.len())]);
                out.push('"');
            }
            5 | 6 => {
                out.push('{');
                for entry in 0..rng.usize(..4) {
                    if entry > 0 {
                        out.push(',');
                    }
                    space(rng, out);
                    out.push('"');
                    out.push_str(STRINGS[rng.usize(..STRINGS.len())]);
                    out.push('"');
                    space(rng, out);
                    out.push(':');
                    random_json(rng, depth + 1, out);
                }
                space(rng, out);
                out.push('}');
            }
            _ => {
                out.push('[');
                for element in 0..rng.usize(..4) {
                    if element > 0 {
                        out.push(',');
                    }
                    random_json(rng, depth + 1, out);
                }
                out.push(']');
            }
        }
        space(rng, out);
    }

    /// Whenever the escaped reading gives a value, serde_json gives the same from the decoded text.
    fn agrees<'de, T: Deserialize<'de> + std::fmt::Debug>(
        escaped: &'de str,
        decoded: &'de str,
    ) -> bool {
        match from_str::<T>(escaped) {
            Ok(value) => {
                let expected = serde_json::from_str::<T>(decoded).unwrap_or_else(|error| {
                    panic!("{decoded}: read {value:?}, serde_json: {error}")
                });
                assert_eq!(format!("{value:?}"), format!("{expected:?}"), "{decoded}");
                true
            }
            Err(Refused) => false,
        }
    }

    #[test]
    fn reads_only_what_serde_json_reads_the_same_from_the_decoded_body() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut read = [0usize; 2];
        for _ in 0..20_000 {
            let mut decoded = String::new();
            random_json(&mut rng, 0, &mut decoded);
            if rng.u8(..4) == 0 && !decoded.is_empty() {
                // A random edit: most make it invalid.
                let at = rng.usize(..decoded.len());
                if decoded.is_char_boundary(at) {
                    let junk = ["", ",", "]", "}", ":", "\"", "1", " ", "x"][rng.usize(..9)];
                    decoded.insert_str(at, junk);
                }
            }
            let escaped = decoded.replace('"', "\\\"");
            let value = agrees::<serde_json::Value>(&escaped, &decoded);
            read[0] += usize::from(value);
            read[1] += usize::from(agrees::<Order<'_>>(&escaped, &decoded));
            agrees::<Vec<Option<i32>>>(&escaped, &decoded);
            agrees::<BTreeMap<String, serde_json::Value>>(&escaped, &decoded);
            agrees::<BTreeMap<&str, bool>>(&escaped, &decoded);
            agrees::<(u8, String)>(&escaped, &decoded);
            agrees::<Status>(&escaped, &decoded);
            agrees::<Newtype>(&escaped, &decoded);
            agrees::<Option<f32>>(&escaped, &decoded);
            agrees::<de::IgnoredAny>(&escaped, &decoded);
            assert!(
                from_str::<Box<serde_json::value::RawValue>>(&escaped).is_err(),
                "a RawValue is left to serde_json"
            );
        }
        // The readings that matter happen: the test would pass vacuously if nothing were read.
        assert!(read[0] > 5_000 && read[1] > 300, "read {read:?}");
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        for (escaped, why) in [
            (
                r#"{\"a\":\"x\\\"y\"}"#,
                "a string with an escape of its own",
            ),
            (r#"{\"data\":1}"#, "an enum variant with data"),
            (r#"\"abc\""#, "bytes"),
            ("[1,2] x", "trailing text"),
            ("", "nothing"),
        ] {
            let refused = match why {
                "an enum variant with data" => from_str::<Status>(escaped).is_err(),
                "bytes" => from_str::<&[u8]>(escaped).is_err(),
                _ => from_str::<serde_json::Value>(escaped).is_err(),
            };
            assert!(refused, "{why}: {escaped}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(
            from_str::<serde_json::Value>(&deep).is_err(),
            "deeper than serde_json reads"
        );
        let shallow = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(from_str::<serde_json::Value>(&shallow).is_ok());
    }
}
