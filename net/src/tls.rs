//! TLS on the Kafka and HTTP ports (`--tls-cert`, `--tls-key`,
//! `--tls-client-ca`): rustls, TLS 1.2 and 1.3, over glommio's sockets;
//! and the client side a cluster node's replica fetcher speaks to the
//! others' Kafka ports (`--tls-peer-ca`).
//!
//! With a client CA, a client may present a certificate; one that does not
//! chain to that CA fails the handshake, and one that does names the
//! connection's principal by its subject CN (`User:CN`), as Kafka's SSL
//! listener does with `ssl.client.auth=requested`. A client without one
//! signs in with SASL (SASL_SSL) as on a plain port.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::io::{AsyncRead, AsyncWrite};
use futures_rustls::server::TlsStream;
pub use futures_rustls::{TlsAcceptor, TlsConnector};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// How long a client may take over its handshake before it is dropped (a
/// client that connects and says nothing holds a connection slot).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files that make a node's TLS (paths as given on the command line).
pub struct TlsFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub client_ca: Option<&'a Path>,
}

/// Reads the certificate chain, key and client CA and builds the server's
/// TLS configuration, or says which file is wrong and why.
pub fn load(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(files.cert, "--tls-cert")?;
    let key = PrivateKeyDer::from_pem_file(files.key).map_err(|e| {
        format!(
            "--tls-key {}: no PEM private key read: {e}",
            files.key.display()
        )
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path, "--tls-client-ca")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("--tls-client-ca {}: {e}", path.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "--tls-cert {} with --tls-key {}: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    // Kafka and HTTP/1.1 alike: no ALPN asked for, none offered.
    config.alpn_protocols.clear();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The TLS a node's replica fetcher speaks to the others' Kafka ports:
/// their certificates must chain to the authority in `ca` (`flag` names
/// where it came from in errors) and name the host connected to. No
/// client certificate is presented: the fetcher signs in with SASL.
pub fn peer_connector(ca: &Path, flag: &str) -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca, flag)? {
        roots
            .add(cert)
            .map_err(|e| format!("{flag} {}: {e}", ca.display()))?;
    }
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Runs the client side of a handshake with `host`, bounded in time.
pub async fn connect<IO>(
    connector: &TlsConnector,
    host: &str,
    stream: IO,
) -> Result<futures_rustls::client::TlsStream<IO>, String>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host:?} is no TLS server name: {e}"))?;
    match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async {
        Ok(connector.connect(name, stream).await)
    })
    .await
    {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake with {host} failed: {e}")),
        Err(_) => Err(format!(
            "TLS handshake with {host} not done in {}s",
            HANDSHAKE_TIMEOUT.as_secs()
        )),
    }
}

/// Runs the server side of a handshake, bounded in time.
pub async fn accept<IO>(acceptor: &TlsAcceptor, stream: IO) -> Result<TlsStream<IO>, String>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async {
        Ok(acceptor.accept(stream).await)
    })
    .await
    {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
        Err(_) => Err(format!(
            "TLS handshake not done in {}s",
            HANDSHAKE_TIMEOUT.as_secs()
        )),
    }
}

/// The subject CN of the certificate the client presented, if it did.
pub fn client_name<IO>(tls: &TlsStream<IO>) -> Option<String> {
    let cert = tls.get_ref().1.peer_certificates()?.first()?;
    common_name(cert)
}

fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}
