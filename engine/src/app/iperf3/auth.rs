//! iperf3's authentication, server side: the RSA private key, the
//! authorized-users file, and the check of the `authtoken` a client sends in
//! its parameters (`iperf3 -c --username U --rsa-public-key-path pub.pem`,
//! the password from `IPERF3_PASSWORD` or the terminal).
//!
//! What iperf3 does (`iperf_auth.c`), and this module the same way:
//!
//! - The client writes `user: U\npwd:  P\nts:   T` (T: its clock, Unix
//!   seconds), encrypts it with the server's public key — PKCS#1 v1.5
//!   padding up to iperf3 3.16 (Debian's 3.12), OAEP (SHA-1, MGF1-SHA-1)
//!   from 3.17 on unless `--use-pkcs1-padding` — and sends it base64
//!   encoded as `authtoken`.
//! - The server decrypts it, reads the three fields as `sscanf` does
//!   (whitespace-separated words, so neither name nor password can hold
//!   whitespace), refuses a token whose time is more than the time skew
//!   threshold (default 10 s) from its own clock, then looks for a line
//!   `U,H` in the users file where H is the hex SHA-256 of `{U}P` (the
//!   name in braces, then the password). Lines starting with `#` are
//!   comments.
//! - Any failure is answered with `SERVER_ERROR` / `IEAUTHTEST` (142): "test
//!   authorization failed". The reason (unknown user, wrong password, stale
//!   token, a token that does not decrypt) stays on the server.
//!
//! Both paddings are tried on every token, whatever the first one gives, so
//! that the time a check takes does not tell a client whether its bytes had
//! valid PKCS#1 v1.5 padding; private-key operations are blinded. The `rsa`
//! crate (0.9) is not constant-time (RUSTSEC-2023-0071, the Marvin attack):
//! where clients that are not trusted can reach the port, also restrict it
//! with the allow list.
//!
//! The client side ([`client_token`]) writes the same text and encrypts it
//! with PKCS#1 v1.5 padding, which every iperf3 server (3.12's and 3.17+'s)
//! decrypts.
//!
//! Contract: loading reads the two files once (a reload loads them again);
//! [`Authenticator::check`] does no I/O and reads no clock: the caller
//! passes the time.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey};
use sha2::{Digest, Sha256};

/// iperf3's default `--time-skew-threshold`.
pub const DEFAULT_TIME_SKEW: Duration = Duration::from_secs(10);

/// The server's key and users.
pub struct Authenticator {
    key: RsaPrivateKey,
    users: Vec<User>,
    skew: Duration,
    key_source: String,
    users_source: String,
}

struct User {
    name: String,
    hash: [u8; 32],
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Authenticator")
            .field("key", &self.key_source)
            .field("users", &self.users_source)
            .field("user_count", &self.users.len())
            .field("skew", &self.skew)
            .finish()
    }
}

/// The key or the users file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: not an RSA private key in PEM without a password (PKCS#1 `BEGIN RSA PRIVATE \
         KEY` or PKCS#8 `BEGIN PRIVATE KEY`, as `openssl genrsa` writes them): {reason}"
    )]
    Key { path: String, reason: String },
    #[error("{path}:{line}: {reason}")]
    Users {
        path: String,
        line: usize,
        reason: String,
    },
    #[error(
        "{path}: no users (one line `user,sha256hex` per user, the hex SHA-256 of `{{user}}password`)"
    )]
    NoUsers { path: String },
}

/// The `authtoken` a client sends (iperf3's `encode_auth_setting`): `user:
/// U\npwd:  P\nts:   T` encrypted with the server's public key (PEM: SPKI
/// `PUBLIC KEY` as `openssl rsa -pubout` writes it, or PKCS#1 `RSA PUBLIC
/// KEY`) with PKCS#1 v1.5 padding, base64. `key_path` only names the file
/// in errors, which are one line each.
pub fn client_token(
    public_pem: &str,
    key_path: &str,
    user: &str,
    password: &str,
    unix_now: i64,
) -> Result<String, String> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::pkcs8::DecodePublicKey;
    let err = |reason: String| format!("{key_path}: {reason}");
    if user.is_empty() || user.contains(char::is_whitespace) {
        return Err(format!(
            "--username `{user}`: iperf3 reads the name up to the first white space; give a \
             non-empty name without spaces"
        ));
    }
    if password.is_empty() || password.contains(char::is_whitespace) {
        return Err(
            "the password is empty or holds white space, which iperf3's server cannot read".into(),
        );
    }
    let key = if public_pem.contains("BEGIN RSA PUBLIC KEY") {
        rsa::RsaPublicKey::from_pkcs1_pem(public_pem).map_err(|e| err(format!("PKCS#1: {e}")))?
    } else {
        rsa::RsaPublicKey::from_public_key_pem(public_pem)
            .map_err(|e| err(format!("not an RSA public key in PEM (SPKI): {e}")))?
    };
    let text = format!("user: {user}\npwd:  {password}\nts:   {unix_now}");
    let c = key
        .encrypt(&mut rsa::rand_core::OsRng, Pkcs1v15Encrypt, text.as_bytes())
        .map_err(|e| err(format!("encrypting the token: {e}")))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(c))
}

