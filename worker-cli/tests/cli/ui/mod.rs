//! The dashboard in a real headless Chromium (Debian's `chromium`, driven over the DevTools
//! protocol by chromiumoxide) against the real broker (`KAFKA_BOOTSTRAP`) and the built
//! binary. Screenshots of each page go to `target/ui-screenshots/`.

mod browser;

mod access;
mod dead_letters;
mod overview;
mod pauses;
