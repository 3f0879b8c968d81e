//! The flags `stasis serve` and `stasis worker run` share to speak mutual
//! TLS on the internal API (`--internal-ca`, `--internal-tls-cert`,
//! `--internal-tls-key`; see `stasis_runtime::http::mtls`).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use stasis_runtime::http::mtls::InternalTls;
use stasis_runtime::http::subject::CertRole;
use stasis_runtime::http::tls::CertFiles;

/// Mutual TLS between the control plane and workers: all three or none.
#[derive(Debug, Clone, Args)]
pub(crate) struct InternalTlsFlags {
    /// Mutual TLS on the internal API between the control plane and
    /// workers: the CA certificates (PEM) that sign every internal peer's
    /// certificate (`stasis ca create`). Peers are checked against it
    /// only. Read once at start. Needs --internal-tls-cert and
    /// --internal-tls-key.
    #[arg(long, value_name = "PATH", env = "STASIS_INTERNAL_CA")]
    internal_ca: Option<PathBuf>,
    /// This process's certificate chain (PEM, leaf first) issued by
    /// --internal-ca (`stasis ca issue`), for both ends of an internal
    /// connection; reloaded when the file changes.
    #[arg(long, value_name = "PATH", env = "STASIS_INTERNAL_TLS_CERT")]
    internal_tls_cert: Option<PathBuf>,
    /// The private key of --internal-tls-cert (PEM).
    #[arg(long, value_name = "PATH", env = "STASIS_INTERNAL_TLS_KEY")]
    internal_tls_key: Option<PathBuf>,
}

/// The flags' names, as the errors give them.
const FLAGS: &str = "--internal-ca, --internal-tls-cert and --internal-tls-key";

impl InternalTlsFlags {
    /// The CA and this process's certificate, which must carry `role`
    /// (`stasis ca issue --role`), or `None` when no flag is given.
    ///
    /// # Errors
    /// If only some of the three are given (naming them), or a file cannot
    /// be read, holds no certificate or key, the CA did not issue the
    /// certificate (naming the file, without its folders), or it carries
    /// another role or none.
    pub(crate) fn load(&self, role: CertRole) -> anyhow::Result<Option<Arc<InternalTls>>> {
        match (
            &self.internal_ca,
            &self.internal_tls_cert,
            &self.internal_tls_key,
        ) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => {
                let files = CertFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                };
                let tls =
                    InternalTls::load(ca, files).map_err(|e| anyhow::anyhow!("{FLAGS}: {e}"))?;
                let name = cert.file_name().unwrap_or_default().to_string_lossy();
                let stem = name.strip_suffix(".pem").unwrap_or(&name);
                match tls.cert_role() {
                    Some(held) if held == role => Ok(Some(tls)),
                    held => anyhow::bail!(
                        "--internal-tls-cert: {name} is {}, not a {} certificate: workers take \
                         calls only from the control plane's; issue it with `stasis ca issue \
                         --dir DIR --name {stem} --role {}`",
                        held.map_or("a certificate without a role (issued before roles)", |h| {
                            match h {
                                CertRole::Control => "the control plane's",
                                CertRole::Worker => "a worker's",
                            }
                        }),
                        role.flag(),
                        role.flag()
                    ),
                }
            }
            (ca, cert, key) => {
                let missing: Vec<&str> = [
                    (ca.is_none(), "--internal-ca"),
                    (cert.is_none(), "--internal-tls-cert"),
                    (key.is_none(), "--internal-tls-key"),
                ]
                .into_iter()
                .filter_map(|(absent, flag)| absent.then_some(flag))
                .collect();
                anyhow::bail!(
                    "{FLAGS} come together (mutual TLS between the control plane and workers): {} missing",
                    missing.join(" and ")
                )
            }
        }
    }
}