/// Why a token did not pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no authentication token (the client gave no --username)")]
    Missing,
    #[error("the token is not base64")]
    NotBase64,
    #[error(
        "the token does not decrypt with the server's key (PKCS#1 v1.5 or OAEP) into \
         `user: … pwd: … ts: …`"
    )]
    Undecodable,
    #[error(
        "user `{user}`: the token's time {ts} is {} s away from the server's {now} (time skew \
         threshold {threshold_secs} s)", now.abs_diff(*ts)
    )]
    Stale {
        user: String,
        ts: i64,
        now: i64,
        threshold_secs: u64,
    },
    #[error("unknown user `{0}`")]
    UnknownUser(String),
    #[error("user `{0}`: wrong password")]
    BadPassword(String),
}

/// The three fields of a decrypted token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    /// The client's clock, Unix seconds.
    pub ts: i64,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("ts", &self.ts)
            .finish_non_exhaustive()
    }
}

/// The users file's hash of a password: hex SHA-256 of `{user}password`.
pub fn password_hash(user: &str, password: &str) -> String {
    hex(&Sha256::digest(format!("{{{user}}}{password}").as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(s.as_bytes().chunks(2)) {
        let txt = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(txt, 16).ok()?;
    }
    Some(out)
}

/// Equal without an early exit.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn parse_users(text: &str, path: &str) -> Result<Vec<User>, AuthConfigError> {
    let mut users = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |reason: String| AuthConfigError::Users {
            path: path.to_owned(),
            line: i + 1,
            reason,
        };
        // As iperf3's strtok: empty fields are skipped, fields after the
        // second are ignored.
        let mut fields = t.split(',').map(str::trim).filter(|f| !f.is_empty());
        let (Some(name), Some(hash)) = (fields.next(), fields.next()) else {
            return Err(err(format!(
                "`{t}`: expected `user,sha256hex` (the hex SHA-256 of `{{user}}password`)"
            )));
        };
        if name.chars().any(char::is_whitespace) {
            return Err(err(format!(
                "user `{name}` holds whitespace: an iperf3 token cannot carry it"
            )));
        }
        let Some(hash) = parse_hex32(hash) else {
            return Err(err(format!(
                "the hash of `{name}` is not 64 hex digits (the SHA-256 of `{{{name}}}password`, \
                 e.g. `printf '%s' '{{{name}}}password' | sha256sum`)"
            )));
        };
        users.push(User {
            name: name.to_owned(),
            hash,
        });
    }
    if users.is_empty() {
        return Err(AuthConfigError::NoUsers {
            path: path.to_owned(),
        });
    }
    Ok(users)
}

fn parse_key(pem: &str, path: &str) -> Result<RsaPrivateKey, AuthConfigError> {
    let err = |reason: String| AuthConfigError::Key {
        path: path.to_owned(),
        reason,
    };
    if pem.contains("BEGIN ENCRYPTED PRIVATE KEY") || pem.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(err("it is password-protected".into()));
    }
    if pem.contains("BEGIN RSA PRIVATE KEY") {
        RsaPrivateKey::from_pkcs1_pem(pem).map_err(|e| err(format!("PKCS#1: {e}")))
    } else if pem.contains("BEGIN PRIVATE KEY") {
        RsaPrivateKey::from_pkcs8_pem(pem).map_err(|e| err(format!("PKCS#8: {e}")))
    } else {
        Err(err(
            "no `-----BEGIN RSA PRIVATE KEY-----` or `-----BEGIN PRIVATE KEY-----` line".into(),
        ))
    }
}

