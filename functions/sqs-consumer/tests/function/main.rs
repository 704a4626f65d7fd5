//! The function on the sample events in `events/`, and on Lambda Managed Instances.
//! One test binary per crate: one link, and its tests run side by side.
mod events;
mod managed_instances;
