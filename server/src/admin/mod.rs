//! The admin socket: a Unix-domain socket in the data directory (`admin.sock`, mode 0600,
//! removed on clean shutdown) through which `ferrodir export` and `ferrodir backup` reach a
//! serving server. redb locks its files, so while a server runs these commands cannot open
//! the data directory themselves; they ask the server, which takes a consistent cut
//! ([`Cut::online`]) and reads from it. When no server answers on the socket, the commands
//! open the directory offline, as before.
//!
//! Only the directory's owner can connect (the file's mode), so the socket carries no
//! authentication. One request per connection, one connection at a time (the admin thread
//! serves them in turn, so at most one cut is open).
//!
//! Protocol: the client sends one line, `export operational`, `export user`, `reload` or
//! `backup <absolute path>`. The server answers with frames of `kind (1 byte) ‖ length (u32
//! BE) ‖ payload`: `D` carries LDIF bytes, then exactly one of `K` (done; the payload is a
//! summary) or `E` (failed; the payload says why). A stream that ends without `K` is
//! incomplete, and the client says so: a truncated export is never taken for a whole one.
//!
//! # Layout
//! - this file: the protocol both sides share (the socket's name, the request line, the
//!   frames and their bounds);
//! - [`server`]: the admin thread of a serving server, which answers requests;
//! - [`client`]: what `ferrodir export`, `backup` and `compact` call to reach it.

pub mod client;
pub mod server;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SOCKET_FILE: &str = "admin.sock";
/// A request is one short line; anything longer is not a request.
pub(crate) const REQUEST_BYTES_MAX: usize = 4096;
/// LDIF is sent in data frames of at most this size.
pub(crate) const DATA_FRAME_BYTES_MAX: usize = 64 << 10;
/// The client refuses a frame larger than this (a confused peer, not a ferrodir server).
pub(crate) const FRAME_BYTES_ACCEPTED_MAX: usize = 1 << 20;
/// A client must send its request promptly...
pub(crate) const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// ...and keep reading: on sled, a cut holds writes back until the export is sent.
pub(crate) const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) const FRAME_DATA: u8 = b'D';
pub(crate) const FRAME_DONE: u8 = b'K';
pub(crate) const FRAME_FAILED: u8 = b'E';

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// An LDIF export; `operational`: with the stored operational attributes.
    Export { operational: bool },
    /// Write a backup into this directory (absolute; it must be absent or empty).
    Backup(PathBuf),
    /// Re-read the config file (serve/reload.rs); the summary says what happened.
    Reload,
}

impl Request {
    pub(crate) fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let mut line = match self {
            Request::Export { operational: true } => b"export operational".to_vec(),
            Request::Export { operational: false } => b"export user".to_vec(),
            Request::Reload => b"reload".to_vec(),
            Request::Backup(to) => {
                let bytes = to.as_os_str().as_bytes();
                if !to.is_absolute() || bytes.contains(&b'\n') || bytes.len() + 8 > REQUEST_BYTES_MAX {
                    anyhow::bail!("unusable backup path {}", to.display());
                }
                [b"backup ".as_slice(), bytes].concat()
            }
        };
        line.push(b'\n');
        Ok(line)
    }

    pub(crate) fn parse(line: &[u8]) -> anyhow::Result<Self> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        match line {
            b"export operational" => Ok(Request::Export { operational: true }),
            b"export user" => Ok(Request::Export { operational: false }),
            b"reload" => Ok(Request::Reload),
            _ => match line.strip_prefix(b"backup ") {
                Some(path) if Path::new(OsStr::from_bytes(path)).is_absolute() => {
                    Ok(Request::Backup(PathBuf::from(OsStr::from_bytes(path))))
                }
                _ => anyhow::bail!("unknown request {:?}", String::from_utf8_lossy(line)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for request in [
            Request::Export { operational: true },
            Request::Export { operational: false },
            Request::Backup(PathBuf::from("/var/backups/ferrodir 1")),
        ] {
            assert_eq!(Request::parse(&request.encode().unwrap()).unwrap(), request);
        }
        assert!(Request::Backup(PathBuf::from("relative")).encode().is_err());
        assert!(Request::parse(b"backup relative\n").is_err());
        assert!(Request::parse(b"drop everything\n").is_err());
    }
}
