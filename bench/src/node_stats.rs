//! The node's own latency histograms (weir's `GET /stats/latency`), emptied
//! before a run and read after it, so the node's part of a latency can be
//! set beside what the client measured.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(clap::Args, Clone, Default)]
pub struct NodeStats {
    /// weir's HTTP address (HOST:PORT, as `weir serve --addr`): its latency
    /// histograms are reset before the run and reported after it (produce
    /// request time on the node, flush write and fdatasync times).
    #[arg(long, value_name = "HOST:PORT")]
    pub node_stats: Option<String>,
}

impl NodeStats {
    /// Empties the node's histograms (nothing to do without an address).
    pub fn reset(&self) -> Result<(), String> {
        match &self.node_stats {
            Some(addr) => http(addr, "POST", "/stats/reset").map(|_| ()),
            None => Ok(()),
        }
    }

    /// The node's histograms since `reset`, if an address was given.
    pub fn read(&self) -> Result<Option<serde_json::Value>, String> {
        match &self.node_stats {
            Some(addr) => http(addr, "GET", "/stats/latency").map(Some),
            None => Ok(None),
        }
    }
}

/// One HTTP/1.1 exchange with an empty request body; the response body
/// parsed as JSON. Any status but 200 is an error naming it.
fn http(addr: &str, method: &str, path: &str) -> Result<serde_json::Value, String> {
    let addr = addr.trim_start_matches("http://").trim_end_matches('/');
    let fail = |e: std::io::Error| format!("{method} http://{addr}{path}: {e}");
    let mut s = TcpStream::connect(addr).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(fail)?;
    let mut response = String::new();
    s.read_to_string(&mut response).map_err(fail)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} http://{addr}{path}: no HTTP response"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("{method} http://{addr}{path}: {status}: {body}"));
    }
    serde_json::from_str(body).map_err(|e| format!("{method} http://{addr}{path}: {e}"))
}
