//! agentsh's certificate authority: made at first need, its key root-only
//! in `<state_dir>/ca.key`, its certificate published at `egress.ca`
//! (world-readable, not writable by trees), with `ca-bundle.pem` beside it
//! (the system's roots and it, for `SSL_CERT_FILE` and the like). The proxy
//! signs a short-lived certificate for each name a tree's TLS asks for.
//!
//! Failure modes: a key that cannot be read, parsed or written, a
//! certificate that cannot be published: a [`CaError`] (the proxy does not
//! start; connects that need it are refused). A published certificate
//! whose key is gone is replaced, and said so in the log (images that
//! trusted the old one must trust the new one).

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The bundle's file name, beside the certificate.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
/// Where the system's roots are, first found wins.
pub const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];
/// The most leaf certificates kept.
const LEAVES_MAX: usize = 1024;

/// Why the CA is not there.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("agentsh's CA key {path} cannot be parsed: {error}")]
    Key { path: PathBuf, error: rcgen::Error },
    #[error("cannot make a certificate: {0}")]
    Make(#[from] rcgen::Error),
    #[error("cannot load a signing key: {0}")]
    Sign(#[from] rustls::Error),
}

/// The CA, and the leaves it signed.
pub struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
    /// Where the certificate is published.
    pub cert_path: PathBuf,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |error| CaError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// The CA's own fields: the same every time, so a certificate made again
/// from the key names the same issuer.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "agentsh");
    dn.push(DnType::CommonName, "agentsh egress CA");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(3650);
    p
}

/// Writes `data` to `path` through a file beside it (mode `mode`).
fn publish(path: &Path, data: &[u8], mode: u32) -> Result<(), CaError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(
        ".{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("ca"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(data).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// The system's roots, as PEM text (empty: none found).
pub fn system_roots_pem() -> String {
    SYSTEM_ROOTS
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

impl Ca {
    /// Loads the CA from its key (`egress.ca_key`), or makes it; publishes the
    /// certificate at `cert_path` (and the bundle beside it) where it is
    /// not there yet.
    ///
    /// # Errors
    /// See the module's failure modes.
    pub fn load_or_make(key_path: &Path, cert_path: &Path) -> Result<Ca, CaError> {
        let key_path = key_path.to_path_buf();
        let key_dir = key_path.parent().unwrap_or(Path::new("/"));
        let (key, made) = match std::fs::read_to_string(&key_path) {
            Ok(pem) => (
                KeyPair::from_pem(&pem).map_err(|error| CaError::Key {
                    path: key_path.clone(),
                    error,
                })?,
                false,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate()?;
                std::fs::create_dir_all(key_dir).map_err(io(key_dir))?;
                publish(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
                tracing::info!(key = %key_path.display(), "made agentsh's egress CA");
                (key, true)
            }
            Err(e) => return Err(io(&key_path)(e)),
        };
        let cert = ca_params().self_signed(&key)?;
        if made || !cert_path.exists() {
            if !made {
                tracing::warn!(
                    cert = %cert_path.display(),
                    "agentsh's CA certificate was missing: published again from its key"
                );
            }
            publish(cert_path, cert.pem().as_bytes(), 0o644)?;
        } else if !same_key(cert_path, &key) {
            tracing::warn!(
                cert = %cert_path.display(),
                "the published CA certificate is not of agentsh's CA key: replaced (images that \
                 trusted the old one must trust this one)"
            );
            publish(cert_path, cert.pem().as_bytes(), 0o644)?;
        }
        let bundle = cert_path.with_file_name(BUNDLE_FILE);
        let mut text = system_roots_pem();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&std::fs::read_to_string(cert_path).map_err(io(cert_path))?);
        if std::fs::read_to_string(&bundle).ok().as_deref() != Some(text.as_str()) {
            publish(&bundle, text.as_bytes(), 0o644)?;
        }
        Ok(Ca {
            key,
            cert,
            cert_path: cert_path.to_path_buf(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// A certificate for `name` (a DNS name or an IP address), signed by
    /// the CA: valid from a day ago for 30 days; made once per name.
    ///
    /// # Errors
    /// The name cannot be in a certificate, or signing failed.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let mut leaves = self
            .leaves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = leaves.get(name) {
            return Ok(l.clone());
        }
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec![name.to_string()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        p.distinguished_name = dn;
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(30);
        p.use_authority_key_identifier_extension = true;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p.signed_by(&key, &self.cert, &self.key)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der)?;
        let certified = Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            signer,
        ));
        if leaves.len() >= LEAVES_MAX {
            leaves.clear();
        }
        leaves.insert(name.to_string(), certified.clone());
        Ok(certified)
    }
}

/// Whether the certificate at `path` carries `key`'s public key.
fn same_key(path: &Path, key: &KeyPair) -> bool {
    use rustls::pki_types::pem::PemObject;
    let Ok(der) = CertificateDer::from_pem_file(path) else {
        return false;
    };
    let public = key.public_key_raw();
    der.windows(public.len()).any(|w| w == public)
}
