//! End to end on the local stack: the real SDK clients against moto (and a Kafka-compatible broker).
//! One test binary per crate: one link, and its tests run side by side.
mod dynamodb;
mod kafka;
mod large;
mod redrive;
mod sqs;
mod streams;