/// Reads `user: %s\npwd:  %s\nts:   %ld` as C's `sscanf` does: literal
/// text must match, whitespace in the format matches any run of whitespace
/// (or none), `%s` takes one non-empty word. Text after the number is
/// ignored; a NUL ends the text.
fn parse_plaintext(bytes: &[u8]) -> Option<Credentials> {
    let bytes = bytes.split(|&b| b == 0).next().unwrap_or_default();
    let text = std::str::from_utf8(bytes).ok()?;
    fn word(s: &str) -> Option<(String, &str)> {
        let s = s.trim_start();
        let end = s.find(char::is_whitespace).unwrap_or(s.len());
        (end > 0).then(|| (s[..end].to_owned(), &s[end..]))
    }
    let rest = text.strip_prefix("user:")?;
    let (user, rest) = word(rest)?;
    let rest = rest.trim_start().strip_prefix("pwd:")?;
    let (password, rest) = word(rest)?;
    let rest = rest.trim_start().strip_prefix("ts:")?.trim_start();
    let sign_len = usize::from(rest.starts_with(['+', '-']));
    let digits = rest[sign_len..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len() - sign_len);
    if digits == 0 {
        return None;
    }
    let ts = rest[..sign_len + digits].parse().ok()?;
    Some(Credentials { user, password, ts })
}

impl Authenticator {
    /// Loads the private key (PEM, PKCS#1 or PKCS#8, no password) and the
    /// users file; errors name the file, and for the users file the line.
    pub fn load(
        key_path: &Path,
        users_path: &Path,
        skew: Duration,
    ) -> Result<Authenticator, AuthConfigError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| AuthConfigError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let key = read(key_path)?;
        let users = read(users_path)?;
        Self::from_text(
            &key,
            &key_path.display().to_string(),
            &users,
            &users_path.display().to_string(),
            skew,
        )
    }

    /// As [`Authenticator::load`], from the files' text; `key_name` and
    /// `users_name` stand for the files in errors.
    pub fn from_text(
        key_pem: &str,
        key_name: &str,
        users_csv: &str,
        users_name: &str,
        skew: Duration,
    ) -> Result<Authenticator, AuthConfigError> {
        Ok(Authenticator {
            key: parse_key(key_pem, key_name)?,
            users: parse_users(users_csv, users_name)?,
            skew,
            key_source: key_name.to_owned(),
            users_source: users_name.to_owned(),
        })
    }

    /// Users in the file.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// The time skew threshold.
    pub fn skew(&self) -> Duration {
        self.skew
    }

    /// Decrypts a token (see the module doc for why both paddings are
    /// always tried).
    pub fn decode(&self, token: &str) -> Result<Credentials, AuthError> {
        let compact: String = token.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let cipher = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|_| AuthError::NotBase64)?;
        let mut rng = rsa::rand_core::OsRng;
        let v15 = self
            .key
            .decrypt_blinded(&mut rng, Pkcs1v15Encrypt, &cipher)
            .ok()
            .and_then(|p| parse_plaintext(&p));
        let oaep = self
            .key
            .decrypt_blinded(&mut rng, Oaep::new::<sha1::Sha1>(), &cipher)
            .ok()
            .and_then(|p| parse_plaintext(&p));
        v15.or(oaep).ok_or(AuthError::Undecodable)
    }

    /// Checks a token at `unix_now` (the server's clock, Unix seconds);
    /// the user's name on success.
    pub fn check(&self, token: Option<&str>, unix_now: i64) -> Result<String, AuthError> {
        let c = self.decode(token.ok_or(AuthError::Missing)?)?;
        let threshold_secs = self.skew.as_secs();
        if unix_now.abs_diff(c.ts) > threshold_secs {
            return Err(AuthError::Stale {
                user: c.user,
                ts: c.ts,
                now: unix_now,
                threshold_secs,
            });
        }
        let mut known = false;
        let mut ok = false;
        let hash: [u8; 32] =
            Sha256::digest(format!("{{{}}}{}", c.user, c.password).as_bytes()).into();
        for u in self.users.iter().filter(|u| u.name == c.user) {
            known = true;
            ok |= same(&u.hash, &hash);
        }
        match (known, ok) {
            (_, true) => Ok(c.user),
            (true, false) => Err(AuthError::BadPassword(c.user)),
            (false, _) => Err(AuthError::UnknownUser(c.user)),
        }
    }
}

