//! Splitting libpq's TLS parameters out of a database URL (pure: no files, no I/O).
//!
//! tokio-postgres parses `sslmode` itself but knows only `disable`, `prefer` and `require`, and
//! refuses `sslrootcert`, `sslcert` and `sslkey` as unknown options. [`split`] takes those four
//! out of the URL (`postgres://…?sslmode=verify-full&sslrootcert=/ca.pem`) or key=value string
//! (`host=db sslmode=verify-full`), as libpq reads them, and hands the rest to tokio-postgres
//! untouched. What each mode checks: `docs/configuration.md#tls-to-postgres`.

use std::path::PathBuf;

/// libpq's `sslmode`, all five values libpq gives TLS (`allow` is cleartext first and not offered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Cleartext only.
    Disable,
    /// TLS when the server offers it, cleartext when it does not (libpq's default, and ours).
    Prefer,
    /// TLS or no connection; the server is not authenticated (unless `sslrootcert` is given).
    Require,
    /// TLS, and the server's certificate chains to `sslrootcert`; any host name.
    VerifyCa,
    /// TLS, the chain to `sslrootcert`, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<SslMode, UrlError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(UrlError::UnknownSslMode(other.to_owned())),
        })
    }
}

/// The TLS settings of one database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    /// `sslmode` (default [`SslMode::Prefer`], as libpq).
    pub mode: SslMode,
    /// `sslrootcert`: PEM file of the CA certificates the server's must chain to.
    pub root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: the client certificate (PEM chain) and its private key (PEM).
    pub client: Option<(PathBuf, PathBuf)>,
}

impl TlsParams {
    /// Whether the server's certificate is checked against a CA. libpq checks the chain in
    /// `prefer` and `require` too when a root certificate is given, and so do we.
    pub fn checks_chain(&self) -> bool {
        match self.mode {
            SslMode::Disable => false,
            SslMode::Prefer | SslMode::Require => self.root_cert.is_some(),
            SslMode::VerifyCa | SslMode::VerifyFull => true,
        }
    }
}

/// Why a database URL's TLS parameters cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// `sslmode` has a value libpq does not define.
    #[error("unknown sslmode `{0}` (use disable, prefer, require, verify-ca or verify-full)")]
    UnknownSslMode(String),
    /// `verify-ca`/`verify-full` without the CA to verify against.
    #[error("sslmode={0} needs sslrootcert=<PEM file of the CA certificates>")]
    MissingRootCert(&'static str),
    /// Only one of `sslcert` and `sslkey`.
    #[error("sslcert and sslkey must be given together")]
    HalfClientCert,
    /// A `%` escape that is not two hex digits, or that decodes to invalid UTF-8.
    #[error("bad percent-encoding in the value of {0}")]
    BadEscape(String),
    /// A key=value string that does not parse (an unterminated quote, a key with no `=`).
    #[error("malformed connection string: {0}")]
    Malformed(&'static str),
}

/// Splits `url` into the string tokio-postgres parses (without the TLS parameters) and
/// the TLS parameters. A parameter given twice takes its last value, as in libpq.
pub fn split(url: &str) -> Result<(String, TlsParams), UrlError> {
    let mut found = Found::default();
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_uri(url, &mut found)?
    } else {
        split_key_values(url, &mut found)?
    };
    Ok((rest, found.into_params()?))
}

/// The TLS parameters as found, before validation.
#[derive(Default)]
struct Found {
    mode: Option<String>,
    root_cert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl Found {
    /// Takes `key` if it is a TLS parameter; `false` leaves it for tokio-postgres.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.mode,
            "sslrootcert" => &mut self.root_cert,
            "sslcert" => &mut self.cert,
            "sslkey" => &mut self.key,
            _ => return false,
        };
        *slot = Some(value);
        true
    }

    fn into_params(self) -> Result<TlsParams, UrlError> {
        let mode = self
            .mode
            .as_deref()
            .map_or(Ok(SslMode::Prefer), SslMode::parse)?;
        let root_cert = self.root_cert.map(PathBuf::from);
        match mode {
            SslMode::VerifyCa | SslMode::VerifyFull if root_cert.is_none() => {
                return Err(UrlError::MissingRootCert(mode.as_str()));
            }
            _ => {}
        }
        let client = match (self.cert, self.key) {
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (None, None) => None,
            _ => return Err(UrlError::HalfClientCert),
        };
        Ok(TlsParams {
            mode,
            root_cert,
            client,
        })
    }
}

