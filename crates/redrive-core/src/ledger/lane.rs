//! The retry lane: an SQS FIFO queue the same function reads (`REDRIVE_LANE_URL`), where records
//! wait out of their source in order, so that the source goes on. Kafka sends a record that fails
//! transiently there ([`crate::kafka`]); an SQS FIFO source with `REDRIVE_FIFO_ON_DEAD_LETTER=hold`
//! sends a head that would hold its group there, and the group's later records follow it
//! ([`crate::fifo`]): a held group's backlog then grows in the lane, not in the source, whose
//! receives look at the first 120,000 messages only (SQS developer guide, "Avoid large message
//! backlogs with the same message group ID").
//!
//! The attempt ledger keeps, per key (a Kafka key in its partition, a FIFO group in its queue),
//! the position of the last record that left for the lane and of the last that took effect there
//! ([`KeyPositions`]): while one is out, the key's later records follow it untried.

use redrive_event::{MessageAttribute, SqsRecord, Text};

/// A record's place in its source's order: a Kafka offset, or an SQS FIFO `SequenceNumber`
/// (128 bits, SQS API reference, SendMessage), which a 64-bit number cannot hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position(pub u128);

impl Position {
    /// The position of a Kafka offset (Kafka offsets are not negative).
    pub fn offset(offset: i64) -> Self {
        Self(u128::try_from(offset).unwrap_or_default())
    }

    /// 39 digits, zero-padded: text that sorts as the number does, as DynamoDB compares strings
    /// (its numbers hold 38 digits, one short of 128 bits).
    pub fn to_sortable(self) -> String {
        format!("{:039}", self.0)
    }

    /// The position written as [`Position::to_sortable`] (or any decimal).
    pub fn parse(text: &str) -> Option<Self> {
        text.parse().ok().map(Self)
    }
}

/// Where a key's records wait out of their source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPlace {
    /// In the retry lane.
    Lane,
    /// FIFO: in the retry lane, the last one out the head its group is held on (should it come
    /// back to its source, its copy's send or its delete lost, it is sent to the lane again as the head).
    Held,
    /// Kafka: in the DLQ, until a redrive sends them to the lane.
    Dlq,
}

impl KeyPlace {
    /// The name stored in the ledger.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Lane => "lane",
            Self::Held => "held",
            Self::Dlq => "dlq",
        }
    }

    /// The place named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Lane, Self::Held, Self::Dlq]
            .into_iter()
            .find(|place| place.as_str() == name)
    }
}

/// What the attempt ledger remembers of a key's records that left their source: the last
/// position sent out (and where), and the last that took effect from the lane. While `left` is
/// past `done`, the key's later records follow there; a record lost on the way (never sent,
/// given back) is passed by the next one done, so a key is never waiting for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPositions {
    /// The last position sent to the lane or the DLQ.
    pub left: Position,
    /// Where it went.
    pub place: KeyPlace,
    /// The last position that took effect from the lane, if any.
    pub done: Option<Position>,
}

impl KeyPositions {
    /// Where the key's later records go, while some of its records are out.
    pub fn waiting(&self) -> Option<KeyPlace> {
        (self.done < Some(self.left)).then_some(self.place)
    }
}

/// The message attribute on a FIFO record's copy in the lane: what it is there for, its position
/// in its source and its group's ledger key ([`LaneMark`]).
pub const LANE_ATTRIBUTE: &str = "redrive-lane";

/// The ledger key of a FIFO message group: `fifo#<queue arn>#<group>`.
pub fn group_key(queue_arn: &str, group: &str) -> String {
    format!("fifo#{queue_arn}#{group}")
}

/// What a FIFO record's copy in the lane carries ([`LANE_ATTRIBUTE`], `<held|follows> <position>
/// <group key>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneMark {
    /// The head its group was held on: it holds the group in the lane until an operator
    /// releases it (`dlq release`), untried.
    pub held: bool,
    /// Its `SequenceNumber` in its source.
    pub position: Position,
    /// Its group's ledger key ([`group_key`]).
    pub key: String,
}

impl LaneMark {
    /// The mark `record` carries, if any.
    pub fn of(record: &SqsRecord<'_>) -> Option<Self> {
        let text = record
            .message_attributes
            .get(LANE_ATTRIBUTE)?
            .string_value
            .as_deref()?;
        let mut parts = text.splitn(3, ' ');
        let held = match parts.next()? {
            "held" => true,
            "follows" => false,
            _ => return None,
        };
        Some(Self {
            held,
            position: Position::parse(parts.next()?)?,
            key: parts.next()?.to_owned(),
        })
    }

    /// The attribute that carries it.
    pub fn attribute(&self) -> (Text<'static>, MessageAttribute<'static>) {
        let what = if self.held { "held" } else { "follows" };
        let value = format!("{what} {} {}", self.position.to_sortable(), self.key);
        (
            Text::from(LANE_ATTRIBUTE),
            MessageAttribute {
                string_value: Some(Text::from(value)),
                binary_value: None,
                data_type: Text::from("String"),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_sort_as_text_as_they_do_as_numbers() {
        let small = Position(9).to_sortable();
        let large = Position(18_849_496_460_467_696_128).to_sortable();
        let max = Position(u128::MAX).to_sortable();
        assert_eq!(max.len(), 39);
        assert!(small < large && large < max);
        assert_eq!(
            Position::parse(&large),
            Some(Position(18_849_496_460_467_696_128))
        );
        assert_eq!(Position::offset(-1), Position(0));
    }

    #[test]
    fn a_mark_reads_back_as_written_and_a_stranger_is_none() {
        let mark = LaneMark {
            held: true,
            position: Position(42),
            key: group_key("arn:aws:sqs:eu-west-1:1:payments.fifo", "customer 7"),
        };
        let mut record = SqsRecord::default();
        let (name, value) = mark.attribute();
        record.message_attributes.insert(name, value.clone());
        assert_eq!(LaneMark::of(&record), Some(mark));
        let mut stranger = SqsRecord::default();
        let mut odd = value;
        odd.string_value = Some(Text::from("parked 42 k"));
        stranger
            .message_attributes
            .insert(Text::from(LANE_ATTRIBUTE), odd);
        assert_eq!(LaneMark::of(&stranger), None);
    }
}
