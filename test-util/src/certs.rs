//! Test certificates made with the `openssl` command: a CA
//! ([`TestCa::new`]) and leaf certificates it signs for the names given
//! ([`TestCa::issue`]), as PEM files in a folder.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA's files in a folder.
#[derive(Debug, Clone)]
pub struct TestCa {
    dir: PathBuf,
    /// The CA's certificate (PEM): what clients trust.
    pub cert: PathBuf,
}

/// A leaf certificate and its key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl TestCa {
    /// Makes a CA in `dir` (`ca.pem`, `ca.key`), valid for two days.
    ///
    /// # Panics
    /// If `openssl` cannot be run or fails.
    #[must_use]
    pub fn new(dir: &Path) -> Self {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=stasis-test-ca",
            ],
        );
        Self {
            dir: dir.to_owned(),
            cert: dir.join("ca.pem"),
        }
    }

    /// Issues `<stem>.pem` and `<stem>.key` for the subject alternative
    /// names `san` (`DNS:*.actors.example.test,IP:127.0.0.1`), for servers
    /// and clients, with common name `cn`.
    ///
    /// # Panics
    /// If `openssl` cannot be run or fails.
    #[must_use]
    pub fn issue(&self, stem: &str, cn: &str, san: &str) -> Issued {
        let (key, csr, ext, pem) = (
            format!("{stem}.key"),
            format!("{stem}.csr"),
            format!("{stem}.ext"),
            format!("{stem}.pem"),
        );
        let subject = format!("/CN={cn}");
        openssl(
            &self.dir,
            &[
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
                &subject,
            ],
        );
        std::fs::write(
            self.dir.join(&ext),
            format!("subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"),
        )
        .expect("write the certificate extensions");
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        Issued {
            cert: self.dir.join(pem),
            key: self.dir.join(key),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running openssl (apt-get install -y openssl): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
