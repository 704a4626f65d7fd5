//! The package as built: its release profile, and the fuzz targets' regressions.
//! One test binary per crate: one link, and its tests run side by side.
mod build_profile;
mod fuzz_regressions;
