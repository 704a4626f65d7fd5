//! The release profile keeps `panic = "unwind"`: per-record panic isolation depends on it, and
//! `cargo lambda build` injects `panic = "abort"` when the profile does not say.
#[test]
fn the_release_profile_unwinds_explicitly() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a [profile.release] section");
    let section = release.split("\n[").next().unwrap();
    assert!(
        section
            .lines()
            .any(|line| line.split('#').next().unwrap().replace(' ', "") == "panic=\"unwind\""),
        "[profile.release] must set panic = \"unwind\":\n{section}"
    );
}
