//! weir-bench: drives a Kafka broker (weir, the null broker, or any other)
//! with librdkafka and reports throughput and latency percentiles.

mod client;
mod consume;
mod disk;
mod e2e;
mod node_stats;
mod null_broker;
mod produce;
mod report;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "weir-bench",
    about = "Benchmark a Kafka broker with librdkafka"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Producer throughput and ack latency.
    Produce(produce::ProduceArgs),
    /// Catch-up read throughput of a full topic.
    Consume(consume::ConsumeArgs),
    /// End-to-end and long-poll wake latency at a fixed rate.
    E2e(e2e::E2eArgs),
    /// A Kafka responder that does no storage work: the limit.
    NullBroker(null_broker::NullBrokerArgs),
    /// The disk's write + fdatasync latency: the floor under acks=all.
    Disk(disk::DiskArgs),
}

fn main() {
    // librdkafka's own log lines (connection failures, protocol errors) go
    // through the `log` crate: warnings and errors on stderr unless
    // RUST_LOG says otherwise, stamped to the microsecond so a debug log
    // (`-X debug=eos,protocol`) shows where a request's time went.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_micros()
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Produce(a) => produce::run(a),
        Command::Consume(a) => consume::run(a),
        Command::E2e(a) => e2e::run(a),
        Command::NullBroker(a) => null_broker::run(a),
        Command::Disk(a) => disk::run(a),
    };
    if let Err(e) = r {
        eprintln!("weir-bench: {e}");
        std::process::exit(1);
    }
}
