//! Reading a password for `ferrodir hash-password`: from a prompt with echo off when
//! standard input is a terminal (asked twice, as slappasswd does), else the first line of
//! standard input. Never from the command line, where `ps` and the shell's history would
//! show it.

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd as _;

/// The longest password read from standard input, in bytes: far beyond any real one, and a
/// bound on what a mistaken pipe (a whole file) makes us hold.
pub const PASSWORD_BYTES_MAX: usize = 4096;

/// The password, from the terminal or from standard input.
pub fn read_password() -> anyhow::Result<Vec<u8>> {
    let stdin = std::io::stdin();
    let password = if is_terminal(stdin.as_raw_fd()) {
        let first = prompt("New password: ")?;
        let again = prompt("Re-enter new password: ")?;
        if first != again {
            anyhow::bail!("the passwords differ");
        }
        first
    } else {
        first_line(stdin.lock())?
    };
    if password.is_empty() {
        anyhow::bail!("no password given (an empty line)");
    }
    Ok(password)
}

/// The first line of `input` without its line ending (LF or CR LF); at most
/// [`PASSWORD_BYTES_MAX`] bytes.
fn first_line(input: impl BufRead) -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    let read = input.take(PASSWORD_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line)?;
    if read == 0 {
        anyhow::bail!("no password on standard input");
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    } else if line.len() > PASSWORD_BYTES_MAX {
        anyhow::bail!("the password is longer than {PASSWORD_BYTES_MAX} bytes");
    }
    Ok(line)
}

fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only reads the descriptor's state.
    unsafe { libc::isatty(fd) == 1 }
}

/// `text` on stderr, then one line from the terminal on stdin with echo off.
fn prompt(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut stderr = std::io::stderr();
    stderr.write_all(text.as_bytes())?;
    stderr.flush()?;
    let line = {
        let _quiet = EchoOff::new(std::io::stdin().as_raw_fd())?;
        first_line(std::io::stdin().lock())
    };
    // The user's Enter was not echoed either.
    stderr.write_all(b"\n")?;
    line
}

/// The terminal's echo turned off while this lives; restored when dropped, on an error too.
struct EchoOff {
    fd: i32,
    saved: libc::termios,
}

impl EchoOff {
    fn new(fd: i32) -> anyhow::Result<Self> {
        // SAFETY: termios is plain data; tcgetattr fills it or fails.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            anyhow::bail!("cannot read the terminal's settings: {}", std::io::Error::last_os_error());
        }
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: a termios read from the same descriptor, with one flag changed.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &quiet) } != 0 {
            anyhow::bail!("cannot turn the terminal's echo off: {}", std::io::Error::last_os_error());
        }
        Ok(Self { fd, saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: the settings read in `new`, written back to the same descriptor.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_without_its_ending() {
        assert_eq!(first_line(&b"pw\nnext\n"[..]).unwrap(), b"pw");
        assert_eq!(first_line(&b"pw\r\n"[..]).unwrap(), b"pw");
        assert_eq!(first_line(&b"no newline"[..]).unwrap(), b"no newline");
        assert_eq!(first_line(&b" spaced \n"[..]).unwrap(), b" spaced ", "spaces are the password's");
        assert!(first_line(&b""[..]).is_err());
        let long = vec![b'x'; PASSWORD_BYTES_MAX + 1];
        assert!(first_line(&long[..]).is_err());
        let mut fits = vec![b'x'; PASSWORD_BYTES_MAX];
        fits.push(b'\n');
        assert_eq!(first_line(&fits[..]).unwrap().len(), PASSWORD_BYTES_MAX);
    }
}
