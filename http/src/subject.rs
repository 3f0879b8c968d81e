//! A certificate's subject as Stasis reads it, without an X.509 parser:
//! its common name (the name `stasis ca` gave it) and the **role** of an
//! internal certificate, in its organizational unit (`stasis ca issue
//! --role`): the control plane's, which a worker takes calls from, or a
//! worker's, which the control plane takes its join, heartbeats and drain
//! from.

/// What an internal certificate is for (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertRole {
    /// The control plane (`stasis serve`, every replica): a worker takes
    /// calls on its API only from this role.
    Control,
    /// A worker (`stasis worker run`).
    Worker,
}

impl CertRole {
    /// The organizational unit that carries the role in the subject.
    #[must_use]
    pub const fn unit(self) -> &'static str {
        match self {
            Self::Control => "stasis control plane",
            Self::Worker => "stasis worker",
        }
    }

    /// The role as `stasis ca issue --role` names it.
    #[must_use]
    pub const fn flag(self) -> &'static str {
        match self {
            Self::Control => "control",
            Self::Worker => "worker",
        }
    }

    /// The role certificate `cert_der` carries, if any (one issued before
    /// roles carries none).
    #[must_use]
    pub fn of(cert_der: &[u8]) -> Option<Self> {
        let unit = attribute(cert_der, OU)?;
        [Self::Control, Self::Worker]
            .into_iter()
            .find(|role| role.unit() == unit)
    }
}

/// The subject's common name of certificate `cert_der`.
#[must_use]
pub fn common_name(cert_der: &[u8]) -> Option<String> {
    attribute(cert_der, CN)
}

/// The object identifier of the common name (2.5.4.3).
const CN: &[u8] = &[0x55, 0x04, 0x03];
/// The object identifier of the organizational unit (2.5.4.11).
const OU: &[u8] = &[0x55, 0x04, 0x0b];

/// One DER element of `input`: its tag, its contents, and what follows.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 3 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0_usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The first subject attribute `oid` (UTF-8 or printable text) of
/// certificate `cert_der`.
fn attribute(cert_der: &[u8], oid: &[u8]) -> Option<String> {
    let (_, cert, _) = der(cert_der)?;
    let (_, tbs, _) = der(cert)?;
    let mut fields = tbs;
    // [0] version, serial, signature algorithm, issuer, validity, subject.
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let (tag, contents, rest) = der(fields)?;
        if seen.is_empty() && tag != 0xa0 {
            seen.push(&[][..]);
        }
        seen.push(contents);
        fields = rest;
    }
    let mut rdns = seen[5];
    while let Some((_, set, rest)) = der(rdns) {
        let (_, attribute, _) = der(set)?;
        let (_, id, value) = der(attribute)?;
        let (tag, text, _) = der(value)?;
        // UTF8String or PrintableString.
        if id == oid && (tag == 0x0c || tag == 0x13) {
            return String::from_utf8(text.to_vec()).ok();
        }
        rdns = rest;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_certificate_has_no_subject() {
        assert_eq!(common_name(b"\x30\x03\x02\x01"), None);
        assert_eq!(CertRole::of(b""), None);
    }
}
