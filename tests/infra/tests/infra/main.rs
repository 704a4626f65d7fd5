//! What `infra/` ships, checked from its rendering, its plans and the provider schema.
//! One test binary per crate: one link, and its tests run side by side.
mod alarms;
mod calls_against_roles;
mod consumers;
mod contract;
mod eventbridge;
mod iam;
mod names;
mod payloads;
mod provider_schema;
mod shipped;
mod terraform_eval;
