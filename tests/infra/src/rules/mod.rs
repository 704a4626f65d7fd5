//! The contract rules, by concern: each returns what breaks it, empty when the configuration keeps it.
pub mod alarms;
pub mod consumers;
pub mod eventbridge;
pub mod iam;
pub mod modules;
pub mod names;
pub mod payloads;
