//! weir-net: the Kafka protocol front end of a shard.
//!
//! - [`codec`]: frames and messages, bytes in and out, no I/O.
//! - [`handlers`]: one module per Kafka API, declaring its versions.
//! - [`connection`]: one client connection, pipelined and answered in order.
//! - [`server`]: the per-shard listeners (Kafka and HTTP).

pub mod codec;
pub mod connection;
pub mod handlers;
pub mod sasl;
pub mod server;
