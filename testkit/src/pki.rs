//! Throwaway certificates made with the `openssl` CLI: a CA and the certificates it signs, in
//! one temp directory removed on drop: the TLS Postgres of [`crate::pg::PgOptions::tls`], the
//! end-to-end mTLS scenarios.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::os::unique_temp_dir;

/// A CA (P-256, valid two days) and the certificates issued under it.
#[derive(Debug)]
pub struct Pki {
    dir: PathBuf,
}

/// A certificate and its private key (PEM files).
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// The private key (PKCS#8), mode 0600.
    pub key: PathBuf,
}

impl Pki {
    /// A fresh CA whose subject is `CN=<common_name>`, in `dir` (created).
    pub fn new_in(dir: PathBuf, common_name: &str) -> Pki {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let pki = Pki { dir };
        pki.new_key_request(
            "ca.key",
            common_name,
            &[
                "-x509",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        );
        pki
    }

    /// A fresh CA in a fresh temp directory.
    pub fn new(common_name: &str) -> Pki {
        Pki::new_in(unique_temp_dir("pki"), common_name)
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A file in the PKI's directory (what [`Pki::issue`] wrote as `<file>.pem`/`.key`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Signs a fresh P-256 key as `<file>.pem`/`<file>.key`, subject `CN=<common_name>`,
    /// with the given X.509v3 extensions (one `name=value` per line).
    pub fn issue(&self, file: &str, common_name: &str, extensions: &str) -> CertFiles {
        let ext_file = format!("{file}.ext");
        std::fs::write(self.dir.join(&ext_file), extensions)
            .unwrap_or_else(|e| panic!("write {ext_file}: {e}"));
        let (key, csr, pem) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.pem"),
        );
        self.new_key_request(&key, common_name, &["-out", &csr]);
        self.openssl(&[
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
        ]);
        let files = CertFiles {
            cert: self.dir.join(pem),
            key: self.dir.join(key),
        };
        chmod_600(&files.key);
        files
    }

    /// A workload certificate as a mesh issues it: `<file>.pem`/`.key` naming `spiffe_id`
    /// as its URI SAN, for client and server use.
    pub fn issue_workload(&self, file: &str, spiffe_id: &str) -> CertFiles {
        self.issue(
            file,
            file,
            &format!("subjectAltName=URI:{spiffe_id}\nextendedKeyUsage=clientAuth,serverAuth\n"),
        )
    }

    /// `openssl req` with a fresh P-256 key written to `key`, subject `CN=<common_name>`.
    fn new_key_request(&self, key: &str, common_name: &str, more: &[&str]) {
        let subject = format!("/CN={common_name}");
        let mut args = vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            key,
            "-subj",
            &subject,
        ];
        args.extend_from_slice(more);
        self.openssl(&args);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("run openssl (apt-get install openssl): {e}"));
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        // Best effort: leftover test certificates in the temp dir harm nothing.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Postgres refuses a server key readable by others; libpq refuses such a client key.
fn chmod_600(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", path.display()));
}
