//! What talaria and the sandbox's helper say to each other: one JSON message per datagram of a
//! `SOCK_SEQPACKET` socket pair, with file descriptors passed beside it (`SCM_RIGHTS`).
//!
//! talaria asks the helper to [`ToHelper::Run`] a command (handing it the command's stdin, stdout
//! and stderr) or to [`ToHelper::Kill`] one; the helper says it is [`FromHelper::Ready`], that a
//! command [`FromHelper::Exited`], or hands over a [`FromHelper::Connection`] a command opened to
//! the egress proxy's port inside the sandbox.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::{Deserialize, Serialize};

/// Largest message either side sends (a command line is at most 128 KiB for `execve` anyway).
pub const MAX_MESSAGE: usize = 512 * 1024;

/// Most descriptors passed with one message.
const MAX_FDS: usize = 4;

/// From talaria to the helper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToHelper {
    /// Start a command in a PID namespace of its own; its stdin, stdout and stderr come with the
    /// message, in that order.
    Run(Spawn),
    /// Kill command `id` and everything it started.
    Kill { id: u64 },
    /// Join the process-count group whose `cgroup.procs` comes with the message.
    Cgroup,
}

/// A command to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spawn {
    pub id: u64,
    /// The program and its arguments; the program is looked up in `PATH` when it has no `/`.
    pub argv: Vec<String>,
    pub cwd: String,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Largest file it may write, in bytes (`RLIMIT_FSIZE`); 0: no limit.
    pub max_file_bytes: u64,
    /// Most processes of the sandbox's user (`RLIMIT_NPROC`); 0: no limit.
    pub max_processes: u64,
}

/// From the helper to talaria.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromHelper {
    /// Set up; the egress proxy listens on this loopback port inside the sandbox.
    Ready { proxy_port: u16 },
    /// Command `id` ended: its exit code, or the signal that killed it.
    Exited { id: u64, code: Option<i32>, signal: Option<i32> },
    /// Command `id` could not be started.
    Failed { id: u64, error: String },
    /// A connection a command made to the proxy port; the stream comes with the message.
    Connection,
    /// Something went wrong that is not any command's (for the log).
    Problem { error: String },
}

/// Send `message` with `fds` over `socket`, waiting for room in it unless `wait` is false.
///
/// # Errors
/// The socket is closed (or full, without `wait`), or the message is larger than
/// [`MAX_MESSAGE`].
pub fn send<T: Serialize>(
    socket: BorrowedFd<'_>,
    message: &T,
    fds: &[BorrowedFd<'_>],
    wait: bool,
) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(std::io::Error::other(format!("a message of {} bytes is too large to send", bytes.len())));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let control: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    let flags = if wait { MsgFlags::MSG_NOSIGNAL } else { MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT };
    sendmsg::<()>(socket.as_raw_fd(), &[IoSlice::new(&bytes)], control, flags, None).map_err(std::io::Error::from)?;
    Ok(())
}

/// What [`receive`] read.
pub enum Received<T> {
    Message(T, Vec<OwnedFd>),
    /// The other side closed the socket.
    Closed,
}

/// Read one message and the descriptors that came with it (opened close-on-exec), waiting for
/// one.
///
/// # Errors
/// Reading fails, or the message is not one of `T`'s.
pub fn receive<T: serde::de::DeserializeOwned>(socket: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<Received<T>> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, fds, truncated) = {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
            .map_err(std::io::Error::from)?;
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().map_err(std::io::Error::from)? {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                fds.extend(raw.into_iter().map(owned));
            }
        }
        (msg.bytes, fds, msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC))
    };
    if len == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    if truncated {
        return Err(std::io::Error::other("a message was cut short (too large, or too many descriptors)"));
    }
    let message = serde_json::from_slice(&buf[..len]).map_err(std::io::Error::other)?;
    Ok(Received::Message(message, fds))
}

/// Take ownership of a descriptor `recvmsg` installed.
#[allow(unsafe_code)]
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just received with SCM_RIGHTS: it is open, and no other owner exists.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsFd as _;

    #[test]
    fn messages_and_descriptors_cross_the_socket() {
        let (a, b) =
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).expect("socketpair");
        let (mut r, w) = std::io::pipe().expect("pipe");
        let spawn = Spawn {
            id: 7,
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            cwd: "/w".into(),
            env: vec![("PATH".into(), "/usr/bin".into())],
            max_file_bytes: 1 << 20,
            max_processes: 64,
        };
        send(a.as_fd(), &ToHelper::Run(spawn.clone()), &[w.as_fd()], true).expect("send");
        drop(w);
        let mut buf = vec![0; MAX_MESSAGE];
        let Received::Message(got, fds) = receive::<ToHelper>(b.as_fd(), &mut buf).expect("receive") else {
            panic!("closed")
        };
        assert_eq!(got, ToHelper::Run(spawn));
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.into_iter().next().expect("fd"));
        w.write_all(b"through the passed pipe").expect("write");
        drop(w);
        let mut text = String::new();
        r.read_to_string(&mut text).expect("read");
        assert_eq!(text, "through the passed pipe");

        drop(a);
        assert!(matches!(receive::<ToHelper>(b.as_fd(), &mut buf).expect("eof"), Received::Closed));
    }
}
