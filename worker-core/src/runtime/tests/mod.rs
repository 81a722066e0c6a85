//! Runtime tests: behaviour against the [`MemoryBroker`](crate::testing::MemoryBroker), the
//! dispatch loop against a mocked port, and the load, renewal and shutdown scenarios.

mod controls;
mod delays;
mod dlq_down;
mod fairness;
mod flow;
mod hostile_waits;
mod limits;
mod load;
mod mock;
mod policy;
mod renewal;
mod shutdown;
mod support;
mod telemetry;
