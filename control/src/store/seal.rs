//! Encryption of Secret values at rest: AES-256-GCM (ring) under a key kept in the data
//! directory, one fresh random nonce per sealed value.
//!
//! The key file (`secrets.key`, mode 0600) holds one or more keys, each a line
//! `ID HEX-KEY`; the first line is the key new values are sealed with, the others are kept so
//! values sealed before a rotation still open. A sealed value names its key, so rotating is:
//! add a new first key, re-seal every value, drop the old key.
//!
//! Sealed layout: `MAGIC` (4 bytes), key id length (1 byte), key id, nonce (12 bytes), then
//! the ciphertext with its 16-byte tag. The key id and magic are authenticated as associated
//! data, so a value cannot be moved under another key id unnoticed.

use std::io::Write;
use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// The first bytes of every sealed value (never the start of a postcard envelope, whose
/// first byte is a small version tag).
pub const MAGIC: &[u8; 4] = b"\xffSK1";

/// The key file's name in the data directory.
pub const KEY_FILE: &str = "secrets.key";

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("secrets key file {path}: {message}")]
    KeyFile { path: PathBuf, message: String },
    #[error("sealed value names key {0:?}, which the key file does not hold")]
    UnknownKey(String),
    #[error("sealed value is malformed or was tampered with")]
    Corrupt,
    #[error("the system random source failed")]
    Random,
}

/// One key: its id and its AES-256-GCM key.
struct Key {
    id: String,
    bytes: [u8; 32],
    aead: LessSafeKey,
}

impl Key {
    fn new(id: String, bytes: [u8; 32]) -> Key {
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &bytes).expect("32-byte key"));
        Key { id, bytes, aead }
    }
}

/// The keys of a data directory, the first one current.
pub struct Keyring {
    keys: Vec<Key>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key bytes.
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keyring").field("ids", &ids).finish()
    }
}

