//! `stasis ca`: the cluster's internal CA for mutual TLS between the
//! control plane and workers (`--internal-ca`). `ca create` makes the CA
//! (`DIR/ca.pem`, `DIR/ca-key.pem`); `ca issue` signs a certificate for
//! one process (`DIR/NAME.pem`, `DIR/NAME-key.pem`), valid as both a
//! server and a client, for its host names and IP addresses, with its
//! role (`--role control` or `worker`, in the subject's organizational
//! unit: a worker takes calls only from the control plane's). Keys are
//! ECDSA P-256, written with mode 0600. `ca issue` signs with the CA's
//! key under the name `ca create` gave the CA, and checks what it made
//! against `ca.pem` before writing it (a CA made otherwise is refused).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use stasis_runtime::http::mtls::check_issued;
use stasis_runtime::http::subject::{CertRole, common_name};
use time::{Duration, OffsetDateTime};

/// `stasis ca ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum CaCommand {
    /// Make the internal CA: DIR/ca.pem (its certificate: give it to every
    /// process as --internal-ca) and DIR/ca-key.pem (its key, mode 0600:
    /// keep it off the servers). Refused if DIR already holds either.
    Create {
        /// The folder to write them to (created if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// How long the CA is valid (at most 3653: ten years).
        #[arg(long, value_name = "N", default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=3653))]
        days: u32,
    },
    /// Issue a certificate for one process (control plane or worker),
    /// signed by the CA in DIR: DIR/NAME.pem (--internal-tls-cert) and
    /// DIR/NAME-key.pem (--internal-tls-key, mode 0600). Valid for server
    /// and client use. Issuing NAME again replaces its files (a renewal,
    /// which running processes reload).
    Issue {
        /// The folder of the CA (`ca create`), where the files go.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// The certificate's name (1-63 of a-z, 0-9 and -, not ending in
        /// -key): its common name, a DNS name in it, and its files' names.
        /// A worker's must be its --name: the control plane checks it.
        #[arg(long)]
        name: String,
        /// A DNS name or IP address the process is reached at;
        /// repeatable (default: localhost and 127.0.0.1). Workers are
        /// reached at their --listen (or --advertise) address: give its IP.
        #[arg(long = "host", value_name = "H")]
        hosts: Vec<String>,
        /// How long the certificate is valid (at most 3653: ten years).
        #[arg(long, value_name = "N", default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3653))]
        days: u32,
        /// What the certificate is for: `control` for the control plane
        /// (`stasis serve`, every replica), whose calls workers take, or
        /// `worker` for a worker, which a worker never takes calls from.
        #[arg(long, value_enum, default_value_t = RoleFlag::Worker)]
        role: RoleFlag,
    },
}

/// `ca issue --role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RoleFlag {
    /// The control plane's certificate.
    Control,
    /// A worker's certificate.
    Worker,
}

impl From<RoleFlag> for CertRole {
    fn from(role: RoleFlag) -> Self {
        match role {
            RoleFlag::Control => Self::Control,
            RoleFlag::Worker => Self::Worker,
        }
    }
}

/// The CA's files in `dir`: certificate, key.
fn ca_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.pem"), dir.join("ca-key.pem"))
}

/// Runs a `stasis ca` verb; prints the files written.
///
/// # Errors
/// As each verb says: files that exist or cannot be written, a CA that
/// cannot be read, a bad name or host.
pub(crate) fn run(command: &CaCommand) -> anyhow::Result<()> {
    let written = match command {
        CaCommand::Create { dir, days } => create(dir, *days).context("ca create")?,
        CaCommand::Issue {
            dir,
            name,
            hosts,
            days,
            role,
        } => issue(dir, name, hosts, *days, (*role).into())
            .with_context(|| format!("ca issue {name}"))?,
    };
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}

/// A fresh positive 128-bit serial number.
fn serial() -> anyhow::Result<SerialNumber> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("random serial number: {e}"))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

/// Validity from an hour ago (clocks a little behind) for `days`.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days));
}

/// Writes `contents` to `path`: a new file only when `new` (else it
/// replaces what is there, in one rename), with `mode` on Unix.
fn write(path: &Path, contents: &str, mode: u32, new: bool) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    if new {
        let mut file = options.create_new(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!("{} already exists: refusing to replace it", path.display())
            } else {
                anyhow::anyhow!("writing {}: {e}", path.display())
            }
        })?;
        file.write_all(contents.as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    // Beside it, then renamed over it: a process reloading the file never
    // reads half of it.
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let staged = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&staged);
    let mut file = options
        .create_new(true)
        .open(&staged)
        .with_context(|| format!("writing {}", staged.display()))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", staged.display()))?;
    std::fs::rename(&staged, path).with_context(|| format!("writing {}", path.display()))
}

/// What the CA's certificate says of it: its name (`Stasis internal CA`
/// and a random suffix, so that two CAs never share a name), and that it
/// signs only end certificates. `ca issue` signs under the same.
fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body = pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)?
        .split("-----END CERTIFICATE-----")
        .next()?;
    let text: String = body.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// `ca create`.
