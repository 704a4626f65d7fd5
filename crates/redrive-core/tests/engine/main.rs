//! The engine through its public face: the batch processor's rules, streams, Kafka and large payloads.
//! One test binary per crate: one link, and its tests run side by side.
mod kafka;
mod payloads;
mod processor;
mod streams;
