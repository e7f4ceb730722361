//! TLS for the metrics listener (rustls): a certificate and key, and
//! optionally a CA whose client certificates `/metrics` requires; and a
//! bearer-token file. Every file is read again when it changes on disk
//! (cert-manager rotates them by swapping the secret's files), at most once
//! a second; a reload that fails keeps the previous contents and is counted.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rustls::{
    pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};

use super::metrics::{HttpMetrics, Reload};

/// The files, as the flags name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients of `/metrics` must present a certificate this CA signed.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files could not be used: one line.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {}: {source}", path.display())]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what} {} holds no PEM {expected}", path.display())]
    Empty { what: &'static str, path: PathBuf, expected: &'static str },
    #[error("{what} {}: {reason}", path.display())]
    Bad { what: &'static str, path: PathBuf, reason: String },
    #[error("the TLS certificate and key do not make a server configuration: {0}")]
    Config(rustls::Error),
}

/// What a file looked like when read: it changed if this did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: i64,
    modified_ns: i64,
    size: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    // Follows symlinks: a Kubernetes secret volume swaps a link.
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { modified: m.mtime(), modified_ns: m.mtime_nsec(), size: m.size(), inode: m.ino() })
}

/// How often files are looked at for changes, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.to_path_buf(), source })
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| TlsError::Bad {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Empty { what, path: path.to_path_buf(), expected: "certificate" });
    }
    Ok(certs)
}

/// A server configuration from the files as they are now.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let certs = certificates("--tls-cert-file", &files.cert)?;
    let key_pem = read("--tls-key-file", &files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            TlsError::Empty { what: "--tls-key-file", path: files.key.clone(), expected: "private key" }
        }
        e => TlsError::Bad { what: "--tls-key-file", path: files.key.clone(), reason: e.to_string() },
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("--tls-client-ca-file", ca)? {
                roots.add(cert).map_err(|e| TlsError::Bad {
                    what: "--tls-client-ca-file",
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
            }
            // The handshake lets a client without a certificate in, so the
            // kubelet's probes of /healthz and /readyz pass; /metrics then
            // refuses it. A certificate the CA did not sign fails the
            // handshake.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Bad { what: "--tls-client-ca-file", path: ca.clone(), reason: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

struct Loaded {
    stamps: Vec<Option<Stamp>>,
    config: Arc<ServerConfig>,
    checked: Instant,
}

/// The server configuration, read again when a file changes.
pub struct Tls {
    files: TlsFiles,
    loaded: Mutex<Loaded>,
    metrics: Option<HttpMetrics>,
}

impl Tls {
    /// Reads the files now: an error here is the agent's to report at start.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let stamps = Self::stamps(&files);
        let config = Arc::new(server_config(&files)?);
        Ok(Self { files, loaded: Mutex::new(Loaded { stamps, config, checked: Instant::now() }), metrics: None })
    }

    /// Where reloads are counted.
    pub fn counted(self, metrics: HttpMetrics) -> Self {
        Self { metrics: Some(metrics), ..self }
    }

    fn stamps(files: &TlsFiles) -> Vec<Option<Stamp>> {
        [Some(&files.cert), Some(&files.key), files.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| stamp(p))
            .collect()
    }

    pub fn client_ca(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The configuration for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        let mut loaded = self.loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if loaded.checked.elapsed() >= CHECK_EVERY {
            loaded.checked = Instant::now();
            let stamps = Self::stamps(&self.files);
            if stamps != loaded.stamps {
                // Mark it seen either way: a broken file is reported once,
                // not at every handshake, until it changes again.
                loaded.stamps = stamps;
                match server_config(&self.files) {
                    Ok(config) => {
                        loaded.config = Arc::new(config);
                        if let Some(m) = &self.metrics {
                            m.reloaded(Reload::Ok);
                        }
                        log::info!("TLS: reloaded the certificate, key and client CA");
                    }
                    Err(e) => {
                        if let Some(m) = &self.metrics {
                            m.reloaded(Reload::Error);
                        }
                        log::warn!("TLS: keeping the previous certificate: {e}");
                    }
                }
            }
        }
        loaded.config.clone()
    }
}

struct TokenState {
    stamp: Option<Stamp>,
    token: String,
    checked: Instant,
}

/// A bearer token from a file (its first line), read again when it changes.
pub struct TokenFile {
    path: PathBuf,
    state: Mutex<TokenState>,
}

impl TokenFile {
    pub fn load(path: PathBuf) -> Result<Self, TlsError> {
        let token = Self::read_token(&path)?;
        let state = TokenState { stamp: stamp(&path), token, checked: Instant::now() };
        Ok(Self { path, state: Mutex::new(state) })
    }

    fn read_token(path: &Path) -> Result<String, TlsError> {
        let text = read("--auth-token-file", path)?;
        let token = String::from_utf8_lossy(&text).lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() {
            return Err(TlsError::Empty { what: "--auth-token-file", path: path.to_path_buf(), expected: "token" });
        }
        Ok(token)
    }

    /// Whether `sent` is the token (compared in constant time).
    pub fn matches(&self, sent: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() >= CHECK_EVERY {
            state.checked = Instant::now();
            let now = stamp(&self.path);
            if now != state.stamp {
                state.stamp = now;
                match Self::read_token(&self.path) {
                    Ok(token) => state.token = token,
                    Err(e) => log::warn!("keeping the previous bearer token: {e}"),
                }
            }
        }
        let (a, b) = (state.token.as_bytes(), sent.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, content: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("sandwatch-tls-{}-{name}", std::process::id()));
        std::fs::write(&p, content).expect("write");
        p
    }

    #[test]
    fn bad_files_are_one_line_each() {
        let none = PathBuf::from("/nonexistent/cert.pem");
        let empty = temp("empty.pem", "not pem at all\n");
        let files = TlsFiles { cert: none.clone(), key: none.clone(), client_ca: None };
        let e = server_config(&files).expect_err("missing").to_string();
        assert!(e.starts_with("cannot read --tls-cert-file /nonexistent/cert.pem"), "{e}");
        let files = TlsFiles { cert: empty.clone(), key: empty.clone(), client_ca: None };
        let e = server_config(&files).expect_err("empty").to_string();
        assert!(e.contains("holds no PEM certificate") && !e.contains('\n'), "{e}");
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn a_token_matches_itself_only_and_follows_its_file() {
        let path = temp("token", "s3cret\n");
        let token = TokenFile::load(path.clone()).expect("token");
        assert!(token.matches("s3cret"));
        assert!(!token.matches("s3cre") && !token.matches("s3cret!") && !token.matches(""));
        std::fs::write(&path, "n3w-token-longer\n").expect("rotate");
        std::thread::sleep(CHECK_EVERY + Duration::from_millis(50));
        assert!(token.matches("n3w-token-longer") && !token.matches("s3cret"));
        std::fs::write(&path, "").expect("empty");
        std::thread::sleep(CHECK_EVERY + Duration::from_millis(50));
        assert!(token.matches("n3w-token-longer"), "an empty file keeps the previous token");
        let _ = std::fs::remove_file(path);
        assert!(TokenFile::load(PathBuf::from("/nonexistent/token")).is_err());
    }
}
