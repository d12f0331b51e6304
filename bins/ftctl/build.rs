// See crates/runtime/build_version.rs: FTCOORD_VERSION for --version.
include!("../../crates/runtime/build_version.rs");
