//! TLS for a listener (`--tls-cert`/`--tls-key`): rustls with the `ring`
//! provider, HTTP/2 and HTTP/1.1 offered by ALPN, and one or more
//! certificates chosen by the client's SNI name — a wildcard certificate
//! (`*.actors.example.com`) matches as a browser would match it, and a
//! client that sends no name, or a name no certificate covers, gets the
//! first one. Clients that reconnect resume their sessions from tickets.
//! [`ServerTls::watch`] reloads the files when they change (a
//! renewed certificate, a Kubernetes Secret updated in place): new
//! connections get the new certificates within [`RELOAD_EVERY`], open ones
//! keep theirs; a file that cannot be read or parsed keeps the previous
//! certificates and is logged. A listener may also ask its clients for a
//! certificate ([`ServerTls::load_verifying`], mutual TLS).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often [`ServerTls::watch`] looks at the files.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The chain, leaf first (`--tls-cert`).
    pub cert: PathBuf,
    /// Its private key: PKCS#8, PKCS#1 or SEC1 (`--tls-key`).
    pub key: PathBuf,
}

/// One loaded certificate: its key, and the leaf's DER to match names.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    leaf: CertificateDer<'static>,
}

/// The certificates of a listener, reloaded as their files change.
#[derive(Debug)]
pub struct ServerTls {
    files: Vec<CertFiles>,
    /// Whether it asks clients for a certificate.
    verifies_clients: bool,
    certs: Arc<Certs>,
    config: Arc<rustls::ServerConfig>,
}

/// The loaded certificates (shared with the configuration's resolver) and
/// the stamps of the files they were read from.
#[derive(Debug)]
struct Certs(RwLock<(Vec<Loaded>, Vec<Stamp>)>);

/// What a file looked like when it was read: changes when it is replaced.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

/// The provider every listener (and every internal client) uses.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The name of the file at `path`, without its folders (errors show no
/// server paths).
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// Reads the chain and key of `files`.
fn load(files: &CertFiles, provider: &rustls::crypto::CryptoProvider) -> Result<Loaded, String> {
    let name = file_name;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect)
        .map_err(|e| format!("reading the certificate {}: {e}", name(&files.cert)))?;
    let Some(leaf) = chain.first().cloned() else {
        return Err(format!(
            "the certificate file {} holds no certificate",
            name(&files.cert)
        ));
    };
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("reading the private key {}: {e}", name(&files.key)))?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        format!(
            "the key {} does not go with the certificate {}: {e}",
            name(&files.key),
            name(&files.cert)
        )
    })?;
    Ok(Loaded {
        key: Arc::new(certified),
        leaf,
    })
}

impl ServerTls {
    /// Loads every pair of `files` (at least one) into a server
    /// configuration.
    ///
    /// # Errors
    /// A message naming the file (by its name only) that cannot be read,
    /// holds no certificate or key, or whose key does not match.
    pub fn load(files: Vec<CertFiles>) -> Result<Arc<Self>, String> {
        Self::load_verifying(files, None)
    }

    /// [`ServerTls::load`], asking each client for a certificate that
    /// `clients` verifies (mutual TLS, see [`crate::mtls`]); `None` asks
    /// for none.
    ///
    /// # Errors
    /// As [`ServerTls::load`].
    pub fn load_verifying(
        files: Vec<CertFiles>,
        clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<Arc<Self>, String> {
        if files.is_empty() {
            return Err("TLS needs at least one certificate and key".into());
        }
        let provider = provider();
        let loaded = files
            .iter()
            .map(|f| load(f, &provider))
            .collect::<Result<Vec<_>, _>>()?;
        let stamps = files.iter().flat_map(|f| [stamp(&f.cert), stamp(&f.key)]);
        let stamps = stamps.collect();
        let certs = Arc::new(Certs(RwLock::new((loaded, stamps))));
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS protocol versions: {e}"))?;
        let verifies_clients = clients.is_some();
        let builder = match clients {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(certs.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // A client that reconnects resumes its session from a ticket (keys
        // rotated every 6 hours by rustls) instead of a full handshake.
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| format!("TLS session tickets: {e}"))?;
        Ok(Arc::new(Self {
            files,
            verifies_clients,
            certs,
            config: Arc::new(config),
        }))
    }

    /// The acceptor of the listener.
    #[must_use]
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }

    /// Whether it asks clients for a certificate (mutual TLS): its
    /// requests then say whether theirs presented a verified one
    /// ([`crate::serve::ClientCertified`]).
    #[must_use]
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }

    /// The first certificate and key (this process's own, when it
    /// presents one as a client: [`crate::mtls`]).
    #[must_use]
    pub fn first(&self) -> Option<Arc<CertifiedKey>> {
        self.certs.choose(None)
    }

    /// Reloads the files whenever one changed, every [`RELOAD_EVERY`]
    /// (runs until its task is aborted).
    pub async fn watch(self: Arc<Self>) {
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            self.reload_if_changed();
        }
    }

    /// Reloads every pair when a file's stamp moved; keeps the old ones
    /// if the new files do not load.
    pub fn reload_if_changed(&self) {
        let now: Vec<Stamp> = self
            .files
            .iter()
            .flat_map(|f| [stamp(&f.cert), stamp(&f.key)])
            .collect();
        if self.certs.read().1 == now {
            return;
        }
        let provider = provider();
        match self
            .files
            .iter()
            .map(|f| load(f, &provider))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(loaded) => {
                *self.certs.write() = (loaded, now);
                tracing::info!("TLS certificates reloaded");
            }
            Err(e) => {
                // Not again until the files change once more.
                self.certs.write().1 = now;
                tracing::warn!("keeping the previous TLS certificates: {e}");
            }
        }
    }
}

/// Whether certificate `leaf` is valid for `name` (its DNS or IP subject
/// alternative names, wildcards matched as browsers match them).
pub(crate) fn covers(leaf: &CertificateDer<'_>, name: &ServerName<'_>) -> bool {
    webpki::EndEntityCert::try_from(leaf)
        .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(name).is_ok())
}

impl Certs {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, (Vec<Loaded>, Vec<Stamp>)> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, (Vec<Loaded>, Vec<Stamp>)> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The certificate for SNI name `name`: the first whose leaf covers it
    /// (wildcards included), else the first.
    fn choose(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let loaded = self.read();
        let wanted = name.and_then(|n| ServerName::try_from(n.to_owned()).ok());
        loaded
            .0
            .iter()
            .find(|l| wanted.as_ref().is_some_and(|w| covers(&l.leaf, w)))
            .or_else(|| loaded.0.first())
            .map(|l| l.key.clone())
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.server_name())
    }
}