fn key_error(path: &Path, message: impl Into<String>) -> SealError {
    SealError::KeyFile {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Keyring {
    /// The data directory's keys, made (one fresh key, mode 0600) if the file is absent.
    pub fn load_or_create(data_dir: &Path) -> Result<Keyring, SealError> {
        let path = data_dir.join(KEY_FILE);
        if !path.exists() {
            let mut ring = Keyring {
                keys: Vec::new(),
                rng: SystemRandom::new(),
            };
            ring.add_key()?;
            ring.save(data_dir)?;
            return Ok(ring);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| key_error(&path, e.to_string()))?;
        Keyring::parse(&path, &text)
    }

    /// The keys of a key file's text (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Keyring, SealError> {
        let mut keys = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let mut parts = line.split_whitespace();
            let (Some(id), Some(k), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(key_error(
                    path,
                    format!("line {}: want `ID HEX-KEY`", n + 1),
                ));
            };
            let bytes = unhex(k).ok_or_else(|| {
                key_error(
                    path,
                    format!("line {}: the key is not 64 hex digits", n + 1),
                )
            })?;
            if id.len() > u8::MAX as usize {
                return Err(key_error(path, format!("line {}: key id too long", n + 1)));
            }
            keys.push(Key::new(id.to_string(), bytes));
        }
        if keys.is_empty() {
            return Err(key_error(path, "holds no key"));
        }
        Ok(Keyring {
            keys,
            rng: SystemRandom::new(),
        })
    }

    /// Writes the key file atomically, readable by its owner only.
    pub fn save(&self, data_dir: &Path) -> Result<(), SealError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = data_dir.join(KEY_FILE);
        let tmp = data_dir.join(format!("{KEY_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            for k in &self.keys {
                writeln!(f, "{} {}", k.id, hex(&k.bytes))?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| key_error(&path, e.to_string()))
    }

    /// Adds a fresh key in front: values sealed from now on use it.
    pub fn add_key(&mut self) -> Result<&str, SealError> {
        let mut bytes = [0u8; 32];
        self.rng.fill(&mut bytes).map_err(|_| SealError::Random)?;
        let mut id_bytes = [0u8; 4];
        self.rng
            .fill(&mut id_bytes)
            .map_err(|_| SealError::Random)?;
        let id = format!("k{}", hex(&id_bytes));
        self.keys.insert(0, Key::new(id, bytes));
        Ok(&self.keys[0].id)
    }

    /// Drops every key but the current one (after everything was re-sealed with it).
    pub fn retire_old_keys(&mut self) {
        self.keys.truncate(1);
    }

    /// The id of the key new values are sealed with.
    pub fn current_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Whether `bytes` is a sealed value (rather than a plain one from before encryption).
    pub fn is_sealed(bytes: &[u8]) -> bool {
        bytes.starts_with(MAGIC)
    }

    /// The key id a sealed value names.
    pub fn key_id_of(bytes: &[u8]) -> Result<&str, SealError> {
        let rest = bytes.strip_prefix(MAGIC).ok_or(SealError::Corrupt)?;
        let (&len, rest) = rest.split_first().ok_or(SealError::Corrupt)?;
        let id = rest.get(..len as usize).ok_or(SealError::Corrupt)?;
        std::str::from_utf8(id).map_err(|_| SealError::Corrupt)
    }

    /// Seals `plain` with the current key under a fresh nonce.
    pub fn seal(&self, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut out =
            Vec::with_capacity(MAGIC.len() + 1 + key.id.len() + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(MAGIC);
        out.push(key.id.len() as u8);
        out.extend_from_slice(key.id.as_bytes());
        let header_len = out.len();
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&out[..header_len]),
                &mut body,
            )
            .map_err(|_| SealError::Corrupt)?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Opens a value [`Keyring::seal`] made, with whichever of the keys it names.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let id = Self::key_id_of(sealed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let header_len = MAGIC.len() + 1 + id.len();
        let nonce: [u8; NONCE_LEN] = sealed
            .get(header_len..header_len + NONCE_LEN)
            .and_then(|n| n.try_into().ok())
            .ok_or(SealError::Corrupt)?;
        let mut body = sealed[header_len + NONCE_LEN..].to_vec();
        let plain = key
            .aead
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&sealed[..header_len]),
                &mut body,
            )
            .map_err(|_| SealError::Corrupt)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_file_is_private_and_values_round_trip_without_plaintext() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Keyring::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let plain = b"password=hunter2";
        let a = ring.seal(plain).unwrap();
        let b = ring.seal(plain).unwrap();
        assert_ne!(a, b, "a fresh nonce each time");
        assert!(!a.windows(7).any(|w| w == b"hunter2"));
        assert!(Keyring::is_sealed(&a));
        assert_eq!(ring.open(&a).unwrap(), plain);
        // The same file gives the same key back.
        let again = Keyring::load_or_create(dir.path()).unwrap();
        assert_eq!(again.open(&b).unwrap(), plain);
    }

    #[test]
    fn tampering_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Keyring::load_or_create(dir.path()).unwrap();
        let mut sealed = ring.seal(b"x").unwrap();
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(matches!(ring.open(&sealed), Err(SealError::Corrupt)));
        assert!(matches!(ring.open(b"\xffSK1"), Err(SealError::Corrupt)));
        let other = Keyring::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        let foreign = other.seal(b"x").unwrap();
        assert!(matches!(ring.open(&foreign), Err(SealError::UnknownKey(_))));
    }

    #[test]
    fn rotation_keeps_old_values_readable_until_the_old_key_is_retired() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Keyring::load_or_create(dir.path()).unwrap();
        let old_id = ring.current_id().to_string();
        let old = ring.seal(b"v1").unwrap();
        let new_id = ring.add_key().unwrap().to_string();
        assert_ne!(old_id, new_id);
        ring.save(dir.path()).unwrap();
        let ring = Keyring::load_or_create(dir.path()).unwrap();
        assert_eq!(ring.current_id(), new_id);
        assert_eq!(ring.open(&old).unwrap(), b"v1");
        let resealed = ring.seal(&ring.open(&old).unwrap()).unwrap();
        assert_eq!(Keyring::key_id_of(&resealed).unwrap(), new_id);
        let mut ring = ring;
        ring.retire_old_keys();
        assert!(matches!(ring.open(&old), Err(SealError::UnknownKey(_))));
        assert_eq!(ring.open(&resealed).unwrap(), b"v1");
    }
}
