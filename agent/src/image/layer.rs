//! Digests, and unpacking of layer tars into overlayfs-ready directories.
//!
//! OCI whiteouts become what overlayfs expects in a lower directory: `.wh.<name>` becomes a
//! character device 0:0 named `<name>`, and `.wh..wh..opq` in a directory sets the xattr
//! `trusted.overlay.opaque=y` on it. Unpacking needs root (device nodes, ownership, trusted
//! xattrs).

use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use ring::digest;

use super::error::ImageError;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// Formats a finished sha256 as `sha256:<hex>`.
pub(crate) fn digest_string(d: digest::Digest) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d.as_ref() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// sha256 of a byte slice, as `sha256:<hex>`.
pub fn sha256_bytes(data: &[u8]) -> String {
    digest_string(digest::digest(&digest::SHA256, data))
}

/// A reader that hashes and counts what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    ctx: digest::Context,
    pub(crate) count: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            ctx: digest::Context::new(&digest::SHA256),
            count: 0,
        }
    }

    /// Reads the rest and returns (digest, byte count).
    pub(crate) fn finish(mut self) -> io::Result<(String, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((digest_string(self.ctx.finish()), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.ctx.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// sha256 and size of a file.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    HashingReader::new(BufReader::new(fs::File::open(path)?)).finish()
}

/// Compression of a layer blob, sniffed from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

pub(crate) fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// A reader of the uncompressed content of a (possibly gzipped) file.
pub(crate) fn open_maybe_gzip(path: &Path) -> io::Result<(Box<dyn Read + Send>, Compression)> {
    let mut r = BufReader::with_capacity(256 * 1024, fs::File::open(path)?);
    let c = sniff(r.fill_buf()?);
    let reader: Box<dyn Read + Send> = match c {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
        _ => Box::new(r),
    };
    Ok((reader, c))
}

/// Unpacks the layer blob at `blob` into the new directory `dest` (which must not exist), and
/// returns the layer's diff id (sha256 of the uncompressed tar) and unpacked size.
/// `digest` names the blob in errors.
pub fn unpack_layer(blob: &Path, dest: &Path, digest: &str) -> Result<(String, u64), ImageError> {
    let bad = |detail: String| ImageError::BadLayer {
        digest: digest.to_string(),
        detail,
    };
    let (reader, compression) =
        open_maybe_gzip(blob).map_err(|e| bad(format!("cannot read the blob: {e}")))?;
    if compression == Compression::Zstd {
        return Err(bad(
            "zstd-compressed layers are not supported; use gzip or uncompressed layers".into(),
        ));
    }
    fs::create_dir(dest).map_err(|e| bad(format!("cannot create {}: {e}", dest.display())))?;
    let mut hashing = HashingReader::new(reader);
    let mut size = 0u64;
    {
        let mut archive = tar::Archive::new(&mut hashing);
        archive.set_preserve_permissions(true);
        archive.set_preserve_ownerships(true);
        archive.set_preserve_mtime(true);
        archive.set_unpack_xattrs(true);
        archive.set_overwrite(true);
        let entries = archive
            .entries()
            .map_err(|e| bad(format!("not a tar archive: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| bad(format!("bad tar entry: {e}")))?;
            let raw = entry
                .path()
                .map_err(|e| bad(format!("bad path in tar: {e}")))?
                .into_owned();
            let Some(rel) = clean_path(&raw) else {
                return Err(bad(format!("unsafe path {:?} in layer", raw.display())));
            };
            if rel.as_os_str().is_empty() {
                continue; // "./"
            }
            let file_name = rel
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or_default()
                .to_string();
            if let Some(hidden) = file_name.strip_prefix(WHITEOUT_PREFIX) {
                let parent = dest.join(rel.parent().unwrap_or(Path::new("")));
                fs::create_dir_all(&parent)
                    .map_err(|e| bad(format!("cannot create {}: {e}", parent.display())))?;
                if file_name == OPAQUE_MARKER {
                    set_opaque(&parent).map_err(|e| {
                        bad(format!("cannot mark {} opaque: {e}", parent.display()))
                    })?;
                } else if !hidden.is_empty() {
                    let target = parent.join(hidden);
                    remove_any(&target)
                        .map_err(|e| bad(format!("cannot replace {}: {e}", target.display())))?;
                    make_whiteout(&target).map_err(|e| {
                        bad(format!("cannot create whiteout {}: {e}", target.display()))
                    })?;
                }
                continue;
            }
            size += entry.header().size().unwrap_or(0);
            entry
                .unpack_in(dest)
                .map_err(|e| bad(format!("cannot unpack {}: {}", rel.display(), chain(&e))))?;
        }
    }
    let (diff_id, _) = hashing
        .finish()
        .map_err(|e| bad(format!("cannot read the blob: {e}")))?;
    Ok((diff_id, size))
}

/// An error with its sources (the tar crate hides the cause in them).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Strips `./` and leading `/`; None if the path climbs out with `..`.
fn clean_path(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// An overlayfs whiteout: a character device 0:0.
fn make_whiteout(p: &Path) -> io::Result<()> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    mknod(p, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0)).map_err(io::Error::from)
}

/// An overlayfs opaque directory: lower layers' content under it is hidden.
fn set_opaque(dir: &Path) -> io::Result<()> {
    xattr::set(dir, "trusted.overlay.opaque", b"y")
}

/// Total size in bytes of the files under `p` (not following symlinks).
pub(crate) fn disk_usage(p: &Path) -> u64 {
    let Ok(m) = fs::symlink_metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    let mut total = 0;
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            total += disk_usage(&e.path());
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned() {
        assert_eq!(clean_path(Path::new("./a/b")), Some(PathBuf::from("a/b")));
        assert_eq!(
            clean_path(Path::new("/etc/x")),
            Some(PathBuf::from("etc/x"))
        );
        assert_eq!(clean_path(Path::new("a/../../x")), None);
    }

    #[test]
    fn sha256_is_hex() {
        assert_eq!(
            sha256_bytes(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn compression_is_sniffed() {
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(sniff(&[0x28, 0xb5, 0x2f, 0xfd]), Compression::Zstd);
        assert_eq!(sniff(b"bin/"), Compression::None);
    }
}