/// `postgres://…?k=v&…`: takes the TLS parameters out of the query, keeps the rest verbatim.
fn split_uri(url: &str, found: &mut Found) -> Result<String, UrlError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(url.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(raw_key, raw_key)?;
        let value = percent_decode(raw_value, &key)?;
        if !found.take(&key, value) {
            kept.push(pair);
        }
    }
    Ok(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

/// Decodes `%XX` escapes (`+` stays `+`, as libpq reads it); `name` labels the error.
fn percent_decode(text: &str, name: &str) -> Result<String, UrlError> {
    let bad = || UrlError::BadEscape(name.to_owned());
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

/// `key=value key='quoted value' …`: takes the TLS parameters out and re-quotes the rest.
fn split_key_values(text: &str, found: &mut Found) -> Result<String, UrlError> {
    let mut kept = Vec::new();
    for (key, value) in key_values(text)? {
        if !found.take(&key, value.clone()) {
            kept.push(format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    Ok(kept.join(" "))
}

/// The pairs of a libpq key=value string: spaces around `=` allowed, values bare or
/// single-quoted, `\` escaping the next character in both.
fn key_values(text: &str) -> Result<Vec<(String, String)>, UrlError> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(UrlError::Malformed("a key without `=`"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(UrlError::Malformed("an unterminated quoted value")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: SslMode, root: Option<&str>) -> TlsParams {
        TlsParams {
            mode,
            root_cert: root.map(PathBuf::from),
            client: None,
        }
    }

    #[test]
    fn a_url_without_tls_parameters_is_prefer_and_unchanged() {
        let url = "postgres://u:p@h:5432/db?connect_timeout=5";
        assert_eq!(
            split(url),
            Ok((url.to_owned(), params(SslMode::Prefer, None)))
        );
        assert_eq!(
            split("postgres://h/db"),
            Ok(("postgres://h/db".to_owned(), params(SslMode::Prefer, None)))
        );
    }

    #[test]
    fn uri_tls_parameters_are_taken_out_and_decoded() {
        let (rest, tls) = split(
            "postgresql://h/db?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem\
             &sslcert=/c.pem&sslkey=/k.pem&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgresql://h/db?connect_timeout=5&target_session_attrs=read-write"
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/etc/ca x.pem")));
        assert_eq!(
            tls.client,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        assert_eq!(
            split("postgres://h/db?sslmode=require").map(|(rest, _)| rest),
            Ok("postgres://h/db".to_owned())
        );
    }

    #[test]
    fn key_value_tls_parameters_are_taken_out_and_the_rest_requoted() {
        let (rest, tls) = split(
            r"host=h  dbname = 'my db' password='it\'s' sslmode=verify-ca sslrootcert='/ca dir/ca.pem'",
        )
        .unwrap();
        assert_eq!(rest, r"host='h' dbname='my db' password='it\'s'");
        assert_eq!(tls, params(SslMode::VerifyCa, Some("/ca dir/ca.pem")));
        let reparsed: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(reparsed.get_password(), Some(&b"it's"[..]));
        assert_eq!(reparsed.get_dbname(), Some("my db"));
    }

    #[test]
    fn the_last_value_wins() {
        let (_, tls) = split("postgres://h/db?sslmode=disable&sslmode=require").unwrap();
        assert_eq!(tls.mode, SslMode::Require);
    }

    #[test]
    fn verifying_modes_need_a_root_certificate() {
        assert_eq!(
            split("postgres://h/db?sslmode=verify-full"),
            Err(UrlError::MissingRootCert("verify-full"))
        );
        assert_eq!(
            split("host=h sslmode=verify-ca"),
            Err(UrlError::MissingRootCert("verify-ca"))
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert_eq!(
            split("postgres://h/db?sslmode=allow"),
            Err(UrlError::UnknownSslMode("allow".into()))
        );
        assert_eq!(
            split("postgres://h/db?sslcert=/c.pem"),
            Err(UrlError::HalfClientCert)
        );
        assert_eq!(
            split("postgres://h/db?sslrootcert=%zz"),
            Err(UrlError::BadEscape("sslrootcert".into()))
        );
        assert!(matches!(split("host='h"), Err(UrlError::Malformed(_))));
        assert!(matches!(split("host"), Err(UrlError::Malformed(_))));
    }

    #[test]
    fn roots_make_prefer_and_require_check_the_chain() {
        assert!(!params(SslMode::Require, None).checks_chain());
        assert!(params(SslMode::Require, Some("/ca.pem")).checks_chain());
        assert!(!params(SslMode::Disable, Some("/ca.pem")).checks_chain());
        assert!(params(SslMode::VerifyCa, Some("/ca.pem")).checks_chain());
    }
}