/// Test support: a token as iperf3's client makes it.
#[cfg(test)]
pub(crate) mod testing {
    use base64::Engine as _;
    use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey, RsaPublicKey};
    use std::sync::OnceLock;

    /// One 1024-bit key for all tests (generation is slow).
    pub(crate) fn key() -> &'static RsaPrivateKey {
        static KEY: OnceLock<RsaPrivateKey> = OnceLock::new();
        KEY.get_or_init(|| RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 1024).unwrap())
    }

    /// PKCS#1 v1.5 (iperf3 ≤ 3.16) or OAEP (3.17+).
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Padding {
        Pkcs1,
        Oaep,
    }

    pub(crate) fn token_of(text: &str, padding: Padding) -> String {
        let public = RsaPublicKey::from(key());
        let mut rng = rsa::rand_core::OsRng;
        let c = match padding {
            Padding::Pkcs1 => public.encrypt(&mut rng, Pkcs1v15Encrypt, text.as_bytes()),
            Padding::Oaep => public.encrypt(&mut rng, Oaep::new::<sha1::Sha1>(), text.as_bytes()),
        }
        .unwrap();
        base64::engine::general_purpose::STANDARD.encode(c)
    }

    pub(crate) fn token(user: &str, password: &str, ts: i64, padding: Padding) -> String {
        token_of(
            &format!("user: {user}\npwd:  {password}\nts:   {ts}"),
            padding,
        )
    }

    pub(crate) fn key_pkcs1_pem() -> String {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        key().to_pkcs1_pem(Default::default()).unwrap().to_string()
    }

    pub(crate) fn key_pkcs8_pem() -> String {
        use rsa::pkcs8::EncodePrivateKey;
        key().to_pkcs8_pem(Default::default()).unwrap().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Padding, key_pkcs1_pem, key_pkcs8_pem, token, token_of};
    use super::*;

    const NOW: i64 = 1_780_000_000;

    fn users() -> String {
        format!(
            "# iperf3 users\n\nalice,{}\r\nbob,{},extra\n",
            password_hash("alice", "s3cret"),
            password_hash("bob", "hunter2")
        )
    }

    fn auth(key: &str) -> Authenticator {
        Authenticator::from_text(key, "key.pem", &users(), "users.csv", DEFAULT_TIME_SKEW).unwrap()
    }

    #[test]
    fn client_token_passes_the_server_check() {
        use rsa::pkcs8::{EncodePublicKey, LineEnding};
        let public = rsa::RsaPublicKey::from(super::testing::key());
        let pem = public.to_public_key_pem(LineEnding::LF).unwrap();
        let a = auth(&key_pkcs1_pem());
        let t = client_token(&pem, "pub.pem", "alice", "s3cret", NOW).unwrap();
        assert_eq!(a.check(Some(&t), NOW), Ok("alice".into()));
        let t = client_token(&pem, "pub.pem", "alice", "wrong", NOW).unwrap();
        assert!(matches!(
            a.check(Some(&t), NOW),
            Err(AuthError::BadPassword(_))
        ));
        assert!(
            client_token("junk", "pub.pem", "alice", "x", 0)
                .unwrap_err()
                .starts_with("pub.pem: ")
        );
        assert!(client_token(&pem, "pub.pem", "a b", "x", 0).is_err());
    }

    #[test]
    fn password_hash_is_iperf3s() {
        // `printf '%s' '{mario}rossi' | sha256sum` (iperf3's own example user).
        assert_eq!(
            password_hash("mario", "rossi"),
            "bf7a49a846d44b454a5d11e7acfaf13d138bbe0b7483aa3e050879700572709b"
        );
    }

    #[test]
    fn both_paddings_and_both_key_formats_pass() {
        for key in [key_pkcs1_pem(), key_pkcs8_pem()] {
            let a = auth(&key);
            assert_eq!(a.user_count(), 2);
            for p in [Padding::Pkcs1, Padding::Oaep] {
                let t = token("alice", "s3cret", NOW, p);
                assert_eq!(a.check(Some(&t), NOW), Ok("alice".into()), "{p:?}");
                let t = token("bob", "hunter2", NOW - 10, p);
                assert_eq!(a.check(Some(&t), NOW), Ok("bob".into()), "{p:?}");
            }
        }
    }

    #[test]
    fn bad_password_unknown_user_stale_and_garbage_fail() {
        let a = auth(&key_pkcs8_pem());
        for p in [Padding::Pkcs1, Padding::Oaep] {
            let t = token("alice", "wrong", NOW, p);
            assert_eq!(
                a.check(Some(&t), NOW),
                Err(AuthError::BadPassword("alice".into()))
            );
            let t = token("mallory", "s3cret", NOW, p);
            assert_eq!(
                a.check(Some(&t), NOW),
                Err(AuthError::UnknownUser("mallory".into()))
            );
            // More than 10 s either way.
            for ts in [NOW - 11, NOW + 11] {
                let t = token("alice", "s3cret", ts, p);
                let e = a.check(Some(&t), NOW).unwrap_err();
                assert!(
                    matches!(&e, AuthError::Stale { ts: x, .. } if *x == ts),
                    "{e}"
                );
                assert!(e.to_string().contains("11 s away"), "{e}");
            }
            // Another key's token, or not a token at all.
            let t = token_of("user: alice", p);
            assert_eq!(a.check(Some(&t), NOW), Err(AuthError::Undecodable));
        }
        assert_eq!(a.check(Some("!!!"), NOW), Err(AuthError::NotBase64));
        assert_eq!(a.check(Some("AAAA"), NOW), Err(AuthError::Undecodable));
        assert_eq!(a.check(None, NOW), Err(AuthError::Missing));
        // A wider threshold takes the stale one.
        let wide = Authenticator::from_text(
            &key_pkcs8_pem(),
            "k",
            &users(),
            "u",
            Duration::from_secs(60),
        )
        .unwrap();
        let t = token("alice", "s3cret", NOW - 59, Padding::Pkcs1);
        assert!(wide.check(Some(&t), NOW).is_ok());
    }

    #[test]
    fn plaintext_is_read_as_sscanf_reads_it() {
        let c = parse_plaintext(b"user: a\npwd:  b\nts:   -5").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str(), c.ts), ("a", "b", -5));
        let c = parse_plaintext(b"user:a pwd:b ts:12trailing\0junk").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str(), c.ts), ("a", "b", 12));
        for bad in [
            &b"user: a\npwd:  b\nts:   x"[..],
            b"user: a\npass: b\nts: 1",
            b" user: a\npwd: b\nts: 1",
            b"user: \npwd: b\nts: 1",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(
                parse_plaintext(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn load_errors_name_the_file_and_line() {
        let key = key_pkcs1_pem();
        let e = |users: &str| {
            Authenticator::from_text(&key, "k.pem", users, "/etc/users.csv", DEFAULT_TIME_SKEW)
                .unwrap_err()
                .to_string()
        };
        let h = password_hash("a", "b");
        let t = e(&format!("a,{h}\n# c\nnocomma\n"));
        assert!(t.starts_with("/etc/users.csv:3: `nocomma`"), "{t}");
        let t = e(&format!("a,{h}\nb,1234\n"));
        assert!(t.starts_with("/etc/users.csv:2: the hash of `b`"), "{t}");
        let t = e(&format!("a b,{h}\n"));
        assert!(t.starts_with("/etc/users.csv:1: user `a b`"), "{t}");
        let t = e("# nobody\n\n");
        assert!(t.starts_with("/etc/users.csv: no users"), "{t}");
        let k = |pem: &str| {
            Authenticator::from_text(pem, "/etc/k.pem", &users(), "u", DEFAULT_TIME_SKEW)
                .unwrap_err()
                .to_string()
        };
        assert!(k("hello").starts_with("/etc/k.pem: not an RSA private key"));
        assert!(k("-----BEGIN ENCRYPTED PRIVATE KEY-----\n").contains("password-protected"));
        let broken = key_pkcs8_pem().replace('A', "B");
        assert!(k(&broken).contains("PKCS#8"), "{}", k(&broken));
        let missing = Authenticator::load(
            Path::new("/nonexistent/k.pem"),
            Path::new("/nonexistent/u.csv"),
            DEFAULT_TIME_SKEW,
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.starts_with("cannot read /nonexistent/k.pem"),
            "{missing}"
        );
        // Debug shows where the key came from, never the key.
        let dbg = format!("{:?}", auth(&key));
        assert!(dbg.contains("key.pem") && !dbg.contains("BEGIN"), "{dbg}");
    }
}
