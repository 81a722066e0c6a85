//! Support for the integration tests: broker address, unique names, producing records.
