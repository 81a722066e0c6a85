//! Procedural macros for `worker-core`. The `#[handler]` attribute arrives with the handler API.
