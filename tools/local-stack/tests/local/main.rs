//! The local stack: its pollers, the short soaks, and cargo-lambda `watch`/`invoke`.
//! One test binary per crate: one link, and its tests run side by side.
mod kafka_poller;
mod soak;
mod watch_invoke;
