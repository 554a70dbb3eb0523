//! The admin socket's client side: how `ferrodir export`, `backup` and `compact` find out
//! whether a server is serving the data directory, and ask it (see the module doc of
//! [`super`]).

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::Context as _;

use super::{Request, FRAME_BYTES_ACCEPTED_MAX, FRAME_DATA, FRAME_DONE, FRAME_FAILED, SOCKET_FILE};

/// The serving server's socket for `data_dir`, or None when no server answers there (no
/// socket, or a crashed server's socket file): the caller then works offline.
pub fn connect(data_dir: &Path) -> anyhow::Result<Option<UnixStream>> {
    let path = data_dir.join(SOCKET_FILE);
    match UnixStream::connect(&path) {
        Ok(stream) => Ok(Some(stream)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::InvalidInput
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot connect to {}", path.display())),
    }
}

/// Whether a server is serving `data_dir` (its admin socket answers).
pub fn server_answers(data_dir: &Path) -> bool {
    matches!(connect(data_dir), Ok(Some(_)))
}

/// Sends `request` and copies the LDIF it returns (if any) to `out`; returns the server's
/// summary, or its error.
pub fn call(mut stream: UnixStream, request: &Request, out: &mut impl Write) -> anyhow::Result<String> {
    stream.write_all(&request.encode()?)?;
    let mut reader = BufReader::new(stream);
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; 5];
        reader.read_exact(&mut header).map_err(|e| {
            anyhow::anyhow!("the server closed the connection before the end ({e}): the output is incomplete")
        })?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if length > FRAME_BYTES_ACCEPTED_MAX {
            anyhow::bail!("admin socket: a frame of {length} bytes; is this a ferrodir server?");
        }
        payload.resize(length, 0);
        reader.read_exact(&mut payload).map_err(|e| {
            anyhow::anyhow!("the server closed the connection before the end ({e}): the output is incomplete")
        })?;
        match header[0] {
            FRAME_DATA => out.write_all(&payload)?,
            FRAME_DONE => return Ok(String::from_utf8_lossy(&payload).into_owned()),
            FRAME_FAILED => anyhow::bail!("the server: {}", String::from_utf8_lossy(&payload)),
            other => anyhow::bail!("admin socket: unknown frame kind {other:#04x}"),
        }
    }
}
