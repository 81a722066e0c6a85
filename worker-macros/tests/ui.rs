//! Compile-time behaviour of `#[handler]`: what compiles, and the error each mistake gets.
//!
//! Regenerate the expected messages with `TRYBUILD=overwrite cargo test -p worker-macros --test ui`
//! and review every changed `.stderr`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
