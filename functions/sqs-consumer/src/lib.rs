//! The `orders` SQS consumer: a Lambda handler on the redrive record-fate engine.
pub mod orders;
pub mod payments;
