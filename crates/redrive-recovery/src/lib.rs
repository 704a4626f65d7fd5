//! Recovery: the DLQ reprocessor ([`reprocess::Reprocessor`]), which sends dead-lettered messages
//! home under a [`redrive_core::reprocess_policy::ReprocessPolicy`], and EventBridge redrive
//! ([`eventbridge::EventRedrive`]), which re-delivers a failed event to the one target that failed.
//! Both drive redrive-core's ports, so they run against any queue and invoker.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod eventbridge;
pub mod intake;
pub mod reprocess;
pub mod settings;
