//! Commands confined by the operating system to what was granted.
//!
//! Plugins are WebAssembly components and cannot reach anything they were not granted. The
//! processes talaria starts for them and for the model (the `process` import behind the
//! `terminal` tool, MCP stdio servers, skill scripts run through the terminal, commands from
//! gateway chats and scheduled jobs) are native programs: this crate confines them.
//!
//! # What a confined command gets
//! - **Files** ([`policy`]): the system read-only, the workspace read-write with its
//!   `.git/config`, `.git/hooks` and `.talaria/` read-only, a private `/tmp`, the toolchain
//!   places it was given, and an empty, read-only home directory. Never talaria's home (any
//!   profile's), never the user's keys and credentials, also when the workspace is the home
//!   directory itself.
//! - **Network**: a network namespace of its own with only loopback. Its `HTTP(S)_PROXY` is
//!   talaria's egress proxy ([`proxy`]), which asks a [`proxy::Gate`] — the same grants and
//!   per-host approvals as a plugin's HTTP — before each connection and resolves names itself.
//!   No UDP, no raw sockets, no unix socket of the machine's (ssh-agent, docker, D-Bus).
//! - **Processes**: its own PID namespace: talaria and the user's other processes cannot be
//!   seen, signalled, traced or read (`/proc/<talaria>/environ`, `mem`); when the command ends,
//!   or talaria exits, everything it started dies with it, `setsid` or not. No capabilities,
//!   no new privileges (setuid programs do not elevate), and a seccomp filter ([`seccomp`]).
//!   Limits on processes ([`cgroup`], else `RLIMIT_NPROC`), file size and `/tmp`.
//!
//! # Why bubblewrap, and how it is used
//! Namespaces, mounts and capability dropping are easy to get subtly wrong, so the sandbox is
//! built by bubblewrap (`bwrap`), the setup tool Flatpak, Codex and Claude Code rely on, as a
//! separate program talaria starts. Landlock was the other candidate: it needs no helper, but
//! it cannot make `.git/hooks` read-only inside a writable workspace (its rules only add), and
//! it has no PID or network namespaces. seccomp filters come from `seccompiler`.
//!
//! A bare `bwrap` with new PID and network namespaces costs several milliseconds per command,
//! so a sandbox is started once and kept ([`sandbox::Sandbox`]): bubblewrap runs talaria's own
//! executable inside as the [`helper`], which holds the namespaces and starts each command in
//! a fresh PID and mount namespace of its own, dropping its capabilities and installing the
//! filter just before `execve`. A command then costs a `clone` and an `exec`.
//!
//! # Fails closed
//! Where bubblewrap is missing or the kernel refuses it a user namespace, [`Sandbox::start`]
//! returns [`Unavailable`], saying why and how to fix it; the caller refuses the command. Running
//! unconfined is the caller's explicit choice, never a fallback.
//!
//! Only Linux is supported; elsewhere every command is [`Unavailable`].

pub mod bwrap;
pub mod cgroup;
pub mod helper;
pub mod policy;
pub mod proxy;
pub mod sandbox;
pub mod seccomp;
pub mod wire;

pub use policy::{Limits, Policy};
pub use sandbox::{Child, Command, Exit, Launcher, Probe, ProcessLimit, Sandbox, Unavailable, probe};
