//! weir-net: the Kafka protocol front end of a shard.
//!
//! - [`codec`]: frames and messages, bytes in and out, no I/O.
//! - [`handlers`]: one module per Kafka API, declaring its versions.
//! - [`connection`]: one client connection, pipelined and answered in order.
//! - [`transport`]: how its bytes move, over a plain socket or TLS.
//! - [`sasl`]: its sign-in; [`tls`]: the TLS configuration and handshake.
//! - [`throttle`]: client quotas held on a connection's requests.
//! - [`server`]: the per-shard listeners (Kafka and HTTP).

pub mod apis;
pub mod codec;
pub mod connection;
pub mod handlers;
pub mod http;
pub mod replica_fetcher;
pub mod sasl;
pub mod server;
pub mod throttle;
pub mod tls;
pub mod transport;
