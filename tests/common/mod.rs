//! Shared by the Rust integration tests: a real node as a child process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `weir serve`, killed when dropped.
pub struct Node {
    child: Child,
    kafka_port: u16,
    http_port: u16,
}

impl Node {
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    /// The node's `--addr`.
    #[allow(dead_code)] // not every test binary uses it
    pub fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// POSTs `sql` to the node's `/sql` with a bearer token; returns the
    /// status line and the body.
    #[allow(dead_code)] // not every test binary uses it
    pub fn sql(&self, sql: &str, token: &str) -> (String, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.http_port)).unwrap();
        let head = format!(
            "POST /sql HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            sql.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(sql.as_bytes()).unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a two-shard node in a fresh directory named `name` and waits for
/// its "weir serving" line. `extra`: more `weir serve` arguments.
pub fn start_node(name: &str, extra: &[&str]) -> Node {
    start_node_with_env(name, extra, &[])
}

/// `start_node` with variables added to the node's environment.
pub fn start_node_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Node {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (kafka, http) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", dir.to_str().unwrap(), "--cores", "2"])
        .args([
            "--kafka",
            &format!("127.0.0.1:{kafka}"),
            "--addr",
            &format!("127.0.0.1:{http}"),
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("weir serving") => break,
            Some(Ok(_)) => continue,
            _ => panic!("weir did not start"),
        }
    }
    // Keep draining so the node never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Node {
        child,
        kafka_port: kafka,
        http_port: http,
    }
}

/// PEM files made with the `openssl` command in `dir`: an authority
/// (`ca.pem`), a node certificate it signs for 127.0.0.1 (`node.pem`,
/// `node.key`) and a client certificate with subject CN `name`
/// (`client.pem`, `client.key`).
#[allow(dead_code)] // not every test binary uses it
pub fn make_certs(dir: &std::path::Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=weir test CA",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
    ]);
    let uses = [
        (
            "node",
            "/CN=localhost".to_string(),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "client",
            format!("/CN={name}"),
            "extendedKeyUsage=clientAuth\n",
        ),
    ];
    for (file, subject, ext) in uses {
        std::fs::write(
            p(&format!("{file}.ext")),
            format!("basicConstraints=CA:FALSE\n{ext}"),
        )
        .unwrap();
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &subject,
            "-keyout",
            &p(&format!("{file}.key")),
            "-out",
            &p(&format!("{file}.csr")),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &p(&format!("{file}.csr")),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &p(&format!("{file}.pem")),
            "-extfile",
            &p(&format!("{file}.ext")),
        ]);
    }
}
