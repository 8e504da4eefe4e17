//! Certificates and a client for the mTLS principal scenario.
//!
//! [`Pki::generate`] makes a throwaway CA, a server certificate for `127.0.0.1` and client
//! certificates whose URI SAN is a SPIFFE id (what Istio puts there), with the `openssl`
//! CLI. [`send`] posts through Envoy's TLS listener with `curl`, presenting one client
//! certificate or none. Both are tools every CI machine of this project has; pulling a TLS
//! stack and a certificate builder into the test crate would cost more build time than the
//! scenario takes to run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::reply::Reply;

/// A CA, a server certificate and named client certificates in one temp directory.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
}

/// A client certificate and its key.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
}

impl Pki {
    /// Generates the CA, the server certificate (SAN `IP:127.0.0.1`) and one client
    /// certificate per SPIFFE id in `clients` (its URI SAN).
    pub fn generate(clients: &[&str]) -> Pki {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "keyflight-e2e-pki-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let pki = Pki { dir };
        openssl(
            &pki.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=keyflight-e2e-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        );
        pki.issue(
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        for (index, spiffe_id) in clients.iter().enumerate() {
            pki.issue(
                &format!("client{index}"),
                &format!("subjectAltName=URI:{spiffe_id}\nextendedKeyUsage=clientAuth\n"),
            );
        }
        pki
    }

    /// Signs a fresh P-256 key for `name` with the CA, with the given X.509v3 extensions.
    fn issue(&self, name: &str, extensions: &str) {
        let ext_file = format!("{name}.ext");
        std::fs::write(self.dir.join(&ext_file), extensions)
            .unwrap_or_else(|e| panic!("write {ext_file}: {e}"));
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
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
                "-days",
                "2",
                "-extfile",
                &ext_file,
                "-out",
                &pem,
            ],
        );
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The server certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The server key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate for the `index`th SPIFFE id given to [`Pki::generate`].
    pub fn client(&self, index: usize) -> ClientCert {
        ClientCert {
            cert: self.dir.join(format!("client{index}.pem")),
            key: self.dir.join(format!("client{index}.key")),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        // Best effort: leftover test certificates in the temp dir harm nothing.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run openssl (apt-get install openssl): {e}"));
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A request to send over TLS.
#[derive(Debug, Clone)]
pub struct TlsPost<'a> {
    /// `https://127.0.0.1:PORT/path`.
    pub url: String,
    /// The CA that signed the server certificate.
    pub ca: &'a Path,
    /// The client certificate to present, if any.
    pub client: Option<&'a ClientCert>,
    /// Extra headers.
    pub headers: Vec<(&'a str, &'a str)>,
    /// The body.
    pub body: String,
}

/// Sends the request with `curl`; `None` when no HTTP answer came back (e.g. the TLS
/// handshake was refused).
pub async fn send(post: &TlsPost<'_>) -> Option<Reply> {
    let mut command = tokio::process::Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "20", "--include"])
        .arg("--cacert")
        .arg(post.ca)
        .args(["-X", "POST", "--data-binary", &post.body]);
    if let Some(client) = post.client {
        command
            .arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key);
    }
    for (name, value) in &post.headers {
        command.args(["-H", &format!("{name}: {value}")]);
    }
    command.arg(&post.url);
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("run curl (apt-get install curl): {e}"));
    output
        .status
        .success()
        .then(|| parse_included(&output.stdout))
}

/// Parses `curl --include` output: status line, headers, blank line, body.
fn parse_included(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("curl output has no header end: {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("curl output has no status line: {head}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}
