//! The key that seals paged-results cookies, kept in the data directory.

use ferrodir_router::CookieKey;

/// The key that seals paged-results cookies: `paged-results.key` in the data directory
/// (32 random bytes, mode 0600, made at the first start), so cookies outlive a restart.
/// Without it (a read-only directory, a damaged file) a fresh key for this run only.
pub fn paged_key(data_dir: &std::path::Path) -> CookieKey {
    let path = data_dir.join("paged-results.key");
    match std::fs::read(&path) {
        Ok(bytes) => match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(key) => return CookieKey::new(key),
            Err(_) => {
                tracing::warn!(path = %path.display(), "paged results key is not 32 bytes: using a key for this run only")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = CookieKey::random();
            match write_key(&path, &key) {
                Ok(()) => return key,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the paged results key: cookies will not outlive this run")
                }
            }
            return key;
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the paged results key: using a key for this run only")
        }
    }
    CookieKey::random()
}

fn write_key(path: &std::path::Path, key: &CookieKey) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(key.bytes())?;
    file.sync_all()
}
