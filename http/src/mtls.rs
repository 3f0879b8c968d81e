//! Mutual TLS of the internal API between the control plane and workers
//! (`--internal-ca`, `--internal-tls-cert`, `--internal-tls-key`): one
//! cluster CA signs every internal peer's certificate, and each side
//! checks the other's against that CA only (never the system's roots).
//!
//! [`InternalTls`] holds the CA and this process's certificate and key. A
//! worker's listener ([`InternalTls::server`]) requires a client
//! certificate from the CA (a client without one, or with one from
//! another CA, fails the handshake); every internal client
//! ([`InternalTls::client_config`], used by
//! [`crate::client::HttpClient::with_identity`]) presents this process's
//! certificate and accepts only a server certificate from the CA. The
//! certificate and key files are reloaded as they change, as
//! [`crate::tls::ServerTls`] reloads a listener's (a client looks at most
//! every [`crate::tls::RELOAD_EVERY`], when it opens a connection); the CA
//! file is read once, at start: a new CA needs a restart.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustls::DigitallySignedStruct;
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;

use crate::tls::{CertFiles, RELOAD_EVERY, ServerTls, file_name, provider};

/// The internal CA and this process's certificate (module docs).
#[derive(Debug)]
pub struct InternalTls {
    roots: Arc<RootCertStore>,
    /// This process's certificate, served with a verifier that requires a
    /// client certificate from the CA.
    server: Arc<ServerTls>,
    client: Arc<rustls::ClientConfig>,
}

/// Reads the CA certificates of `ca`.
fn roots(ca: &Path) -> Result<RootCertStore, String> {
    let name = file_name(ca);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .and_then(Iterator::collect)
        .map_err(|e| format!("reading the internal CA {name}: {e}"))?;
    roots_of(certs, &name)
}

/// The CA certificates `certs`, read from the file `name`.
fn roots_of(certs: Vec<CertificateDer<'static>>, name: &str) -> Result<RootCertStore, String> {
    if certs.is_empty() {
        return Err(format!("the internal CA file {name} holds no certificate"));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("the internal CA file {name}: {e}"))?;
    }
    Ok(roots)
}

/// Checks that the CA certificates in `ca_pem` issued the certificate
/// chain in `chain_pem` (leaf first) for mutual TLS: `stasis ca issue`
/// checks what it made before writing it.
///
/// # Errors
/// What does not parse, or why the chain does not verify.
pub fn check_issued(ca_pem: &[u8], chain_pem: &[u8]) -> Result<(), String> {
    let ca = CertificateDer::pem_slice_iter(ca_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the CA certificate: {e}"))?;
    let roots = Arc::new(roots_of(ca, "ca.pem")?);
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate: {e}"))?;
    let (leaf, intermediates) = chain
        .split_first()
        .ok_or("the certificate file holds no certificate")?;
    WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("the CA certificate: {e}"))?
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl InternalTls {
    /// Reads the CA certificates of `ca` (PEM) and this process's
    /// certificate chain and key (`files`), and checks that the CA issued
    /// that certificate, for both client and server use.
    ///
    /// # Errors
    /// A message naming the file (by its name only) that cannot be read or
    /// parsed, or the certificate the CA did not issue.
    pub fn load(ca: &Path, files: CertFiles) -> Result<Arc<Self>, String> {
        let roots = Arc::new(roots(ca)?);
        let cert_name = file_name(&files.cert);
        let required = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("the internal CA {}: {e}", file_name(ca)))?;
        let server = ServerTls::load_verifying(vec![files], Some(required.clone()))?;
        // A certificate the CA did not issue would fail every handshake
        // later, on the far side: refuse it now, by name.
        let own = server
            .first()
            .ok_or_else(|| format!("the certificate file {cert_name} holds no certificate"))?;
        let (leaf, intermediates) = own
            .cert
            .split_first()
            .ok_or_else(|| format!("the certificate file {cert_name} holds no certificate"))?;
        required
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| {
                format!(
                    "the certificate {cert_name} is not one the internal CA {} issued for mutual TLS: {e}",
                    file_name(ca)
                )
            })?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?
            .with_root_certificates(roots.clone())
            .with_client_cert_resolver(Arc::new(OwnCert {
                server: server.clone(),
                checked: Mutex::new(Instant::now()),
            }));
        Ok(Arc::new(Self {
            roots,
            server,
            client: Arc::new(client),
        }))
    }

    /// The role this process's certificate carries (`stasis ca issue
    /// --role`), if any.
    #[must_use]
    pub fn cert_role(&self) -> Option<crate::subject::CertRole> {
        let own = self.server.first()?;
        crate::subject::CertRole::of(own.cert.first()?)
    }

    /// The listener of a worker's internal API: this process's
    /// certificate, and a client certificate from the CA required.
    #[must_use]
    pub fn server(&self) -> Arc<ServerTls> {
        self.server.clone()
    }

    /// A client configuration that presents this process's certificate
    /// and accepts only a server certificate from the CA.
    #[must_use]
    pub fn client_config(&self) -> rustls::ClientConfig {
        rustls::ClientConfig::clone(&self.client)
    }

    /// This identity for reaching the peer named `name` (a worker): the
    /// peer's certificate must also name it, as a DNS name (`stasis ca
    /// issue --name NAME` puts NAME in), besides the address it is reached
    /// at, so one certificate of the CA cannot stand for another worker.
    ///
    /// # Errors
    /// A message when `name` cannot be a DNS name.
    pub fn for_peer(&self, name: &str) -> Result<Self, String> {
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| format!("worker name {name:?} cannot be checked in a certificate: {e}"))?;
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| format!("the internal CA: {e}"))?;
        let mut client = rustls::ClientConfig::clone(&self.client);
        client
            .dangerous()
            .set_certificate_verifier(Arc::new(NamedPeer { inner, name }));
        Ok(Self {
            roots: self.roots.clone(),
            server: self.server.clone(),
            client: Arc::new(client),
        })
    }

    /// A verifier that asks for a client certificate from the CA but also
    /// lets a client without one in (a listener that serves both the
    /// internal API and others, such as the admin API).
    ///
    /// # Errors
    /// If the CA cannot make a verifier.
    pub fn optional_client_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, String> {
        WebPkiClientVerifier::builder_with_provider(self.roots.clone(), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("the internal CA: {e}"))
    }
}

/// This process's certificate as a client presents it: the server's,
/// reloaded (at most every [`RELOAD_EVERY`]) when a connection asks.
#[derive(Debug)]
struct OwnCert {
    server: Arc<ServerTls>,
    checked: Mutex<Instant>,
}

impl rustls::client::ResolvesClientCert for OwnCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let due = {
            let mut checked = self
                .checked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = checked.elapsed() >= RELOAD_EVERY;
            if due {
                *checked = Instant::now();
            }
            due
        };
        if due {
            self.server.reload_if_changed();
        }
        self.server.first()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks a server's certificate as the CA's verifier does, and that it
/// names the peer expected there ([`InternalTls::for_peer`]).
#[derive(Debug)]
struct NamedPeer {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedPeer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if !crate::tls::covers(end_entity, &self.name) {
            return Err(rustls::Error::General(format!(
                "the peer's certificate is not {}'s (issue it with stasis ca issue --name {})",
                self.name.to_str(),
                self.name.to_str()
            )));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