fn create(dir: &Path, days: u32) -> anyhow::Result<Vec<PathBuf>> {
    let (cert_path, key_path) = ca_files(dir);
    for path in [&cert_path, &key_path] {
        anyhow::ensure!(
            !path.exists(),
            "{} already exists: refusing to replace the CA (every certificate it issued would stop working)",
            path.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = KeyPair::generate()?;
    let mut suffix = [0_u8; 4];
    getrandom::fill(&mut suffix).map_err(|e| anyhow::anyhow!("random name: {e}"))?;
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let mut params = ca_params(&format!("Stasis internal CA {suffix}"));
    params.serial_number = Some(serial()?);
    validity(&mut params, days);
    let cert = params.self_signed(&key)?;
    // The key first: a CA certificate without its key is of no use.
    write(&key_path, &key.serialize_pem(), 0o600, true)?;
    write(&cert_path, &cert.pem(), 0o644, true)?;
    Ok(vec![cert_path, key_path])
}

/// Checks that `host` is an IP address (without brackets, port or zone)
/// or a DNS name (labels of letters, digits and hyphens; a leftmost `*`
/// label for a wildcard): a certificate for anything else matches no one.
fn check_host(host: &str) -> anyhow::Result<()> {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let name = host.strip_prefix("*.").unwrap_or(host).to_ascii_lowercase();
    stasis_runtime::worker::host_calls::outbound::check_name(&name).map_err(|why| {
        anyhow::anyhow!(
            "--host {host:?} is neither an IP address (no brackets, port or zone) nor a DNS name: {why}"
        )
    })
}

/// `ca issue`.
fn issue(
    dir: &Path,
    name: &str,
    hosts: &[String],
    days: u32,
    role: CertRole,
) -> anyhow::Result<Vec<PathBuf>> {
    stasis_runtime::contract::names::check_label("certificate", name)
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    anyhow::ensure!(
        name != "ca",
        "the name ca is the CA's own (ca.pem): give the certificate another name"
    );
    // NAME.pem and NAME-key.pem must not be another certificate's key
    // file, nor the CA's (ca-key.pem).
    anyhow::ensure!(
        !name.ends_with("-key"),
        "a name ending in -key would overwrite the key file of another certificate \
         (or the CA's ca-key.pem): give the certificate another name"
    );
    for host in hosts {
        check_host(host)?;
    }

    let (ca_cert, ca_key) = ca_files(dir);
    let read = |path: &Path| {
        std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (make the CA first: stasis ca create --dir {})",
                path.display(),
                dir.display()
            )
        })
    };
    let ca_pem = read(&ca_cert)?;
    let not_ours = || {
        anyhow::anyhow!(
            "{} is not a CA certificate made by `stasis ca create`",
            ca_cert.display()
        )
    };
    let ca_der = pem_der(&ca_pem).ok_or_else(not_ours)?;
    let ca_name = common_name(&ca_der).ok_or_else(not_ours)?;
    let ca_key = KeyPair::from_pem(&read(&ca_key)?)
        .with_context(|| format!("reading the CA key {}", ca_key.display()))?;
    let issuer = Issuer::new(ca_params(&ca_name), ca_key);
    let mut hosts = if hosts.is_empty() {
        vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
    } else {
        hosts.to_vec()
    };
    // The name too: the control plane checks that a worker's certificate
    // names the worker it reaches (so one of the CA's certificates cannot
    // stand in for another worker).
    if !hosts.iter().any(|h| h == name) {
        hosts.push(name.to_owned());
    }
    let mut params = CertificateParams::new(hosts.clone())
        .with_context(|| format!("the hosts {}", hosts.join(", ")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, role.unit());
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(serial()?);
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    check_issued(ca_pem.as_bytes(), cert.pem().as_bytes()).map_err(|e| {
        anyhow::anyhow!(
            "{} does not verify the certificate signed with its key ({e}): is it a CA made by `stasis ca create`, with that key?",
            ca_cert.display()
        )
    })?;
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}-key.pem"));
    write(&key_path, &key.serialize_pem(), 0o600, false)?;
    write(&cert_path, &cert.pem(), 0o644, false)?;
    Ok(vec![cert_path, key_path])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_name_is_read_back_and_what_it_signs_verifies() {
        let key = KeyPair::generate().expect("key");
        let ca = ca_params("Stasis internal CA 0a1b2c3d")
            .self_signed(&key)
            .expect("CA");
        let der = pem_der(&ca.pem()).expect("PEM");
        assert_eq!(der, ca.der().to_vec());
        let name = common_name(&der).expect("a common name");
        assert_eq!(name, "Stasis internal CA 0a1b2c3d");
        let issuer = Issuer::new(ca_params(&name), key);
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, CertRole::Control.unit());
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = params.signed_by(&leaf_key, &issuer).expect("leaf");
        check_issued(ca.pem().as_bytes(), leaf.pem().as_bytes()).expect("issued by the CA");
        assert_eq!(CertRole::of(leaf.der()), Some(CertRole::Control));
        assert_eq!(CertRole::of(&der), None, "the CA has no role");
        // Under another name the signature does not verify.
        let other_key = KeyPair::generate().expect("key");
        let other = Issuer::new(ca_params(&name), other_key);
        let forged = params.signed_by(&leaf_key, &other).expect("leaf");
        assert!(check_issued(ca.pem().as_bytes(), forged.pem().as_bytes()).is_err());
        assert_eq!(pem_der("no PEM here"), None);
    }
}
