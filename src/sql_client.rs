//! `weir sql`: sends statements to a node's `POST /sql` and prints the
//! rows as an aligned table (or the JSON as it came).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

use serde_json::Value;

/// Sends `sql` to the node at `addr` (signed in with `token` as a bearer
/// token, if given; over HTTPS trusting the authority in `ca`, if given);
/// returns the JSON body, or the error.
pub fn request(
    addr: &str,
    sql: &str,
    token: Option<&str>,
    ca: Option<&Path>,
) -> Result<String, String> {
    let tcp = TcpStream::connect(addr).map_err(|e| format!("cannot reach {addr}: {e}"))?;
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(300)));
    let mut s: Box<dyn ReadWrite> = match ca {
        None => Box::new(tcp),
        Some(ca) => Box::new(https(addr, tcp, ca)?),
    };
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /sql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        sql.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(sql.as_bytes()))
        .map_err(|e| format!("sending to {addr}: {e}"))?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let resp = String::from_utf8_lossy(&resp);
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr} answered something that is not HTTP"))?;
    let ok = head.starts_with("HTTP/1.1 200");
    if ok {
        return Ok(body.to_string());
    }
    let why = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
        .unwrap_or_else(|| body.to_string());
    Err(why)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A TLS session to `addr` that trusts the certificates in `ca` and checks
/// the node's certificate names the host of `addr`.
fn https(
    addr: &str,
    tcp: TcpStream,
    ca: &Path,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--ca {}: {e}", ca.display()))?;
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("--ca {}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{addr}: not a name to check a certificate against: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name)
        .map_err(|e| format!("TLS to {addr}: {e}"))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows (a JSON array of objects) as an aligned table: a header line, then
/// one line per row, columns two spaces apart. Nothing for no rows.
pub fn table(body: &str) -> Result<String, String> {
    let rows: Vec<serde_json::Map<String, Value>> =
        serde_json::from_str(body).map_err(|e| format!("the node answered bad JSON: {e}"))?;
    let Some(first) = rows.first() else {
        return Ok(String::new());
    };
    let names: Vec<&String> = first.keys().collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            names
                .iter()
                .map(|n| cell(r.get(*n).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([n.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |vals: Vec<&str>| {
        let last = vals.len() - 1;
        let mut s = String::new();
        for (i, v) in vals.iter().enumerate() {
            s.push_str(v);
            if i < last {
                s.push_str(&" ".repeat(widths[i] - v.chars().count() + 2));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(names.iter().map(|n| n.as_str()).collect());
    for r in &cells {
        out.push_str(&line(r.iter().map(|c| c.as_str()).collect()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_like_the_guide() {
        let body =
            r#"[{"user":"u0","amount":0,"_key":"u0"},{"user":"u1","amount":10,"_key":null}]"#;
        assert_eq!(
            table(body).unwrap(),
            "user  amount  _key\nu0    0       u0\nu1    10      NULL\n"
        );
        assert_eq!(table("[]").unwrap(), "");
    }
}
